"""`workbench serve` in a real browser: headless Chromium (Debian's package) driven by Playwright's Python client.

Run by `make test-web` (it sets WORKBENCH_WEB_TEST=1); skipped with the reason in `make test`, and wherever
chromium or playwright is missing. Nothing is downloaded: Playwright is pointed at the system chromium, and
the page's Google Fonts request is aborted (offline). The screen is xterm.js on a canvas, so the page's text
is not in the DOM: the test waits for the terminal's first byte, then for the picture to settle (the
dashboard drawn), reads the screen's text rows from xterm.js's own buffer (the header cells of the Tasks and
Live rollouts panes each whole and apart at the browser's size), presses `p`, and checks both the app's side
effect (a pause command in the store) and that the picture changed. The settled dashboard is saved as
docs/web.png for the README.
"""

from __future__ import annotations

import importlib.util
import itertools
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

import store
from store import runs
from tests.conftest import pending_commands
from tests.tui.test_tui_layout import ROLLOUTS_HEADER, TASKS_HEADER

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SCREENSHOT = ROOT / "docs" / "web.png"

# textual-serve keeps its xterm.js Terminal in a closure. Its client object sets `fitAddon` in its constructor
# (after `terminal`): a setter on Object.prototype, installed before the page's script runs, catches that
# object once and leaves an ordinary property in its place.
CATCH_TERMINAL = """
Object.defineProperty(Object.prototype, "fitAddon", {
  configurable: true,
  set(value) {
    Object.defineProperty(this, "fitAddon", {value, writable: true, configurable: true, enumerable: true});
    if (this.terminal && this.terminal.buffer) window.__workbenchClient = this;
  },
});
"""
# The text rows xterm.js shows now (its buffer holds what the canvas draws).
SCREEN_ROWS = """() => {
  const term = window.__workbenchClient.terminal, buf = term.buffer.active, rows = [];
  for (let y = 0; y < term.rows; y++) rows.push(buf.getLine(buf.viewportY + y).translateToString(true));
  return {cols: term.cols, rows};
}"""

pytestmark = [
    pytest.mark.web,
    pytest.mark.skipif(
        not os.environ.get("WORKBENCH_WEB_TEST"), reason="the browser test runs with `make test-web`"
    ),
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (apt-get install chromium)"),
    pytest.mark.skipif(importlib.util.find_spec("playwright") is None, reason="playwright is not installed"),
    pytest.mark.skipif(
        importlib.util.find_spec("textual_serve") is None, reason="textual-serve is not installed"
    ),
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
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    found: dict[str, str] = {}

    def read() -> None:  # the printed URL (it carries the access token); then keep the pipe drained
        for line in proc.stdout:
            m = re.search(r"open (http://\S+)", line)
            if m:
                found["url"] = m.group(1)

    threading.Thread(target=read, daemon=True).start()
    stop = threading.Event()

    def beat() -> None:
        # The fake worker stays alive however slowly a busy machine starts the browser: past STALE_AFTER_S a
        # banner counts the heartbeat's age in seconds, and a picture that changes every second never settles.
        db = store.open_db(fake.db_path)
        try:
            while not stop.wait(5.0):
                runs.heartbeat(db, fake.run_id, fake.lock_token)
        finally:
            db.conn.close()

    threading.Thread(target=beat, daemon=True).start()

    def listening() -> bool:
        assert proc.poll() is None, "the server exited"
        with socket.socket() as s:
            return "url" in found and s.connect_ex(("127.0.0.1", port)) == 0

    try:
        wait_for(listening, "the server to listen")
        yield found["url"], fake
    finally:
        stop.set()
        os.killpg(proc.pid, signal.SIGTERM)  # the server and the app processes it started
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def pane_rows(rows: list[str], first_label: str) -> list[str]:
    """The rows of the pane whose table header starts with `first_label`, from its header down, each cut to
    that pane (between its │ borders): panes side by side share a screen row."""
    for y, row in enumerate(rows):
        pos = 0
        for seg in row.split("│"):
            if seg.lstrip().startswith(first_label):
                return [r[pos : pos + len(seg)] for r in rows[y:]]
            pos += len(seg) + 1
    raise AssertionError(f"no table header starting {first_label!r} on screen:\n" + "\n".join(rows))


def check_header(header: str, labels: tuple[str, ...]) -> None:
    """Every label drawn whole and apart from the next (`promptsplit` is the bug), in order, from the left;
    the columns that do not fit the pane are cut from the right: at most one shows part of its label."""
    shown = next(
        (
            k
            for k in range(len(labels), 1, -1)
            if re.fullmatch(r"\s*" + r"\s+".join(map(re.escape, labels[:k])) + r"(\s+\S+)?\s*", header)
        ),
        0,
    )
    assert shown >= 2, f"header cells run together or out of order: {header!r}"
    rest = header.split()[len(" ".join(labels[:shown]).split()) :]
    assert not rest or (shown < len(labels) and labels[shown].startswith(rest[0])), header


def check_tasks_pane(rows: list[str]) -> None:
    """The Tasks pane's header and its rows: each split cell starts where the header's does, after a gap."""
    header, *below = pane_rows(rows, "prompt")
    check_header(header, TASKS_HEADER)
    body = list(itertools.takewhile(lambda r: not r.startswith("─"), below))  # down to the pane's border
    cells = [r for r in body if r.strip()]
    col = re.search(r"\ssplit\s", header).start() + 1
    shown = "\n".join([header, *cells])
    assert cells and all(r[col - 1] == " " for r in cells), shown
    assert {r[col : col + 6].strip() for r in cells} == {"train", "held"}, shown  # the fake run's splits


def test_the_dashboard_in_chromium_takes_keys(served):
    from playwright.sync_api import sync_playwright

    url, fake = served
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])  # root in CI containers
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 760})
            page.add_init_script(CATCH_TERMINAL)
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
            screen = page.evaluate(SCREEN_ROWS)
            print(
                f"the browser's terminal: {screen['cols']}x{len(screen['rows'])}", *screen["rows"], sep="\n"
            )
            check_tasks_pane(screen["rows"])
            check_header(pane_rows(screen["rows"], "step")[0], ROLLOUTS_HEADER)
            page.focus(".xterm-helper-textarea")  # xterm.js takes keys through this hidden textarea
            page.keyboard.press("p")
            wait_for(lambda: any(c["kind"] == "pause" for c in pending_commands(fake)), "the pause command")
            wait_for(lambda: page.screenshot() != dashboard, "the page to change")
        finally:
            browser.close()
