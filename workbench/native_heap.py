"""Keep the C heap from holding freed tensor memory: glibc's malloc with a fixed mmap threshold.

Why: torch's CPU tensors come from malloc. glibc raises its mmap threshold each time a large mmapped block is
freed (up to 32 MiB), so the multi-turn rollout's key/value tensors, re-made at every decoded token with
slightly different sizes, end up on the heap, which fragments and is not given back. A GRPO step of the
agent recipe grew the process from 1.6 GB to 18.3 GB in about 80 s of one rollout round (an earlier attempt
was killed by the kernel at 24.4 GB); the same round with the threshold fixed at 128 KiB stayed under 2.3 GB
(docs/results.md, session 18). A fixed threshold also stops the adjustment; the trim threshold returns freed heap tops.

Two ways in. Set at process start through glibc's environment (`HEAP_ENV`, what `launch.start_worker` gives
the worker the UI starts), the round stayed under 2.3 GB. Set by `mallopt` after the model had loaded, it did
not hold (the round reached 18.8 GB); `workbench train` (headless, training in its own process) therefore
calls `bound_heap` first thing, before the model loads, which is untested on that round.

Only runs with multi-turn episodes (`env: multi_turn` or `mcp`) get it. Everywhere else the fixed threshold
only costs: every allocation over 128 KiB is a fresh mapping, so the demo's SFT step (single calls) took 1.84x as
long, with 2.6M page faults and 10 s of system time a step against 0.37M and 1.2 s (bench/heap_bound.py,
docs/benchmarks.md), and the demo never needed it (it ran without it until session 18; its SFT step peaks
at 3.9 GB on glibc's own heap).

Linux/glibc only; elsewhere (or with another allocator preloaded) nothing is changed.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
THRESHOLD_BYTES = 128 * 1024  # glibc's own starting value, kept fixed
HEAP_ENV = {"MALLOC_MMAP_THRESHOLD_": str(THRESHOLD_BYTES), "MALLOC_TRIM_THRESHOLD_": str(THRESHOLD_BYTES)}
BOUNDED_ENVS = frozenset({"multi_turn", "mcp"})  # the envs whose episodes run turn after turn


def needs_bound(env_kind: str | None) -> bool:
    """Whether a run in this `env` gets the fixed thresholds (multi-turn episodes only; see above)."""
    return env_kind in BOUNDED_ENVS


def bound_heap() -> bool:
    """Fix glibc's mmap and trim thresholds for this process; True when they were set."""
    if not sys.platform.startswith("linux"):
        return False
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt(M_MMAP_THRESHOLD, THRESHOLD_BYTES) == 1 and mallopt(M_TRIM_THRESHOLD, THRESHOLD_BYTES) == 1


def child_env(bound: bool = True) -> dict[str, str]:
    """This process's environment, with the thresholds set when `bound`, for a child that trains (a user's own
    values kept either way)."""
    return {**HEAP_ENV, **os.environ} if bound else dict(os.environ)
