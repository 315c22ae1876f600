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

from workbench.ranges import (
    completion_tokens,
    finite_float,
    non_negative_int,
    port,
    positive_float,
    positive_int,
)

DEFAULT_DB = "workbench.db"


def _demo_config_path() -> Path:
    return Path(str(resources.files("workbench").joinpath("data/demo.yaml")))


def cmd_train(args: argparse.Namespace) -> int:
    from workbench import distributed
    from workbench.invocation import workbench_command
    from workbench.preflight import load_checked, run_for_args
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
        print(f"{args.config}: ok: {ok.train} training tasks, {ok.validation} validation and {ok.test} test tasks, "
              f"verifier {ok.reward}, model {cfg.model}, {cfg.sft_steps} SFT steps then {cfg.max_steps} GRPO steps "
              "(checked only: no run, no database)")
        return 0
    if (code := distributed.cmd_train(args)) is not None:  # --nproc N, or a rank under torchrun
        return code
    run_id = run_for_args(args.db, args.resume, args.config, max_steps=args.max_steps)
    if run_id is None:
        return 2
    print(f"run {run_id} in {args.db} (watch it: {workbench_command()} tui --db {args.db} --run {run_id})", flush=True)
    status = run_worker(args.db, run_id, log=lambda m: print(m, flush=True))
    print(f"run {run_id}: {status}")
    return 0 if status in ("finished", "stopped") else 1


def cmd_eval(args: argparse.Namespace) -> int:
    import dataclasses

    from rich.console import Console
    from rich.table import Table

    from workbench.config import Config, ConfigError, load_config
    from workbench.envs import env_for_config
    from workbench.envs.tool_parsers import TemplateError
    from workbench.eval import evaluate
    from workbench.models import load_policy
    from workbench.rollout.hf_generate import local_engine
    from workbench.tasks import load_task_source

    # The config file's model, tool format, parser, harness and env (with --config), the flags over it; without
    # --config the model's own default format (json; native for the packaged Qwen models).
    cfg = load_config(args.config) if args.config else Config(model=args.model or "smollm2-135m")
    changes = {k: v for k, v in (("model", args.model), ("tool_format", args.tool_format),
                                 ("tool_parser", args.tool_parser)) if v is not None}
    cfg = dataclasses.replace(cfg, adapter="lora", **changes)  # replace re-checks the values
    task_source = args.tasks or (cfg.held_out_eval if args.config else "tool_call_eval")
    max_new_tokens = args.max_new_tokens or (cfg.max_completion_length if args.config else 64)
    tasks = load_task_source(task_source, "held_out")
    if args.limit:
        tasks = tasks[: args.limit]
    policy = load_policy(cfg.model, adapter="lora", adapter_path=args.adapter)
    try:
        env = env_for_config(cfg, policy.tokenizer)  # native: the parser is read from this model's template
    except TemplateError as exc:
        raise ConfigError(f"{args.config or 'workbench eval'}: {exc}") from None
    try:
        result = evaluate(local_engine(policy), policy.tokenizer, env, tasks,
                          max_new_tokens=max_new_tokens, samples=args.samples, temperature=args.temperature,
                          stop_token_ids=policy.eos_token_ids)
    finally:
        if hasattr(env, "close"):  # env: mcp runs server processes
            env.close()
    if args.json:
        print(json.dumps(result.metrics, indent=2))
        return 0
    fmt = cfg.tool_format if cfg.tool_format == "json" else f"native, {getattr(env, 'parser', None)} parser"
    table = Table(title=f"{task_source}: {len(tasks)} tasks, {'greedy' if not args.samples else f'{args.samples} samples'}"
                        f", {fmt}")
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

    db = store.open_db(args.db, create=False, check=True)  # a damaged file is refused, naming its pages
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


# `workbench init`'s config: its own run with the demo's recipe shape (SFT warm-up, then GRPO) at a fraction
# of its work (a quarter of the SFT steps, 4 GRPO steps of 2 prompts without refill rounds, 50 eval requests
# instead of 230), so a first run ends soon. The demo's config is the reference run, not a starting point: it
# says why each of its values was chosen, which a new project has not done yet.
STARTER_CONFIG = """\
# {name}: a small starter run of SmolLM2-135M (LoRA) on the calendar tool calls in tasks.jsonl: a baseline eval,
# a short SFT warm-up that teaches the reply format, a few GRPO steps, an eval after each stage; grow the step
# counts once it works. Every key and its default: workbench/config.py (README "Config"). `train --check`
# validates this file, the tasks and the verifier without training; `train --max-steps N` overrides max_steps.
name: {name}
model: smollm2-135m            # the embedded default, or a local HF folder
adapter: lora
lora:
  target_modules: all-linear
tasks: tasks.jsonl             # training requests, one JSON task a line (README "Tasks")
held_out_eval: held_out.jsonl  # split held_out: decides which checkpoint is promoted; split test: reported only
reward: verifier.py            # def reward(output, task); edit it, or name a built-in verifier
sft_steps: 40                  # warm-up batches: the base model rarely writes the JSON reply unaided
sft_batch_size: 8
sft_learning_rate: 1.0e-3
sft_lr_schedule: cosine
algorithm: grpo
num_generations_per_prompt: 8  # samples per request: GRPO learns from the reward differences among them
prompts_per_step: 2
max_steps: 4                   # GRPO steps
eval_interval: 4               # eval and checkpoint every N steps (and at the end)
max_completion_length: 48      # tokens per reply
learning_rate: 3.0e-5
temperature: 0.8
seed: 0
"""
STARTER_REWARD = "tool_call_gated"  # the demo's: "safe" is paid only with the right tool (README "Verifiers")
STARTER_TRAIN_PER_TEMPLATE = 2  # training requests per phrasing template of the built-in train split
STARTER_VALIDATION_PER_TEMPLATE = 1  # of validation_wide (30 templates)
STARTER_TEST_TASKS = 20  # of the built-in test split: phrasings that neither training nor validation uses


