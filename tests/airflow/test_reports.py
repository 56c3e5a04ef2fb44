"""Report building (pyarrow, bounded) and HTML rendering (escaped) of the Data quality view."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq

from msgdedup import reports
from msgdedup.orchestration.quality_view import render_batch, render_index
from msgdedup.review import trends

BATCH = "2026-11-21T05"


def _warehouse(tmp_path, n_quarantined=120):
    (tmp_path / "runs").mkdir()
    manifest = {
        "batch_id": BATCH, "run_id": "r1", "committed_at": "2026-11-21T06:01:00+00:00", "parent": None,
        "counts": {"input_lines": 10 + n_quarantined, "delivered": 7, "dropped": 3, "quarantined": n_quarantined,
                   "by_reason": {"duplicate": 2, "transaction_rejected": 1},
                   "by_address": {"orders.eu": {"delivered": 7, "duplicate": 2, "transaction_rejected": 1}}},
        "caches": {"orders.eu": {"id_cache_size": 20, "entries": 5, "last_seq": 9}},
    }
    (tmp_path / "runs" / f"{BATCH}.json").write_text(json.dumps(manifest))
    qdir = tmp_path / "quarantine" / f"batch_id={BATCH}"
    qdir.mkdir(parents=True)
    rows = [{"raw_line": "<script>alert(1)</script>" if i == 0 else "x" * 2000, "source_file": "file:/raw/part-0.jsonl",
             "line_number": i + 1, "error": "not valid JSON: <b>bad</b>"} for i in range(n_quarantined)]
    pq.write_table(pa.Table.from_pylist(rows[:60]), qdir / "part-00000.parquet")
    pq.write_table(pa.Table.from_pylist(rows[60:]), qdir / "part-00001.parquet")
    gate_dir = tmp_path / "quality" / BATCH
    gate_dir.mkdir(parents=True)
    (gate_dir / "result.json").write_text(json.dumps({
        "batch_id": BATCH, "run_id": "r1", "success": True, "checked_at": "now",
        "data_docs_path": f"{tmp_path}/quality/data_docs/index.html",
        "expectations": [{"suite": "messages", "expectation": "expect_x", "success": True, "observed": {},
                          "kwargs": {"column": "message_id"},
                          "data_docs_page": f"{tmp_path}/quality/data_docs/validations/messages/x.html"}],
    }))
    return tmp_path


def test_report_reads_manifest_gate_and_a_bounded_quarantine(tmp_path):
    wh = _warehouse(tmp_path)
    r = reports.batch_report(wh, BATCH, max_rows=25)
    assert r["committed"] and not r["stale"] and r["run_id"] == "r1"
    assert r["by_address"] == [{"address": "orders.eu", "delivered": 7, "duplicate": 2, "transaction_rejected": 1}]
    assert r["caches"][0]["fill_pct"] == 25.0
    assert len(r["quarantine"]) == 25 and r["quarantine"][1]["raw_line"].endswith("…")
    assert r["gate"]["status"] == "passed" and r["gate"]["data_docs"] == "index.html"
    assert r["gate"]["expectations"][0]["data_docs"] == "validations/messages/x.html"
    [listed] = reports.list_batches(wh)
    assert listed["gate"] == "passed" and listed["published"] is False


def test_gate_of_another_run_is_outdated(tmp_path):
    wh = _warehouse(tmp_path)
    (wh / "runs" / f"{BATCH}.json").write_text(json.dumps({"batch_id": BATCH, "run_id": "r2"}))
    assert reports.batch_report(wh, BATCH)["gate"]["status"] == "outdated"


def test_html_escapes_untrusted_values(tmp_path):
    wh = _warehouse(tmp_path)
    html = render_batch(reports.batch_report(wh, BATCH)).body.decode()
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<b>bad</b>" not in html
    index = render_index(trends.trends(wh), wh).body.decode()
    assert f"href='batches/{BATCH}'" in index


def test_every_committed_batch_id_is_listed_and_has_a_page(tmp_path):
    """The view lists what the warehouse holds, by the warehouse's batch-id rule (not the DAG's hourly one)."""
    wh = _warehouse(tmp_path)
    (wh / "runs" / "nightly-01.json").write_text(json.dumps({"batch_id": "nightly-01", "run_id": "n1"}))
    (wh / "runs" / "zz.stale.json").write_text(json.dumps({"batch_id": "zz", "run_id": "z1"}))
    (wh / "runs" / "notes.txt").write_text("not a manifest")
    listed = {b["batch_id"]: b for b in reports.list_batches(wh)}
    assert sorted(listed) == [BATCH, "nightly-01", "zz"]
    assert listed["zz"]["stale"] and not listed["zz"]["committed"]
    page = reports.batch_report(wh, "nightly-01")
    assert page["committed"] and page["run_id"] == "n1"
    index = render_index(trends.trends(wh), wh).body.decode()
    assert "href='batches/nightly-01'" in index and "href='batches/zz'" in index


def test_batch_page_shows_the_window_miss_audit(tmp_path):
    """§9: the caches whose window let resends through, the most first, with the recommended size."""
    wh = _warehouse(tmp_path)
    manifest = json.loads((wh / "runs" / f"{BATCH}.json").read_text())
    html = render_batch(reports.batch_report(wh, BATCH)).body.decode()
    assert "Not recorded: this batch was committed before the engine kept the audit" in html
    manifest["window_audit"] = {
        "orders.eu": {"address": "orders.eu", "misses": 3, "max_missed_by": 40, "id_cache_size": 20,
                      "recommended_id_cache_size": 60},
        "<i>x</i>": {"address": "<i>x</i>", "misses": 5, "max_missed_by": 0, "id_cache_size": 20,
                     "recommended_id_cache_size": 20},
        "payments.eu": {"address": "payments.eu", "misses": 0, "max_missed_by": 0, "id_cache_size": 20,
                        "recommended_id_cache_size": 20},
    }
    (wh / "runs" / f"{BATCH}.json").write_text(json.dumps(manifest))
    html = render_batch(reports.batch_report(wh, BATCH)).body.decode()
    audit = html[html.index("Window-miss audit"):html.index("Dedup report")]
    assert "8 message(s) were delivered" in audit
    assert audit.index("&lt;i&gt;x&lt;/i&gt;") < audit.index("orders.eu")  # the most misses first
    assert "<i>x</i>" not in audit and "payments.eu" not in audit  # escaped; no misses, not listed
    assert "<tr class='unpublished'><td><code>orders.eu</code></td>" in audit and "<b>60</b>" in audit
    manifest["window_audit"] = {"orders.eu": {**manifest["window_audit"]["payments.eu"], "address": "orders.eu"}}
    (wh / "runs" / f"{BATCH}.json").write_text(json.dumps(manifest))
    html = render_batch(reports.batch_report(wh, BATCH)).body.decode()
    assert "every window was big enough for this batch" in html
