"""What a prompt sampler would have spent on zero-spread groups, estimated from a run that sampled uniformly.

    .venv/bin/python bench/sampler_replay.py demo.db [more.db ...] [--out docs/sampler_replay.json]

A uniformly sampled run (the demo's default, `prompt_sampler: uniform`) logged every group it drew, with its
rewards. For any other weighting w, each logged group stands for w(task) / mean(w) draws (self-normalised
importance weights: the uniform draw had probability 1/N), so the fraction of zero-spread groups the
weighting would draw is estimated without new rollouts. Each step's weights are computed from what the
sampler would know then: the groups of earlier steps and the latest validation eval before the step. The
draw without replacement is taken as proportional to weight^SHARPNESS (exact for one prompt a step).

Reported: the zero-spread fraction f, and zero-spread generations per informative group, f / (1 - f), as a
ratio to uniform's (what dynamic sampling spends to fill a step with informative groups). The estimate uses
only tasks of the run's own training source and ignores that a different draw would change what is learnt
later; `bench/prompt_sampler.py` measures it live.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import store  # noqa: E402
from workbench.learn import grpo  # noqa: E402
from workbench.prompt_sampler import SHARPNESS, GroupSeen, SpreadSampler, skill_success_from_eval  # noqa: E402
from workbench.run.evaluation import live_evals  # noqa: E402
from workbench.run.recorder import task_row  # noqa: E402
from workbench.tasks import load_task_source  # noqa: E402


def logged(
    db_path: Path, run_id: int = 1
) -> tuple[dict, list[tuple[int, str, bool]], list[tuple[int, dict]]]:
    """(the run's config, [(step, task key, spread)] per group, [(step, skill success)] per validation eval),
    read from the store as a resume reads them (`Resume.sampler_state`): the live training rows."""
    db = store.open_db(db_path, create=False, readonly=True)
    config = store.runs.get_run(db, run_id)["config"]
    config = json.loads(config) if isinstance(config, str) else config
    key_of = dict(db.execute("select id, key from tasks").fetchall())
    rewards: dict[tuple[int, int], list[float]] = defaultdict(list)
    keys: dict[tuple[int, int], str] = {}
    for step, group, task_id, reward in store.trajectories.train_group_rewards(db, run_id, 1 << 30):
        keys[(step, group)] = key_of[task_id]
        if reward is not None:
            rewards[(step, group)].append(reward)
    groups = [(g[0], key, grpo.has_spread(rewards[g])) for g, key in keys.items()]
    evals = [
        (e.step, skill_success_from_eval(e.metrics))
        for e in live_evals(db, run_id, mode="greedy")
        if e.split != "test"
    ]
    return config, groups, evals


def replay(db_path: Path) -> dict[str, object]:
    config, groups, evals = logged(db_path)
    tasks = load_task_source(config["tasks"], "train")
    keys = [task_row(t)["key"] for t in tasks]
    index = {k: i for i, k in enumerate(keys)}
    sampler = SpreadSampler(tasks, keys, group_size=config["num_generations_per_prompt"])
    kept = [g for g in groups if g[1] in index]
    zero = total = 0.0
    for step in sorted({s for s, _, _ in kept}):
        seen = [GroupSeen(k, spread) for s, k, spread in kept if s < step]
        before = [skills for s, skills in evals if s < step]
        w = [x**SHARPNESS for x in sampler.weights(seen, before[-1] if before else {})]
        mean_w = sum(w) / len(w)
        for s, key, spread in kept:
            if s == step:
                total += w[index[key]] / mean_w
                zero += (not spread) * w[index[key]] / mean_w
    f_spread = zero / total
    f_uniform = sum(not spread for _, _, spread in kept) / len(kept)
    per_informative = [f / (1 - f) for f in (f_uniform, f_spread)]
    return {
        "db": str(db_path),
        "groups": len(kept),
        "zero_spread_fraction_uniform": round(f_uniform, 3),
        "zero_spread_fraction_spread": round(f_spread, 3),
        "zero_spread_generations_per_informative_group_ratio": round(
            per_informative[1] / per_informative[0], 3
        ),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dbs", nargs="+", type=Path, help="databases of uniformly sampled runs")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    results = [replay(p) for p in args.dbs]
    print(json.dumps(results, indent=1))
    if args.out:
        args.out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
