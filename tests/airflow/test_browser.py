"""Headless Chromium (Debian's package, driven by Playwright): log into the Airflow UI, open the
"Data quality" entry, read a batch's report, the trends and a drill-down, as a user sees them.
Never `playwright install`: the browser is /usr/bin/chromium, installed by `make chromium` (a
prerequisite of `make test`). Login and browser are msgdedup.review.screenshots' (the demo's)."""

from __future__ import annotations

import pytest

from msgdedup.orchestration.local_airflow import ADMIN_USER
from msgdedup.review import screenshots

pytestmark = pytest.mark.slow


@pytest.fixture
def browser():
    with screenshots.browser() as b:
        yield b


@pytest.fixture
def logged_in(backfilled, browser):
    """A page logged into the live Airflow UI; (page, live Airflow, base URL)."""
    live, _ = backfilled
    page = browser.new_page(viewport=screenshots.VIEWPORT)
    screenshots.login(page, live.af.base_url, ADMIN_USER, live.af.password())
    return page, live, live.af.base_url


def _trends(live, query=""):
    status, body = live.api("GET", f"/data-quality/api/trends{query}")
    assert status == 200, body
    return body


def test_data_quality_page_in_the_airflow_ui(backfilled, e2e_hours, browser, tmp_path):
    live, _ = backfilled
    base = live.af.base_url
    batch = e2e_hours[0]
    page = browser.new_page(viewport={"width": 1400, "height": 1000})

    # Not logged in: the plugin endpoint is protected like the UI.
    response = page.goto(f"{base}/data-quality/")
    assert response.status == 401

    screenshots.login(page, base, ADMIN_USER, live.af.password())

    page.get_by_role("link", name="Data quality").click()
    page.wait_for_url("**/plugin/data-quality**", timeout=30_000)
    frame = page.frame_locator("iframe").first
    frame.get_by_role("heading", name="Data quality: message_dedup").wait_for(timeout=30_000)
    frame.get_by_role("link", name=batch, exact=True).click()
    frame.get_by_role("heading", name=f"Batch {batch}").wait_for(timeout=30_000)
    text = frame.locator("body").inner_text()
    page.screenshot(path=str(tmp_path / "data_quality.png"), full_page=True)
    for expected in ("Dedup report", "Per address", "orders.eu", "Duplicate-ID caches", "BRIDGE.orders",
                     "Quality gate (Great Expectations)", "Quarantined lines", "Drill down:"):
        assert expected in text, expected
    # every cache with its policy and window (the demo's settings, docs/semantics.md §8): an Apama
    # domain of two addresses, a time window and a count window
    caches = {r.split("\t")[0]: r.split("\t")[1] for r in frame.locator("table").filter(
        has_text="last seq").first.locator("tr").all_inner_texts()[1:]}
    assert caches["orders"] == "apama: 200 per sender, then 300 s", caches
    assert caches["payments.eu"] == "time: 600 s", caches
    assert caches["inventory.updates"] == "count: last 50 keys", caches
    status, report = live.api("GET", f"/data-quality/api/batches/{batch}")
    assert status == 200 and report["quarantine"], report
    assert report["quarantine"][0]["error"] in text


