"""Trends on the batch list: numbers from the small per-batch JSON files only, filters, the
fullest caches first, stale/unpublished batches marked in words, everything escaped."""

from __future__ import annotations

import json
from datetime import date

import pytest

from msgdedup.orchestration.quality_view import render_index
from msgdedup.review import trends
from msgdedup.review.trends import TrendFilter

HOURS = [f"2026-11-2{d}T{h:02d}" for d in (0, 1) for h in (0, 1, 2)]


def _manifest(batch_id, run_id, dup, rejected, quarantined, fill_eu, address_eu="orders.eu"):
    return {
        "batch_id": batch_id, "run_id": run_id, "committed_at": "2026-11-22T00:00:00+00:00",
        "counts": {"input_lines": 100, "delivered": 90 - dup - rejected, "dropped": dup + rejected,
                   "quarantined": quarantined,
                   "by_reason": {"duplicate": dup, "transaction_rejected": rejected},
                   "by_address": {address_eu: {"delivered": 50 - dup, "duplicate": dup, "transaction_rejected": 0},
                                  "orders.us": {"delivered": 40 - rejected, "duplicate": 0,
                                                "transaction_rejected": rejected}}},
        "caches": {address_eu: {"address": address_eu, "id_cache_size": 100, "entries": fill_eu, "last_seq": 1},
                   "BRIDGE.orders.us": {"address": "orders.us", "id_cache_size": 1000, "entries": 100, "last_seq": 1}},
    }


def trend_warehouse(root, hostile_address="orders.eu"):
    """Six hourly batches: the 4th stale, the 5th committed but unpublished (gate failed), the
    6th with no gate; caches: orders.eu filling up to 95 %, BRIDGE.orders.us at 10 %."""
    (root / "runs").mkdir(parents=True)
    (root / "published").mkdir()
    for i, b in enumerate(HOURS):
        m = _manifest(b, f"r{i}", dup=i, rejected=2 if i == 4 else 0, quarantined=3 if i == 2 else 0,
                      fill_eu=20 + 15 * i, address_eu=hostile_address)
        name = f"{b}.stale.json" if i == 3 else f"{b}.json"
        (root / "runs" / name).write_text(json.dumps(m))
        if i < 5:
            gate = root / "quality" / b
            gate.mkdir(parents=True)
            (gate / "result.json").write_text(json.dumps({"run_id": f"r{i}", "success": i != 4}))
        if i not in (3, 4, 5):
            (root / "published" / f"{b}.json").write_text(json.dumps({"run_id": f"r{i}"}))
    return root


def test_points_oldest_first_with_rates_gate_and_state(tmp_path):
    t = trends.trends(trend_warehouse(tmp_path))
    points = {p["batch_id"]: p for p in t["points"]}
    assert [p["batch_id"] for p in t["points"]] == HOURS
    first = points[HOURS[1]]
    assert first["duplicate"] == 1 and first["valid_messages"] == 90 and first["duplicate_rate_pct"] == 1.11
    assert points[HOURS[2]]["quarantined"] == 3
    assert points[HOURS[3]]["stale"] and not points[HOURS[3]]["committed"] and points[HOURS[3]]["duplicate"] == 3
    assert points[HOURS[4]]["gate"] == "failed" and points[HOURS[4]]["transaction_rejected"] == 2
    assert not points[HOURS[4]]["published"]
    assert points[HOURS[5]]["gate"] == "not run"
    # fullest first: orders.eu ends at 95 %, the bridge at 10 %
    assert [c["cache"] for c in t["caches"]] == ["orders.eu", "BRIDGE.orders.us"]
    assert t["caches"][0]["latest_fill_pct"] == 95.0 and t["caches"][0]["series"][0] == 20.0


def test_filters_by_address_and_date_range_and_limit(tmp_path):
    wh = trend_warehouse(tmp_path)
    t = trends.trends(wh, TrendFilter(address="orders.us", since=date(2026, 11, 21)))
    assert [p["batch_id"] for p in t["points"]] == HOURS[3:]
    assert [c["cache"] for c in t["caches"]] == ["BRIDGE.orders.us"]
    assert [p["duplicate"] for p in t["points"]] == [0, 0, 0]
    assert [p["transaction_rejected"] for p in t["points"]] == [0, 2, 0]
    newest = trends.trends(wh, TrendFilter(limit=2))
    assert [p["batch_id"] for p in newest["points"]] == HOURS[-2:] and newest["truncated"]
    assert trends.trends(wh, TrendFilter(until=date(2026, 11, 20)))["points"][-1]["batch_id"] == HOURS[2]


