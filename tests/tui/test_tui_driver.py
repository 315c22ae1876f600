"""A lone Esc counts after ESCDELAY, not after Textual's 0.1 s input poll (screens/driver.py)."""

from __future__ import annotations

import os
import selectors
import time

from textual import constants
from textual.drivers.headless_driver import HeadlessDriver
from textual.drivers.linux_driver import LinuxDriver

from screens.app import WorkbenchApp
from screens.driver import CappedSelectSelector, PromptEscapeDriver, prompt_escape


def test_the_capped_selector_returns_within_half_the_escape_delay() -> None:
    read, write = os.pipe()
    selector = CappedSelectSelector()
    try:
        selector.register(read, selectors.EVENT_READ)
        waits = []
        for _ in range(3):  # the shortest of three: a loaded box may run the thread late, never early
            t0 = time.perf_counter()
            assert selector.select(0.1) == []  # nothing typed: Textual's poll would wait the whole 0.1 s
            waits.append(time.perf_counter() - t0)
        assert constants.ESCAPE_DELAY / 2 - 0.005 <= min(waits) < 0.1
        os.write(write, b"\x1b")
        assert [key.fd for key, _ in selector.select(0.1)] == [read]  # input still wakes it at once
    finally:
        selector.close()
        os.close(read)
        os.close(write)


def test_only_the_terminal_driver_is_replaced(fake) -> None:
    assert prompt_escape(LinuxDriver) is PromptEscapeDriver
    assert prompt_escape(HeadlessDriver) is HeadlessDriver  # tests, and the web driver, as they are
    assert WorkbenchApp(fake.db_path).get_driver_class() is PromptEscapeDriver
