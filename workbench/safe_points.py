"""Safe points inside long operations: what decoding, SFT micro-batches and evals call every few tokens.

A safe point is where the worker may obey a command. A pause blocks right there (the model, the KV cache
and the partial group stay in memory, and the work goes on from that token on resume); a stop raises
`Interrupted`, which unwinds the operation without writing anything of it (a step's rows are inserted
in one transaction after all its groups are scored, an eval's after all its tasks, an SFT step's
optimizer step only after its last micro-batch).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from workbench.errors import InternalError

DECODE_EVERY = 4  # decode steps between safe points (a step is ~10-100 ms on a CPU: well under 1 s)


class Interrupted(InternalError):
    """A stop was requested at a safe point inside a long operation: drop its partial work."""


class Throttle:
    """True at most once every `interval_s` (a cheap clock check in between): rate-limits store reads or
    writes that a hot loop asks for every few tokens."""

    def __init__(self, interval_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval_s = interval_s
        self.clock = clock
        self._last: float | None = None

    def ready(self) -> bool:
        now = self.clock()
        if self._last is not None and now - self._last < self.interval_s:
            return False
        self._last = now
        return True

    def reset(self) -> None:
        """The next `ready()` is True (a phase changed: say so at once)."""
        self._last = None


@contextmanager
def layer_safe_points(model: Any, point: Callable[[], None]) -> Iterator[int]:
    """Call `point` before each decoder layer's forward and, when it builds a graph, at each layer's
    backward: safe points every few milliseconds inside prefill, SFT and the policy update, which have no
    loop of their own to call one from. Yields the number of layers hooked (0: a model without
    `*DecoderLayer` modules gets none). Duck-typed, so this module stays torch-free (the view reads it)."""

    def before(module: Any, args: Any) -> None:
        point()

    def after(module: Any, args: Any, output: Any) -> None:
        out = output[0] if isinstance(output, tuple) else output
        if getattr(out, "requires_grad", False):
            out.register_hook(lambda grad: point())  # returns None: the gradient passes unchanged

    layers = [m for m in model.modules() if type(m).__name__.endswith("DecoderLayer")]
    handles = [
        h
        for layer in layers
        for h in (layer.register_forward_pre_hook(before), layer.register_forward_hook(after))
    ]
    try:
        yield len(layers)
    finally:
        for h in handles:
            h.remove()