def test_bad_filter_values_are_refused_with_a_reason():
    with pytest.raises(ValueError, match="YYYY-MM-DD"):
        TrendFilter.parse(since="yesterday")
    with pytest.raises(ValueError, match="after"):
        TrendFilter.parse(since="2026-11-22", until="2026-11-21")
    with pytest.raises(ValueError, match="limit"):
        TrendFilter.parse(limit="0")
    assert TrendFilter.parse(address=" orders.eu ", since="2026-11-21") == TrendFilter("orders.eu", date(2026, 11, 21))


def test_named_batches_are_placed_by_their_commit_time(tmp_path):
    (tmp_path / "runs").mkdir()
    for name, at in (("nightly-01", "2026-11-20T23:00:00+00:00"), ("nightly-02", "2026-11-21T23:00:00+00:00")):
        (tmp_path / "runs" / f"{name}.json").write_text(json.dumps({"run_id": "x", "committed_at": at}))
    t = trends.trends(tmp_path, TrendFilter(since=date(2026, 11, 21)))
    assert [p["batch_id"] for p in t["points"]] == ["nightly-02"]


def test_index_page_marks_stale_and_unpublished_in_words_and_escapes(tmp_path):
    wh = trend_warehouse(tmp_path, hostile_address="<img src=x onerror=alert(1)>")
    page = render_index(trends.trends(wh), wh).body.decode()
    assert "<img src=x" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    assert page.count("<svg") >= 4 + 2  # three bar charts, the gate strip, fill bar + sparkline per cache
    assert "stale: re-run it" in page and "not published" in page
    assert f"<title>{HOURS[3]}: 3.33 % (stale: re-run it)</title>" in page
    assert "1 stale</b> (re-run them)" in page and "2 not published</b>" in page
    assert f"href='batches/{HOURS[0]}'" in page
    # the filter form keeps what was asked for
    page = render_index(trends.trends(wh, TrendFilter(since=date(2026, 11, 21))), wh).body.decode()
    assert "name='from' value='2026-11-21'" in page and HOURS[0] not in page


def test_empty_and_filtered_out_warehouses(tmp_path):
    assert "No committed batch yet." in render_index(trends.trends(tmp_path), tmp_path).body.decode()
    wh = trend_warehouse(tmp_path / "wh")
    t = trends.trends(wh, TrendFilter(since=date(2030, 1, 1)))
    assert "No batch matches this filter." in render_index(t, wh).body.decode()


def test_window_misses_per_batch_and_per_cache(tmp_path):
    """§9: misses per batch (None before the audit existed), per cache summed over the batches
    shown with the largest recommended size; the index charts them and flags the cache."""
    root = trend_warehouse(tmp_path)
    for i, b in enumerate(HOURS[4:], start=4):
        path = root / "runs" / f"{b}.json"
        m = json.loads(path.read_text())
        m["window_audit"] = {"orders.eu": {"address": "orders.eu", "misses": i - 2, "max_missed_by": 10 * i,
                                           "id_cache_size": 100, "recommended_id_cache_size": 100 + 10 * i},
                             "BRIDGE.orders.us": {"address": "orders.us", "misses": 0, "max_missed_by": 0,
                                                  "id_cache_size": 1000, "recommended_id_cache_size": 1000}}
        path.write_text(json.dumps(m))
    t = trends.trends(root)
    assert [p["window_misses"] for p in t["points"]] == [None, None, None, None, 2, 3]
    caches = {c["cache"]: c for c in t["caches"]}
    assert caches["orders.eu"]["window_misses"] == 5 and caches["orders.eu"]["recommended"] == "150"
    assert caches["orders.eu"]["too_small"]
    assert caches["BRIDGE.orders.us"]["window_misses"] == 0
    assert caches["BRIDGE.orders.us"]["recommended"] == "1000" and not caches["BRIDGE.orders.us"]["too_small"]
    only_us = trends.trends(root, TrendFilter(address="orders.us"))
    assert [p["window_misses"] for p in only_us["points"]][-2:] == [0, 0]
    html = render_index(t, root).body.decode()
    assert "id='trend-window-misses'" in html and "<b>150</b>" in html and "<b class='stale'>5</b>" in html
    assert "recommended window" in html and "recommended id_cache_size" not in html


