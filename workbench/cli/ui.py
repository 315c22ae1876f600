"""`workbench tui`, `serve` and `demo`: the commands that open the app (the command line is the composition
root: these alone import `screens`, lazily, inside the command)."""

from __future__ import annotations

import argparse
import os
import time
from importlib import resources
from pathlib import Path

# `workbench demo --model NAME`: the packaged recipe for each model it knows (decided on validation:
# docs/results.md). A model's demo is a run of its own name, so each re-attaches to its own run.
DEMO_RECIPES = {"smollm2-135m": "demo.yaml", "qwen2.5-coder-0.5b": "demo_qwen05b.yaml"}


def demo_config_path(model: str | None = None) -> Path:
    """The packaged demo config for `model` (default: the embedded SmolLM2-135M's, `workbench/data/demo.yaml`)."""
    name = model or "smollm2-135m"
    if name not in DEMO_RECIPES:
        from workbench.errors import InputError

        raise InputError(
            f"workbench demo --model {name}: no packaged demo recipe for it; choose one of {sorted(DEMO_RECIPES)}, "
            "or write a config (`workbench init`) and run `workbench train`"
        )
    return Path(str(resources.files("workbench").joinpath(f"data/{DEMO_RECIPES[name]}")))


def _quick_escape() -> None:
    """A lone Esc waits ESCDELAY ms for the rest of a possible escape sequence before it counts as a key:
    Textual's 100 ms default was a third of the Esc-to-repaint time (bench/ui_latency.py). A terminal writes
    a key's whole sequence at once, so 20 ms covers a local terminal, tmux and ssh on a LAN; set ESCDELAY
    higher for a slow link (a sequence split by it reads as Esc and then its characters as keys)."""
    os.environ.setdefault("ESCDELAY", "20")


def cmd_tui(args: argparse.Namespace) -> int:
    _quick_escape()
    from screens.app import run_tui

    run_tui(args.db, args.run)
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    """The TUI in a browser (textual-serve): one `workbench tui` process per connection, behind a token."""
    from screens.serve import run_serve

    return run_serve(args.db, host=args.host, port=args.port, run=args.run, public_url=args.public_url)


def cmd_demo(args: argparse.Namespace) -> int:
    """Create (or re-attach to) the embedded demo run, start its worker, open the UI."""
    import store
    from workbench.config import load_config
    from workbench.launch import start_worker
    from workbench.run.inputs import new_run
    from workbench.view import Run, RunState, allowed, worker_state

    cfg = load_config(demo_config_path(args.model))
    db = store.open_db(args.db)
    demo = [Run.from_row(r) for r in store.runs.list_runs(db) if r["name"] == cfg.name]
    latest = RunState.of(demo[0], time.time()) if demo else None
    if latest is not None and (latest.alive or allowed("start_worker", latest)):  # one not finished: go on
        run_id = demo[0].id
    else:
        run_id = new_run(db, cfg)
    if worker_state(Run.from_row(store.runs.get_run(db, run_id)), time.time()) != "alive":
        start_worker(args.db, run_id)
    db.close()
    from workbench.invocation import workbench_command

    wb = workbench_command()  # `make demo` leaves .venv/bin off PATH: print what works from this shell
    if args.headless:
        print(f"demo run {run_id} training in the background; watch: {wb} tui --db {args.db} --run {run_id}")
        return 0
    _quick_escape()
    from screens.app import run_tui

    if run_tui(args.db, run_id, ask_on_quit=True) == "keep":
        print(
            f"demo run {run_id} keeps training in the background. Re-attach: {wb} tui --db {args.db} "
            f"--run {run_id}; see it: {wb} ls --db {args.db}; stop it: {wb} stop {run_id} --db {args.db}"
        )
    return 0
