"""Per-batch data-quality report: what the "Data quality" view of the Airflow UI shows.

Everything is read from the warehouse (docs/architecture.md), never from Airflow's database:

- the dedup report from the manifest ``runs/<ID>.json``: counts per address and reason, cache
  fill (entries / id_cache_size) per cache;
- the quarantined lines with their errors, read with pyarrow from
  ``quarantine/batch_id=<ID>/*.parquet`` (at most ``max_rows`` rows are read);
- the GX gate summary ``quality/<ID>/result.json`` and links into the Data Docs site under
  ``quality/data_docs/``;
- the publish state (``published/<ID>.json``) and staleness (``runs/<ID>.stale.json``);
- the window-miss audit (docs/semantics.md §9) and its horizon; ``audit_finding`` turns one
  cache's audit report into what a reviewer reads, for every page that shows it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Iterable

from msgdedup import json_files, layout
from msgdedup.config import AUDIT_HORIZON_MULTIPLE, COUNT, TIME
from msgdedup.layout import validate_batch_id
from msgdedup.engine.windows import window_text

QUARANTINE_COLUMNS = ("source_file", "line_number", "error", "raw_line")
DEFAULT_MAX_ROWS = 50
MAX_RAW_LINE_CHARS = 500
DATA_DOCS_DIR = PurePosixPath(layout.data_docs_dir(layout.QUALITY))


def list_batches(warehouse: str | Path) -> list[dict[str, Any]]:
    """Committed and stale batches, newest first, with their headline numbers."""
    runs = Path(layout.runs_dir(warehouse))
    if not runs.is_dir():
        return []
    ids = set()
    for path in runs.glob("*.json"):
        found = layout.batch_id_of_manifest(path.name)
        if found:
            ids.add(found[0])
    out = []
    for batch_id in sorted(ids, reverse=True):
        manifest = json_files.read_object_or_none(Path(layout.manifest(warehouse, batch_id))) or {}
        gate = json_files.read_object_or_none(_gate_result(warehouse, batch_id))
        counts = manifest.get("counts") or {}
        out.append({
            "batch_id": batch_id,
            "committed": bool(manifest),
            "stale": Path(layout.stale_manifest(warehouse, batch_id)).exists(),
            "run_id": manifest.get("run_id"),
            "delivered": counts.get("delivered"),
            "dropped": counts.get("dropped"),
            "quarantined": counts.get("quarantined"),
            "gate": gate_status(gate, manifest.get("run_id")),
            "published": Path(layout.published(warehouse, batch_id)).exists(),
        })
    return out


def _gate_result(warehouse: str | Path, batch_id: str) -> Path:
    return Path(layout.gate_result(layout.quality_dir(warehouse), batch_id))


def gate_status(gate: dict[str, Any] | None, run_id: str | None) -> str:
    """``passed``, ``failed``, ``not run``, or ``outdated`` (the gate checked another run of the batch)."""
    if gate is None:
        return "not run"
    if run_id is not None and gate.get("run_id") != run_id:
        return "outdated"
    return "passed" if gate.get("success") is True else "failed"


def read_quarantine(warehouse: str | Path, batch_id: str, max_rows: int = DEFAULT_MAX_ROWS) -> list[dict[str, Any]]:
    """At most ``max_rows`` quarantined lines of a batch (reads no more than needed)."""
    import pyarrow.dataset as ds

    directory = Path(layout.output_dir(warehouse, "quarantine", validate_batch_id(batch_id)))
    files = sorted(str(p) for p in directory.glob("*.parquet")) if directory.is_dir() else []
    if not files or max_rows <= 0:
        return []
    dataset = ds.dataset(files, format="parquet")
    columns = [c for c in QUARANTINE_COLUMNS if c in dataset.schema.names]
    rows: list[dict[str, Any]] = []
    for record_batch in dataset.to_batches(columns=columns, batch_size=max_rows):
        for row in record_batch.to_pylist():
            raw = row.get("raw_line")
            if isinstance(raw, str) and len(raw) > MAX_RAW_LINE_CHARS:
                row["raw_line"] = raw[:MAX_RAW_LINE_CHARS] + "…"
            rows.append(row)
            if len(rows) >= max_rows:
                return rows
    return rows


def data_docs_relpath(warehouse: str | Path, page: str | None) -> str | None:
    """A Data Docs page (absolute path or URL written by the gate) relative to the site root."""
    if not page:
        return None
    text = page.removeprefix("file://")
    marker = f"/{DATA_DOCS_DIR}/"
    idx = text.find(marker)
    if idx < 0:
        return None
    rel = PurePosixPath(text[idx + len(marker):])
    if rel.is_absolute() or ".." in rel.parts:
        return None
    return str(rel)


def audit_horizon(manifest: dict[str, Any] | None) -> int:
    """The audit's horizon in windows as the batch was run with (0: the audit was off); manifests
    written before it was configurable ran with the default."""
    horizon = (((manifest or {}).get("config") or {}).get("window_audit") or {}).get("horizon")
    return AUDIT_HORIZON_MULTIPLE if horizon is None else horizon


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _seconds_text(us: int) -> str:
    """Microseconds as seconds, exactly (``605 s``, ``1.5 s``, ``0.000001 s``): a rounded value
    could hide the microsecond by which a resend missed a time window."""
    whole, fraction = divmod(abs(us), 1_000_000)
    sign = "-" if us < 0 else ""
    return f"{sign}{whole}" + (f".{fraction:06d}".rstrip("0") if fraction else "") + " s"


@dataclass(frozen=True)
class _AuditUnits:
    """Where a policy's audit report keeps its numbers, and how a reviewer reads them."""

    setting: str
    window_key: str
    recommended_key: str
    missed_by_key: str
    value_text: Callable[[int], str]
    past_text: Callable[[int], str]
    within_text: str


