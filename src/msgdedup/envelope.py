"""The input envelope: one raw exported line becomes a valid message or a readable error.

Bad input must never stop a batch and never vanish, so every rule here produces an error text a
data engineer can act on ("received_at: no UTC offset in '2026-11-21T05:00:00'"), and the line is
quarantined with it. The rules are deliberately strict: a wrong-typed field is an export bug that
someone should see, not something to coerce silently.

We check the fields by hand instead of with a JSON-schema library because this runs once per input
line on the hot path, and the hand-written checks are an order of magnitude cheaper while giving
the same messages.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

REQUIRED_FIELDS = ("message_id", "address", "received_at")
OPTIONAL_STRING_FIELDS = ("txn_id", "source_id", "body")
KNOWN_FIELDS = frozenset(REQUIRED_FIELDS + OPTIONAL_STRING_FIELDS + ("properties", "seq"))

DUPLICATE_ID_PROPERTY = "_AMQ_DUPL_ID"
BRIDGE_DUPLICATE_ID_PROPERTY = "_AMQ_BRIDGE_DUP"

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MICROSECOND = timedelta(microseconds=1)
# datetime's range: anything outside it cannot be a real broker timestamp.
MIN_EPOCH_MS = int((datetime(1, 1, 1, tzinfo=timezone.utc) - _EPOCH) / timedelta(milliseconds=1))
MAX_EPOCH_MS = int((datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone.utc) - _EPOCH) / timedelta(milliseconds=1))
# The instants an ISO received_at may name: those a datetime (Python's, and so every reader of the
# outputs in Python) can hold in UTC.
MIN_RECEIVED_US = (datetime.min.replace(tzinfo=timezone.utc) - _EPOCH) // _MICROSECOND
MAX_RECEIVED_US = (datetime.max.replace(tzinfo=timezone.utc) - _EPOCH) // _MICROSECOND
_ERROR_SNIPPET = 60


@dataclass(frozen=True)
class Message:
    """A valid input message. ``received_at_us`` is the instant in microseconds since the epoch."""

    message_id: str
    address: str
    received_at_us: int
    properties: dict = field(default_factory=dict)
    txn_id: str | None = None
    source_id: str | None = None
    seq: int | None = None
    body: str | None = None
    extra_fields: dict = field(default_factory=dict)


class InvalidLine(ValueError):
    """The readable reason a line is not a valid message."""


def _snippet(value: object) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= _ERROR_SNIPPET else text[:_ERROR_SNIPPET] + "…"


def _type_name(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def decimal_form(value: int | float) -> str:
    """How a number property is compared as a key: ``42`` -> ``"42"``, ``1.5`` -> ``"1.5"``."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        return str(int(value))
    return str(value)


def parse_received_at(value: object) -> int:
    """ISO-8601 text with an offset, or integer epoch milliseconds -> epoch microseconds."""
    if isinstance(value, bool):
        raise InvalidLine(
            f"received_at must be an ISO-8601 string with offset or epoch milliseconds, got {_type_name(value)}")
    if isinstance(value, int):
        if not MIN_EPOCH_MS <= value <= MAX_EPOCH_MS:
            raise InvalidLine(f"received_at: epoch milliseconds {_snippet(str(value))} out of range")
        return value * 1000
    if isinstance(value, str):
        try:
            instant = datetime.fromisoformat(value)
        except ValueError:
            raise InvalidLine(f"received_at: not an ISO-8601 timestamp: {_snippet(value)!r}") from None
        if instant.tzinfo is None:
            raise InvalidLine(f"received_at: no UTC offset in {_snippet(value)!r} (add Z or +HH:MM)")
        received_at_us = (instant - _EPOCH) // _MICROSECOND
        if not MIN_RECEIVED_US <= received_at_us <= MAX_RECEIVED_US:
            # e.g. 0001-01-01T00:00:00+01:00, which is in year 0 in UTC
            raise InvalidLine(f"received_at: {_snippet(value)!r} is outside the years 1 to 9999 in UTC")
        return received_at_us
    raise InvalidLine(
        f"received_at must be an ISO-8601 string with offset or integer epoch milliseconds, got {_type_name(value)}"
    )


def _reject_constant(name: str):
    raise InvalidLine(f"not valid JSON: {name} is not a JSON number")


def _finite_float(text: str) -> float:
    # 1e400 is valid JSON but no double: json would make it inf, which no output can carry as JSON
    value = float(text)
    if not math.isfinite(value):
        raise InvalidLine(f"not valid JSON: number {_snippet(text)} is out of range")
    return value


