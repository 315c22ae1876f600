"""`workbench` command line: train (headless), eval, export, init, tui, serve, demo; ls/pause/resume/stop
(workbench.run_control)."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from importlib import resources
from pathlib import Path

DEFAULT_DB = "workbench.db"


def _demo_config_path() -> Path:
    return Path(str(resources.files("workbench").joinpath("data/demo.yaml")))


def cmd_train(args: argparse.Namespace) -> int:
    from workbench import distributed
    from workbench.preflight import run_for_args
    from workbench.worker import run_worker

    if (code := distributed.cmd_train(args)) is not None:  # --nproc N, or a rank under torchrun
        return code
    run_id = run_for_args(args.db, args.resume, args.config)
    if run_id is None:
        return 2
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
    from workbench.rollout.hf_generate import local_engine
    from workbench.tasks import load_task_source

    cfg = Config(model=args.model, adapter="lora")
    tasks = load_task_source(args.tasks, "held_out")
    if args.limit:
        tasks = tasks[: args.limit]
    policy = load_policy(cfg.model, adapter="lora", adapter_path=args.adapter)
    result = evaluate(local_engine(policy), policy.tokenizer, env_for_config(cfg), tasks,
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
    from workbench.export import ExportFilter, export_trajectories

    db = store.open_db(args.db, create=False)
    flt = ExportFilter(runs=args.run, split=args.split, min_reward=args.min_reward, labels=args.label or [],
                       include_superseded=args.include_superseded)
    ext = "jsonl" if args.format == "openai" else args.format
    suffix = ".openai" if args.format == "openai" else ""
    out = Path(args.out or f"run-{'-'.join(map(str, args.run))}{suffix}.{ext}")
    n = export_trajectories(db, flt, args.format, out)
    print(f"wrote {n} trajectories of run {', '.join(map(str, args.run))} to {out}")
    return 0


def cmd_export_model(args: argparse.Namespace) -> int:
    import store
    from workbench.export_model import export_model

    db = store.open_db(args.db, create=False)
    done = export_model(db, args.run, args.out, args.checkpoint)
    c = done.checkpoint
    print(f"run {args.run}, checkpoint step {c['step']} ({c['kind']}): merged model in {done.merged}"
          + (f", adapter in {done.adapter}" if done.adapter else ""))
    print(f"serve it: {done.serve_command()}")
    if done.tool_parser is None:
        print("(no --tool-call-parser: vLLM turns replies into tool_calls only for a tool_format: native run in a "
              'format it parses; a JSON-harness run replies {"tool": ..., "args": ...} as text)')
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from workbench.report import print_report

    return print_report(args.db, args.run, mode=args.mode, as_json=args.json, n_events=args.events)


def starter_config(demo_text: str) -> tuple[str, str, str]:
    """(the demo config pointed at init's files, the built-in verifier the demo names, the built-in task
    source its validation is). Top-level keys are replaced by name, whatever the demo's values are, so the starter's
    verifier.py is the one that scores (it once kept `reward: tool_call_gated` beside a verifier.py nobody
    loaded) and held_out.jsonl is the demo's validation split."""
    import yaml

    demo = yaml.safe_load(demo_text)
    reward, validation = demo.get("reward"), demo.get("held_out_eval", "tool_call_eval")
    if not isinstance(reward, str) or not isinstance(validation, str):
        raise ValueError("the demo config names no reward or no held_out_eval")
    text = demo_text
    for key, value in (("tasks", "tasks.jsonl"), ("held_out_eval", "held_out.jsonl"), ("reward", "verifier.py")):
        text, n = re.subn(rf"^{key}:.*$", f"{key}: {value}", text, flags=re.M)
        if n != 1:
            raise ValueError(f"the demo config has {n} '{key}:' lines, expected 1")
    return text, reward, validation


