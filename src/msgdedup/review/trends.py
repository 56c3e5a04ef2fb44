"""Per-batch numbers over time for the batch list: duplicate rate, transactions rejected,
quarantined lines, gate result, publish/stale state and cache fill.

Read only from the small per-batch JSON files (``runs/<ID>.json`` or ``runs/<ID>.stale.json``,
``quality/<ID>/result.json``, whether ``published/<ID>.json`` exists), never from Parquet, so a
request costs a few file reads per batch shown. Batch ids are filtered by date *before* any file
is read when they are hourly (``YYYY-MM-DDTHH``: the id is the hour), and at most ``limit`` of
the newest batches are read, so a warehouse of thousands of batches costs no more than ``limit``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any

from msgdedup import json_files, layout, reports
from msgdedup.engine.windows import window_text

DEFAULT_LIMIT = 168  # a week of hourly batches
MAX_LIMIT = 2000


@dataclass(frozen=True)
class TrendFilter:
    """What the batch list is narrowed to (the page's query parameters, validated)."""

    address: str | None = None
    since: date | None = None  # first day, inclusive (UTC)
    until: date | None = None  # last day, inclusive (UTC)
    limit: int = DEFAULT_LIMIT

    @classmethod
    def parse(cls, address: str | None = None, since: str | None = None, until: str | None = None,
              limit: str | int | None = None) -> TrendFilter:
        """From query parameters; raises ValueError with a message a user can act on."""
        def day(name: str, value: str | None) -> date | None:
            if not value:
                return None
            try:
                return date.fromisoformat(value.strip())
            except ValueError:
                raise ValueError(f"{name} must be a date YYYY-MM-DD, not {value!r}") from None

        first, last = day("from", since), day("to", until)
        if first and last and first > last:
            raise ValueError(f"from ({first}) is after to ({last})")
        try:
            n = DEFAULT_LIMIT if limit in (None, "") else int(limit)
        except ValueError:
            raise ValueError(f"limit must be a number, not {limit!r}") from None
        if not 1 <= n <= MAX_LIMIT:
            raise ValueError(f"limit must be between 1 and {MAX_LIMIT}")
        return cls(address=(address or "").strip() or None, since=first, until=last, limit=n)

    def admits(self, when: datetime | None) -> bool:
        if self.since is None and self.until is None:
            return True
        if when is None:  # a batch with no known time cannot be placed in a date range
            return False
        day = when.astimezone(timezone.utc).date()
        return (self.since is None or day >= self.since) and (self.until is None or day <= self.until)


def batch_time(batch_id: str, committed_at: str | None = None) -> datetime | None:
    """The hour an hourly batch holds; for a named batch, when it was committed (if known)."""
    if layout.batch_id_format(batch_id) == layout.HOURLY:
        return datetime.strptime(batch_id, "%Y-%m-%dT%H").replace(tzinfo=timezone.utc)
    if committed_at:
        try:
            when = datetime.fromisoformat(committed_at)
        except ValueError:
            return None
        return when if when.tzinfo else when.replace(tzinfo=timezone.utc)
    return None


def batch_ids(warehouse: str | Path) -> dict[str, bool]:
    """Every batch id in ``runs/`` -> whether it has a committed (non-stale) manifest."""
    runs = Path(layout.runs_dir(warehouse))
    found: dict[str, bool] = {}
    if runs.is_dir():
        for path in runs.iterdir():
            parsed = layout.batch_id_of_manifest(path.name)
            if parsed:
                batch_id, stale = parsed
                found[batch_id] = found.get(batch_id, False) or not stale
    return found


def _rate(part: int | None, whole: int | None) -> float | None:
    if part is None or not whole:
        return None
    return round(100.0 * part / whole, 2)


def point(warehouse: str | Path, batch_id: str, address: str | None = None) -> dict[str, Any]:
    """One batch's numbers (for one address when ``address`` is given)."""
    root = Path(warehouse)
    manifest = json_files.read_object_or_none(Path(layout.manifest(root, batch_id)))
    stale = Path(layout.stale_manifest(root, batch_id)).exists()
    # A stale batch's numbers are those of its stale manifest: shown, but marked as stale.
    shown = manifest or {}
    if manifest is None and stale:
        shown = json_files.read_object_or_none(Path(layout.stale_manifest(root, batch_id))) or {}
    gate = json_files.read_object_or_none(Path(layout.gate_result(layout.quality_dir(root), batch_id)))
    counts = shown.get("counts") or {}
    if address is None:
        by_reason = counts.get("by_reason") or {}
        delivered, duplicate = counts.get("delivered"), by_reason.get("duplicate")
        rejected = by_reason.get("transaction_rejected")
    else:
        mine = (counts.get("by_address") or {}).get(address) or {}
        delivered, duplicate, rejected = (mine.get("delivered", 0), mine.get("duplicate", 0),
                                          mine.get("transaction_rejected", 0)) if counts else (None, None, None)
    valid = None if delivered is None else delivered + (duplicate or 0) + (rejected or 0)
    caches = {}
    audit = shown.get("window_audit")  # docs/semantics.md §9; None for batches committed before it
    for name, c in sorted((shown.get("caches") or {}).items()):
        addresses = c.get("addresses") or [c.get("address")]  # a domain's cache serves several (§8.1)
        if address is not None and address not in addresses:
            continue
        size, entries = c.get("id_cache_size") or 0, c.get("entries") or 0
        missed = (audit or {}).get(name)
        finding = reports.audit_finding(missed) if missed else None  # None: not audited (Apama, audit off)
        caches[name] = {"address": ", ".join(a for a in addresses if a), "window": window_text(c), "entries": entries,
                        "id_cache_size": c.get("id_cache_size"),  # None: no count limit (time, Apama)
                        "fill_pct": round(100.0 * entries / size, 1) if size else None,
                        "window_misses": (missed or {}).get("misses", 0), **_recommendation(finding)}
    when = batch_time(batch_id, shown.get("committed_at"))
    return {
        "batch_id": batch_id,
        "time": when.isoformat() if when else None,
        "committed": manifest is not None,
        "stale": stale,
        "published": Path(layout.published(root, batch_id)).exists(),
        "gate": reports.gate_status(gate, shown.get("run_id")),
        "delivered": delivered,
        "duplicate": duplicate,
        "transaction_rejected": rejected,
        "valid_messages": valid,
        "duplicate_rate_pct": _rate(duplicate, valid),
        "quarantined": counts.get("quarantined"),  # of the whole batch: bad lines have no trusted address
        "addresses": sorted((counts.get("by_address") or {}).keys()),
        "caches": caches,
        "window_misses": None if audit is None else sum(c["window_misses"] for c in caches.values()),
    }


def _recommendation(finding: dict[str, Any] | None) -> dict[str, Any]:
    """A cache's audit finding (``reports.audit_finding``) as the trend data carries it: the
    recommended window as text (None when the cache was not audited) and whether it is bigger
    than the current one; ``audit`` keeps the whole finding, to combine the batches shown."""
    return {"recommended": finding and finding["recommended"],
            "too_small": bool(finding and finding["too_small"]), "audit": finding}


def trends(warehouse: str | Path, flt: TrendFilter = TrendFilter()) -> dict[str, Any]:
    """The batch list's trend data: points oldest first, caches fullest first.

    ``caches``: every cache seen in the points, with its fill per batch (``series``, oldest
    first, None where the batch did not have it) and its latest fill, ordered by latest fill
    (fullest first), so an undersized cache heads the list; with the window misses of the
    batches shown and the largest window (id_cache_size or duplicate_window) the audit
    recommended in them (§9).
    """
    ids = batch_ids(warehouse)
    chosen = []
    for batch_id in sorted(ids, reverse=True):  # newest first, so ``limit`` keeps the newest
        if layout.batch_id_format(batch_id) == layout.HOURLY and not flt.admits(batch_time(batch_id)):
            continue
        chosen.append(batch_id)
    points = []
    for batch_id in chosen:
        if len(points) >= flt.limit:
            break
        p = point(warehouse, batch_id, flt.address)
        if layout.batch_id_format(batch_id) != layout.HOURLY and not flt.admits(
                datetime.fromisoformat(p["time"]) if p["time"] else None):
            continue
        points.append(p)
    points.reverse()
    truncated = len(points) >= flt.limit and len(chosen) > flt.limit
    names = sorted({name for p in points for name in p["caches"]})
    caches = []
    for name in names:
        series = [(p["caches"].get(name) or {}).get("fill_pct") for p in points]
        latest = next((p["caches"][name] for p in reversed(points) if name in p["caches"]), {})
        seen = [p["caches"][name] for p in points if name in p["caches"]]
        caches.append({"cache": name, "address": latest.get("address"), "window": latest.get("window"),
                       "latest_fill_pct": latest.get("fill_pct"),
                       "entries": latest.get("entries"), "id_cache_size": latest.get("id_cache_size"),
                       "series": series, "window_misses": sum(c["window_misses"] for c in seen),
                       **_recommendation(reports.largest_finding(c["audit"] for c in seen))})
    caches.sort(key=lambda c: (-(c["latest_fill_pct"] or 0.0), c["cache"]))
    addresses = sorted({a for p in points for a in p["addresses"]} | ({flt.address} if flt.address else set()))
    return {"filter": flt, "points": points, "caches": caches, "addresses": addresses,
            "truncated": truncated, "batches_in_warehouse": len(ids)}