def _decode(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidLine(f"invalid UTF-8 at byte {exc.start}") from None


def printable_raw_line(raw: bytes) -> str:
    """The raw line as text for the quarantine; undecodable bytes appear as ``\\xNN``."""
    return raw.decode("utf-8", errors="backslashreplace")


def parse_line(raw: bytes) -> Message:
    """Parse one raw line, or raise InvalidLine with the reason.

    InvalidLine is the only exception a line can cause. The known failures get their own words;
    anything else a decoder raises on some unforeseen input (a library's limit, a new Python
    version's check) becomes a reason naming the exception, because one odd line must be
    quarantined, never fail the batch it is in (and every later batch waiting for it).
    """
    try:
        return _parse_line(raw)
    except InvalidLine:
        raise
    except RecursionError:  # json.dumps of a document json.loads could just hold
        raise InvalidLine("not valid JSON: nested too deeply") from None
    except Exception as exc:  # noqa: BLE001 - see the docstring
        raise InvalidLine(f"cannot be parsed: {type(exc).__name__}: {_snippet(str(exc))}") from None


def _parse_line(raw: bytes) -> Message:
    text = _decode(raw)
    if text.strip() == "":
        raise InvalidLine("empty line")
    try:
        document = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float,
                              object_pairs_hook=_object)
    except InvalidLine:
        raise
    except json.JSONDecodeError as exc:
        # json words one message "Invalid control character at" (for its own "... at: line 1")
        raise InvalidLine(f"not valid JSON: {exc.msg.removesuffix(' at')} at column {exc.colno}") from None
    except RecursionError:
        raise InvalidLine("not valid JSON: nested too deeply") from None
    except ValueError:
        # the only other ValueError json.loads raises: int() refuses numbers this long
        raise InvalidLine(
            f"not valid JSON: a number with more than {sys.get_int_max_str_digits()} digits") from None
    if not isinstance(document, dict):
        raise InvalidLine(f"a message must be a JSON object, got {_type_name(document)}")
    if "\\u" in text:
        _reject_lone_surrogates(document)
    return message_from_document(document)


def _object(pairs: list[tuple[str, object]]) -> dict:
    """A JSON object, refusing a repeated key: which copy counts differs between readers (json
    keeps the last, others the first or fail), so the line has no single meaning."""
    document = dict(pairs)
    if len(document) != len(pairs):
        seen = set()
        for key, _ in pairs:
            if key in seen:
                raise InvalidLine(f"not valid JSON: duplicate key {_snippet(key)!r}")
            seen.add(key)
    return document


def _reject_lone_surrogates(document: dict) -> None:
    # json.loads turns "\ud800" into a str that no UTF-8 output (Parquet, Arrow) can hold.
    try:
        json.dumps(document, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidLine(
            f"not valid text: an unpaired UTF-16 surrogate escape (\\u{ord(exc.object[exc.start]):04x})"
        ) from None


def message_from_document(document: dict) -> Message:
    """Validate the fields of a decoded JSON object (also used for Parquet rows)."""
    for name in ("message_id", "address"):
        value = document.get(name)
        if value is None:
            raise InvalidLine(f"missing required field {name}")
        if not isinstance(value, str):
            raise InvalidLine(f"{name} must be a string, got {_type_name(value)}")
        if value == "":
            raise InvalidLine(f"{name} must not be empty")
    if document.get("received_at") is None:
        raise InvalidLine("missing required field received_at")
    received_at_us = parse_received_at(document["received_at"])

    optional: dict[str, object] = {}
    for name in OPTIONAL_STRING_FIELDS:
        value = document.get(name)
        if value is not None and not isinstance(value, str):
            raise InvalidLine(f"{name} must be a string, got {_type_name(value)}")
        optional[name] = value

    seq = document.get("seq")
    if seq is not None and (isinstance(seq, bool) or not isinstance(seq, int)):
        raise InvalidLine(f"seq must be an integer, got {_type_name(seq) if not isinstance(seq, float) else repr(seq)}")
    if seq is not None and not -(2**63) <= seq < 2**63:
        raise InvalidLine(f"seq {_snippet(str(seq))} does not fit in 64 bits")

    properties_doc = document.get("properties")
    properties: dict[str, str] = {}
    if properties_doc is not None:
        if not isinstance(properties_doc, dict):
            raise InvalidLine(f"properties must be an object, got {_type_name(properties_doc)}")
        for key, value in properties_doc.items():
            if isinstance(value, str):
                properties[key] = value
            elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                properties[key] = decimal_form(value)
            else:
                raise InvalidLine(f"properties.{key} must be a string or a number, got {_type_name(value)}")

    extra = {
        key: json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        for key, value in document.items()
        if key not in KNOWN_FIELDS
    }
    return Message(
        message_id=document["message_id"],
        address=document["address"],
        received_at_us=received_at_us,
        properties=properties,
        txn_id=optional["txn_id"],
        source_id=optional["source_id"],
        seq=seq,
        body=optional["body"],
        extra_fields=extra,
    )
