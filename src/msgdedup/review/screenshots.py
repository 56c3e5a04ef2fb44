"""Screenshots of the Data quality pages, for a reviewer without a browser (``make demo``).

Headless Chromium (Debian's ``/usr/bin/chromium``, driven by Playwright; never ``playwright
install``) logs into the Airflow UI like a user, so the pages are shot behind the real login,
then opens the plugin's pages themselves (full length, not cut by the UI's iframe):

- ``data_quality_batches.png``  the batch list with its trends;
- ``data_quality_batch.png``    the page of the batch with the most dropped messages;
- ``data_quality_dropped.png``  that batch's dropped messages (the drill-down).

``login`` and ``browser`` are shared with ``tests/airflow/test_browser.py``.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Callable, Iterator

from msgdedup.orchestration.local_airflow import ADMIN_USER
from msgdedup.review import trends

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
VIEWPORT = {"width": 1400, "height": 1000}
FILES = ("data_quality_batches.png", "data_quality_batch.png", "data_quality_dropped.png")


@contextlib.contextmanager
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    if not CHROMIUM.exists():
        raise FileNotFoundError(f"{CHROMIUM} is missing: run `make chromium`")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


def login(page: Any, base_url: str, username: str, password: str) -> None:
    """Log into the Airflow UI through its login form (the session cookie then opens the plugin)."""
    page.goto(f"{base_url}/", wait_until="networkidle")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base_url}/", timeout=60_000)


def busiest_batch(warehouse: str | Path) -> str | None:
    """The batch to show: one with window misses if any (so the page shows the audit's finding),
    then the most dropped messages (ties: the newest)."""
    points = trends.trends(warehouse)["points"]
    if not points:
        return None
    best = max(reversed(points), key=lambda p: (bool(p.get("window_misses")),
                                                 (p["duplicate"] or 0) + (p["transaction_rejected"] or 0)))
    return best["batch_id"]


def capture(base_url: str, username: str, password: str, batch_id: str, out_dir: Path) -> list[Path]:
    """The three screenshots of ``FILES`` in ``out_dir``; returns their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    root = f"{base_url}/data-quality"
    shots = [(f"{root}/", "Trends"), (f"{root}/batches/{batch_id}", "Dedup report"),
             (f"{root}/batches/{batch_id}/dropped", "Dropped messages")]
    written = []
    with browser() as b:
        page = b.new_page(viewport=VIEWPORT)
        login(page, base_url, username, password)
        for (url, heading), name in zip(shots, FILES, strict=True):
            response = page.goto(url, wait_until="load")
            if response is None or response.status != 200:
                raise RuntimeError(f"{url}: HTTP {None if response is None else response.status}")
            page.get_by_role("heading", name=heading).first.wait_for(timeout=30_000)
            path = out_dir / name
            page.screenshot(path=str(path), full_page=True)
            written.append(path)
    return written


def write_demo_screenshots(af: Any, warehouse: Path, out_dir: Path, say: Callable[[str], None] = print) -> None:
    """The demo's hook: screenshots into ``out_dir``, or one line saying why not (never fails the demo)."""
    try:
        batch_id = busiest_batch(warehouse)
        if batch_id is None:
            say("no committed batch: no screenshots of the Data quality pages")
            return
        paths = capture(af.base_url, ADMIN_USER, af.password(), batch_id, out_dir)
    except Exception as exc:  # noqa: BLE001 - a screenshot is a convenience, the demo's result stands
        say(f"screenshots of the Data quality pages not written: {type(exc).__name__}: {exc}")
        return
    say("screenshots of the Data quality pages: " + ", ".join(str(p) for p in paths))
