"""Verifiers: `reward(output, task) -> float | Score` as loadable code, the built-ins, a judge, metrics.

`get_verifier(name_or_path)` serves the config's `reward:` key: a built-in name or a path to a .py file.
Built-ins are loaded from their own source text through the same path as user code, so the code the UI
shows and the sha256 the store records are what actually scores.

Where code runs (`load_verifier_code`, the one front door): code byte-identical to a built-in's source is
trusted and runs in this process (`Verifier`, ~0.3 ms a score); anything else, including an edited
built-in, runs in worker processes with a timeout and a memory limit (`IsolatedVerifier`, see
`workbench.verifiers.isolated`). `isolate=True/False` overrides the choice.
"""

from __future__ import annotations

import difflib
import hashlib
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from workbench.verifiers.base import (
    Verifier,
    VerifierCompileError,
    VerifierError,
    load_in_process,
)
from workbench.verifiers.isolated import DEFAULT_MEMORY_LIMIT, DEFAULT_WORKERS, IsolatedVerifier

BUILTIN_VERIFIERS = {
    "tool_call_verifier": "tool_call.py",
    "tool_call_gated": "tool_call_gated.py",
    "binary": "binary.py",
    "agent_state": "agent_state.py",
}

AnyVerifier = Verifier | IsolatedVerifier


def builtin_verifier_code(name: str) -> str:
    """The source text of a built-in verifier (what the UI's editor opens)."""
    if name not in BUILTIN_VERIFIERS:
        raise VerifierError(f"no built-in verifier {name!r}; built-ins: {sorted(BUILTIN_VERIFIERS)}")
    return resources.files(__package__).joinpath(BUILTIN_VERIFIERS[name]).read_text(encoding="utf-8")


@cache
def _builtin_shas() -> frozenset[str]:
    return frozenset(
        hashlib.sha256(builtin_verifier_code(n).encode("utf-8")).hexdigest() for n in BUILTIN_VERIFIERS
    )


def is_builtin_code(code: str) -> bool:
    """True when `code` is exactly a built-in's source (shipped with the package, so trusted in process)."""
    return hashlib.sha256(code.encode("utf-8")).hexdigest() in _builtin_shas()


def load_verifier_code(
    code: str,
    name: str = "user",
    *,
    isolate: bool | None = None,
    memory_limit_bytes: int | None = DEFAULT_MEMORY_LIMIT,
    workers: int = DEFAULT_WORKERS,
    **isolated_kw: Any,
) -> AnyVerifier:
    """Load verifier code; raises VerifierCompileError (with the line) or VerifierError, never returns one
    that cannot be called. `isolate=None`: in process for a built-in's exact source, else isolated (the
    module body then runs in the worker too, so a top level that hangs or crashes cannot take this process)."""
    if isolate is None:
        isolate = not is_builtin_code(code)
    if not isolate:
        return load_in_process(code, name)
    return IsolatedVerifier(code, name, memory_limit_bytes=memory_limit_bytes, workers=workers, **isolated_kw)


def load_verifier_file(path: str | Path, **kw: Any) -> AnyVerifier:
    """Load a verifier .py file; its name is the file stem."""
    p = Path(path)
    if not p.is_file():
        raise VerifierError(f"verifier file not found: {p}")
    return load_verifier_code(p.read_text(encoding="utf-8"), name=p.stem, **kw)


def get_verifier(name_or_path: str | Path, **kw: Any) -> AnyVerifier:
    """A built-in by name ("tool_call_verifier", "binary") or a verifier file by path."""
    key = str(name_or_path)
    if key in BUILTIN_VERIFIERS:
        return load_verifier_code(builtin_verifier_code(key), name=key, **kw)
    if key.endswith(".py") or Path(key).exists():
        return load_verifier_file(key, **kw)
    near = difflib.get_close_matches(key, list(BUILTIN_VERIFIERS), n=1)
    hint = f"; did you mean {near[0]!r}?" if near else ""
    raise VerifierError(
        f"unknown verifier {key!r}: not a built-in ({', '.join(BUILTIN_VERIFIERS)}) nor a .py file{hint}"
    )


__all__ = [
    "BUILTIN_VERIFIERS",
    "AnyVerifier",
    "IsolatedVerifier",
    "Verifier",
    "VerifierCompileError",
    "VerifierError",
    "builtin_verifier_code",
    "get_verifier",
    "is_builtin_code",
    "load_verifier_code",
    "load_verifier_file",
]
