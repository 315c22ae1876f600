"""`workbench` command line: train (headless), eval, export, init, tui, demo."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from importlib import resources
from pathlib import Path
from typing import Any

DEFAULT_DB = "workbench.db"


def _demo_config_path() -> Path:
    return Path(str(resources.files("workbench").joinpath("data/demo.yaml")))


def check_sources(cfg: Any) -> None:
    """Load the config's tasks and verifier once, so bad files are reported before a run exists."""
    from workbench.tasks import load_task_source
    from workbench.verifiers import get_verifier

    load_task_source(cfg.tasks, "train")
    load_task_source(cfg.held_out_eval, "held_out")
    get_verifier(cfg.reward)


def cmd_train(args: argparse.Namespace) -> int:
    import store
    from workbench.config import load_config
    from workbench.worker import run_worker

    db = store.open_db(args.db)
    if args.resume is not None:
        run_id = args.resume
        store.runs.get_run(db, run_id)
    else:
        if not args.config:
            print("error: give a CONFIG file, or --resume RUN", file=sys.stderr)
            return 2
        cfg = load_config(args.config)
        check_sources(cfg)  # a typo in tasks or reward fails here, not as a crashed run
        run_id = store.runs.create_run(db, name=cfg.name, model=cfg.model, config=cfg.to_dict())
    db.close()
    print(f"run {run_id} in {args.db} (watch it: workbench tui --db {args.db} --run {run_id})", flush=True)
    status = run_worker(args.db, run_id, log=lambda m: print(m, flush=True))
    print(f"run {run_id}: {status}")
    return 0 if status in ("finished", "stopped") else 1


