"""The verifier interface: a Python file with `def reward(output, task) -> float | Score`.

Built-in and user verifiers go through the same path (`load_verifier_code`), so the code the UI shows and
the store versions (by sha256) is exactly the code that scores.

`Verifier.score` never raises. Whatever goes wrong (an exception, a timeout, NaN/inf, a return value that is
neither a number nor a Score) comes back as `Score(total=0.0, error=...)`. The 0.0 is a placeholder, not a
verdict: the trainer must exclude trajectories whose score has `error` set from the group statistics and
the advantages (and show them), rather than train on a made-up reward.

Timeouts: `reward` runs in a daemon thread joined with a timeout. Python cannot kill a thread; on timeout
we inject a `VerifierTimeout` exception into it (CPython's PyThreadState_SetAsyncExc), which stops a
pure-Python loop at its next bytecode. It cannot stop a thread blocked in C (time.sleep, a regex
catastrophe, a socket): such a thread leaks and keeps its CPU. `Verifier.leaked_threads` counts them so the
trainer can pause and tell the user. A subprocess would be killable but costs ~50 ms per call and needs
picklable inputs; we kept the thread and flag it. Loading runs the module body unguarded: a file whose
top level never returns hangs `load_verifier_code` (the UI should compile in a worker thread).
"""

from __future__ import annotations

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
from collections.abc import Callable
from pathlib import Path
from typing import Any

from workbench.types import Output, Score, Task


class VerifierError(Exception):
    """A verifier could not be loaded (bad name, missing file, no usable `reward`)."""


class VerifierCompileError(VerifierError):
    """The code does not compile or its module body raised; `lineno` points at the offending line."""

    def __init__(self, message: str, lineno: int | None = None):
        self.lineno = lineno
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


def _short_error(e: BaseException, filename: str) -> str:
    """`ZeroDivisionError: division by zero (line 3)`: the last line of the verifier's own code involved."""
    msg = "".join(traceback.format_exception_only(type(e), e)).strip().splitlines()[-1]
    line = _lineno_in(e.__traceback__, filename)
    return f"{msg[:300]} (line {line})" if line else msg[:300]


def _check_number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{what} must be a float, got {type(value).__name__}")
    f = float(value)
    if math.isnan(f) or math.isinf(f):
        raise ValueError(f"{what} is {f}")
    return f


def coerce_score(value: Any) -> Score:
    """A float or a Score, checked (finite numbers, str explanation); anything else raises TypeError/ValueError."""
    if isinstance(value, Score):
        total = _check_number(value.total, "reward total")
        parts = {}
        if not isinstance(value.parts, dict):
            raise TypeError("Score.parts must be a dict")
        for k, v in value.parts.items():
            parts[str(k)] = _check_number(v, f"part {k!r}")
        return Score(total=total, parts=parts, explanation=str(value.explanation or ""), error=value.error)
    return Score(total=_check_number(value, "reward"))


class Verifier:
    """A loaded `reward` function with its source (`code`), `name` and `sha256` (of the code's UTF-8 bytes)."""

    def __init__(self, name: str, code: str, fn: Callable[[Any, Any], Any], filename: str):
        self.name = name
        self.code = code
        self.fn = fn
        self.filename = filename
        self.sha256 = hashlib.sha256(code.encode("utf-8")).hexdigest()
        self.timeouts = 0
        self.leaked_threads = 0

    def __repr__(self) -> str:
        return f"Verifier({self.name!r}, sha256={self.sha256[:12]})"

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
            return Score(total=0.0, error=f"timeout: reward() ran longer than {timeout_s:g}s")
        if "error" in box:
            return Score(total=0.0, error=_short_error(box["error"], self.filename))
        if "value" not in box:
            return Score(total=0.0, error="reward() did not return")
        try:
            return coerce_score(box["value"])
        except (TypeError, ValueError) as e:
            return Score(total=0.0, error=f"bad return value: {e}")


def _interrupt(th: threading.Thread) -> None:
    """Ask CPython to raise VerifierTimeout in the thread at its next bytecode (no-op elsewhere)."""
    if th.ident is None or not hasattr(ctypes, "pythonapi"):
        return
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(th.ident), ctypes.py_object(VerifierTimeout))


def load_verifier_code(code: str, name: str = "user") -> Verifier:
    """Compile and run the module body, then check `reward` takes (output, task). Raises VerifierCompileError
    (with the line) or VerifierError; never returns a verifier that cannot be called."""
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
        raise VerifierCompileError(_short_error(e, filename).rsplit(" (line", 1)[0],
                                   _lineno_in(e.__traceback__, filename)) from None
    fn = module.__dict__.get("reward")
    if fn is None:
        raise VerifierError("the code defines no `reward(output, task)` function")
    if not callable(fn):
        raise VerifierError(f"`reward` is a {type(fn).__name__}, not a function")
    try:
        inspect.signature(fn).bind(None, None)
    except TypeError:
        raise VerifierError(f"`reward{inspect.signature(fn)}` must accept two arguments: (output, task)") from None
    except ValueError:
        pass  # no signature available (a builtin): let the first call tell
    return Verifier(name, code, fn, filename)


def load_verifier_file(path: str | Path) -> Verifier:
    """Load a verifier .py file; its name is the file stem."""
    p = Path(path)
    if not p.is_file():
        raise VerifierError(f"verifier file not found: {p}")
    return load_verifier_code(p.read_text(encoding="utf-8"), name=p.stem)