def _time_audits(root, newest_window_us, newest_recommended_us):
    """payments.eu, a 600 s time window in HOURS[3:5] (misses recommending 603.25 s and 604.25 s),
    then ``newest_window_us`` in HOURS[5]."""
    for i, b in enumerate(HOURS[3:], start=3):
        window_us = 600_000_000 if i < 5 else newest_window_us
        recommended = (600 + i) * 1_000_000 + 250_000 if i < 5 else newest_recommended_us
        path = root / "runs" / (f"{b}.stale.json" if i == 3 else f"{b}.json")
        m = json.loads(path.read_text())
        m["caches"]["payments.eu"] = {"address": "payments.eu", "policy": "time", "id_cache_size": None,
                                      "duplicate_window_us": window_us, "entries": 5, "last_seq": 9}
        m["window_audit"] = {"payments.eu": {"address": "payments.eu", "policy": "time", "misses": 1,
                                             "max_missed_by_us": i * 1_000_000, "duplicate_window_us": window_us,
                                             "recommended_duplicate_window_us": recommended}}
        path.write_text(json.dumps(m))
    return root


def test_time_window_recommendation_per_cache(tmp_path):
    """§9: a time cache's recommended duplicate_window, the largest over the batches shown, in
    seconds; flagged only while it is bigger than the newest window."""
    root = _time_audits(trend_warehouse(tmp_path), 900_000_000, 905_250_000)
    t = trends.trends(root)
    newest = t["points"][-1]["caches"]["payments.eu"]
    assert newest["recommended"] == "905.25 s" and newest["too_small"] and t["points"][-1]["window_misses"] == 1
    payments = {c["cache"]: c for c in t["caches"]}["payments.eu"]
    assert payments["window_misses"] == 3 and payments["recommended"] == "905.25 s" and payments["too_small"]
    assert "<b>905.25 s</b>" in render_index(t, root).body.decode()
    # raised to the 604.25 s HOURS[4] recommended: still the largest, but no longer too small
    root = _time_audits(trend_warehouse(tmp_path / "raised"), 604_250_000, 604_250_000)
    t = trends.trends(root)
    payments = {c["cache"]: c for c in t["caches"]}["payments.eu"]
    assert payments["recommended"] == "604.25 s" and not payments["too_small"]
    html = render_index(t, root).body.decode()
    assert "<td>604.25 s</td>" in html and "<b>604.25 s</b>" not in html


def test_a_domains_cache_is_shown_for_each_of_its_addresses(tmp_path):
    """§8.1: the cache ``orders`` serves orders.eu and orders.us; filtering by either shows it,
    with both addresses and its Apama window."""
    root = trend_warehouse(tmp_path)
    for path in (root / "runs").iterdir():
        m = json.loads(path.read_text())
        m["caches"]["orders"] = {"address": "orders.eu", "addresses": ["orders.eu", "orders.us"], "policy": "apama",
                                 "per_source_window": 200, "expiry_seconds": 300, "entries": 7, "last_seq": 9}
        path.write_text(json.dumps(m))
    for address in ("orders.eu", "orders.us"):
        caches = {c["cache"]: c for c in trends.trends(root, TrendFilter(address=address))["caches"]}
        assert caches["orders"]["address"] == "orders.eu, orders.us", address
        assert caches["orders"]["window"] == "apama: 200 per sender, then 300 s"
        assert caches["orders"]["id_cache_size"] is None and caches["orders"]["latest_fill_pct"] is None
    # no count limit is shown as none, not as a cache size of 0 (which would mean detection off)
    html = render_index(trends.trends(root), root).body.decode()
    assert "<td>orders.eu, orders.us</td><td>apama: 200 per sender, then 300 s</td>" in html
    row = html[html.index("<td>orders.eu, orders.us</td>"):]
    assert "<td>7</td><td>-</td>" in row[:row.index("</tr>")]