_AUDIT_UNITS = {
    COUNT: _AuditUnits("id_cache_size", "id_cache_size", "recommended_id_cache_size", "max_missed_by",
                       str, lambda n: f"{_plural(n, 'acceptance')} past the window",
                       "inside the window as it is now (it grew since)"),
    TIME: _AuditUnits("duplicate_window", "duplicate_window_us", "recommended_duplicate_window_us", "max_missed_by_us",
                      _seconds_text, lambda us: f"{_seconds_text(us)} past the window",
                      "inside the window as it is now (it grew since, or the id_cache_size cap evicted the key)"),
}


def audit_finding(report: dict[str, Any]) -> dict[str, Any]:
    """One cache's window-miss audit report (§9; ``count`` in acceptances, ``time`` in
    microseconds, reports without a policy are ``count``) as a reviewer reads it: the setting to
    change, its current and recommended value as text, the largest miss as text, and whether the
    window is too small. The only place that knows each policy's keys and units, so that every
    page says the same. ``window_value``/``recommended_value`` stay in the policy's unit, for
    comparing findings of one setting (``largest_finding``)."""
    units = _AUDIT_UNITS[report.get("policy", COUNT)]
    window, recommended = report[units.window_key], report[units.recommended_key]
    missed_by = report.get(units.missed_by_key, 0)
    if not report.get("misses"):
        largest = "none"
    else:
        largest = units.past_text(missed_by) if missed_by > 0 else units.within_text
    return {"setting": units.setting, "current": units.value_text(window), "largest_miss": largest,
            "recommended": units.value_text(recommended), "too_small": recommended > window,
            "window_value": window, "recommended_value": recommended}


def largest_finding(findings: Iterable[dict[str, Any] | None]) -> dict[str, Any] | None:
    """Over several batches (oldest first), the largest recommendation for the newest batch's
    setting (a cache whose policy changed recommended in other units before), too small when it
    exceeds the newest window: a window raised since is no longer flagged."""
    found = [f for f in findings if f]
    if not found:
        return None
    newest = found[-1]
    best = max((f for f in found if f["setting"] == newest["setting"]), key=lambda f: f["recommended_value"])
    return {**best, "current": newest["current"], "window_value": newest["window_value"],
            "too_small": best["recommended_value"] > newest["window_value"]}


def batch_report(warehouse: str | Path, batch_id: str, max_rows: int = DEFAULT_MAX_ROWS) -> dict[str, Any]:
    """Everything the view shows about one batch (raises ValueError for a bad batch id)."""
    validate_batch_id(batch_id)
    root = Path(warehouse)
    manifest = json_files.read_object_or_none(Path(layout.manifest(root, batch_id)))
    gate = json_files.read_object_or_none(_gate_result(root, batch_id))
    run_id = (manifest or {}).get("run_id")
    counts = (manifest or {}).get("counts") or {}
    by_address = []
    for address, c in sorted((counts.get("by_address") or {}).items()):
        by_address.append({
            "address": address,
            "delivered": c.get("delivered", 0),
            "duplicate": c.get("duplicate", 0),
            "transaction_rejected": c.get("transaction_rejected", 0),
        })
    caches = []
    for name, c in sorted(((manifest or {}).get("caches") or {}).items()):
        size, entries = c.get("id_cache_size") or 0, c.get("entries") or 0
        caches.append({
            "cache": name, "window": window_text(c), "entries": entries, "id_cache_size": size,
            "last_seq": c.get("last_seq"),
            "fill_pct": round(100.0 * entries / size, 1) if size else None,
        })
    expectations = []
    for e in (gate or {}).get("expectations") or []:
        expectations.append({
            "suite": e.get("suite"), "expectation": e.get("expectation"), "success": e.get("success"),
            "column": (e.get("kwargs") or {}).get("column"),
            "observed": e.get("observed"),
            "data_docs": data_docs_relpath(root, e.get("data_docs_page")),
        })
    docs_index = root / DATA_DOCS_DIR / "index.html"
    return {
        "batch_id": batch_id,
        "committed": manifest is not None,
        "stale": Path(layout.stale_manifest(root, batch_id)).exists(),
        "run_id": run_id,
        "committed_at": (manifest or {}).get("committed_at"),
        "parent": (manifest or {}).get("parent"),
        "counts": {
            "input_lines": counts.get("input_lines"),
            "delivered": counts.get("delivered"),
            "dropped": counts.get("dropped"),
            "quarantined": counts.get("quarantined"),
            "by_reason": counts.get("by_reason") or {},
        },
        "by_address": by_address,
        "caches": caches,
        "quarantine": read_quarantine(root, batch_id, max_rows) if manifest is not None else [],
        "quarantine_limit": max_rows,
        "gate": None if gate is None else {
            "status": gate_status(gate, run_id),
            "success": gate.get("success"),
            "run_id": gate.get("run_id"),
            "checked_at": gate.get("checked_at"),
            "expectations": expectations,
            "data_docs": data_docs_relpath(root, gate.get("data_docs_path")),
        },
        "data_docs_index": "index.html" if docs_index.is_file() else None,
        # The window-miss audit (§9): None for batches committed before the engine kept it; {} when
        # the horizon is 0 (the audit was off).
        "window_audit": (manifest or {}).get("window_audit"),
        "audit_horizon": audit_horizon(manifest),
        "published": json_files.read_object_or_none(Path(layout.published(root, batch_id))),
    }
