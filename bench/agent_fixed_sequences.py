"""How far a policy gets on builtin:calendar_agent without reading a single tool result.

    .venv/bin/python bench/agent_fixed_sequences.py [--splits held_out test] [--max-len 3]

A "fixed sequence" is the same list of calls for every task of a kind, its arguments filled from the
request alone (the person, days, time, city, subject and reminder text the prompt names) or from a few
constant times: what a policy that never reads a result can do. Every sequence of up to --max-len calls
from the vocabulary below (no call twice) is run through the World on each task of each kind and scored by
the agent_state verifier and the evaluation's success flag (workbench.verifiers.metrics.classify). Printed
per kind: the best sequence's success rate and its mean reward, and the best mean reward of any sequence.
The issue's bar: no fixed sequence above 0.5 success on any kind.

A reading policy (`reading_calls`: it lists the calendar, asks the forecast, and acts on what comes back)
is run through the real multi-turn episode as a check that every task is solvable by reading: it must
score 1.0 on all of them.
"""

from __future__ import annotations

import argparse
import itertools
import json
from collections.abc import Callable
from typing import Any

from workbench.domains.calendar import MULTI_TURN_TOOLS, World
from workbench.domains.calendar.agent_tasks import KINDS, MINUTES, generate
from workbench.envs import MultiTurnEnv
from workbench.types import Output, Task, ToolCall
from workbench.verifiers.agent_state import reward
from workbench.verifiers.metrics import classify

Slot = Callable[[dict[str, Any]], ToolCall | None]


def _need(*keys: str) -> Callable[[Callable[..., ToolCall]], Slot]:
    def wrap(make: Callable[..., ToolCall]) -> Slot:
        return lambda s: make(s) if all(k in s for k in keys) else None

    return wrap


def vocabulary(split: str) -> dict[str, Slot]:
    """Symbolic calls: name -> (the task's slots -> a call, or None when the request lacks an entity)."""
    const = [f"{h:02d}:{MINUTES[split][0]:02d}" for h in (9, 14)]  # two times of the split's own clock
    v: dict[str, Slot] = {
        "list()": lambda s: ToolCall("calendar.list_events", {}),
        "list(day1)": _need("day1")(lambda s: ToolCall("calendar.list_events", {"day": s["day1"]})),
        "weather(city,day1)": _need("city", "day1")(
            lambda s: ToolCall("weather.get", {"city": s["city"], "day": s["day1"]})
        ),
        "cancel(name,day1)": _need("name", "day1")(
            lambda s: ToolCall("calendar.cancel_event", {"attendee": s["name"], "day": s["day1"]})
        ),
        "cancel(name,day2)": _need("name", "day2")(
            lambda s: ToolCall("calendar.cancel_event", {"attendee": s["name"], "day": s["day2"]})
        ),
        "create(name,day1,time)": _need("name", "day1", "time")(
            lambda s: ToolCall(
                "calendar.create_event", {"attendee": s["name"], "day": s["day1"], "time": s["time"]}
            )
        ),
        "email(name,subject)": _need("name", "subject")(
            lambda s: ToolCall("email.send", {"to": s["name"], "subject": s["subject"]})
        ),
        "delete_all()": lambda s: ToolCall("calendar.delete_all_events", {}),
        "send_bulk()": lambda s: ToolCall("email.send_bulk", {"to_all": True}),
    }
    for c in const:
        v[f"create(name,day2,{c})"] = _need("name", "day2")(
            lambda s, c=c: ToolCall(
                "calendar.create_event", {"attendee": s["name"], "day": s["day2"], "time": c}
            )
        )
        v[f"create(name,day1,{c})"] = _need("name", "day1")(
            lambda s, c=c: ToolCall(
                "calendar.create_event", {"attendee": s["name"], "day": s["day1"], "time": c}
            )
        )
        v[f"remind(text,day1,{c})"] = _need("text", "day1")(
            lambda s, c=c: ToolCall("reminders.create", {"text": s["text"], "day": s["day1"], "time": c})
        )
    return v


def run_calls(task: Task, calls: list[ToolCall]) -> Output:
    """The Output a multi-turn episode that made exactly `calls` would hand the verifier."""
    world = World(task.initial_state, task.tools or MULTI_TURN_TOOLS)
    obs = [world.call(c) for c in calls]
    return Output(
        "" if calls else "I can't help with that.",
        tool_calls=list(calls),
        parse_error=None if calls else "no JSON object",
        unsafe=list(world.unsafe),
        executed=bool(calls) and not world.errors,
        observations=obs,
        state=world.state(),
    )


def best_fixed(
    tasks: list[tuple[Task, dict[str, Any]]], vocab: dict[str, Slot], max_len: int
) -> dict[str, Any]:
    """The sequence with the highest success rate on `tasks` (ties: higher mean reward), and the best mean."""
    names = [n for n in vocab if all(vocab[n](s) is not None for _, s in tasks)]  # calls this kind can fill
    best: dict[str, Any] = {"success": -1.0, "reward": -9.0, "seq": None}
    best_reward: dict[str, Any] = {"reward": -9.0, "seq": None}
    for n in range(max_len + 1):
        for seq in itertools.permutations(names, n):
            ok = total = 0.0
            for task, slots in tasks:
                out = run_calls(task, [vocab[c](slots) for c in seq])
                ok += classify(out, task)["success"]
                total += reward(out, task).total
            rate, mean = ok / len(tasks), total / len(tasks)
            if (rate, mean) > (best["success"], best["reward"]):
                best = {"success": rate, "reward": mean, "seq": list(seq)}
            if mean > best_reward["reward"]:
                best_reward = {"reward": mean, "seq": list(seq)}
    return {"best": best, "best_by_reward": best_reward, "vocabulary": len(names)}


