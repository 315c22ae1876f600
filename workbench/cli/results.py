"""`workbench eval`, `report`, `export` and `export-model`: what a model or a run achieved, measured, shown or
written out."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


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
    changes = {
        k: v
        for k, v in (
            ("model", args.model),
            ("tool_format", args.tool_format),
            ("tool_parser", args.tool_parser),
        )
        if v is not None
    }
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
        result = evaluate(
            local_engine(policy),
            policy.tokenizer,
            env,
            tasks,
            max_new_tokens=max_new_tokens,
            samples=args.samples,
            temperature=args.temperature,
            stop_token_ids=policy.eos_token_ids,
        )
    finally:
        if hasattr(env, "close"):  # env: mcp runs server processes
            env.close()
    if args.json:
        print(json.dumps(result.metrics, indent=2))
        return 0
    fmt = cfg.tool_format if cfg.tool_format == "json" else f"native, {getattr(env, 'parser', None)} parser"
    table = Table(
        title=f"{task_source}: {len(tasks)} tasks, {'greedy' if not args.samples else f'{args.samples} samples'}"
        f", {fmt}"
    )
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
    flt = ExportFilter(
        runs=args.run,
        split=args.split,
        min_reward=args.min_reward,
        labels=args.label or [],
        include_superseded=args.include_superseded,
    )
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
    print(
        f"run {args.run}, checkpoint step {c.step} ({c.kind}): merged model in {done.merged}"
        + (f", adapter in {done.adapter}" if done.adapter else "")
    )
    print(f"serve it: {done.serve_command()}")
    if done.tool_parser is None:
        print(
            "(no --tool-call-parser: vLLM turns replies into tool_calls only for a tool_format: native run in a "
            'format it parses; a JSON-harness run replies {"tool": ..., "args": ...} as text)'
        )
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from workbench.report import print_report

    return print_report(args.db, args.run, mode=args.mode, as_json=args.json, n_events=args.events)
