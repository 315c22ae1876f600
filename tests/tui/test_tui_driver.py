"""A lone Esc counts after ESCDELAY, not after Textual's 0.1 s input poll, and an idle UI wakes no more often than
before (screens/driver.py)."""

from __future__ import annotations

import os
import selectors
import time

from textual import constants
from textual.drivers.headless_driver import HeadlessDriver
from textual.drivers.linux_driver import LinuxDriver

from screens.app import WorkbenchApp
from screens.driver import DeadlineSelector, DeadlineXTermParser, PromptEscapeDriver, prompt_escape


def _selector_and_parser() -> tuple[DeadlineSelector, DeadlineXTermParser, int, int]:
    read, write = os.pipe()
    selector = DeadlineSelector()  # made first, as the input thread does: the parser finds it
    parser = DeadlineXTermParser()
    selector.register(read, selectors.EVENT_READ)
    assert selector.parser is parser
    return selector, parser, read, write


def test_a_lone_esc_wakes_the_input_thread_at_the_escape_deadline() -> None:
    selector, parser, read, write = _selector_and_parser()
    try:
        waits = []
        for _ in range(3):  # the shortest of three: a loaded box may run the thread late, never early
            assert list(parser.feed("\x1b")) == []  # maybe the start of a sequence: no key yet
            t0 = time.perf_counter()
            assert selector.select(1.0) == []  # nothing more typed: not the whole timeout asked for
            waits.append(time.perf_counter() - t0)
            assert [e.key for e in parser.tick()] == ["escape"]  # the deadline has passed: a key now
        assert constants.ESCAPE_DELAY - 0.005 <= min(waits) < constants.ESCAPE_DELAY + 0.05
        os.write(write, b"\x1b")
        assert [key.fd for key, _ in selector.select(0.1)] == [read]  # input still wakes it at once
    finally:
        selector.close()
        os.close(read)
        os.close(write)


def test_an_idle_input_thread_waits_as_long_as_textual_asks() -> None:
    selector, _parser, read, write = _selector_and_parser()
    try:
        t0 = time.perf_counter()
        assert selector.select(0.1) == []  # nothing pending: no wake-ups beyond Textual's own poll
        assert time.perf_counter() - t0 >= 0.095
    finally:
        selector.close()
        os.close(read)
        os.close(write)


def test_only_the_terminal_driver_is_replaced(fake) -> None:
    assert prompt_escape(LinuxDriver) is PromptEscapeDriver
    assert prompt_escape(HeadlessDriver) is HeadlessDriver  # tests, and the web driver, as they are
    assert WorkbenchApp(fake.db_path).get_driver_class() is PromptEscapeDriver