def cmd_eval(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from workbench.config import Config
    from workbench.envs import env_for_config
    from workbench.eval import evaluate
    from workbench.models import load_policy
    from workbench.rollout.hf import HFEngine
    from workbench.tasks import load_task_source

    cfg = Config(model=args.model, adapter="lora")
    tasks = load_task_source(args.tasks, "held_out")
    if args.limit:
        tasks = tasks[: args.limit]
    policy = load_policy(cfg.model, adapter="lora", adapter_path=args.adapter)
    result = evaluate(HFEngine(policy), policy.tokenizer, env_for_config(cfg), tasks,
                      max_new_tokens=args.max_new_tokens, samples=args.samples, temperature=args.temperature,
                      stop_token_ids=policy.eos_token_ids)
    if args.json:
        print(json.dumps(result.metrics, indent=2))
        return 0
    table = Table(title=f"{args.tasks}: {len(tasks)} tasks, {'greedy' if not args.samples else f'{args.samples} samples'}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for k, v in result.metrics.items():
        if isinstance(v, (int, float)):  # the per-task "solved" map is in --json
            table.add_row(k, f"{v:.3f}" if isinstance(v, float) else str(v))
    Console().print(table)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    import store
    from store.trajectories import TrajectoryFilter, page_trajectories

    db = store.open_db(args.db, create=False)
    out = Path(args.out or f"run-{args.run}.{args.format}")
    rows: list[dict[str, Any]] = []
    after = None
    while True:  # keyset pages, then full rows: never the whole table in one query
        page = page_trajectories(db, TrajectoryFilter(run_id=args.run, include_superseded=True), descending=False,
                                 after=after, limit=1000)
        for r in page.rows:
            rows.append(store.trajectories.get_trajectory(db, r["id"]))
        if page.next_cursor is None:
            break
        after = page.next_cursor
    if args.format == "jsonl":
        with out.open("w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    else:
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            print("error: parquet export needs pyarrow: pip install pyarrow", file=sys.stderr)
            return 2
        flat = [{k: json.dumps(v) if isinstance(v, (dict, list)) else v for k, v in r.items()} for r in rows]
        pq.write_table(pa.Table.from_pylist(flat), out)
    print(f"wrote {len(rows)} trajectories of run {args.run} to {out}")
    return 0


def eval_table(view: Any, run_id: int, mode: str = "greedy") -> list[dict[str, Any]]:
    """Baseline, SFT-only and each checkpoint's held-out metrics, in order, as JSON-ready dicts: the promoted
    one marked, each with its paired success difference to the baseline and to SFT-only (same tasks). The
    rows and their rules are workbench.view.evaluations', the same the evaluations screen shows."""
    from dataclasses import asdict

    from workbench.view import eval_rows

    return [
        {"label": r.label, "step": r.eval.step, "kind": r.kind, "promoted": r.promoted, **r.eval.metrics,
         "vs_base": asdict(r.vs_base) if r.vs_base else None, "vs_sft": asdict(r.vs_sft) if r.vs_sft else None}
        for r in eval_rows(view.evals(run_id), view.checkpoints(run_id), mode)
    ]


def _paired_cell(d: dict[str, Any] | None) -> str:
    if d is None:
        return "-"
    return f"{d['delta']:+.2f} [{d['ci_low']:+.2f}, {d['ci_high']:+.2f}]"


def _rate(value: Any, ci: tuple[Any, Any] | None = None) -> str:
    if not isinstance(value, (int, float)):
        return "-"
    if ci and all(isinstance(c, (int, float)) for c in ci):
        return f"{value:.2f} [{ci[0]:.2f}, {ci[1]:.2f}]"
    return f"{value:.2f}"


def cmd_report(args: argparse.Namespace) -> int:
    import datetime as dt

    from rich.console import Console
    from rich.table import Table

    from workbench.view import View

    with View.open(args.db) as view:
        run = view.run(args.run)
        rows = eval_table(view, args.run, args.mode)
        events = view.last_events(args.run, args.events) if args.events > 0 else []
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    table = Table(title=f"run {args.run} ({run.name}, {run.status}): held-out, {args.mode}")
    for col in ("policy", "valid JSON", "tool", "args", "success [95% CI]", "unsafe", "tokens", "vs base",
                "vs SFT-only"):
        table.add_column(col, justify="left" if col == "policy" else "right")
    for r in rows:
        table.add_row(
            r["label"] + (" *" if r["promoted"] else ""), _rate(r.get("valid_json_rate")),
            _rate(r.get("correct_tool_rate")), _rate(r.get("correct_args_rate")),
            _rate(r.get("success_rate"), (r.get("success_ci_low"), r.get("success_ci_high"))),
            _rate(r.get("unsafe_rate")), f"{r.get('mean_tokens', 0):.1f}", _paired_cell(r["vs_base"]),
            _paired_cell(r["vs_sft"]),
        )
    # Piped to a file, rich would wrap at 80 columns: give the table the width it needs instead.
    console = Console() if sys.stdout.isatty() else Console(width=200)
    console.print(table)
    print("* promoted: the best checkpoint that beats the baseline")
    print("vs base / vs SFT-only: paired success difference on the same held-out tasks [95% bootstrap CI over tasks]")
    if events:
        print(f"\nevents (the last {len(events)}):")
        for e in events:
            print(f"  {dt.datetime.fromtimestamp(e.created):%Y-%m-%d %H:%M:%S}  {e.kind:<8} {e.message}")
    return 0


def cmd_init(args: argparse.Namespace) -> int:
    from workbench.tasks import write_builtin_jsonl
    from workbench.verifiers import builtin_verifier_code

    d = Path(args.dir)
    d.mkdir(parents=True, exist_ok=True)
    made = []
    for name, write in (
        ("tasks.jsonl", lambda p: write_builtin_jsonl(p, split="train")),
        ("held_out.jsonl", lambda p: write_builtin_jsonl(p, split="held_out")),
        ("verifier.py", lambda p: p.write_text(builtin_verifier_code("tool_call_verifier"))),
        ("config.yaml", lambda p: p.write_text(
            _demo_config_path().read_text()
            .replace("tasks: builtin:calendar", "tasks: tasks.jsonl")
            .replace("held_out_eval: tool_call_eval", "held_out_eval: held_out.jsonl")
            .replace("reward: tool_call_verifier", "reward: verifier.py"))),
    ):
        p = d / name
        if p.exists():
            print(f"kept {p} (exists)")
            continue
        write(p)
        made.append(str(p))
    print("made " + ", ".join(made) if made else "nothing to do")
    print(f"next: cd {d} && workbench train config.yaml")
    return 0


def _quick_escape() -> None:
    """A lone Esc waits ESCDELAY ms for the rest of a possible escape sequence before it counts as a key:
    Textual's 100 ms default was a third of the Esc-to-repaint time (bench/ui_latency.py). 40 ms still
    covers a sequence split across packets on a LAN or a local terminal; set ESCDELAY for a slow link."""
    os.environ.setdefault("ESCDELAY", "40")


def cmd_tui(args: argparse.Namespace) -> int:
    _quick_escape()
    from screens.app import run_tui

    run_tui(args.db, args.run)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """Create (or re-attach to) the embedded demo run, start its worker, open the UI."""
    import store
    from workbench.config import load_config
    from workbench.launch import start_worker
    from workbench.view import Run, worker_state

    db = store.open_db(args.db)
    demo = [r for r in store.runs.list_runs(db) if r["name"] == "demo"]
    if demo and demo[0]["status"] not in ("finished",):
        run_id = demo[0]["id"]
    else:
        cfg = load_config(_demo_config_path())
        run_id = store.runs.create_run(db, name=cfg.name, model=cfg.model, config=cfg.to_dict())
    if worker_state(Run.from_row(store.runs.get_run(db, run_id)), time.time()) != "alive":
        start_worker(args.db, run_id)
    db.close()
    if args.headless:
        print(f"demo run {run_id} training in the background; watch: workbench tui --db {args.db} --run {run_id}")
        return 0
    _quick_escape()
    from screens.app import run_tui

    run_tui(args.db, run_id)
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="workbench", description="Train small tool-calling agents with GRPO.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("train", help="train headless from a config (or resume a run)")
    p.add_argument("config", nargs="?")
    p.add_argument("--db", default=DEFAULT_DB)
    p.add_argument("--resume", type=int, metavar="RUN", help="continue RUN from its last checkpoint")
    p.set_defaults(fn=cmd_train)
    p = sub.add_parser("eval", help="held-out metrics of a model (+ adapter) on a tasks file")
    p.add_argument("--tasks", default="tool_call_eval", help="a .jsonl file or a built-in split")
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--adapter", help="a checkpoint's adapter folder")
    p.add_argument("--samples", type=int, default=0, help="sampled eval with N samples a task (0: greedy)")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--limit", type=int)
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_eval)
    p = sub.add_parser("export", help="export a run's trajectories")
    p.add_argument("--run", type=int, required=True)
    p.add_argument("--format", choices=("jsonl", "parquet"), default="jsonl")
    p.add_argument("--db", default=DEFAULT_DB)
    p.add_argument("--out")
    p.set_defaults(fn=cmd_export)
    p = sub.add_parser("report", help="held-out metrics of a run: baseline, SFT-only, each checkpoint")
    p.add_argument("--run", type=int, required=True)
    p.add_argument("--db", default=DEFAULT_DB)
    p.add_argument("--mode", choices=("greedy", "sampled"), default="greedy")
    p.add_argument("--json", action="store_true")
    p.add_argument("--events", type=int, default=20, metavar="N", help="the run's last N events (0: none)")
    p.set_defaults(fn=cmd_report)
    p = sub.add_parser("init", help="a starter config, tasks file and verifier to edit")
    p.add_argument("dir")
    p.set_defaults(fn=cmd_init)
    p = sub.add_parser("tui", help="open the workbench on a database")
    p.add_argument("--db", default=DEFAULT_DB)
    p.add_argument("--run", type=int)
    p.set_defaults(fn=cmd_tui)
    p = sub.add_parser("demo", help="train the embedded default (SmolLM2-135M, calendar tools) with the UI open")
    p.add_argument("--db", default=DEFAULT_DB)
    p.add_argument("--headless", action="store_true", help="start the worker and return")
    p.set_defaults(fn=cmd_demo)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from store import StoreError
    from workbench.checkpoint import CheckpointError
    from workbench.config import ConfigError
    from workbench.models import ModelNotFoundError
    from workbench.rollout.vllm import BackendUnavailable
    from workbench.tasks import TaskFileError
    from workbench.verifiers import VerifierError

    try:
        return args.fn(args)
    except (ConfigError, StoreError, TaskFileError, VerifierError, ModelNotFoundError, BackendUnavailable,
            CheckpointError, FileNotFoundError) as exc:  # the user's input: say what is wrong, no traceback
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