def starter_config(name: str) -> str:
    """`init`'s config.yaml for a project called `name` (quoted when YAML would not read it back as itself)."""
    import yaml

    plain = re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name) is not None and yaml.safe_load(name) == name
    return STARTER_CONFIG.replace("{name}", name if plain else json.dumps(name))


def starter_tasks() -> tuple[list, list]:
    """(training tasks, held-out tasks) for `init`: a few of each phrasing template of the built-in train split;
    one of each validation_wide template (split held_out: they decide promotion) and the first test-split tasks
    (split test: reported only), so a run's evals take tens of tasks, not hundreds."""
    import dataclasses

    from workbench.tasks import load_task_source

    def per_template(tasks: list, k: int) -> list:
        seen: dict[str | None, int] = {}
        kept = []
        for t in tasks:
            key = t.template or t.id
            if seen.get(key, 0) < k:
                seen[key] = seen.get(key, 0) + 1
                kept.append(t)
        return kept

    train = per_template(load_task_source("train", "train"), STARTER_TRAIN_PER_TEMPLATE)
    validation = [dataclasses.replace(t, split="held_out")
                  for t in per_template(load_task_source("validation_wide", "held_out"), STARTER_VALIDATION_PER_TEMPLATE)]
    test = load_task_source("test", "test")[:STARTER_TEST_TASKS]
    return train, validation + test


