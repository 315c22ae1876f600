"""The test split, once, for finished runs whose config kept it out (`test_tasks: none`): base, SFT-only and last
checkpoint of each run, greedy, then GRPO − SFT-only paired per run and pooled over the runs (each task's outcome
averaged over them first, as bench/recipe_seeds.pooled).

    .venv/bin/python bench/test_split.py --db /tmp/s23/q3s0.db --db /tmp/s23/q3s1.db --db /tmp/s23/q3s2.db \\
        [--tasks test] [--out docs/qwen05b_test.json]

Run it once, for the final recipe, after validation decided: nothing here decides anything. Each run's model,
tool format, parser and max_completion_length come from its stored config; the base model is evaluated once
per distinct config model.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def evaluate_checkpoint(cfg: Any, tasks: list, adapter: Path | None) -> dict[str, Any]:
    """`workbench eval`'s measurement of one adapter (None: the base model) on `tasks`."""
    from workbench.envs import env_for_config
    from workbench.eval import evaluate
    from workbench.models import load_policy
    from workbench.rollout.hf_generate import local_engine

    t = time.perf_counter()
    policy = load_policy(cfg.model, adapter="lora", adapter_path=adapter, seed=0)
    env = env_for_config(cfg, policy.tokenizer)
    result = evaluate(
        local_engine(policy),
        policy.tokenizer,
        env,
        tasks,
        max_new_tokens=cfg.max_completion_length,
        stop_token_ids=policy.eos_token_ids,
    )
    return {**result.metrics, "adapter": str(adapter) if adapter else None, "wall_s": time.perf_counter() - t}


def checkpoints(db_path: str) -> tuple[Any, Path, Path, int]:
    """(config, SFT-only adapter, last checkpoint's adapter, its step) of the database's one run."""
    import store
    from workbench.config import config_from_dict

    db = store.open_db(db_path, create=False)
    (run,) = store.runs.list_runs(db)
    cfg = config_from_dict(json.loads(run["config"]) if isinstance(run["config"], str) else run["config"])
    rows = list(
        db.query("select step, kind, path from checkpoints where run_id = ? order by step", [run["id"]])
    )
    sft = next(r for r in rows if r["kind"] == "sft")
    last = rows[-1]
    return cfg, Path(sft["path"]) / "adapter", Path(last["path"]) / "adapter", int(last["step"])


def main() -> int:
    from workbench.eval import paired_difference
    from workbench.tasks import load_task_source

    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--db", action="append", required=True, help="a finished run's database (repeat per seed)"
    )
    ap.add_argument("--tasks", default="test")
    ap.add_argument(
        "--split", default="test", help="the split of --tasks to read (builtin:calendar_calls: held_out)"
    )
    ap.add_argument("--out", default="docs/qwen05b_test.json")
    args = ap.parse_args()
    tasks = load_task_source(args.tasks, args.split)
    base: dict[str, dict[str, Any]] = {}
    runs = []
    for db in args.db:
        cfg, sft, last, step = checkpoints(db)
        if cfg.model not in base:
            base[cfg.model] = evaluate_checkpoint(cfg, tasks, None)
        row = {"db": db, "seed": cfg.seed, "last_step": step}
        row["sft"] = evaluate_checkpoint(cfg, tasks, sft)
        row["last"] = evaluate_checkpoint(cfg, tasks, last)
        d = paired_difference(
            row["last"]["solved"], row["sft"]["solved"], clusters=row["sft"].get("clusters")
        )
        row["last_minus_sft"] = [d.delta, d.ci_low, d.ci_high] if d else None
        runs.append(row)
        print(
            f"{db} seed {cfg.seed}: base {base[cfg.model]['success_rate']:.3f}, "
            f"SFT-only {row['sft']['success_rate']:.3f}, step {step} {row['last']['success_rate']:.3f}, "
            f"paired {row['last_minus_sft']}",
            flush=True,
        )
    mean = lambda rs, k: {  # noqa: E731
        t: sum(r[k]["solved"][t] for r in rs) / len(rs) for t in rs[0][k]["solved"]
    }
    pooled = paired_difference(mean(runs, "last"), mean(runs, "sft"), clusters=runs[0]["sft"].get("clusters"))
    summary = {
        "tasks": args.tasks,
        "n_tasks": len(tasks),
        "base": base,
        "runs": runs,
        "pooled_last_minus_sft": [pooled.delta, pooled.ci_low, pooled.ci_high, pooled.cluster_ci]
        if pooled
        else None,
    }
    Path(args.out).write_text(json.dumps(summary, indent=1, default=str))
    print(f"pooled over {len(runs)} runs: {summary['pooled_last_minus_sft']}; written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
