"""One exception base for the engine, with a stable exit code per kind of failure.

Every exception class defined under `workbench/` derives from one of the kinds below (and keeps its older
base, e.g. ValueError, so existing `except ValueError` clauses still catch it). The command line catches
them once, prints the message without a traceback and exits with the error's `exit_code`, so a
script can tell "fix your input" from "install something" from "the run lost a process". It catches these
and the store's errors (below) and FileNotFoundError (a path the user named: exit 2), nothing else.

    exit  kind                what the user does next
    2     InputError          fix the named file, line or field (argparse's own usage errors exit 2 too)
    3     UnavailableError    install or fetch what is named (a model, vLLM, the MCP SDK, tensorboard)
    4     StoredDataError     set aside what an earlier run wrote and is now unusable (a checkpoint)
    5     RunLostError        resume: a run lost a process it depends on (its lock, a rank, an MCP server)
    70    InternalError       report a bug: these are caught where they are raised and never reach the CLI
                              (70 is sysexits' EX_SOFTWARE)

The store may not import `workbench` (import-linter: "store knows SQLite only"), so its errors cannot derive
from `WorkbenchError`, and this module may not import the store either (the domains import it, and a domain
may not reach the store even indirectly). Store errors carry the same `exit_code` class attribute instead,
and the command line catches `store.StoreError` beside `WorkbenchError`:

    2     store.StoreError            a --db, run or verifier that does not exist or is not a Workbench database
    6     store.SchemaTooNewError     the database was written by a newer Workbench
    7     store.DiskFullError         the disk refused a write (the transaction was rolled back whole)
    8     store.runs.RunLockedError   another live worker holds the run

The exit codes are part of the command line's interface: tests/project/test_errors.py pins them.
"""

from __future__ import annotations

from typing import ClassVar


class WorkbenchError(Exception):
    """The base of every exception the engine defines; `exit_code` is what `workbench` exits with."""

    exit_code: ClassVar[int] = 1


class InputError(WorkbenchError):
    """The user's input (a config, a tasks file, verifier code, a command's arguments) is wrong."""

    exit_code: ClassVar[int] = 2


class UnavailableError(WorkbenchError):
    """Something the command needs is not installed or not there."""

    exit_code: ClassVar[int] = 3


class StoredDataError(WorkbenchError):
    """Something an earlier run wrote to disk cannot be used."""

    exit_code: ClassVar[int] = 4


class RunLostError(WorkbenchError):
    """A running run lost a process or lock it depends on; resuming is the way on."""

    exit_code: ClassVar[int] = 5


class InternalError(WorkbenchError):
    """Control flow inside the engine (an interrupted step, a tool's refusal, a verifier's bad return value),
    always caught where it is raised; one that reaches the command line is a bug."""

    exit_code: ClassVar[int] = 70


def exit_code_of(exc: BaseException) -> int:
    """The exit code the command line returns for an error it reports: the class's `exit_code` (a
    WorkbenchError's or a store error's); a missing file the user named (FileNotFoundError) is an input error."""
    code = getattr(type(exc), "exit_code", None)
    return code if isinstance(code, int) else InputError.exit_code
