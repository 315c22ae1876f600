"""`workbench train`: a run headless in this process, over N ranks (`--nproc`, or under torchrun), or only
its config checked (`--check`)."""

from __future__ import annotations

import argparse
import os
import sys


def _env_kind(args: argparse.Namespace) -> str | None:
    """The run's `env` (its config file, or the stored config of the run resumed); None when unreadable: the
    checks that follow say why."""
    from workbench.config import ConfigError, load_config
    from workbench.launch import run_env_kind

    if args.resume is not None:
        return run_env_kind(args.db, args.resume) if args.db else None
    try:
        return load_config(args.config).env if args.config else None
    except ConfigError:
        return None


def cmd_train(args: argparse.Namespace) -> int:
    from workbench import distributed, native_heap

    # Before the model loads (a headless run trains in this process), for runs with multi-turn episodes.
    if native_heap.needs_bound(_env_kind(args)):
        native_heap.bound_heap()
        # and for its ranks, when it spawns them (a user's own values kept)
        os.environ.update(native_heap.child_env())
    from workbench.invocation import workbench_command
    from workbench.preflight import TrainRequest, load_checked, run_for_args
    from workbench.worker import run_worker

    if args.resume is not None and (args.check or args.max_steps is not None):
        # a resumed run goes on with the config it stored; overriding it would make its record lie
        print("error: --check and --max-steps apply to a CONFIG file, not to --resume RUN", file=sys.stderr)
        return 2
    if args.check:
        if not args.config:
            print("error: --check needs a CONFIG file", file=sys.stderr)
            return 2
        cfg, ok = load_checked(args.config, max_steps=args.max_steps)
        for warning in ok.warnings:
            print(f"note: {warning}")
        print(
            f"{args.config}: ok: {ok.train} training tasks, {ok.validation} validation and {ok.test} test tasks, "
            f"verifier {ok.reward}, model {cfg.model}, {cfg.sft_steps} SFT steps then {cfg.max_steps} GRPO steps "
            "(checked only: no run, no database)"
        )
        return 0
    request = TrainRequest(
        db=args.db, config=args.config, resume=args.resume, max_steps=args.max_steps, nproc=args.nproc
    )
    if (code := distributed.cmd_train(request)) is not None:  # --nproc N, or a rank under torchrun
        return code
    run_id = run_for_args(args.db, args.resume, args.config, max_steps=args.max_steps)
    if run_id is None:
        return 2
    print(
        f"run {run_id} in {args.db} (watch it: {workbench_command()} tui --db {args.db} --run {run_id})",
        flush=True,
    )
    status = run_worker(args.db, run_id, log=lambda m: print(m, flush=True))
    print(f"run {run_id}: {status}")
    return 0 if status in ("finished", "stopped") else 1