def cmd_init(args: argparse.Namespace) -> int:
    from workbench.invocation import workbench_command
    from workbench.tasks import write_tasks_jsonl
    from workbench.verifiers import builtin_verifier_code

    d = Path(args.dir)
    d.mkdir(parents=True, exist_ok=True)
    train, held_out = starter_tasks()
    made = []
    for name, write in (
        ("tasks.jsonl", lambda p: write_tasks_jsonl(p, train)),
        ("held_out.jsonl", lambda p: write_tasks_jsonl(p, held_out)),
        ("verifier.py", lambda p: p.write_text(builtin_verifier_code(STARTER_REWARD))),
        ("config.yaml", lambda p: p.write_text(starter_config(d.resolve().name))),
    ):
        p = d / name
        if p.exists():
            print(f"kept {p} (exists)")
            continue
        write(p)
        made.append(str(p))
    print("made " + ", ".join(made) if made else "nothing to do")
    wb = workbench_command(d.resolve())  # typed after the cd: a relative .venv path would no longer work
    print(f"next: cd {d} && {wb} train --check config.yaml && {wb} train config.yaml")
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
    """The TUI in a browser (textual-serve): one `workbench tui` process per connection, behind a token."""
    from screens.serve import serve
    from screens.web_auth import Guard, is_loopback

    try:
        guard = Guard(args.host, args.port, args.public_url)
    except ValueError as e:
        print(f"workbench serve: {e}", file=sys.stderr)
        return 2
    if not is_loopback(args.host) and not (args.public_url or "").startswith("https:"):
        print(f"warning: listening on {args.host} over plain http: the token crosses the network in clear; "
              "an SSH tunnel to 127.0.0.1 (README) or an https proxy (--public-url https://...) is safer",
              file=sys.stderr)
    print(f"serving {args.db} (Ctrl+C to stop); only this URL lets a browser in:", flush=True)
    serve(args.db, host=args.host, port=args.port, run=args.run, public_url=args.public_url, guard=guard)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """Create (or re-attach to) the embedded demo run, start its worker, open the UI."""
    import store
    from workbench.config import load_config
    from workbench.launch import start_worker
    from workbench.run.inputs import new_run
    from workbench.view import Run, RunState, allowed, worker_state

    db = store.open_db(args.db)
    demo = [Run.from_row(r) for r in store.runs.list_runs(db) if r["name"] == "demo"]
    latest = RunState.of(demo[0], time.time()) if demo else None
    if latest is not None and (latest.alive or allowed("start_worker", latest)):  # one not finished: go on
        run_id = demo[0].id
    else:
        cfg = load_config(_demo_config_path())
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
        print(f"demo run {run_id} keeps training in the background. Re-attach: {wb} tui --db {args.db} "
              f"--run {run_id}; see it: {wb} ls --db {args.db}; stop it: {wb} stop {run_id} --db {args.db}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="workbench", description="Train small tool-calling agents with GRPO.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("train", help="train headless from a config (or resume a run)")
    p.add_argument("config", nargs="?")
    p.add_argument("--db", default=DEFAULT_DB)
    p.add_argument("--resume", type=positive_int, metavar="RUN", help="continue RUN from its last checkpoint")
    p.add_argument("--nproc", type=positive_int, default=1, metavar="N",
                   help="data-parallel over N ranks on this machine (torchrun's env; gloo on CPU, nccl on GPU)")
    p.add_argument("--max-steps", type=positive_int, metavar="N", help="GRPO steps, in place of the config's max_steps")
    p.add_argument("--check", action="store_true",
                   help="validate the config, its tasks and verifier, then exit (no run, no database)")
    p.set_defaults(fn=cmd_train)
    p = sub.add_parser("eval", help="held-out metrics of a model (+ adapter) on a tasks file")
    p.add_argument("--config", metavar="FILE",
                   help="a run config: its model, tool_format, tool_parser, harness, env, held_out_eval and "
                   "max_completion_length (the flags below override them)")
    p.add_argument("--tasks", help="a .jsonl file or a built-in split (default: the config's held_out_eval, "
                   "else tool_call_eval)")
    p.add_argument("--model", help="default: the config's, else smollm2-135m")
    p.add_argument("--tool-format", choices=("json", "native"),
                   help="json: the project's harness; native: the model's chat template and call format "
                   "(default: the config's, else native for the packaged Qwen models, json otherwise)")
    p.add_argument("--tool-parser", choices=("auto", "hermes", "llama3_json", "mistral", "nemotron"),
                   help="native only: the call format (default: the config's, else auto, read from the template)")
    p.add_argument("--adapter", help="a checkpoint's adapter folder")
    p.add_argument("--samples", type=non_negative_int, default=0,
                   help="sampled eval with N samples a task (0: greedy)")
    p.add_argument("--temperature", type=positive_float, default=1.0)
    p.add_argument("--max-new-tokens", type=completion_tokens,
                   help="default: the config's max_completion_length, else 64")
    p.add_argument("--limit", type=positive_int)
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_eval)
    p = sub.add_parser(
        "export", help="export trajectories: as stored, or as an OpenAI tool-calling dataset",
        description="--format openai writes JSONL rows {\"messages\": [...], \"tools\": [...]}, the shape TRL's "
        "SFTTrainer and HF chat templates (apply_chat_template(messages, tools=tools)) take: replies that are calls "
        "become assistant tool_calls, tool results role \"tool\" messages. For a tool_format: json run it drops "
        "the JSON harness's system prompt and one-shot example and keeps the task's own prompt (and messages).")
    p.add_argument("--run", type=positive_int, required=True, action="extend", nargs="+", help="one or more runs")
    p.add_argument("--format", choices=("jsonl", "parquet", "openai"), default="jsonl")
    p.add_argument("--split", help="only this split (train, held_out, test, ...)")
    p.add_argument("--min-reward", type=finite_float, help="only trajectories with at least this reward")
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
    p.add_argument("--run", type=positive_int, required=True)
    p.add_argument("--checkpoint", default="promoted", metavar="promoted|latest|STEP",
                   help="which checkpoint (default: the promoted one)")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--db", default=DEFAULT_DB)
    p.set_defaults(fn=cmd_export_model)
    p = sub.add_parser("report", help="validation and test metrics of a run: baseline, SFT-only, each checkpoint, per skill")
    p.add_argument("--run", type=positive_int, required=True)
    p.add_argument("--db", default=DEFAULT_DB)
    p.add_argument("--mode", choices=("greedy", "sampled"), default="greedy")
    p.add_argument("--json", action="store_true")
    p.add_argument("--events", type=non_negative_int, default=20, metavar="N",
                   help="the run's last N events (0: none)")
    p.set_defaults(fn=cmd_report)
    p = sub.add_parser("init", help="a starter config, tasks file and verifier to edit")
    p.add_argument("dir")
    p.set_defaults(fn=cmd_init)
    p = sub.add_parser("tui", help="open the workbench on a database")
    p.add_argument("--db", default=DEFAULT_DB)
    p.add_argument("--run", type=positive_int)
    p.set_defaults(fn=cmd_tui)
    p = sub.add_parser("serve", help="serve the workbench to a browser, behind a per-start token (loopback by default)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=port, default=8000)
    p.add_argument("--db", default=DEFAULT_DB)
    p.add_argument("--run", type=positive_int)
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
    from workbench.errors import WorkbenchError, exit_code_of

    try:
        return args.fn(args)
    # Say what is wrong, no traceback, and exit with the kind's code (workbench/errors.py). The store's
    # errors cannot derive from WorkbenchError (the store imports no workbench) but carry the same exit_code.
    except (WorkbenchError, StoreError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exit_code_of(exc)


if __name__ == "__main__":
    sys.exit(main())
