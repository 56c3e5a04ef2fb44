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
    assert "40 acceptances past the window" in audit and "<td><code>id_cache_size</code></td><td>20</td>" in audit
    assert "looks back 5 windows per cache" in audit  # no config.window_audit: the default horizon 4
    manifest["window_audit"] = {"orders.eu": {**manifest["window_audit"]["payments.eu"], "address": "orders.eu"}}
    (wh / "runs" / f"{BATCH}.json").write_text(json.dumps(manifest))
    html = render_batch(reports.batch_report(wh, BATCH)).body.decode()
    assert "every window was big enough for this batch" in html


def _with_audit(wh, window_audit, config=None):
    manifest = json.loads((wh / "runs" / f"{BATCH}.json").read_text())
    manifest["window_audit"] = window_audit
    if config is not None:
        manifest["config"] = config
    (wh / "runs" / f"{BATCH}.json").write_text(json.dumps(manifest))
    html = render_batch(reports.batch_report(wh, BATCH)).body.decode()
    return html[html.index("Window-miss audit"):html.index("Dedup report")]


TIME_AUDIT = {"address": "payments.eu", "policy": "time", "misses": 2, "max_missed_by_us": 5_000_000,
              "duplicate_window_us": 600_000_000, "recommended_duplicate_window_us": 605_500_000}


def test_time_window_findings_are_in_seconds_beside_count_ones(tmp_path):
    """§9: a time cache's audit names duplicate_window and speaks seconds; both policies in one table."""
    wh = _warehouse(tmp_path)
    audit = _with_audit(wh, {
        "payments.eu": TIME_AUDIT,
        "orders.eu": {"address": "orders.eu", "policy": "count", "misses": 1, "max_missed_by": 1,
                      "id_cache_size": 20, "recommended_id_cache_size": 21},
        "capped": {"address": "capped", "policy": "time", "misses": 1, "max_missed_by_us": -250_000,
                   "duplicate_window_us": 1_500_000, "recommended_duplicate_window_us": 1_500_000},
    }, config={"window_audit": {"horizon": 2}})
    assert "4 message(s) were delivered" in audit and "looks back 3 windows per cache" in audit
    assert ("<tr class='unpublished'><td><code>payments.eu</code></td><td>payments.eu</td><td>2</td>"
            "<td>5 s past the window</td><td><code>duplicate_window</code></td><td>600 s</td>"
            "<td><b>605.5 s</b></td></tr>") in audit
    assert ("<td>1 acceptance past the window</td><td><code>id_cache_size</code></td><td>20</td>"
            "<td><b>21</b></td>") in audit
    # evicted by the cap inside the window: nothing to raise, so not flagged
    assert ("<tr class=''><td><code>capped</code></td><td>capped</td><td>1</td><td>inside the window as it is now "
            "(it grew since, or the id_cache_size cap evicted the key)</td><td><code>duplicate_window</code></td>"
            "<td>1.5 s</td><td>1.5 s</td></tr>") in audit
    assert "5x" not in audit


def test_horizon_zero_says_the_audit_was_off(tmp_path):
    wh = _warehouse(tmp_path)
    audit = _with_audit(wh, {}, config={"window_audit": {"horizon": 0}})
    assert "The window-miss audit is off for this batch (window_audit: horizon: 0 in the config)" in audit
    assert "big enough" not in audit and "Not recorded" not in audit
    assert reports.batch_report(wh, BATCH)["audit_horizon"] == 0
    audit = _with_audit(wh, {}, config={"window_audit": {"horizon": 7}})
    assert "every window was big enough" in audit and "looks back 8 windows per cache" in audit


def test_audit_finding_reads_either_policy():
    """The one place that knows each policy's keys and units; a report without a policy is count."""
    count = reports.audit_finding({"misses": 3, "max_missed_by": 5, "id_cache_size": 50,
                                   "recommended_id_cache_size": 55})
    assert count == {"setting": "id_cache_size", "current": "50", "largest_miss": "5 acceptances past the window",
                     "recommended": "55", "too_small": True, "window_value": 50, "recommended_value": 55}
    time = reports.audit_finding({**TIME_AUDIT, "recommended_duplicate_window_us": 600_000_001})
    assert (time["setting"], time["current"], time["recommended"]) == ("duplicate_window", "600 s", "600.000001 s")
    assert time["too_small"] and time["largest_miss"] == "5 s past the window"
    assert reports.audit_finding({**TIME_AUDIT, "misses": 0, "max_missed_by_us": 0})["largest_miss"] == "none"


def test_demo_summary_names_the_setting_of_either_policy(tmp_path):
    """The demo's closing lines: duplicate_window in seconds for a time cache, id_cache_size for a count one."""
    from msgdedup.orchestration.demo import summary

    wh = _warehouse(tmp_path)
    _with_audit(wh, {"payments.eu": TIME_AUDIT,
                     "orders.eu": {"address": "orders.eu", "misses": 3, "max_missed_by": 40, "id_cache_size": 20,
                                   "recommended_id_cache_size": 60}})
    lines = summary(wh, [BATCH], {})
    assert lines[-2].startswith("Window-miss audit: 3 resend(s) on orders.eu got through because its window "
                                "(id_cache_size 20) was too small; recommended id_cache_size: 60")
    assert lines[-1].startswith("Window-miss audit: 2 resend(s) on payments.eu got through because its window "
                                "(duplicate_window 600 s) was too small; recommended duplicate_window: 605.5 s")
    _with_audit(wh, {}, config={"window_audit": {"horizon": 0}})
    *_, row = summary(wh, [BATCH], {})  # the audit was off: no misses counted, no closing line
    assert row.startswith(BATCH) and row.split()[6] == "-"
