"""The terminal driver: Textual's LinuxDriver, with a lone Esc answered after ESCDELAY instead of ~100 ms.

A lone Esc may be the start of an escape sequence, so Textual's parser waits ESCDELAY (`workbench tui` sets 40 ms)
for more input before it calls it a key. But the input thread checks that timeout only when its `select()` returns,
and with nothing more typed that is after its fixed 0.1 s poll: every lone Esc took ~100 ms whatever ESCDELAY
said (docs/benchmarks.md, "Full garbage collections and a lone Esc"). Here the input thread's selector polls
at most every ESCDELAY / 2, so Esc counts within 1.5 x ESCDELAY; the idle thread wakes 50 times a second at
40 ms, one `select` call each.
The input thread builds its selector from the `selectors` module that linux_driver imported; that one name is
pointed at a copy of the module whose SelectSelector caps the timeout (nothing else in Textual uses it).
"""

from __future__ import annotations

import selectors
import types

from textual import constants
from textual.driver import Driver
from textual.drivers import linux_driver


class CappedSelectSelector(selectors.SelectSelector):
    """A SelectSelector whose select() returns within half the escape delay."""

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        cap = constants.ESCAPE_DELAY / 2
        return super().select(cap if timeout is None else min(timeout, cap))


class PromptEscapeDriver(linux_driver.LinuxDriver):
    def run_input_thread(self) -> None:
        if getattr(linux_driver.selectors, "SelectSelector", None) is not CappedSelectSelector:
            linux_driver.selectors = types.SimpleNamespace(  # type: ignore[assignment]
                **{**vars(selectors), "SelectSelector": CappedSelectSelector}
            )
        super().run_input_thread()


def prompt_escape(driver_class: type[Driver]) -> type[Driver]:
    """PromptEscapeDriver in place of the plain LinuxDriver; any other driver (web, Windows, headless) as is."""
    return PromptEscapeDriver if driver_class is linux_driver.LinuxDriver else driver_class
