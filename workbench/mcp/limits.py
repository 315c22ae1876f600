"""Start an MCP server command under resource limits, then become it (exec).

    python workbench/mcp/limits.py MEMORY_MB CPU_S PIDFILE -- COMMAND [ARGS...]

Run by path (not `-m`) so that it imports nothing of the workbench before the exec. It sets RLIMIT_AS
(address space), RLIMIT_CPU and RLIMIT_FSIZE, asks the kernel to kill it when its parent dies (a trainer
killed with -9 leaves no servers behind), writes its pid (the server's, after the exec) to PIDFILE so the
client can kill a hung server's process group at once, and execs the command.

This is NOT a security sandbox: the server runs as the same user, with the same filesystem and network. The
limits and the stripped environment stop accidents (a runaway loop, a memory leak, a stray secret in the
environment), not an adversary. Run untrusted servers in a container or a VM.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import signal
import sys

FILE_SIZE_LIMIT = 1 << 30  # 1 GiB: a server that writes without end fails instead of filling the disk
PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    with contextlib.suppress(OSError, AttributeError):  # not Linux: the client's shutdown still stops it
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def main(argv: list[str]) -> None:
    if len(argv) < 5 or argv[3] != "--":
        sys.exit("usage: limits.py MEMORY_MB CPU_S PIDFILE -- COMMAND [ARGS...]")
    memory = int(argv[0]) << 20
    cpu = int(argv[1])
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))  # SIGXCPU at the soft limit, SIGKILL 5 s later
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_LIMIT, FILE_SIZE_LIMIT))
    _die_with_parent()
    with open(argv[2], "w") as f:
        f.write(str(os.getpid()))
    command = argv[4:]
    try:
        os.execvp(command[0], command)
    except OSError as e:
        sys.exit(f"cannot start {command[0]!r}: {e.strerror or e}")


if __name__ == "__main__":
    main(sys.argv[1:])
