"""The Data Docs site of real gate runs renders with the network blocked.

Two gated batches (B2 with an injected duplicate delivery, so a failed suite's page lists
offending rows): every page references only files of the site, and headless Chromium (Debian's
package driven by Playwright, as in tests/airflow/test_browser.py; never `playwright install`)
renders the index's validation table, its filters and Bootstrap's styles from ``file:`` URLs
while every other request is aborted.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from msgdedup.quality import run_gate
from msgdedup.quality.data_docs_offline import manifest, site_path
from tests.quality.warehouse_fixture import DELIVERED_DDL, delivered, two_batches, write_rows

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
REFERENCE = re.compile(r'<(script|link|img)\b([^>]*?)\b(?:src|href)="([^"]*)"', re.IGNORECASE)
SUITES = ("messages", "key_window", "transactions", "accounting", "id_cache")


@pytest.fixture(scope="module")
def site(spark, tmp_path_factory):
    """Data Docs of two real gate runs: B1 passes, B2 fails ``key_window`` (m9 delivered twice)."""
    warehouse = tmp_path_factory.mktemp("docs") / "wh"
    two_batches(spark, warehouse)
    write_rows(spark, str(warehouse / "delivered" / "batch_id=B2"), [delivered("m9-dup", 9, "k6", 7)],
               DELIVERED_DDL, mode="append")
    first, second = run_gate(spark, str(warehouse), "B1"), run_gate(spark, str(warehouse), "B2")
    assert first.success and not second.success
    failed_page = next(e.data_docs_page for e in second.expectations
                       if e.suite == "key_window" and not e.success)
    return Path(second.data_docs_path).parent, Path(failed_page)


def test_every_page_references_only_files_of_the_site(site):
    root, _ = site
    pages = sorted(root.rglob("*.html"))
    # index, 5 suite pages, 2 batches x 5 validation pages
    assert len(pages) == 1 + len(SUITES) + 2 * len(SUITES), pages
    for page in pages:
        html = page.read_text()
        references = REFERENCE.findall(html)
        assert {tag.lower() for tag, _, _ in references} >= {"script", "link", "img"}, page
        for tag, attributes, url in references:
            assert not re.match(r"(?i)(https?:)?//", url), f"{page.relative_to(root)}: remote {tag} {url}"
            if "shortcut icon" in attributes and page.relative_to(root).parts[0] == "validations":
                # GX's favicon.j2 climbs one directory too few from validation pages (GX's bug,
                # left alone): a missing local icon, never a request to the network.
                continue
            target = (page.parent / unquote(urlsplit(url).path)).resolve()
            assert target.is_file() and target.is_relative_to(root), f"{page.relative_to(root)}: {url} missing"
        # vega is not shipped (manifest.json, not_shipped): no page may need it.
        assert "vegaEmbed" not in html, page


def test_the_site_holds_the_pinned_files_and_their_licenses(site):
    root, _ = site
    for entry in manifest()["files"]:
        copied = root / site_path(entry["path"])
        assert hashlib.sha256(copied.read_bytes()).hexdigest() == entry["sha256"], entry["path"]
    for package in manifest()["packages"]:
        assert (root / site_path(package["license_file"])).is_file()


@pytest.fixture
def offline_page():
    """A Chromium page for which every request but ``file:`` is aborted; the aborted URLs and
    the page's script errors are collected in the two lists that come with it."""
    from playwright.sync_api import sync_playwright

    assert CHROMIUM.exists(), "run `make chromium` (make test does)"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            blocked: list[str] = []

            def block(route):
                if route.request.url.startswith("file:"):
                    route.continue_()
                else:
                    blocked.append(route.request.url)
                    route.abort("internetdisconnected")

            context.route("**/*", block)
            page = context.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            yield page, blocked, errors
        finally:
            browser.close()


@pytest.mark.slow
def test_data_docs_render_with_the_network_blocked(site, offline_page, tmp_path):
    root, failed_page = site
    page, blocked, errors = offline_page
    page.goto((root / "index.html").as_uri(), wait_until="load")

    # The validation list is built in the browser by bootstrap-table (jQuery, Bootstrap).
    validations = page.locator("table", has=page.locator("th[data-field='run_name']"))
    rows = validations.locator("tbody tr:not(.no-records-found)")
    rows.first.wait_for(timeout=30_000)
    assert rows.count() == 2 * len(SUITES), page.locator("body").inner_text()
    assert rows.filter(has_text="key_window").count() == 2
    # Bootstrap's stylesheet applied: GX's layout classes take Bootstrap's spacing and position.
    style = page.evaluate("""() => {
        const css = (selector, property) => getComputedStyle(document.querySelector(selector))[property];
        return {padding: css('.container-fluid', 'paddingLeft'), navbar: css('nav.navbar', 'position'),
                button: css('.btn-secondary', 'backgroundColor')};
    }""")
    assert style == {"padding": "48px", "navbar": "sticky", "button": "rgb(108, 117, 125)"}, style
    # Font Awesome's solid face (the success/failure icons) loaded from the site.
    page.wait_for_function("""() => [...document.fonts].some(
        f => f.family.includes('Font Awesome 6 Free') && f.weight === '900' && f.status === 'loaded')""",
                           timeout=30_000)
    page.screenshot(path=str(tmp_path / "data_docs_index.png"), full_page=True)
    # The filter-control extension's filters work: the run-name filter keeps B1's five results,
    # and the run-time filter opens bootstrap-datepicker's calendar.
    validations.locator("th[data-field='run_name'] .filter-control input").press_sequentially("B1")
    page.wait_for_function("""() => document.querySelectorAll(
        "table:has(th[data-field='run_name']) tbody tr:not(.no-records-found)").length === %d""" % len(SUITES),
                           timeout=30_000)
    assert rows.filter(has_text="B2").count() == 0
    validations.locator("th[data-field='run_time'] .filter-control input").click()
    page.locator(".datepicker-dropdown .datepicker-days").wait_for(timeout=30_000)

    # A failed suite's page: its offending rows, styled, still nothing from outside.
    page.goto(failed_page.as_uri(), wait_until="load")
    page.get_by_text("m9-dup").first.wait_for(timeout=30_000)
    padding = page.evaluate("() => getComputedStyle(document.querySelector('.container-fluid')).paddingLeft")
    assert padding == "48px"

    assert blocked == [], blocked
    assert errors == [], errors
