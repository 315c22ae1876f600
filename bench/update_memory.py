"""One stored GRPO step's update, replayed from its token traces: peak memory and time, source trees side by side.

The multi-step family's update peaked at ~15 GB on a 24 GiB box (docs/results.md, issue 35): its episodes
are long, each with its own history after the shared harness. This replays the update a stored step actually
ran (its episodes with an advantage, every turn's prompt and completion ids from `token_trace`, made into
rows by the tree's own `update_items` under the run's config), one fresh process per measurement, so each
peak RSS is that update's alone. Trees alternate in one run (a before/after pair is two checkouts of the
repository).

    .venv/bin/python bench/update_memory.py DB [--step 1] [--tree PATH ...] [--reps 2] [--micro-batch 16]

Each child runs with the heap settings the run's worker would have (workbench.native_heap: the fixed threshold
for multi-turn runs only), prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

HERE = Path(__file__).resolve().parent.parent


def child(db_path: str, step: int, micro_batch: int) -> None:
    """Load the run's policy (its newest checkpoint's adapter is not needed: memory and time depend on the
    shapes), build the step's update rows, run one `policy_update`, print its figures."""
    import torch

    import store
    from store import trajectories
    from workbench.config import config_from_dict
    from workbench.learn.update import policy_update, update_items
    from workbench.models import load_policy

    db = store.open_db(db_path)
    cfg = config_from_dict(json.loads(db.execute("select config from runs where id = 1").fetchone()[0]))
    ids = [
        r[0]
        for r in db.execute(
            "select id from trajectories where run_id = 1 and step = ? and split = 'train' and eval_id is null"
            " and superseded = 0 and advantage is not null and advantage != 0 order by id",
            [step],
        )
    ]
    if not ids:
        raise SystemExit(f"{db_path}: no rows with an advantage at step {step}")
    episodes = []  # (rollout, advantage) as the trainer hands them to `update_items`, from the stored traces
    for tid in ids:
        row = trajectories.get_trajectory(db, tid)
        segs = [
            SimpleNamespace(
                prompt_ids=s["prompt_ids"],
                completion=SimpleNamespace(token_ids=s["completion_ids"], logprobs=s["logprobs"]),
            )
            for s in row["token_trace"] or []
        ]
        episodes.append((SimpleNamespace(segments=segs, truncated=bool(row["truncated"])), row["advantage"]))
    items, n_seqs = update_items(episodes, cfg)
    turns = sum(len(ep.segments) for ep, _ in episodes)
    # load_policy spelled out as the trainer calls it: the tree under test may be older than any helper
    policy = load_policy(
        cfg.model,
        adapter=cfg.adapter,
        lora_r=cfg.lora.r,
        lora_alpha=cfg.lora.alpha,
        lora_dropout=cfg.lora.dropout,
        target_modules=cfg.lora.target_modules,
        dtype=cfg.dtype,
        seed=cfg.seed,
    )
    optimizer = torch.optim.AdamW(policy.trainable_parameters(), lr=cfg.learning_rate)
    loaded_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t = time.perf_counter()
    out = policy_update(
        policy, optimizer, cfg, items, n_seqs, temperature=cfg.temperature, lr=1e-6, micro_batch=micro_batch
    )
    seconds = time.perf_counter() - t
    print(
        json.dumps(
            {
                "episodes": len(ids),
                "turns": turns,
                "rows": len(items),
                "prompt_tokens_max": max(len(it[0]) for it in items),
                "completion_tokens": sum(len(it[1]) for it in items),
                "update_tokens": out.get("update_tokens"),
                "grad_norm": out.get("grad_norm"),
                "loaded_mb": loaded_kb / 1024,
                "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                "seconds": seconds,
                "loss": out.get("loss"),
            }
        )
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("db")
    ap.add_argument("--step", type=int, default=1)
    ap.add_argument("--tree", action="append", help="a source tree to run (default: this one); repeatable")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--micro-batch", type=int, default=16)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.db, args.step, args.micro_batch)
        return
    trees = [str(Path(t).resolve()) for t in (args.tree or [str(HERE)])]
    sys.path.insert(0, str(HERE))
    from workbench.launch import run_env_kind
    from workbench.native_heap import child_env, needs_bound

    # The worker's rule (run 1, as the children read): the fixed threshold for multi-turn runs only.
    bound = needs_bound(run_env_kind(args.db, 1))
    runs: dict[str, list[dict]] = {t: [] for t in trees}
    for _ in range(args.reps):
        for tree in trees:
            env = {**child_env(bound), "PYTHONPATH": tree}
            cmd = [sys.executable, __file__, args.db, "--step", str(args.step), "--child"]
            cmd += ["--micro-batch", str(args.micro_batch)]
            done = subprocess.run(cmd, env=env, cwd=tree, capture_output=True, text=True)
            if done.returncode != 0:
                raise SystemExit(f"{tree}: exit {done.returncode}\n{done.stderr[-2000:]}")
            runs[tree].append(json.loads(done.stdout.strip().splitlines()[-1]))
    first = runs[trees[0]][0]
    print(
        f"{args.db} step {args.step}: {first['episodes']} episodes with an advantage; micro-batch {args.micro_batch}"
    )
    for tree, rs in runs.items():
        peak = statistics.median(r["peak_mb"] for r in rs)
        sec = statistics.median(r["seconds"] for r in rs)
        print(
            f"{tree}: {rs[0]['rows']} rows, longest prompt {rs[0]['prompt_tokens_max']}, completion positions"
            f" {rs[0]['completion_tokens']} (trained {rs[0].get('update_tokens')}); peak RSS median {peak:.0f} MB"
            f" (after load {rs[0]['loaded_mb']:.0f} MB), update median {sec:.1f} s, runs"
            f" {[round(r['seconds'], 1) for r in rs]}, grad norm {[r.get('grad_norm') for r in rs]}"
        )
    print(json.dumps(runs))


if __name__ == "__main__":
    main()
