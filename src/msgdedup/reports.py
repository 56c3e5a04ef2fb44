"""Per-batch data-quality report: what the "Data quality" view of the Airflow UI shows.

Everything is read from the warehouse (docs/architecture.md), never from Airflow's database:

- the dedup report from the manifest ``runs/<ID>.json``: counts per address and reason, cache
  fill (entries / id_cache_size) per cache;
- the quarantined lines with their errors, read with pyarrow from
  ``quarantine/batch_id=<ID>/*.parquet`` (at most ``max_rows`` rows are read);
- the GX gate summary ``quality/<ID>/result.json`` and links into the Data Docs site under
  ``quality/data_docs/``;
- the publish state (``published/<ID>.json``) and staleness (``runs/<ID>.stale.json``).
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any

from msgdedup import json_files, layout
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
        # The window-miss audit (issue 12 item 3) once the engine writes it into the manifest.
        "window_audit": (manifest or {}).get("window_audit"),
        "published": json_files.read_object_or_none(Path(layout.published(root, batch_id))),
    }
