"""No line can fail a batch: whatever bytes a line holds, parsing gives a message or a readable
reason, in Python (envelope.parse_line, the definition) and on the engine's real Spark path (the
JVM fast path plus the Python slow path, parsing.py), and the two agree."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings, strategies as st

from msgdedup.envelope import InvalidLine, parse_line

from tests.engine.test_parsing import _python_view, _spark_rows, _spark_view

# Pieces that reach the envelope's edges: its fields, numbers beyond every limit (Python's
# 4,300-digit int conversion, 64-bit seq, epoch range), nesting, escapes, controls, BOM, bad bytes.
PIECES = [
    '{', '}', '[', ']', ',', ':', '"', ' ', '\t', '\r', '\x00', '\\', '\\u', 'd800', '\ufeff', 'é', '\u2028',
    '"message_id"', '"address"', '"received_at"', '"properties"', '"_AMQ_DUPL_ID"', '"seq"', '"txn_id"',
    '"body"', '"m1"', '"a"', '"2026-11-21T05:00:00Z"', '"0001-01-01T00:00:00+01:00"',
    '"9999-12-31T23:59:59-01:00"', '1795219200000', '-0', '1.5', '1e400', '9223372036854775808',
    '9' * 5000, 'NaN', 'Infinity', 'true', 'null', '[' * 3000, '{"a":' * 2000,
]
VALID = {"message_id": "m1", "address": "a", "received_at": "2026-11-21T05:00:00Z"}

raw_bytes = st.binary(max_size=300)
jsonish = st.lists(st.sampled_from(PIECES), max_size=40).map(
    lambda parts: "".join(parts).encode("utf-8", "surrogatepass"))
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12)
# mostly-valid envelopes with one field replaced or added: the interesting lines are near-valid
near_valid = st.builds(
    lambda name, value: json.dumps({**VALID, name: value}, allow_nan=True).encode(),
    st.sampled_from(["message_id", "address", "received_at", "properties", "seq", "txn_id", "body", "x"]),
    json_values)
any_line = st.one_of(raw_bytes, jsonish, near_valid)


def _assert_decided(raw: bytes) -> None:
    try:
        parse_line(raw)
    except InvalidLine as error:
        reason = str(error)
        assert reason.strip(), raw
        reason.encode("utf-8")  # storable in the quarantine (Parquet, the Data quality page)
    # any other exception escapes and fails the test


@settings(max_examples=1500, deadline=None)
@given(any_line)
def test_python_parser_decides_every_line(raw):
    _assert_decided(raw)


def test_known_escapes_are_reasons():
    """The inputs that once escaped as exceptions (and failed the batch with exit 1)."""
    base = b'{"message_id":"m","address":"a","received_at":1,'
    for raw, reason in [
        (base + b'"seq":' + b"9" * 5000 + b"}", "not valid JSON: a number with more than 4300 digits"),
        (base + b'"x":' + b"[" * 10000 + b"]" * 10000 + b"}", "not valid JSON: nested too deeply"),
        (base + b'"x":1,"x":2}', "not valid JSON: duplicate key 'x'"),
    ]:
        try:
            parse_line(raw)
        except InvalidLine as error:
            assert str(error) == reason
        else:
            raise AssertionError(f"accepted {raw[:80]!r}")


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(any_line, min_size=1, max_size=40))
def test_spark_path_decides_every_line_as_python_does(spark, raws):
    rows, _ = _spark_rows(spark, raws)
    assert sorted(rows) == list(range(1, len(raws) + 1))
    for number, raw in enumerate(raws, start=1):
        view = _spark_view(rows[number])
        assert view["error"] is None or view["error"].strip()
        assert view == _python_view(raw), raw