def cmd_init(args: argparse.Namespace) -> int:
    from workbench.tasks import load_task_source, write_builtin_jsonl, write_tasks_jsonl
    from workbench.verifiers import builtin_verifier_code

    d = Path(args.dir)
    d.mkdir(parents=True, exist_ok=True)
    config_text, reward, validation = starter_config(_demo_config_path().read_text())
    made = []
    for name, write in (
        ("tasks.jsonl", lambda p: write_builtin_jsonl(p, split="train")),
        ("held_out.jsonl", lambda p: write_tasks_jsonl(p, load_task_source(validation, "held_out"))),
        ("verifier.py", lambda p: p.write_text(builtin_verifier_code(reward))),
        ("config.yaml", lambda p: p.write_text(config_text)),
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


def cmd_serve(args: argparse.Namespace) -> int:
    """The TUI in a browser (textual-serve): one `workbench tui` process per connection."""
    from screens.serve import serve

    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"warning: listening on {args.host}: anyone who reaches it drives the workbench (no login); "
              "an SSH tunnel to 127.0.0.1 is safer (README)", file=sys.stderr)
    print(f"serving {args.db} on http://{args.host}:{args.port} (Ctrl+C to stop)", flush=True)
    serve(args.db, host=args.host, port=args.port, run=args.run, public_url=args.public_url)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """Create (or re-attach to) the embedded demo run, start its worker, open the UI."""
    import store
    from workbench.config import load_config
    from workbench.launch import BACKGROUND_NICE, start_worker
    from workbench.view import Run, RunState, allowed, worker_state

    db = store.open_db(args.db)
    demo = [Run.from_row(r) for r in store.runs.list_runs(db) if r["name"] == "demo"]
    latest = RunState.of(demo[0], time.time()) if demo else None
    if latest is not None and (latest.alive or allowed("start_worker", latest)):  # one not finished: go on
        run_id = demo[0].id
    else:
        cfg = load_config(_demo_config_path())
        run_id = store.runs.create_run(db, name=cfg.name, model=cfg.model, config=cfg.to_dict())
    if worker_state(Run.from_row(store.runs.get_run(db, run_id)), time.time()) != "alive":
        start_worker(args.db, run_id, nice=BACKGROUND_NICE)
    db.close()
    if args.headless:
        print(f"demo run {run_id} training in the background; watch: workbench tui --db {args.db} --run {run_id}")
        return 0
    _quick_escape()
    from screens.app import run_tui

    if run_tui(args.db, run_id, ask_on_quit=True) == "keep":
        print(f"demo run {run_id} keeps training in the background. Re-attach: workbench tui --db {args.db} "
              f"--run {run_id}; see it: workbench ls --db {args.db}; stop it: workbench stop {run_id} --db {args.db}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="workbench", description="Train small tool-calling agents with GRPO.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("train", help="train headless from a config (or resume a run)")
    p.add_argument("config", nargs="?")
    p.add_argument("--db", default=DEFAULT_DB)
    p.add_argument("--resume", type=int, metavar="RUN", help="continue RUN from its last checkpoint")
    p.add_argument("--nproc", type=int, default=1, metavar="N",
                   help="data-parallel over N ranks on this machine (torchrun's env; gloo on CPU, nccl on GPU)")
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
    p = sub.add_parser(
        "export", help="export trajectories: as stored, or as an OpenAI tool-calling dataset",
        description="--format openai writes JSONL rows {\"messages\": [...], \"tools\": [...]}, the shape TRL's "
        "SFTTrainer and HF chat templates (apply_chat_template(messages, tools=tools)) take: replies that are calls "
        "become assistant tool_calls, tool results role \"tool\" messages. For a tool_format: json run it drops "
        "the JSON harness's system prompt and one-shot example and keeps the task's own prompt (and messages).")
    p.add_argument("--run", type=int, required=True, action="extend", nargs="+", help="one or more runs")
    p.add_argument("--format", choices=("jsonl", "parquet", "openai"), default="jsonl")
    p.add_argument("--split", help="only this split (train, held_out, test, ...)")
    p.add_argument("--min-reward", type=float, help="only trajectories with at least this reward")
    p.add_argument("--label", action="append", choices=("good", "bad"),
                   help="only trajectories whose human verdict is this (repeat for both)")
    p.add_argument("--include-superseded", action="store_true", help="also rows of steps redone after a resume")
    p.add_argument("--db", default=DEFAULT_DB)
    p.add_argument("--out")
    p.set_defaults(fn=cmd_export)
    p = sub.add_parser(
        "export-model", help="a checkpoint as an adapter and a merged HF folder to serve",
        description="Writes OUT/adapter (the LoRA adapter) and OUT/merged (base + adapter merged, with the "
        "tokenizer and its chat template), and prints the vllm serve line (with --tool-call-parser when the "
        "template has a tool format vLLM parses).")
    p.add_argument("--run", type=int, required=True)
    p.add_argument("--checkpoint", default="promoted", metavar="promoted|latest|STEP",
                   help="which checkpoint (default: the promoted one)")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--db", default=DEFAULT_DB)
    p.set_defaults(fn=cmd_export_model)
    p = sub.add_parser("report", help="validation and test metrics of a run: baseline, SFT-only, each checkpoint, per skill")
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
    p = sub.add_parser("serve", help="serve the workbench to a browser (loopback by default)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--db", default=DEFAULT_DB)
    p.add_argument("--run", type=int)
    p.add_argument("--public-url", help="the URL the browser uses, when it differs (a proxy)")
    p.set_defaults(fn=cmd_serve)
    p = sub.add_parser("demo", help="train the embedded default (SmolLM2-135M, calendar tools) with the UI open")
    p.add_argument("--db", default=DEFAULT_DB)
    p.add_argument("--headless", action="store_true", help="start the worker and return")
    p.set_defaults(fn=cmd_demo)
    from workbench.run_control import register

    register(sub, DEFAULT_DB)  # ls, pause, resume, stop
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from store import StoreError
    from workbench.checkpoint import CheckpointError
    from workbench.config import ConfigError
    from workbench.export import ExportError
    from workbench.export_model import ExportModelError
    from workbench.models import ModelNotFoundError
    from workbench.rollout.vllm import BackendUnavailable
    from workbench.tasks import TaskFileError
    from workbench.verifiers import VerifierError

    try:
        return args.fn(args)
    except (ConfigError, StoreError, TaskFileError, VerifierError, ModelNotFoundError, BackendUnavailable,
            CheckpointError, FileNotFoundError, ExportError, ExportModelError) as exc:  # the user's input: say what is wrong, no traceback
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
