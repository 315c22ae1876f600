"""How likely a checkpoint is to act after a look, rather than finish: what decides whether GRPO can sample (and
so learn) a multi-step path on builtin:calendar_agent.

    .venv/bin/python bench/act_after_look.py ADAPTER_DIR [--tasks val28.jsonl] [--threads 1]

For each validation task whose kind needs an action after looking (reschedule, conditional, fanout, clear_day),
the episode is started in the built-in multi-turn env, a gold look is played (`calendar.list_events` for the
request's day; `weather.get` for a conditional's city and day), and one forward gives the next turn's first
token after the JSON prefill. `finish`'s first token differs from every other tool name's, so
P(act) = 1 - P(that token). Reported per kind, at temperature 1 (sampling at 0.8 makes it smaller still).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from workbench.domains.calendar import WEEKDAYS  # noqa: E402
from workbench.domains.calendar.agent_tasks import task_kind  # noqa: E402
from workbench.envs.multi_turn import FINISH, MultiTurnEnv  # noqa: E402
from workbench.models import load_policy  # noqa: E402
from workbench.rollout.prompt import render_prompt  # noqa: E402
from workbench.tasks import load_task_source  # noqa: E402

KINDS = ("reschedule", "conditional", "fanout", "clear_day")


def look_for(task: object, kind: str) -> dict:
    """The gold look of a task: the request's first weekday's calendar, or a conditional's forecast."""
    prompt = task.prompt  # type: ignore[attr-defined]
    day = min((prompt.index(d), d) for d in WEEKDAYS if d in prompt)[1]
    if kind == "conditional":
        city = prompt.split(" in ", 1)[1].split(" on ", 1)[0]
        return {"tool": "weather.get", "args": {"city": city, "day": day}}
    return {"tool": "calendar.list_events", "args": {"day": day}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("adapter", help="a checkpoint's adapter folder (step-NNNNN-*/adapter)")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--tasks", default="builtin:calendar_agent", help="validation tasks (default: all 140)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    policy = load_policy(args.model, adapter_path=args.adapter, target_modules="all-linear")
    tok, model = policy.tokenizer, policy.model.eval()
    finish_first = tok(FINISH, add_special_tokens=False)["input_ids"][0]
    env = MultiTurnEnv()
    by_kind: dict[str, list[float]] = defaultdict(list)
    for task in load_task_source(args.tasks, "held_out"):
        kind = task_kind(task)
        if kind not in KINDS:
            continue
        ep = env.start(task)
        ep.step(json.dumps(look_for(task, kind))[len(ep.prefill) :])
        if not ep.observations[-1].get("ok"):
            raise SystemExit(f"{task.id}: the gold look failed: {ep.observations[-1]}")
        with torch.no_grad():
            logits = model(torch.tensor([render_prompt(tok, ep.messages, ep.prefill)])).logits[0, -1]
        by_kind[kind].append(1.0 - torch.softmax(logits.float(), -1)[finish_first].item())
    print(json.dumps({k: {"n": len(v), "p_act": sum(v) / len(v)} for k, v in by_kind.items()}, indent=1))


if __name__ == "__main__":
    main()
