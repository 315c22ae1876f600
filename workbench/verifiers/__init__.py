"""Verifiers: `reward(output, task) -> float | Score` as loadable code, the built-ins, a judge, metrics.

`get_verifier(name_or_path)` serves the config's `reward:` key: a built-in name or a path to a .py file.
Built-ins are loaded from their own source text through the same path as user code, so the code the UI
shows and the sha256 the store records are what actually scores.
"""

from __future__ import annotations

import difflib
from importlib import resources
from pathlib import Path

from workbench.verifiers.base import (
    Verifier,
    VerifierCompileError,
    VerifierError,
    load_verifier_code,
    load_verifier_file,
)

BUILTIN_VERIFIERS = {"tool_call_verifier": "tool_call.py", "tool_call_gated": "tool_call_gated.py", "binary": "binary.py"}


def builtin_verifier_code(name: str) -> str:
    """The source text of a built-in verifier (what the UI's editor opens)."""
    if name not in BUILTIN_VERIFIERS:
        raise VerifierError(f"no built-in verifier {name!r}; built-ins: {sorted(BUILTIN_VERIFIERS)}")
    return resources.files(__package__).joinpath(BUILTIN_VERIFIERS[name]).read_text(encoding="utf-8")


def get_verifier(name_or_path: str | Path) -> Verifier:
    """A built-in by name ("tool_call_verifier", "binary") or a verifier file by path."""
    key = str(name_or_path)
    if key in BUILTIN_VERIFIERS:
        return load_verifier_code(builtin_verifier_code(key), name=key)
    if key.endswith(".py") or Path(key).exists():
        return load_verifier_file(key)
    near = difflib.get_close_matches(key, list(BUILTIN_VERIFIERS), n=1)
    hint = f"; did you mean {near[0]!r}?" if near else ""
    raise VerifierError(f"unknown verifier {key!r}: not a built-in ({', '.join(BUILTIN_VERIFIERS)}) nor a .py file{hint}")


__all__ = [
    "BUILTIN_VERIFIERS", "Verifier", "VerifierCompileError", "VerifierError", "builtin_verifier_code",
    "get_verifier", "load_verifier_code", "load_verifier_file",
]
