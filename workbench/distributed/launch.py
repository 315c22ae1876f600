"""Starting the ranks: `workbench train --nproc N` spawns them on this machine as torchrun would, and each
rank joins the process group, builds its trainer (rank 0 inside the worker, the others as followers) and
trains.

A rank that dies makes the next collective fail on the others (`RankLost`); the launcher names the rank and
its exit in the run's status. `workbench train --resume RUN --nproc N` continues from the last checkpoint
(every rank loads the same one).
"""

from __future__ import annotations

import contextlib
import datetime
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

import store
from workbench.devices import resolve_device
from workbench.distributed.collective import TIMEOUT_S, RankCollective, Ranks
from workbench.distributed.meetings import RankHooks
from workbench.run.inputs import new_run
from workbench.run.records import Run
from workbench.trainer import Hooks, Trainer

GRACE_S = 10.0  # the launcher: a rank's peers get this long after SIGTERM before SIGKILL
STOP_WAIT_S = 300.0  # the launcher's SIGTERM: how long the ranks get to reach a meeting and stop there


def env_ranks() -> Ranks | None:
    """The ranks torchrun (or `launch`) describes in the environment; None for a single process."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return None
    return Ranks(int(os.environ["RANK"]), world, int(os.environ.get("LOCAL_RANK", "0")))


def init(ranks: Ranks, device: str = "auto") -> torch.device:
    """Join the process group: gloo for CPU tensors, nccl for CUDA ones; returns this rank's device."""
    target = resolve_device(device)
    if target.type == "cuda":
        torch.cuda.set_device(target)
    backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
    if not dist.is_initialized():
        dist.init_process_group(
            backend, rank=ranks.rank, world_size=ranks.world, timeout=datetime.timedelta(seconds=TIMEOUT_S)
        )
    return target


def shutdown() -> None:
    if dist.is_initialized():
        with contextlib.suppress(Exception):
            dist.destroy_process_group()


# ----- the trainer of one rank ------------------------------------------------------------------------


def rank_trainer(cfg: Any, db: Any, run_id: int, ranks: Ranks, hooks: Hooks | None, **kw: Any) -> Trainer:
    """A rank's trainer: the `Trainer` with this rank's collective, its driver (`hooks`: the worker's on rank
    0, none on the others) met at the meetings (`workbench.worker.run_worker(make_trainer=...)`)."""
    log = kw.get("log") or (lambda m: None)
    collective = RankCollective(ranks, resolve_device(cfg.device))  # where load_policy puts the policy
    return Trainer(cfg, db, run_id, hooks=RankHooks(hooks, collective, log), collective=collective, **kw)


def run_follower(db_path: str, run_id: int, ranks: Ranks, *, log: Callable[[str], None]) -> str:
    """A rank other than 0: read the run's config, train in step with rank 0, write nothing to the store."""
    from workbench.config import config_from_dict

    with contextlib.closing(store.open_db(db_path, create=False, readonly=True)) as real:
        run = Run.from_row(store.runs.get_run(real, run_id))
    cfg = config_from_dict(run.config, f"run {run_id} config")
    scratch = store.open_db(":memory:")  # what the trainer writes as it goes, never read by anyone
    trainer = rank_trainer(cfg, scratch, new_run(scratch, cfg), ranks, None, log=log)
    trainer.resume()
    trainer.run()
    return "stopped" if trainer.hooks.should_stop(trainer) else "finished"


# ----- `workbench train` with ranks ------------------------------------------------------------------------


def train_rank(args: Any, ranks: Ranks) -> int:
    """`workbench train` inside one rank (torchrun or `launch`): rank 0 makes the run, all train it."""
    from workbench.preflight import load_checked
    from workbench.worker import run_worker

    device = "auto"
    run_id = args.resume
    if run_id is None and ranks.is_main:
        if not args.config:
            print("error: give a CONFIG file, or --resume RUN", file=sys.stderr)
            return 2
        cfg, _ = load_checked(args.config, max_steps=getattr(args, "max_steps", None))
        device = cfg.device
    target = init(ranks, device)
    try:
        if ranks.is_main and run_id is None:
            db = store.open_db(args.db)
            run_id = new_run(db, cfg)
            db.close()
        run_id = RankCollective(ranks, target).broadcast(run_id, "the run id")
        prefix = "" if ranks.is_main else f"[rank {ranks.rank}] "

        def log(msg: str) -> None:
            print(prefix + msg, flush=True)

        if ranks.is_main:
            print(
                f"run {run_id} in {args.db} on {ranks.world} ranks (watch it: workbench tui --db {args.db} "
                f"--run {run_id})",
                flush=True,
            )
            status = run_worker(args.db, run_id, log=log, ranks=ranks, make_trainer=rank_trainer)
            print(f"run {run_id}: {status}", flush=True)
        else:
            status = run_follower(args.db, run_id, ranks, log=log)
    finally:
        shutdown()
    return 0 if status in ("finished", "stopped") else 1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _exit_text(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-code).name} (signal {-code})"
        return f"was killed by signal {-code}"
    return f"exited with code {code}"


