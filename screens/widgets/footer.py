"""The key footer, rebuilt only when the keys it shows change.

Textual's Footer recomposes (unmounts and mounts one widget per key, restyles them, lays the screen out
again) whenever the screen's bindings signal fires, and the signal fires on every focus change, including
the one when a modal closes and the dashboard gets its focus back, though the keys are the same. On the
dashboard that rebuild was the largest part of closing the help screen (docs/benchmarks.md, issue 36 item 8).
This footer compares what it would show with what it shows and skips the rebuild when they are equal.
"""

from __future__ import annotations

from typing import Any

from textual.screen import Screen
from textual.widgets import Footer


def shown_keys(screen: Screen) -> tuple[tuple[Any, ...], ...]:
    """What a footer on `screen` shows: each shown binding's key, label, action, whether it is enabled, its
    tooltip and group. Two equal results render the same footer."""
    return tuple(
        (
            binding.key,
            binding.key_display,
            binding.description,
            binding.action,
            enabled,
            tooltip,
            None if binding.group is None else (binding.group.description, binding.group.compact),
        )
        for _node, binding, enabled, tooltip in screen.active_bindings.values()
        if binding.show
    )


class KeyFooter(Footer):
    """A Footer that recomposes only when the keys it would show differ from the keys it shows."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._shown: tuple[tuple[Any, ...], ...] | None = None

    def compose(self):  # type: ignore[override]  # Footer.compose's own generator, remembered
        if self._bindings_ready:
            self._shown = shown_keys(self.screen)
        yield from super().compose()

    def bindings_changed(self, screen: Screen) -> None:
        if (
            self._bindings_ready
            and self.is_attached
            and screen is self.screen
            and shown_keys(screen) == self._shown
        ):
            return
        super().bindings_changed(screen)