def reading_calls(task: Task, slots: dict[str, Any], seen: list[dict[str, Any]]) -> ToolCall | None:
    """The next call of a policy that reads results: `seen` holds the observations so far; None = done."""
    kind, n = slots["kind"], len(seen)
    events = lambda: seen[0]["result"]["events"]  # noqa: E731 - the first look is always list_events here
    if kind in ("reschedule", "recover"):
        if n == 0:
            return ToolCall("calendar.list_events", {"day": slots["day1"]})
        [ev] = [e for e in events() if e["attendee"] == slots["name"]]
        step = [
            ToolCall("calendar.cancel_event", {"attendee": slots["name"], "day": slots["day1"]}),
            ToolCall(
                "calendar.create_event", {"attendee": slots["name"], "day": slots["day2"], "time": ev["time"]}
            ),
        ]
        return step[n - 1] if n <= 2 else None
    if kind == "conditional":
        if n == 0:
            return ToolCall("calendar.list_events", {"day": slots["day1"]})
        if n == 1:
            return ToolCall("weather.get", {"city": slots["city"], "day": slots["day1"]})
        [ev] = [e for e in events() if e["attendee"] == slots["name"]]
        if seen[1]["result"]["condition"] == "rain":
            step = [
                ToolCall("calendar.cancel_event", {"attendee": slots["name"], "day": slots["day1"]}),
                ToolCall(
                    "calendar.create_event",
                    {"attendee": slots["name"], "day": slots["day2"], "time": ev["time"]},
                ),
            ]
        else:
            step = [
                ToolCall(
                    "reminders.create", {"text": slots["text"], "day": slots["day1"], "time": ev["time"]}
                )
            ]
        return step[n - 2] if n - 2 < len(step) else None
    if kind in ("fanout", "clear_day"):
        if n == 0:
            return ToolCall("calendar.list_events", {"day": slots["day1"]})
        people = [e["attendee"] for e in events()]
        if n > len(people):
            return None
        if kind == "fanout":
            return ToolCall("email.send", {"to": people[n - 1], "subject": slots["subject"]})
        return ToolCall("calendar.cancel_event", {"attendee": people[n - 1], "day": slots["day1"]})
    if kind == "lookup":
        if n == 0:
            return ToolCall("calendar.list_events", {"day": slots["day1"]})
        busy = any(e["time"] == slots["time"] for e in events())
        return (
            None
            if busy or n > 1
            else ToolCall(
                "calendar.create_event",
                {"attendee": slots["name"], "day": slots["day1"], "time": slots["time"]},
            )
        )
    if kind == "ambiguity":
        if n == 0:
            return ToolCall("calendar.list_events", {})
        mine = [e for e in events() if e["attendee"] == slots["name"]]
        return (
            ToolCall("calendar.cancel_event", {"attendee": slots["name"], "day": mine[0]["day"]})
            if len(mine) == 1 and n == 1
            else None
        )
    raise ValueError(kind)


def run_reading(task: Task, slots: dict[str, Any], max_turns: int = 8) -> Output:
    """The reading policy through the real multi-turn episode (JSON harness replies, after the prefill)."""
    ep = MultiTurnEnv(max_turns=max_turns).start(task)
    seen: list[dict[str, Any]] = []
    while not ep.done:
        call = reading_calls(task, slots, seen)
        if call is None:
            call = ToolCall("finish", {"answer": "done"})
        text = json.dumps({"tool": call.name, "args": call.args})
        ep.step(text[len(ep.prefill) :] if text.startswith(ep.prefill) else text)
        if ep.observations and len(ep.observations) > len(seen):
            seen.append(ep.observations[-1])
    return ep.output()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--splits", nargs="+", default=["held_out", "test"], choices=["train", "held_out", "test"]
    )
    ap.add_argument("--max-len", type=int, default=3)
    args = ap.parse_args()
    for split in args.splits:
        tasks = generate(split)
        vocab = vocabulary(split)
        reading = [classify(run_reading(t, s), t)["success"] for t, s in tasks]
        print(f"\n{split}: {len(tasks)} tasks; reading policy success {sum(reading) / len(tasks):.3f}")
        print(
            f"{'kind':<12} {'n':>3} {'best fixed success':>19} {'its reward':>11} {'best reward':>12}  sequence"
        )
        for kind in KINDS:
            mine = [(t, s) for t, s in tasks if s["kind"] == kind]
            r = best_fixed(mine, vocab, args.max_len)
            b = r["best"]
            print(
                f"{kind:<12} {len(mine):>3} {b['success']:>19.3f} {b['reward']:>11.3f} "
                f"{r['best_by_reward']['reward']:>12.3f}  {' -> '.join(b['seq']) or '(no call)'}"
                f"  [reward: {' -> '.join(r['best_by_reward']['seq']) or '(no call)'}; {r['vocabulary']} calls]"
            )


if __name__ == "__main__":
    main()
