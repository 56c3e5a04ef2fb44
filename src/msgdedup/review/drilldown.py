"""One batch's messages behind its numbers, a page at a time: dropped messages (and what each
repeats, and in which batch that was delivered), quarantined lines, rejected transactions with
the message that caused each rejection, and one message by id.

Everything is read from the committed Parquet outputs (``<output>/batch_id=<ID>/*.parquet``,
schemas in ``engine/transforms.py``) with pyarrow, never a whole batch at once:

- only the columns a page shows are read (column projection);
- without a filter, whole row groups before the page are skipped from the Parquet footers'
  row counts, so page N costs the row groups it overlaps, not the N-1 pages before it;
- with a filter (reason, address, message id) the filter is pushed into the scan and rows
  stream through in record batches; rows before the page are counted and dropped, and the scan
  stops as soon as the page (plus one row, to know whether there is a next page) is full.

So memory is bounded by a page and a row group, whatever the batch's size. Row order is the
files' order (sorted names) and, inside a file, the engine's (arrival order).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from msgdedup import json_files, layout
from msgdedup.layout import validate_batch_id

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 500
MAX_RAW_LINE_CHARS = 4000
MAX_BODY_CHARS = 20000
SCAN_BATCH_ROWS = 2048

DROPPED_COLUMNS = ("message_id", "address", "received_at", "txn_id", "reason", "duplicate_of", "dedup_key",
                   "source_file", "line_number")
QUARANTINE_COLUMNS = ("source_file", "line_number", "error", "raw_line")
REJECTED_COLUMNS = ("txn_id", "message_id", "address", "received_at", "duplicate_of", "source_file", "line_number")
MESSAGE_COLUMNS = ("message_id", "address", "received_at", "properties", "txn_id", "source_id", "seq", "body",
                   "extra_fields", "source_file", "line_number", "cache", "dedup_key", "cache_seq", "reason",
                   "duplicate_of")
REASONS = ("duplicate", "transaction_rejected")


@dataclass
class Page:
    """A page of rows: ``number`` is 1-based; ``total`` is None when it is not known cheaply."""

    rows: list[dict[str, Any]]
    number: int
    size: int
    total: int | None
    has_next: bool
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def first_row(self) -> int:
        return (self.number - 1) * self.size + 1

    @property
    def pages(self) -> int | None:
        return None if self.total is None else max(1, -(-self.total // self.size))


def page_args(page: Any = None, size: Any = None) -> tuple[int, int]:
    """(page number, page size) from query parameters; raises ValueError with the reason."""
    try:
        number = 1 if page in (None, "") else int(page)
        n = DEFAULT_PAGE_SIZE if size in (None, "") else int(size)
    except (TypeError, ValueError):
        raise ValueError("page and size must be whole numbers") from None
    if number < 1:
        raise ValueError("page starts at 1")
    if not 1 <= n <= MAX_PAGE_SIZE:
        raise ValueError(f"size must be between 1 and {MAX_PAGE_SIZE}")
    return number, n


def output_files(warehouse: str | Path, output: str, batch_id: str) -> list[str]:
    directory = Path(layout.output_dir(warehouse, output, validate_batch_id(batch_id)))
    return sorted(str(p) for p in directory.glob("*.parquet")) if directory.is_dir() else []


def _dataset(files: list[str]):
    import pyarrow.dataset as ds

    return ds.dataset(files, format="parquet") if files else None


def _plain(row: dict[str, Any]) -> dict[str, Any]:
    """Maps come out of Arrow as lists of pairs: make them dicts (JSON and templates want that)."""
    for key, value in row.items():
        if isinstance(value, list) and value and all(isinstance(v, tuple) and len(v) == 2 for v in value):
            row[key] = dict(value)
    return row


def _take(batches: Iterable[Any], offset: int, want: int, skipped: int = 0) -> tuple[list[dict[str, Any]], int]:
    """Rows ``offset`` .. ``offset + want`` of a stream of record batches (``skipped`` rows of
    the stream were already passed over); stops reading as soon as it has them."""
    rows: list[dict[str, Any]] = []
    for rb in batches:
        n = rb.num_rows
        if skipped + n <= offset:
            skipped += n
            continue
        start = max(0, offset - skipped)
        skipped += n
        rows.extend(_plain(r) for r in rb.slice(start, want - len(rows)).to_pylist())
        if len(rows) >= want:
            break
    return rows, skipped


def read_rows(files: list[str], columns: Iterable[str], offset: int, limit: int,
              filter: Any = None) -> tuple[list[dict[str, Any]], bool, int | None]:
    """Rows ``offset .. offset+limit`` of Parquet ``files`` -> (rows, has_more, total rows if
    known without reading data: i.e. unfiltered, from the footers)."""
    dataset = _dataset(files)
    if dataset is None:
        return [], False, 0
    wanted = [c for c in columns if c in dataset.schema.names]
    want = limit + 1
    if filter is not None:
        scanner = dataset.scanner(columns=wanted, filter=filter, batch_size=SCAN_BATCH_ROWS, use_threads=False)
        rows, _ = _take(scanner.to_batches(), offset, want)
        return rows[:limit], len(rows) > limit, None
    rows: list[dict[str, Any]] = []
    skipped = total = 0
    for fragment in dataset.get_fragments():
        for group in fragment.split_by_row_group():  # footers only: no data read yet
            n = group.row_groups[0].num_rows
            total += n
            if len(rows) >= want:  # the page is full: only count the rest
                continue
            if skipped + n <= offset:  # wholly before the page: skipped unread
                skipped += n
                continue
            got, skipped = _take(group.to_batches(columns=wanted, batch_size=SCAN_BATCH_ROWS, use_threads=False),
                                 offset, want - len(rows), skipped)
            rows.extend(got)
    return rows[:limit], len(rows) > limit, total


def _manifest(warehouse: str | Path, batch_id: str) -> dict[str, Any]:
    return json_files.read_object_or_none(Path(layout.manifest(warehouse, batch_id))) or {}


def origins(warehouse: str | Path, batch_id: str, message_ids: Iterable[str]) -> dict[str, str]:
    """message_id -> the batch it was delivered (accepted) in, for the ids the batch's duplicates
    repeat. A duplicate hits an entry of the parent snapshot (``id_cache/batch_id=<parent>``,
    whose ``accepted_batch_id`` names the batch) or an acceptance of the batch itself: an id not in
    the parent snapshot was delivered in ``batch_id``. Scans two columns of the snapshot (bounded
    by the caches' sizes, not by history) and keeps only the rows that match."""
    import pyarrow.compute as pc

    ids = sorted({m for m in message_ids if m})
    if not ids:
        return {}
    found: dict[str, str] = {}
    parent = (_manifest(warehouse, batch_id).get("parent") or {}).get("batch_id")
    if parent and layout.is_batch_id(parent):
        dataset = _dataset(output_files(warehouse, "id_cache", parent))
        if dataset is not None and {"message_id", "accepted_batch_id"} <= set(dataset.schema.names):
            table = dataset.to_table(columns=["message_id", "accepted_batch_id"],
                                     filter=pc.field("message_id").isin(ids))
            for row in table.to_pylist():
                found[row["message_id"]] = row["accepted_batch_id"]
    return {m: found.get(m, batch_id) for m in ids}


def _counts(warehouse: str | Path, batch_id: str) -> dict[str, Any]:
    return _manifest(warehouse, batch_id).get("counts") or {}


def dropped_page(warehouse: str | Path, batch_id: str, number: int = 1, size: int = DEFAULT_PAGE_SIZE,
                 reason: str | None = None, address: str | None = None) -> Page:
    """Dropped messages; a duplicate's row gets ``duplicate_of_batch``: the batch the message it
    repeats was delivered in (the cause of a rejected transaction is a message of this batch)."""
    import pyarrow.compute as pc

    if reason is not None and reason not in REASONS:
        raise ValueError(f"reason must be one of {', '.join(REASONS)}")
    conditions = []
    if reason:
        conditions.append(pc.field("reason") == reason)
    if address:
        conditions.append(pc.field("address") == address)
    flt = None
    for c in conditions:
        flt = c if flt is None else flt & c
    rows, has_next, total = read_rows(output_files(warehouse, "dropped", batch_id), DROPPED_COLUMNS,
                                      (number - 1) * size, size, flt)
    if flt is not None:
        counts = _counts(warehouse, batch_id)
        if address:
            mine = (counts.get("by_address") or {}).get(address) or {}
            total = mine.get(reason) if reason else sum(mine.get(r, 0) for r in REASONS)
        else:
            total = (counts.get("by_reason") or {}).get(reason)
    where = origins(warehouse, batch_id, (r["duplicate_of"] for r in rows if r.get("reason") == "duplicate"))
    for r in rows:
        r["duplicate_of_batch"] = where.get(r["duplicate_of"], batch_id) if r.get("duplicate_of") else None
    return Page(rows, number, size, total, has_next)


def quarantine_page(warehouse: str | Path, batch_id: str, number: int = 1,
                    size: int = DEFAULT_PAGE_SIZE) -> Page:
    """Quarantined lines (raw lines cut at MAX_RAW_LINE_CHARS, ``raw_line_chars`` keeps the length)."""
    rows, has_next, total = read_rows(output_files(warehouse, "quarantine", batch_id), QUARANTINE_COLUMNS,
                                      (number - 1) * size, size)
    for r in rows:
        raw = r.get("raw_line")
        r["raw_line_chars"] = len(raw) if isinstance(raw, str) else None
        if isinstance(raw, str) and len(raw) > MAX_RAW_LINE_CHARS:
            r["raw_line"] = raw[:MAX_RAW_LINE_CHARS]
    return Page(rows, number, size, total, has_next)


def rejected_page(warehouse: str | Path, batch_id: str, number: int = 1, size: int = DEFAULT_PAGE_SIZE) -> Page:
    """Messages dropped as ``transaction_rejected``, each with ``cause``: the duplicate in its
    transaction that rejected it (its message id, what it repeats, and the batch that was in)."""
    import pyarrow.compute as pc

    files = output_files(warehouse, "dropped", batch_id)
    rows, has_next, _ = read_rows(files, REJECTED_COLUMNS, (number - 1) * size, size,
                                  pc.field("reason") == "transaction_rejected")
    total = (_counts(warehouse, batch_id).get("by_reason") or {}).get("transaction_rejected")
    causes = sorted({r["duplicate_of"] for r in rows if r.get("duplicate_of")})
    found: dict[str, dict[str, Any]] = {}
    if causes:
        cause_rows, _, _ = read_rows(files, ("message_id", "reason", "duplicate_of", "dedup_key"), 0, len(causes),
                                     pc.field("message_id").isin(causes))
        found = {c["message_id"]: c for c in cause_rows}
    where = origins(warehouse, batch_id, (c.get("duplicate_of") for c in found.values()))
    for r in rows:
        cause = found.get(r.get("duplicate_of")) or {}
        r["cause"] = {
            "message_id": r.get("duplicate_of"),
            "reason": cause.get("reason"),
            "dedup_key": cause.get("dedup_key"),
            "repeats": cause.get("duplicate_of"),
            "repeats_batch": where.get(cause.get("duplicate_of")) if cause.get("duplicate_of") else None,
        }
    return Page(rows, number, size, total, has_next)


def find_message(warehouse: str | Path, batch_id: str, message_id: str) -> dict[str, Any] | None:
    """A message of the batch by id (delivered first, then dropped), all its columns, with
    ``outcome``; None if neither output holds it. Scans only rows matching the id."""
    import pyarrow.compute as pc

    for output in ("delivered", "dropped"):
        rows, _, _ = read_rows(output_files(warehouse, output, batch_id), MESSAGE_COLUMNS, 0, 1,
                               pc.field("message_id") == message_id)
        if rows:
            row = rows[0]
            row["outcome"] = output
            body = row.get("body")
            row["body_chars"] = len(body) if isinstance(body, str) else None
            if isinstance(body, str) and len(body) > MAX_BODY_CHARS:
                row["body"] = body[:MAX_BODY_CHARS]
            row["duplicate_of_batch"] = None
            if row.get("duplicate_of"):
                if row.get("reason") == "duplicate":
                    row["duplicate_of_batch"] = origins(warehouse, batch_id, [row["duplicate_of"]])[row["duplicate_of"]]
                else:
                    row["duplicate_of_batch"] = batch_id
            return row
    return None
