"""Is a checkpoint's time skill weak in distribution, or only on the test split's unseen minutes? Decides nothing.

Fresh create_event requests in the *training* phrasings, names and days, in four sets of 40: 12-hour and
24-hour times, at minutes the train split uses or at the four it never uses (test's :10 :20 :40 :50).
Greedy, the demo's harness; prints success per set and, with --show, every miss.

    python bench/time_probe.py --adapter runs/<run>/step-00000-sft/adapter [--adapter ...] [--show]
"""

from __future__ import annotations

import argparse
import random
from typing import Any

from workbench.domains.calendar import single_turn_tasks as st
from workbench.types import Task

SEEN_MINUTES = [5, 25, 35, 55, 12, 48, 33, 7]  # all in the train split's minutes
UNSEEN_MINUTES = [10, 20, 40, 50]  # test's, never in train or validation
SETS = (
    ("12h_seen", SEEN_MINUTES, 12),
    ("12h_unseen", UNSEEN_MINUTES, 12),
    ("24h_seen", SEEN_MINUTES, 24),
    ("24h_unseen", UNSEEN_MINUTES, 24),
)


def probe_sets(n: int = 40, seed: int = 7) -> dict[str, list[Task]]:
    """The four probe sets, identical on every call."""
    rng = random.Random(seed)
    out: dict[str, list[Task]] = {}
    for name, minutes, fmt in SETS:
        tasks = []
        for i in range(n):
            template = rng.choice(st.TEMPLATES["calendar.create_event"]["train"])
            h, m = rng.randint(8, 19), rng.choice(minutes)
            day = rng.choice(st.WEEKDAYS)
            if fmt == 12:
                h12, ampm = h % 12 or 12, ("AM" if h < 12 else "PM")
                said = rng.choice([f"{h12}:{m:02d} {ampm}", f"{h12}:{m:02d}{ampm.lower()}"])
            else:
                said = f"{h:02d}:{m:02d}"
            who = rng.choice(st.NAMES["train"])
            prompt = template.format(name=who, when=f"on {day}", day=day, time=said)
            tasks.append(
                Task(
                    id=f"{name}-{i}",
                    prompt=prompt,
                    expected_tool="calendar.create_event",
                    expected_args={"attendee": who, "day": day, "time": f"{h:02d}:{m:02d}"},
                )
            )
        out[name] = tasks
    return out


def main() -> int:
    from workbench.config import Config
    from workbench.envs import env_for_config
    from workbench.eval import evaluate
    from workbench.models import load_policy
    from workbench.rollout.hf_generate import local_engine

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--adapter", action="append", required=True, help="a checkpoint's adapter folder (repeatable)"
    )
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--show", action="store_true", help="print every miss")
    args = ap.parse_args()
    cfg = Config(model=args.model, adapter="lora")
    sets = probe_sets(args.n)
    print("| adapter | " + " | ".join(sets) + " |")
    print("|---|" + "---|" * len(sets))
    for adapter in args.adapter:
        policy = load_policy(cfg.model, adapter="lora", adapter_path=adapter)
        cells: list[str] = []
        misses: list[Any] = []
        for tasks in sets.values():
            res = evaluate(
                local_engine(policy),
                policy.tokenizer,
                env_for_config(cfg),
                tasks,
                max_new_tokens=48,
                samples=0,
                stop_token_ids=policy.eos_token_ids,
            )
            cells.append(f"{res.metrics['success_rate']:.3f}")
            misses += [
                (r.task, r.output) for r, f in zip(res.rollouts, res.flags, strict=True) if not f["success"]
            ]
        print(f"| {adapter} | " + " | ".join(cells) + " |")
        if args.show:
            for task, output in misses:
                print(f"  {task.expected_args['time']} | {task.prompt} | {output[:100]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
