"""The verifier interface: a Python file with `def reward(output, task) -> float | Score`.

Built-in and user verifiers go through the same path (`load_verifier_code`), so the code the UI shows and
the store versions (by sha256) is exactly the code that scores.

`Verifier.score` never raises. Whatever goes wrong (an exception, a timeout, NaN/inf, a total outside the
verifier's declared range, a return value that is neither a number nor a Score) comes back as
`Score(total=0.0, error=...)`. The 0.0 is a placeholder, not a
verdict: the trainer must exclude trajectories whose score has `error` set from the group statistics and
the advantages (and show them), rather than train on a made-up reward.

This module is the in-process path: the built-ins (trusted code shipped with the package) and any code
loaded with `isolate=False`. User code runs in a separate process (`workbench.verifiers.isolated`), which
reuses `load_in_process`, `coerce_score` and `short_error` from here so both paths say the same thing.

In-process timeouts: `reward` runs in a daemon thread joined with a timeout. Python cannot kill a thread; on
timeout we inject a `VerifierTimeout` exception into it (CPython's PyThreadState_SetAsyncExc), which stops a
pure-Python loop at its next bytecode. It cannot stop a thread blocked in C (time.sleep, a regex
catastrophe, a socket): such a thread leaks and keeps its CPU. `Verifier.leaked_threads` counts them. This is
why user code is isolated (a process can be killed); the thread costs ~0.3 ms a score (docs/benchmarks.md).
`load_in_process` runs the module body unguarded: only trusted code should be loaded with it.
"""

from __future__ import annotations

import ast
import copy
import ctypes
import hashlib
import inspect
import linecache
import math
import numbers
import sys
import threading
import traceback
import types
from collections.abc import Callable, Sequence
from typing import Any

from workbench.errors import InputError, InternalError
from workbench.types import Output, Score, Task


class VerifierError(InputError):
    """A verifier could not be loaded (bad name, missing file, no usable `reward`)."""


class VerifierCompileError(VerifierError):
    """The code does not compile or its module body raised; `lineno` points at the offending line."""

    def __init__(self, message: str, lineno: int | None = None):
        self.lineno = lineno
        self.message = message
        super().__init__(f"line {lineno}: {message}" if lineno else message)


class VerifierTimeout(BaseException):
    """Injected into a verifier thread that overran its timeout (BaseException so `except Exception` in user
    code does not swallow it)."""


def _lineno_in(tb: types.TracebackType | None, filename: str) -> int | None:
    line = None
    for frame, lineno in traceback.walk_tb(tb):
        if frame.f_code.co_filename == filename:
            line = lineno
    return line


def short_error(e: BaseException, filename: str) -> str:
    """`ZeroDivisionError: division by zero (line 3)`: the last line of the verifier's own code involved."""
    msg = "".join(traceback.format_exception_only(type(e), e)).strip().splitlines()[-1]
    line = _lineno_in(e.__traceback__, filename)
    return f"{msg[:300]} (line {line})" if line else msg[:300]


# What a verifier's total may be unless its module declares `REWARD_RANGE = (low, high)`: the two conventions
# the project ships, 0/1 (binary) and the seed article's shaped -1..1 (tool_call_verifier: -1 for an
# unparseable or unsafe reply), so a verifier written either way needs no declaration. A total outside it
# (a 1e308 that would overflow the group's mean) is that row's error, never a reward.
DEFAULT_REWARD_RANGE = (-1.0, 1.0)


class BadReturn(InternalError, ValueError):
    """`reward` returned something that is not a finite float or a well-formed Score; the message says what."""


def _what(value: Any) -> str:
    return "None" if value is None else type(value).__name__