def test_trend_view_shows_every_batch_and_filters(logged_in, e2e_hours):
    page, live, base = logged_in
    page.goto(f"{base}/data-quality/", wait_until="load")
    page.get_by_role("heading", name="Trends").wait_for(timeout=30_000)
    text = page.locator("body").inner_text()
    for expected in ("Duplicate rate", "Transactions rejected", "Quarantined lines", "Gate result",
                     "Duplicate-ID caches, fullest first", "Batches, newest first"):
        assert expected in text, expected
    # one bar and one gate cell per batch, each telling its batch and value on hover
    for chart in ("#chart-dup-rate rect.bar", "#chart-quarantined rect.bar", "#chart-gate rect.gate"):
        titles = page.locator(f"{chart} title").all_text_contents()
        assert [t.split(":")[0] for t in titles] == list(e2e_hours), (chart, titles)
    data = _trends(live)
    quarantined = {p["batch_id"]: p["quarantined"] for p in data["points"]}
    assert page.locator("#chart-quarantined title").first.text_content().startswith(
        f"{e2e_hours[0]}: {quarantined[e2e_hours[0]]}")
    # caches, fullest first, as the user reads them in the table
    rows = page.locator("table").nth(0).locator("tr").all_inner_texts()[1:]
    assert [r.split("\t")[0] for r in rows] == [c["cache"] for c in data["caches"]]
    fills = [c["latest_fill_pct"] or 0 for c in data["caches"]]
    assert fills == sorted(fills, reverse=True) and len(rows) >= 2

    # filter by address with the form
    page.select_option("select[name=address]", "orders.eu")
    page.get_by_role("button", name="Show").click()
    page.wait_for_url("**address=orders.eu**", timeout=30_000)
    assert "address orders.eu" in page.locator("body").inner_text()
    cache_rows = page.locator("table").nth(0).locator("tr").all_inner_texts()[1:]
    assert cache_rows and all("orders.eu" in r.split("\t")[1].split(", ") for r in cache_rows), cache_rows
    # and by dates: a range with no batch says so
    page.fill("input[name=from]", "2030-01-01")
    page.get_by_role("button", name="Show").click()
    page.wait_for_url("**from=2030-01-01**", timeout=30_000)
    assert "No batch matches this filter." in page.locator("body").inner_text()


def test_drill_down_from_a_batch_to_the_message_a_duplicate_repeats(logged_in):
    page, live, base = logged_in
    points = [p for p in _trends(live)["points"] if p["duplicate"]]
    assert points, "the sample data has duplicates"
    batch = points[-1]["batch_id"]
    page.goto(f"{base}/data-quality/batches/{batch}", wait_until="load")
    # the window-miss audit (docs/semantics.md §9): the e2e windows are Artemis' default, never too small
    page.get_by_role("heading", name="Window-miss audit").wait_for(timeout=30_000)
    assert "every window was big enough for this batch" in page.locator("body").inner_text()
    page.get_by_role("link", name=f"duplicates ({points[-1]['duplicate']})").click()
    page.get_by_role("heading", name=f"Dropped messages: batch {batch}").wait_for(timeout=30_000)
    rows = page.locator("table tr")
    assert rows.count() == 1 + min(points[-1]["duplicate"], 50)
    first = rows.nth(1).locator("td")
    assert first.nth(3).inner_text() == "duplicate"
    dropped_id, original = first.nth(0).inner_text(), first.nth(4).inner_text()
    delivered_in = first.nth(5).inner_text()
    assert delivered_in == "this batch" or delivered_in < batch
    first.nth(4).get_by_role("link").click()
    page.get_by_role("heading", name=f"Message {original}").wait_for(timeout=30_000)
    text = page.locator("body").inner_text()
    assert "delivered" in text and "body" in text
    page.go_back()
    first = page.locator("table tr").nth(1).locator("td")
    first.nth(0).get_by_role("link").click()
    page.get_by_role("heading", name=f"Message {dropped_id}").wait_for(timeout=30_000)
    assert "dropped (duplicate)" in page.locator("body").inner_text()

    # the quarantined lines of the first batch that has some, raw lines as text
    bad = [p for p in _trends(live)["points"] if p["quarantined"]]
    if bad:
        page.goto(f"{base}/data-quality/batches/{bad[0]['batch_id']}/quarantine", wait_until="load")
        page.get_by_role("heading", name=f"Quarantined lines: batch {bad[0]['batch_id']}").wait_for(timeout=30_000)
        status, report = live.api("GET", f"/data-quality/api/batches/{bad[0]['batch_id']}/quarantine")
        assert status == 200 and report["rows"]
        assert report["rows"][0]["error"] in page.locator("body").inner_text()


def test_screenshots_for_the_demo(backfilled, tmp_path):
    live, _ = backfilled
    batch = screenshots.busiest_batch(live.warehouse)
    paths = screenshots.capture(live.af.base_url, ADMIN_USER, live.af.password(), batch, tmp_path)
    assert [p.name for p in paths] == list(screenshots.FILES)
    for p in paths:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 10_000, p
