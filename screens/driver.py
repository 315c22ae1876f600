"""The terminal driver: Textual's LinuxDriver, with a lone Esc answered after ESCDELAY instead of ~100 ms.

A lone Esc may be the start of an escape sequence, so Textual's parser waits ESCDELAY (`workbench tui` sets 20 ms)
for more input before it calls it a key. But the input thread checks that deadline only when its `select()`
returns, and with nothing more typed that is after its fixed 0.1 s poll: every lone Esc took ~100 ms whatever
ESCDELAY said (docs/benchmarks.md, "Full garbage collections and a lone Esc").

Here the input thread's selector wakes at the parser's own deadline when one is pending, and otherwise waits as
long as Textual asks: a lone Esc counts after ESCDELAY, and an idle UI wakes 10 times a second as before. (A
first version polled at ESCDELAY / 2 all the time: Esc counted within 1.5 x ESCDELAY, and the idle input thread
took ~1.7% of a core at ESCDELAY 20 ms.)

The input thread makes its selector, then its parser, from the names linux_driver imported (`selectors`,
`XTermParser`); those two names are pointed at subclasses that find each other through the thread (nothing
else in Textual uses them).
"""

from __future__ import annotations

import selectors
import threading
import types

from textual._time import get_time
from textual._xterm_parser import XTermParser
from textual.driver import Driver
from textual.drivers import linux_driver

_input_thread = threading.local()  # the selector this thread made last, found by the parser it makes next


class DeadlineSelector(selectors.SelectSelector):
    """A SelectSelector that returns by its parser's escape deadline."""

    def __init__(self) -> None:
        super().__init__()
        self.parser: XTermParser | None = None
        _input_thread.selector = self

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        # The parser's clock (textual._time), set when it is waiting for the rest of a sequence.
        deadline = getattr(self.parser, "_timeout_time", None)
        if deadline is not None:
            left = max(0.0, deadline - get_time())
            timeout = left if timeout is None else min(timeout, left)
        return super().select(timeout)


class DeadlineXTermParser(XTermParser):
    """Textual's parser, known to the selector its thread made just before it."""

    def __init__(self, debug: bool = False) -> None:
        super().__init__(debug)
        selector = getattr(_input_thread, "selector", None)
        if selector is not None:
            selector.parser = self


class PromptEscapeDriver(linux_driver.LinuxDriver):
    def run_input_thread(self) -> None:
        if linux_driver.XTermParser is not DeadlineXTermParser:
            linux_driver.selectors = types.SimpleNamespace(  # type: ignore[assignment]
                **{**vars(selectors), "SelectSelector": DeadlineSelector}
            )
            linux_driver.XTermParser = DeadlineXTermParser  # type: ignore[misc]
        super().run_input_thread()


def prompt_escape(driver_class: type[Driver]) -> type[Driver]:
    """PromptEscapeDriver in place of the plain LinuxDriver; any other driver (web, Windows, headless) as is."""
    return PromptEscapeDriver if driver_class is linux_driver.LinuxDriver else driver_class
