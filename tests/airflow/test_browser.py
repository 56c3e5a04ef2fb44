"""Headless Chromium (Debian's package, driven by Playwright): log into the Airflow UI, open the
"Data quality" entry and read a batch's report. Never `playwright install`: the browser is
/usr/bin/chromium, installed by `make chromium` (a prerequisite of `make test`)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture
def browser():
    from playwright.sync_api import sync_playwright

    assert CHROMIUM.exists(), "run `make chromium` (make test does)"
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


def test_data_quality_page_in_the_airflow_ui(backfilled, e2e_hours, browser, tmp_path):
    live, _ = backfilled
    base = live.af.base_url
    batch = e2e_hours[0]
    page = browser.new_page(viewport={"width": 1400, "height": 1000})

    # Not logged in: the plugin endpoint is protected like the UI.
    response = page.goto(f"{base}/data-quality/")
    assert response.status == 401

    page.goto(f"{base}/", wait_until="networkidle")
    page.fill("input[name=username]", "admin")
    page.fill("input[name=password]", live.af.password())
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/", timeout=60_000)

    page.get_by_role("link", name="Data quality").click()
    page.wait_for_url("**/plugin/data-quality**", timeout=30_000)
    frame = page.frame_locator("iframe").first
    frame.get_by_role("heading", name="Data quality: message_dedup").wait_for(timeout=30_000)
    frame.get_by_role("link", name=batch, exact=True).click()
    frame.get_by_role("heading", name=f"Batch {batch}").wait_for(timeout=30_000)
    text = frame.locator("body").inner_text()
    page.screenshot(path=str(tmp_path / "data_quality.png"), full_page=True)
    for expected in ("Dedup report", "Per address", "orders.eu", "Duplicate-ID caches", "BRIDGE.orders.us",
                     "Quality gate (Great Expectations)", "Quarantined lines"):
        assert expected in text, expected
    status, report = live.api("GET", f"/data-quality/api/batches/{batch}")
    assert status == 200 and report["quarantine"], report
    assert report["quarantine"][0]["error"] in text
