"""The demo recipe with several seeds: each seed is a full `workbench train` (baseline -> SFT -> GRPO -> evals),
then the test split's numbers are read back from the store, and the built-in multi-turn family (14 tasks judged
on the final state, none of them trained on by the demo) is evaluated with the base model, the SFT-only
checkpoint and the last (GRPO) checkpoint.

    python bench/recipe_seeds.py [--config workbench/data/demo.yaml] [--seeds 0 1 2] [--out docs/recipe_seeds.json]

A CI over tasks is not a CI over seeds: the table gives each seed and the mean and range across seeds.
Nothing here decides anything: the recipe was chosen on validation before this ran.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SKILLS_12H = "time_12h"  # by_skill key of "12-hour times"


def seeded_config(text: str, seed: int, db_dir: Path) -> Path:
    """The config with its seed, name and output folder replaced (keys at the top level of the YAML)."""
    for key, value in (
        ("seed", str(seed)),
        ("name", f"recipe-seed{seed}"),
        ("output_dir", str(db_dir / f"runs{seed}")),
    ):
        line = f"{key}: {value}"
        text, n = re.subn(rf"^{key}:.*$", line, text, flags=re.M)
        if not n:
            text += f"\n{line}\n"
    path = db_dir / f"seed{seed}.yaml"
    path.write_text(text)
    return path


def _by_kind(rows: list[dict[str, Any]], split: str) -> dict[str, dict[str, Any]]:
    """base, sft, promoted and last checkpoint rows of one split."""
    mine = [r for r in rows if r["split"] == split]
    out = {
        "base": next((r for r in mine if r["kind"] == "base"), None),
        "sft": next((r for r in mine if r["kind"] == "sft"), None),
        "last": mine[-1] if mine else None,
        "promoted": next((r for r in mine if r["promoted"]), None),
    }
    return {k: v for k, v in out.items() if v is not None}


def _skill(row: dict[str, Any], name: str) -> float | None:
    skill = (row.get("by_skill") or {}).get(name)
    return skill["success"] if skill else None


def _stored_wall(db: str) -> float:
    """Seconds from the run's creation to its last event (the train command's wall time, less start-up)."""
    from workbench.view import View

    with View.open(db) as view:
        run, events = view.run(1), view.last_events(1, 1)
    return (events[-1].created - run.created) if events else 0.0


_BASE_MULTI_TURN: dict[str, float] = {}  # greedy: the base model's result is the same for every seed


def multi_turn(db: str, run_id: int, model: str) -> dict[str, float]:
    """Success on all 14 built-in multi-turn tasks for base, SFT-only and the last (GRPO) checkpoint."""
    from workbench.config import Config
    from workbench.domains.calendar import builtin_multi_turn_tasks
    from workbench.envs import env_for_config
    from workbench.eval import evaluate
    from workbench.models import load_policy
    from workbench.rollout.hf_generate import local_engine
    from workbench.view import View

    with View.open(db) as view:
        cks = view.checkpoints(run_id)
    sft = next((c for c in cks if c.kind == "sft"), None)
    last = cks[-1] if cks and cks[-1] is not sft else None  # the GRPO stage's end
    cfg = Config(model=model, adapter="lora", env="multi_turn")
    tasks = builtin_multi_turn_tasks()
    out: dict[str, float] = {}
    for label, ck in (("base", None), ("sft", sft), ("last", last)):
        if label != "base" and ck is None:
            continue
        if label == "base" and model in _BASE_MULTI_TURN:
            out[label] = _BASE_MULTI_TURN[model]
            continue
        policy = load_policy(
            cfg.model, adapter="lora", adapter_path=str(Path(ck.path) / "adapter") if ck else None
        )
        res = evaluate(
            local_engine(policy),
            policy.tokenizer,
            env_for_config(cfg),
            tasks,
            max_new_tokens=64,
            samples=0,
            stop_token_ids=policy.eos_token_ids,
        )
        out[label] = res.metrics["success_rate"]
        if label == "base":
            _BASE_MULTI_TURN[model] = out[label]
    return out


def pooled(
    rows_by_seed: list[list[dict[str, Any]]], split: str, later: str = "last"
) -> dict[str, Any] | None:
    """GRPO (`later`: its last or promoted checkpoint) minus SFT-only on `split`, each task's outcome averaged
    over the seeds first, then paired over tasks (and over phrasing templates). Several seeds give a tighter
    estimate of the recipe's gain than any one seed's CI; it is still a CI over tasks, not over seeds. None
    when a seed lacks either row or its per-task results."""
    from workbench.eval import paired_difference

    cand: dict[str, list[float]] = {}
    ref: dict[str, list[float]] = {}
    clusters: dict[str, str] = {}
    for rows in rows_by_seed:
        kinds = _by_kind(rows, split)
        if any(not kinds.get(k, {}).get("solved") for k in ("sft", later)):
            return None
        for tid, v in kinds[later]["solved"].items():
            cand.setdefault(tid, []).append(v)
        for tid, v in kinds["sft"]["solved"].items():
            ref.setdefault(tid, []).append(v)
        clusters.update(kinds["sft"].get("clusters") or {})
    mean = lambda d: {t: sum(v) / len(v) for t, v in d.items() if len(v) == len(rows_by_seed)}  # noqa: E731
    diff = paired_difference(mean(cand), mean(ref), clusters=clusters or None)
    if diff is None:
        return None
    return {
        "seeds": len(rows_by_seed),
        "later": later,
        "delta": diff.delta,
        "ci": [diff.ci_low, diff.ci_high],
        "cluster_ci": list(diff.cluster_ci) if diff.cluster_ci else None,
        "n_tasks": diff.n_tasks,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="workbench/data/demo.yaml")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--out", default="docs/recipe_seeds.json")
    ap.add_argument("--work", default=None, help="folder for the stores (default: a temporary one)")
    ap.add_argument(
        "--summarize-only", action="store_true", help="read the runs already in --work, train nothing"
    )
    args = ap.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="recipe_seeds_"))
    work.mkdir(parents=True, exist_ok=True)
    text = Path(args.config).read_text()
    model = re.search(r"^model:\s*(\S+)", text, flags=re.M)
    results = []
    all_rows: list[list[dict[str, Any]]] = []
    # With --summarize-only, the wall times the training runs measured (in --out) are kept.
    before = json.loads(Path(args.out).read_text())["seeds"] if Path(args.out).is_file() else []
    measured = {e["seed"]: (e["rc"], e["wall_s"]) for e in before if e.get("rc") is not None}
    for seed in args.seeds:
        cfg_path, db = seeded_config(text, seed, work), str(work / f"seed{seed}.db")
        if args.summarize_only:  # the runs exist: read them again (e.g. after fixing this script's reading)
            rc, wall = measured.get(seed, (None, _stored_wall(db)))
        else:
            t0 = time.perf_counter()
            rc = subprocess.run(
                [sys.executable, "-m", "workbench.cli", "train", str(cfg_path), "--db", db]
            ).returncode
            wall = time.perf_counter() - t0
        rows = json.loads(
            subprocess.run(
                [sys.executable, "-m", "workbench.cli", "report", "--db", db, "--run", "1", "--json"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
        all_rows.append(rows)
        entry: dict[str, Any] = {"seed": seed, "rc": rc, "wall_s": round(wall, 1), "db": db}
        for split in ("validation", "test"):
            entry[split] = {
                k: {
                    "label": r["label"],
                    "success": r["success_rate"],
                    "ci": [r.get("success_ci_low"), r.get("success_ci_high")],
                    "unsafe": r.get("unsafe_rate"),
                    "12h": _skill(r, SKILLS_12H),
                    "vs_sft": r.get("vs_sft"),
                }
                for k, r in _by_kind(rows, split).items()
            }
        try:
            entry["multi_turn"] = multi_turn(db, 1, model.group(1) if model else "smollm2-135m")
        except Exception as exc:  # noqa: BLE001 - the seed's training numbers are kept whatever this does
            entry["multi_turn"] = {"error": repr(exc)}
        results.append(entry)
        print(json.dumps(entry), flush=True)
    pooled_all = {split: pooled(all_rows, split) for split in ("validation", "test")}
    Path(args.out).write_text(
        json.dumps({"config": args.config, "seeds": results, "pooled_grpo_minus_sft": pooled_all}, indent=2)
        + "\n"
    )
    print_table(results)
    for split, d in pooled_all.items():
        if d:
            cl = (
                f", over templates [{d['cluster_ci'][0]:+.3f}, {d['cluster_ci'][1]:+.3f}]"
                if d["cluster_ci"]
                else ""
            )
            print(
                f"{split}: GRPO ({d['later']}) − SFT-only, each task averaged over {d['seeds']} seeds: "
                f"{d['delta']:+.3f} "
                f"[{d['ci'][0]:+.3f}, {d['ci'][1]:+.3f}] over tasks{cl}"
            )
    return 0


def print_table(results: list[dict[str, Any]]) -> None:
    """Markdown: test-split success per seed (base, SFT-only, GRPO's last checkpoint, the promoted one)."""

    def cell(d: dict[str, Any] | None) -> str:
        return f"{d['delta']:+.3f} [{d['ci_low']:+.3f}, {d['ci_high']:+.3f}]" if d else "-"

    print(
        "| seed | wall | base | SFT-only | GRPO (last) | GRPO − SFT, paired | promoted: success / 12-hour / unsafe |"
        " multi-turn base / SFT / GRPO |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for e in results:
        t, mt = e["test"], e["multi_turn"]
        dep = t.get("promoted") or {}
        print(
            f"| {e['seed']} | {e['wall_s'] / 60:.1f} min | {t['base']['success']:.3f} | {t['sft']['success']:.3f} | "
            f"{t['last']['success']:.3f} | {cell(t['last'].get('vs_sft'))} | {dep.get('label', 'none')}: "
            f"{dep.get('success', float('nan')):.3f} / {dep.get('12h')} / {dep.get('unsafe')} | "
            f"{mt.get('base', '-')} / {mt.get('sft', '-')} / {mt.get('last', '-')} |"
        )
    for key in ("sft", "last", "promoted"):
        xs = [e["test"][key]["success"] for e in results if key in e["test"]]
        if xs:
            print(f"test success, {key}: mean {sum(xs) / len(xs):.3f}, range [{min(xs):.3f}, {max(xs):.3f}]")


if __name__ == "__main__":
    raise SystemExit(main())
