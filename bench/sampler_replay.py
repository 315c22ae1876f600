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
import sqlite3
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from workbench.prompt_sampler import SHARPNESS, GroupSeen, SpreadSampler, skill_success_from_eval  # noqa: E402
from workbench.run.recorder import task_row  # noqa: E402
from workbench.tasks import load_task_source  # noqa: E402


def logged(db_path: Path) -> tuple[dict, list[tuple[int, str, bool]], list[tuple[int, dict[str, float]]]]:
    """(the run's config, [(step, task key, spread)] per group, [(step, skill success)] per validation eval)."""
    db = sqlite3.connect(db_path)
    config = json.loads(db.execute("select config from runs order by id limit 1").fetchone()[0])
    key_of = dict(db.execute("select id, key from tasks"))
    rewards: dict[tuple[int, int, str], list[float]] = defaultdict(list)
    rows = db.execute(
        "select step, group_idx, task_id, reward from trajectories where split = 'train' and superseded = 0 "
        "and reward is not null order by id"
    )
    for step, group, task_id, reward in rows:
        rewards[(step, group, key_of[task_id])].append(reward)
    groups = [(s, key, len(r) >= 2 and max(r) - min(r) > 1e-8) for (s, _, key), r in rewards.items()]
    evals = []
    for step, tasks, metrics in db.execute(
        "select step, tasks, metrics from evals where mode = 'greedy' and superseded = 0 order by id"
    ):
        if (json.loads(tasks or "{}") or {}).get("split") != "test":
            evals.append((step, skill_success_from_eval(json.loads(metrics))))
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
