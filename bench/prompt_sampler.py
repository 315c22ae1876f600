"""Uniform vs spread prompt sampling on the demo recipe, from one SFT checkpoint.

    .venv/bin/python bench/prompt_sampler.py --out docs/prompt_sampler.json

The demo's config (workbench/data/demo.yaml: SmolLM2-135M, G=8, 4 prompts a step, dynamic sampling with 4
refill rounds, 160 SFT steps, 8 GRPO steps, whole validation evals) trains its SFT warm-up once
(`--sft-steps`, evals capped at `--eval-max-tasks` a split when given); the database is then copied, and each
copy runs `--steps` GRPO steps from that checkpoint with `prompt_sampler: uniform` and with
`prompt_sampler: spread`, same seed. The test split is not evaluated (a benchmark decides nothing on it).
A cheap SFT checkpoint (few SFT steps, capped evals) gives the sampler a noisier eval prior than the demo's.
Reported per arm from the steps' own metrics: generations in groups with no reward spread (they teach
nothing), all generations, informative groups kept a step (dynamic sampling refills up to the prompt count),
reward, and wall time.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import store  # noqa: E402
from workbench.config import config_from_dict, load_config  # noqa: E402
from workbench.trainer import Trainer  # noqa: E402


def demo_cfg(**overrides: object):
    base = load_config(ROOT / "workbench" / "data" / "demo.yaml").to_dict()
    base.update(overrides)
    return config_from_dict(base)


def arm(work: Path, sft_db: Path, sampler: str, steps: int, common: dict) -> dict:
    db_path = work / f"{sampler}.db"
    shutil.copy(sft_db, db_path)
    db = store.open_db(db_path)
    cfg = demo_cfg(
        **common, prompt_sampler=sampler, max_steps=steps, eval_interval=steps, output_dir=str(work / sampler)
    )
    t0 = time.perf_counter()
    t = Trainer(cfg, db, run_id=1, log=lambda m: print(f"[{sampler}] {m}", flush=True))
    assert t.resume() == 0, "expected to resume from the SFT checkpoint"
    t.run()
    wall = time.perf_counter() - t0
    steps_m = [s["metrics"] for s in store.metrics.steps_since(db, 1)]
    g = cfg.num_generations_per_prompt
    out = {
        "sampler": sampler,
        "wall_s": round(wall, 1),
        "zero_spread_generations": sum(m["sampler/zero_spread_generations"] for m in steps_m),
        "generations": sum(
            g * (cfg.prompts_per_step + m.get("dynamic_sampling/extra_groups", 0)) for m in steps_m
        ),
        "groups_kept_per_step": [m["groups_kept"] for m in steps_m],
        "reward_per_step": [round(m["reward"], 3) for m in steps_m],
        "final_validation_success": next(
            e["metrics"]["success_rate"]
            for e in reversed(store.metrics.list_evals(db, 1, mode="greedy"))
            if (e["tasks"] or {}).get("split") != "test"
        ),
    }
    db.conn.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sft-steps", type=int, default=160)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--eval-max-tasks", type=int, default=None, help="default: the whole validation split")
    ap.add_argument("--out", default="docs/prompt_sampler.json")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="wb-sampler-"))
    common = dict(sft_steps=args.sft_steps, eval_max_tasks=args.eval_max_tasks, test_tasks="none")
    sft_db = work / "sft.db"
    t0 = time.perf_counter()
    db = store.open_db(sft_db)
    sft = Trainer(
        demo_cfg(**common, max_steps=0, output_dir=str(work / "sft")),
        db,
        log=lambda m: print(f"[sft] {m}", flush=True),
    )
    sft.run()
    db.conn.close()
    sft_s = time.perf_counter() - t0
    arms = [arm(work, sft_db, s, args.steps, common) for s in ("uniform", "spread")]
    u, s = arms
    result = {
        "args": vars(args),
        "sft_s": round(sft_s, 1),
        "arms": arms,
        "zero_spread_generations_ratio_spread_over_uniform": round(
            s["zero_spread_generations"] / u["zero_spread_generations"], 3
        )
        if u["zero_spread_generations"]
        else None,
    }
    print(json.dumps(result, indent=1))
    Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
