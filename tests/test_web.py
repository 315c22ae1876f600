"""`workbench serve` in a real browser: headless Chromium (Debian's package) driven by Playwright's Python client.

Run by `make test-web` (it sets WORKBENCH_WEB_TEST=1); skipped with the reason in `make test`, and wherever
chromium or playwright is missing. Nothing is downloaded: Playwright is pointed at the system chromium, and
the page's Google Fonts request is aborted (offline). The screen is xterm.js on a canvas, so the page's text
is not in the DOM: the test waits for the terminal's first byte, then for the picture to settle (the
dashboard drawn), presses `p`, and checks both the app's side effect (a pause command in the store) and that
the picture changed. The settled dashboard is saved as docs/web.png for the README.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import pending_commands

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SCREENSHOT = ROOT / "docs" / "web.png"

pytestmark = [
    pytest.mark.web,
    pytest.mark.skipif(not os.environ.get("WORKBENCH_WEB_TEST"), reason="the browser test runs with `make test-web`"),
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (apt-get install chromium)"),
    pytest.mark.skipif(importlib.util.find_spec("playwright") is None, reason="playwright is not installed"),
    pytest.mark.skipif(importlib.util.find_spec("textual_serve") is None, reason="textual-serve is not installed"),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(check, what: str, deadline_s: float = 90.0, every_s: float = 0.5):
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        value = check()
        if value:
            return value
        time.sleep(every_s)
    raise AssertionError(f"gave up waiting for {what}")


@pytest.fixture
def served(fake):
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "workbench.cli", "serve", "--port", str(port), "--db", str(fake.db_path)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )
    found: dict[str, str] = {}

    def read() -> None:  # the printed URL (it carries the access token); then keep the pipe drained
        for line in proc.stdout:
            m = re.search(r"open (http://\S+)", line)
            if m:
                found["url"] = m.group(1)

    threading.Thread(target=read, daemon=True).start()

    def listening() -> bool:
        assert proc.poll() is None, "the server exited"
        with socket.socket() as s:
            return "url" in found and s.connect_ex(("127.0.0.1", port)) == 0

    try:
        wait_for(listening, "the server to listen")
        yield found["url"], fake
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the server and the app processes it started
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_the_dashboard_in_chromium_takes_keys(served):
    from playwright.sync_api import sync_playwright

    url, fake = served
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])  # root in CI containers
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 760})
            page.route(re.compile(r"fonts\.(googleapis|gstatic)\.com"), lambda route: route.abort())
            page.goto(url)
            page.wait_for_selector("body.-first-byte", timeout=90_000)
            last: list[bytes] = [b""]

            def settled() -> bytes | None:  # two equal pictures in a row: the dashboard is drawn
                shot = page.screenshot()
                same = shot == last[0]
                last[0] = shot
                return shot if same else None

            dashboard = wait_for(settled, "the dashboard to settle", every_s=1.5)
            SCREENSHOT.write_bytes(dashboard)
            page.focus(".xterm-helper-textarea")  # xterm.js takes keys through this hidden textarea
            page.keyboard.press("p")
            wait_for(lambda: any(c["kind"] == "pause" for c in pending_commands(fake)), "the pause command")
            wait_for(lambda: page.screenshot() != dashboard, "the page to change")
        finally:
            browser.close()
