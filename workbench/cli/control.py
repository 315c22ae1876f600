"""Run control from the shell: `workbench ls`, `workbench pause|resume|stop N` (their flags: `parser`).

The same door as the UI: commands go through the store's command table (`View.enqueue`), and whether a
control is allowed now is `workbench.view.run_state`'s rule (the keys, the palette and these commands
read the same table), so the shell and the UI never disagree about what a run in some state accepts.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from workbench.view import Run, RunState, View, allowed

WAIT_S = 30.0  # how long `pause`/`resume`/`stop` wait for the worker's answer by default (`--wait-s`)
POLL_S = 0.1


def run_line(run: Run, state: RunState, progress: str) -> list[str]:
    """One row of `workbench ls`: id, name, status, phase, step, worker."""
    step = "–" if run.last_step is None else str(run.last_step)
    if run.max_steps:
        step += f"/{run.max_steps}"
    worker = {"alive": f"alive (pid {run.worker_pid})", "stale": "stale (no heartbeat)", "none": "–"}[
        state.worker
    ]
    return [str(run.id), run.name, run.status, progress, step, worker]


def cmd_ls(args: argparse.Namespace) -> int:
    from workbench.view.run_state import LIVE_STATUSES

    now = time.time()
    with View.open(args.db, check=True) as view:  # a damaged file is refused, naming its pages
        runs = view.runs()
        rows = []
        for run in runs:
            state = RunState.of(run, now)
            p = view.progress(run.id) if run.status in LIVE_STATUSES else None
            rows.append(run_line(run, state, p.text if p is not None else (run.status_reason or "")[:60]))
    if not rows:
        print(f"no runs in {args.db}")
        return 0
    head = ["run", "name", "status", "phase", "step", "worker"]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    for r in [head, *rows]:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return 0


def cmd_control(args: argparse.Namespace) -> int:
    """pause / resume / stop one run through the command table; waits for the worker's answer."""
    kind = args.cmd
    with View.open(args.db) as view:
        run = view.run(args.run)
        state = RunState.of(run, time.time())
        if not allowed(kind, state):
            why = "no live worker holds it" if not state.alive else f"its status is {run.status}"
            print(f"error: run {run.id} ({run.name}) cannot {kind} now: {why}", file=sys.stderr)
            return 2
        command_id = view.enqueue(run.id, kind)
        print(f"{kind} sent to run {run.id} (command #{command_id})", flush=True)
        if not state.alive:  # stop is allowed on a run whose status says it is live: nobody may answer
            print(
                f"no live worker answers now; the command stays queued until one runs "
                f"(workbench train --db {args.db} --resume {run.id})"
            )
            return 0
        if args.no_wait:
            return 0
        answer = wait_answer(view, command_id, args.wait_s)
    if answer is None:
        print(
            f"no answer within {args.wait_s:.0f} s; the command stays queued (see `workbench ls --db {args.db}`)"
        )
        return 1
    ok, result = answer
    print(f"{kind}: {'done' if ok else 'failed'} {result}")
    return 0 if ok else 1


def wait_answer(view: View, command_id: int, timeout_s: float) -> tuple[bool, dict[str, Any]] | None:
    """(ok, result) once the worker answered the command, None after `timeout_s`."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        cmd = view.command(command_id)
        if cmd is not None and cmd.answered:
            return cmd.status == "done", cmd.result or {}
        time.sleep(POLL_S)
    return None
