"""Browser tests: Debian's Chromium driven by Playwright (sync API), nothing downloaded.

Chromium is the system package ``chromium`` (``make test`` installs it when missing:
the Makefile's ``SYSTEM_PACKAGES``); ``playwright install`` is never needed. Without
it these tests skip with the reason, or fail under CI=true. Chromium's background
connections (updates, sync, QUIC) are switched off: the tests need no network.

Every wait is for a condition (``expect`` and locators, up to ``TIMEOUT_MS``), never
for a duration. Screenshots go to ``.pytest_cache/dashboard/`` (git-ignored); the
paths are printed at the end of the run.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from pathlib import Path

import pytest
import requests

from exosuit.db import jobs as jobs_db
from exosuit.db.api import Database
from tests.conftest import require

CHROMIUM = (
    os.environ.get("EXOSUIT_TEST_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
)
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TIMEOUT_MS = 30_000
LAPTOP = {"width": 1280, "height": 800}
PHONE = {"width": 375, "height": 812}
SCREENSHOTS = Path(__file__).resolve().parents[3] / ".pytest_cache" / "dashboard"

_screenshots: list[Path] = []


@pytest.fixture(scope="session")
def browser():
    """One headless Chromium for the session."""
    require(
        Path(CHROMIUM).is_file(),
        f"Chromium is not installed at {CHROMIUM} (apt-get install chromium; make test does)",
    )
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=TIMEOUT_MS)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, timeout=60_000
        )
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def open_page(browser):
    """``open_page(url, headers=None, viewport=LAPTOP)``: a page in a new browser context
    (its own storage), ``headers`` sent with every request. A script error on any page
    fails the test."""
    contexts = []
    errors: list[str] = []

    def open_(url: str, *, headers: dict[str, str] | None = None, viewport=LAPTOP):
        context = browser.new_context(extra_http_headers=headers, viewport=viewport)
        context.set_default_timeout(TIMEOUT_MS)
        contexts.append(context)
        page = context.new_page()
        page.on("pageerror", lambda error: errors.append(f"{page.url}: {error}"))
        page.goto(url)
        return page

    yield open_
    for context in contexts:
        context.close()
    assert errors == [], "script errors in the page"


def screenshot(page, name: str) -> Path:
    """A full-page screenshot under .pytest_cache/dashboard/ (not committed)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / name
    page.screenshot(path=str(path), full_page=True)
    _screenshots.append(path)
    return path


def pytest_terminal_summary(terminalreporter):
    for path in _screenshots:
        terminalreporter.write_line(f"dashboard screenshot: {path}")


def make_failed_job(server, kind: str, payload: dict | None = None, wait: float = 30.0) -> dict:
    """A failed job of the conductor of ``server`` (an ``exosuit serve``), as the API
    shows it. A job of a kind no conductor handles fails at its first attempt (the
    conductor records why); it is enqueued in serve's database as the API enqueues its
    jobs: no endpoint makes one on purpose."""
    db = Database(f"sqlite:///{server.data_dir}/exosuit.sqlite")
    try:
        job_id = db.write(jobs_db.enqueue, kind, payload or {}, key=f"{kind}:{uuid.uuid4()}")
    finally:
        db.dispose()
    deadline = time.monotonic() + wait
    while True:
        r = requests.get(
            f"{server.url}/v2/jobs/{job_id}",
            headers={"OpenStack-API-Version": "accelerator 2.5"},
            timeout=10,
        )
        assert r.status_code == 200, r.text
        job = r.json()
        if job["state"] == "failed":
            return job
        assert time.monotonic() < deadline, f"job {job_id} never failed: {job}"
        time.sleep(0.1)