def _finite(value: Any, bad_type: str, bad_value: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise BadReturn(bad_type.format(type=_what(value)))
    f = float(value)
    if math.isnan(f) or math.isinf(f):
        raise BadReturn(bad_value.format(value=f))
    return f


def coerce_score(value: Any, reward_range: tuple[float, float] | None = None) -> Score:
    """A float or a Score, checked (finite numbers, dict parts, str explanation, the total inside
    `reward_range` when given); anything else raises BadReturn with the row's error text: "verifier
    returned nan", "verifier returned str, expected float or Score", "verifier returned 2, outside its
    declared range [0, 1]"."""
    score = _coerce(value)
    if reward_range is not None and not reward_range[0] <= score.total <= reward_range[1]:
        lo, hi = reward_range
        default = reward_range == DEFAULT_REWARD_RANGE
        how = "the default range" if default else "its declared range"
        hint = "; declare REWARD_RANGE = (low, high) for another" if default else ""
        raise BadReturn(f"verifier returned {score.total:g}, outside {how} [{lo:g}, {hi:g}]{hint}")
    return score


def _coerce(value: Any) -> Score:
    if isinstance(value, Score):
        total = _finite(
            value.total,
            "verifier returned a Score whose total is {type}, expected float",
            "verifier returned a Score whose total is {value}",
        )
        if not isinstance(value.parts, dict):
            raise BadReturn(f"verifier returned a Score whose parts is {_what(value.parts)}, expected dict")
        parts = {}
        for k, v in value.parts.items():
            parts[str(k)] = _finite(
                v,
                f"verifier returned a Score whose part {k!r} is {{type}}, expected float",
                f"verifier returned a Score whose part {k!r} is {{value}}",
            )
        error = None if value.error is None else str(value.error)
        return Score(total=total, parts=parts, explanation=str(value.explanation or ""), error=error)
    return Score(
        total=_finite(value, "verifier returned {type}, expected float or Score", "verifier returned {value}")
    )


def timeout_error(timeout_s: float) -> str:
    """The one wording of a timeout ("verifier timed out after 5.0 s"), in process or isolated."""
    t = float(timeout_s)
    return f"verifier timed out after {t:.1f} s" if round(t, 1) == t else f"verifier timed out after {t:g} s"


class Verifier:
    """A loaded `reward` function with its source (`code`), `name` and `sha256` (of the code's UTF-8 bytes)."""

    isolated = False  # runs in this process (see workbench.verifiers.isolated for the other kind)

    def __init__(
        self,
        name: str,
        code: str,
        fn: Callable[[Any, Any], Any],
        filename: str,
        reward_range: tuple[float, float] = DEFAULT_REWARD_RANGE,
    ):
        self.name = name
        self.code = code
        self.fn = fn
        self.filename = filename
        self.reward_range = reward_range  # the module's REWARD_RANGE, else DEFAULT_REWARD_RANGE
        self.sha256 = hashlib.sha256(code.encode("utf-8")).hexdigest()
        self.timeouts = 0
        self.leaked_threads = 0

    def __repr__(self) -> str:
        return f"Verifier({self.name!r}, sha256={self.sha256[:12]})"

    def __enter__(self) -> Verifier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Nothing to release in process (the same surface as IsolatedVerifier)."""

    def score_many(self, items: Sequence[tuple[Output, Task]], timeout_s: float = 5.0) -> list[Score]:
        """`score` of each (output, task), in order (one call for a group, as the isolated kind)."""
        return [self.score(output, task, timeout_s=timeout_s) for output, task in items]

    def score(self, output: Output, task: Task, timeout_s: float = 5.0) -> Score:
        """Run `reward(output, task)`; never raises (see the module docstring for what errors mean)."""
        box: dict[str, Any] = {}
        try:  # a verifier that mutates its inputs must not corrupt the task for the next sample
            args = copy.deepcopy((output, task))
        except Exception as e:
            return Score(total=0.0, error=f"could not copy inputs: {e}")

        def run() -> None:
            try:
                box["value"] = self.fn(*args)
            except VerifierTimeout:
                box["timeout"] = True
            except BaseException as e:  # anything a user's code throws becomes a Score error
                box["error"] = e

        th = threading.Thread(target=run, name=f"verifier-{self.name}", daemon=True)
        th.start()
        th.join(timeout_s)
        if th.is_alive():
            self.timeouts += 1
            _interrupt(th)
            th.join(0.5)
            if th.is_alive():
                self.leaked_threads += 1
            return Score(total=0.0, error=timeout_error(timeout_s))
        if "error" in box:
            return Score(total=0.0, error=short_error(box["error"], self.filename))
        if "value" not in box:
            return Score(total=0.0, error="reward() did not return")
        try:
            return coerce_score(box["value"], self.reward_range)
        except BadReturn as e:
            return Score(total=0.0, error=str(e))


def _interrupt(th: threading.Thread) -> None:
    """Ask CPython to raise VerifierTimeout in the thread at its next bytecode (no-op elsewhere)."""
    if th.ident is None or not hasattr(ctypes, "pythonapi"):
        return
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(th.ident), ctypes.py_object(VerifierTimeout))


def load_in_process(code: str, name: str = "user") -> Verifier:
    """Compile and run the module body here, then check `reward` takes (output, task). Raises
    VerifierCompileError (with the line) or VerifierError; never returns a verifier that cannot be called.
    The front door is `workbench.verifiers.load_verifier_code`, which isolates anything but a built-in."""
    sha = hashlib.sha256(code.encode("utf-8")).hexdigest()
    filename = f"<verifier {name}>"
    try:
        compiled = compile(code, filename, "exec")
    except SyntaxError as e:
        raise VerifierCompileError(f"{type(e).__name__}: {e.msg}", e.lineno) from None
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)  # readable tracebacks
    mod_name = f"workbench_verifier_{''.join(c if c.isalnum() else '_' for c in name)}_{sha[:12]}"
    module = types.ModuleType(mod_name)
    module.__file__ = filename
    sys.modules[mod_name] = module  # dataclasses and typing resolve names through sys.modules
    try:
        exec(compiled, module.__dict__)
    except Exception as e:
        sys.modules.pop(mod_name, None)
        raise VerifierCompileError(
            short_error(e, filename).rsplit(" (line", 1)[0], _lineno_in(e.__traceback__, filename)
        ) from None
    fn = module.__dict__.get("reward")
    if fn is None:
        raise VerifierError("the code defines no `reward(output, task)` function")
    if not callable(fn):
        raise VerifierError(f"`reward` is a {type(fn).__name__}, not a function")
    try:
        inspect.signature(fn).bind(None, None)
    except TypeError:
        raise VerifierError(
            f"`reward{inspect.signature(fn)}` must accept two arguments: (output, task)"
        ) from None
    except ValueError:
        pass  # no signature available (a builtin): let the first call tell
    return Verifier(name, code, fn, filename, declared_range(module.__dict__, code))


def declared_range(namespace: dict[str, Any], code: str) -> tuple[float, float]:
    """The module's `REWARD_RANGE` as (low, high), or DEFAULT_REWARD_RANGE when it has none; a malformed one
    is a VerifierCompileError at its line."""
    value = namespace.get("REWARD_RANGE")
    if value is None:
        return DEFAULT_REWARD_RANGE
    nums = list(value) if isinstance(value, (tuple, list)) else []
    if (
        len(nums) == 2
        and all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in nums)
        and all(math.isfinite(float(v)) for v in nums)
        and float(nums[0]) < float(nums[1])
    ):
        return float(nums[0]), float(nums[1])
    raise VerifierCompileError(
        f"REWARD_RANGE must be (low, high): two finite numbers, low < high; got {value!r:.80}",
        _assigned_at(code, "REWARD_RANGE"),
    )


def _assigned_at(code: str, name: str) -> int | None:
    """The line of the last top-level assignment to `name` (the code compiled, so it parses)."""
    line = None
    for node in ast.parse(code).body:
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AnnAssign)
            else []
        )
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            line = node.lineno
    return line
