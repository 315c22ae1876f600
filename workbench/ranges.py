"""The valid range of a number a user types (a config key, a command-line flag, a UI prompt), checked where
it enters, so a NaN learning rate or a negative gradient norm is refused with the range named instead of
training on garbage.

`Range.problem(value)` says what is wrong ("must be in (0, 1], got 0") or None; the config prefixes the key
and its line, argparse the flag. The argparse types below (`positive_int`, `finite_float`, ...) are the
command line's shared helpers.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from dataclasses import dataclass


def _fmt(v: float) -> str:
    return str(v) if isinstance(v, int) else f"{v:g}"


@dataclass(frozen=True)
class Range:
    """Finite numbers from `lo` to `hi` (either may be None: unbounded); `lo_open`/`hi_open` exclude the bound."""

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False

    def __str__(self) -> str:
        if self.lo is not None and self.hi is not None:
            return f"in {'(' if self.lo_open else '['}{_fmt(self.lo)}, {_fmt(self.hi)}{')' if self.hi_open else ']'}"
        if self.lo is not None:
            return f"{'>' if self.lo_open else '>='} {_fmt(self.lo)}"
        if self.hi is not None:
            return f"{'<' if self.hi_open else '<='} {_fmt(self.hi)}"
        return ""

    def problem(self, value: object) -> str | None:
        """None when `value` is a finite number inside the range, else what is wrong, naming the range."""
        where = f" {self}" if str(self) else ""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"must be a number{where}, got {value!r}"
        if isinstance(value, float) and not math.isfinite(value):
            return f"must be a finite number{where}, got {value}"
        below = self.lo is not None and (value < self.lo or (self.lo_open and value == self.lo))
        above = self.hi is not None and (value > self.hi or (self.hi_open and value == self.hi))
        return f"must be{where}, got {_fmt(value)}" if below or above else None


# The largest completion a run or an eval may ask for: the longest context of the models the project ships or
# names (Qwen2.5's 32,768 positions). A model's own, often shorter, context is its own limit.
MAX_COMPLETION_LENGTH = 32768

POSITIVE = Range(0, lo_open=True)
NON_NEGATIVE = Range(0)
AT_LEAST_ONE = Range(1)
FRACTION = Range(0, 1, lo_open=True)  # (0, 1]: a learning-rate-like or probability-mass knob that 0 turns off


def arg_type(rng: Range, kind: type[int] | type[float] = float) -> Callable[[str], float]:
    """An argparse `type=` that parses `kind` and refuses values outside `rng` (NaN and inf always), so the
    error reads "argument --port: must be in [1, 65535], got 0"."""

    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not {'a whole number' if kind is int else 'a number'}"
            ) from None
        if (problem := rng.problem(value)) is not None:
            raise argparse.ArgumentTypeError(problem)
        return value

    parse.__name__ = f"{kind.__name__} {rng}".strip()
    return parse


positive_int = arg_type(AT_LEAST_ONE, int)  # run ids, counts
non_negative_int = arg_type(NON_NEGATIVE, int)  # counts where 0 means "none" (--samples 0: greedy only)
finite_float = arg_type(Range(), float)
positive_float = arg_type(POSITIVE, float)
port = arg_type(Range(1, 65535), int)
completion_tokens = arg_type(Range(1, MAX_COMPLETION_LENGTH), int)