def launch(args: Any, nproc: int) -> int:
    """`workbench train --nproc N`: make (or take) the run, start N ranks on this machine as torchrun would
    (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT; OMP threads split), watch them. When a rank dies the
    others are stopped and the run's status names the rank and how it ended."""
    from workbench.preflight import run_for_args

    run_id = run_for_args(args.db, args.resume, args.config, max_steps=getattr(args, "max_steps", None))
    if run_id is None:
        return 2
    port = _free_port()
    threads = str(max(1, (os.cpu_count() or 1) // nproc))
    procs: list[subprocess.Popen] = []
    for r in range(nproc):
        env = {
            **os.environ,
            "RANK": str(r),
            "LOCAL_RANK": str(r),
            "WORLD_SIZE": str(nproc),
            "LOCAL_WORLD_SIZE": str(nproc),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
        }
        env.setdefault("OMP_NUM_THREADS", threads)
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "workbench.cli",
                    "train",
                    "--db",
                    str(args.db),
                    "--resume",
                    str(run_id),
                ],
                env=env,
            )
        )
        print(f"rank {r} pid {procs[-1].pid}", flush=True)
    failed: tuple[int, int] | None = None
    stop_asked: list[float] = []

    def on_term(signum: int, frame: Any) -> None:
        """Stopping the launcher stops the run the way the UI does: a `stop` command, which rank 0 claims and
        broadcasts at the ranks' next meeting, so every rank leaves together and rank 0 checkpoints.
        Signalling the ranks instead killed the followers at once and left the run "crashed". A second
        SIGTERM, or ranks that do not stop within STOP_WAIT_S, fall back to signals."""
        if stop_asked:
            _stop(procs)
            return
        stop_asked.append(time.monotonic())
        with contextlib.closing(store.open_db(args.db)) as sdb:
            store.commands.enqueue(sdb, run_id, "stop", {"by": "launcher SIGTERM"})

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        while [p.poll() for p in procs].count(None):  # poll every rank (any() stops at the first live one)
            bad = [(r, p.returncode) for r, p in enumerate(procs) if p.returncode not in (None, 0)]
            if bad and failed is None:
                failed = bad[0]
                _stop(procs)
            if stop_asked and time.monotonic() - stop_asked[0] > STOP_WAIT_S:
                _stop(procs)
            time.sleep(0.2)
    except KeyboardInterrupt:
        _stop(procs)
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
    codes = [p.returncode for p in procs]
    if failed is None:
        failed = next(((r, c) for r, c in enumerate(codes) if c != 0), None)
    if failed is None:
        return 0
    rank, code = failed
    reason = (
        f"rank {rank} of {nproc} {_exit_text(code)}; the run stopped. Continue from the last "
        f"checkpoint: workbench train --db {args.db} --resume {run_id} --nproc {nproc}"
    )
    print(f"run {run_id}: crashed: {reason}", file=sys.stderr, flush=True)
    with contextlib.closing(store.open_db(args.db)) as db:
        if Run.from_row(store.runs.get_run(db, run_id)).status not in ("stopped", "finished"):
            store.runs.set_status(db, run_id, "crashed", reason)
    return 1


def _stop(procs: list[subprocess.Popen]) -> None:
    """SIGTERM the live ranks (rank 0 checkpoints if it can), SIGKILL what is left after GRACE_S."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        if p.poll() is None:
            p.kill()
            p.wait()


def cmd_train(args: Any) -> int | None:
    """`workbench train` with ranks: the launcher (`--nproc N`), or one rank under torchrun. None: neither
    (a plain single-process run)."""
    nproc = getattr(args, "nproc", None) or 1
    ranks = env_ranks()
    if ranks is not None:
        return train_rank(args, ranks)
    if nproc > 1:
        return launch(args, nproc)
    return None
