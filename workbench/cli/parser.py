"""The flags of every `workbench` command: one parser, each subcommand's `fn` the function that runs it."""

from __future__ import annotations

import argparse

from workbench.cli.control import WAIT_S, cmd_control, cmd_ls
from workbench.cli.init import cmd_init
from workbench.cli.results import cmd_eval, cmd_export, cmd_export_model, cmd_report
from workbench.cli.train import cmd_train
from workbench.cli.ui import cmd_demo, cmd_serve, cmd_tui
from workbench.ranges import (
    completion_tokens,
    finite_float,
    non_negative_int,
    port,
    positive_float,
    positive_int,
)

DEFAULT_DB = "workbench.db"


def build_parser() -> argparse.ArgumentParser:
    """Every command's flags; `fn` is the command that runs with them."""
    ap = argparse.ArgumentParser(prog="workbench", description="Train small tool-calling agents with GRPO.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("train", help="train headless from a config (or resume a run)")
    p.add_argument("config", nargs="?")
    p.add_argument("--db", default=DEFAULT_DB)
    p.add_argument("--resume", type=positive_int, metavar="RUN", help="continue RUN from its last checkpoint")
    p.add_argument(
        "--nproc",
        type=positive_int,
        default=1,
        metavar="N",
        help="data-parallel over N ranks on this machine (torchrun's env; gloo on CPU, nccl on GPU)",
    )
    p.add_argument(
        "--max-steps", type=positive_int, metavar="N", help="GRPO steps, in place of the config's max_steps"
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="validate the config, its tasks and verifier, then exit (no run, no database)",
    )
    p.set_defaults(fn=cmd_train)
    p = sub.add_parser("eval", help="held-out metrics of a model (+ adapter) on a tasks file")
    p.add_argument(
        "--config",
        metavar="FILE",
        help="a run config: its model, tool_format, tool_parser, harness, env, held_out_eval and "
        "max_completion_length (the flags below override them)",
    )
    p.add_argument(
        "--tasks",
        help="a .jsonl file or a built-in split (default: the config's held_out_eval, else tool_call_eval)",
    )
    p.add_argument("--model", help="default: the config's, else smollm2-135m")
    p.add_argument(
        "--tool-format",
        choices=("json", "native"),
        help="json: the project's harness; native: the model's chat template and call format "
        "(default: the config's, else native for the packaged Qwen models, json otherwise)",
    )
    p.add_argument(
        "--tool-parser",
        choices=("auto", "hermes", "llama3_json", "mistral", "nemotron"),
        help="native only: the call format (default: the config's, else auto, read from the template)",
    )
    p.add_argument("--adapter", help="a checkpoint's adapter folder")
    p.add_argument(
        "--samples", type=non_negative_int, default=0, help="sampled eval with N samples a task (0: greedy)"
    )
    p.add_argument("--temperature", type=positive_float, default=1.0)
    p.add_argument(
        "--max-new-tokens",
        type=completion_tokens,
        help="default: the config's max_completion_length, else 64",
    )
    p.add_argument("--limit", type=positive_int)
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_eval)
    p = sub.add_parser(
        "export",
        help="export trajectories: as stored, or as an OpenAI tool-calling dataset",
        description='--format openai writes JSONL rows {"messages": [...], "tools": [...]}, the shape TRL\'s '
        "SFTTrainer and HF chat templates (apply_chat_template(messages, tools=tools)) take: replies that are calls "
        'become assistant tool_calls, tool results role "tool" messages. For a tool_format: json run it drops '
        "the JSON harness's system prompt and one-shot example and keeps the task's own prompt (and messages).",
    )
    p.add_argument(
        "--run", type=positive_int, required=True, action="extend", nargs="+", help="one or more runs"
    )
    p.add_argument("--format", choices=("jsonl", "parquet", "openai"), default="jsonl")
    p.add_argument("--split", help="only this split (train, held_out, test, ...)")
    p.add_argument("--min-reward", type=finite_float, help="only trajectories with at least this reward")
    p.add_argument(
        "--label",
        action="append",
        choices=("good", "bad"),
        help="only trajectories whose human verdict is this (repeat for both)",
    )
    p.add_argument(
        "--include-superseded", action="store_true", help="also rows of steps redone after a resume"
    )
    p.add_argument("--db", default=DEFAULT_DB)
    p.add_argument("--out")
    p.set_defaults(fn=cmd_export)
    p = sub.add_parser(
        "export-model",
        help="a checkpoint as an adapter and a merged HF folder to serve",
        description="Writes OUT/adapter (the LoRA adapter) and OUT/merged (base + adapter merged, with the "
        "tokenizer and its chat template), and prints the vllm serve line (with --tool-call-parser when the "
        "template has a tool format vLLM parses).",
    )
    p.add_argument("--run", type=positive_int, required=True)
    p.add_argument(
        "--checkpoint",
        default="promoted",
        metavar="promoted|latest|STEP",
        help="which checkpoint (default: the promoted one)",
    )
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--db", default=DEFAULT_DB)
    p.set_defaults(fn=cmd_export_model)
    p = sub.add_parser(
        "report", help="validation and test metrics of a run: baseline, SFT-only, each checkpoint, per skill"
    )
    p.add_argument("--run", type=positive_int, required=True)
    p.add_argument("--db", default=DEFAULT_DB)
    p.add_argument("--mode", choices=("greedy", "sampled"), default="greedy")
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--events", type=non_negative_int, default=20, metavar="N", help="the run's last N events (0: none)"
    )
    p.set_defaults(fn=cmd_report)
    p = sub.add_parser("init", help="a starter config, tasks file and verifier to edit")
    p.add_argument("dir")
    p.set_defaults(fn=cmd_init)
    p = sub.add_parser("tui", help="open the workbench on a database")
    p.add_argument("--db", default=DEFAULT_DB)
    p.add_argument("--run", type=positive_int)
    p.set_defaults(fn=cmd_tui)
    p = sub.add_parser(
        "serve", help="serve the workbench to a browser, behind a per-start token (loopback by default)"
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=port, default=8000)
    p.add_argument("--db", default=DEFAULT_DB)
    p.add_argument("--run", type=positive_int)
    p.add_argument("--public-url", help="the URL the browser uses, when it differs (a proxy)")
    p.set_defaults(fn=cmd_serve)
    p = sub.add_parser(
        "demo", help="train the embedded default (SmolLM2-135M, calendar tools) with the UI open"
    )
    p.add_argument("--db", default=DEFAULT_DB)
    p.add_argument("--headless", action="store_true", help="start the worker and return")
    p.add_argument(
        "--model",
        help="the packaged recipe of this model: smollm2-135m (default) or qwen2.5-coder-0.5b (fetched and "
        "verified on first use)",
    )
    p.set_defaults(fn=cmd_demo)
    p = sub.add_parser("ls", help="runs in a database: status, phase, step, worker")
    p.add_argument("--db", default=DEFAULT_DB)
    p.set_defaults(fn=cmd_ls)
    for kind, what in (
        ("pause", "pause a run at its next safe point (the model stays loaded)"),
        ("resume", "resume a paused run"),
        ("stop", "stop a run: it checkpoints the last finished step and its worker exits"),
    ):
        p = sub.add_parser(kind, help=what)
        p.add_argument("run", type=int)
        p.add_argument("--db", default=DEFAULT_DB)
        p.add_argument("--no-wait", action="store_true", help="return once the command is queued")
        p.add_argument(
            "--wait-s", type=float, default=WAIT_S, help="how long to wait for the worker's answer"
        )
        p.set_defaults(fn=cmd_control)
    return ap
