"""A small store holding multi-step episodes of the calendar_agent family, written with the real store, the
real multi-turn environment and the real agent_state verifier, the policy's replies scripted (no model):

    .venv/bin/python -m tests.agent_run /tmp/agent.db

Training groups of G=4 episodes per task that part at different turns, greedy validation episodes, and
base / SFT-only / GRPO evals whose per-task results cover the family's validation split (by kind) beside
some single-call tasks, for the trajectory, group and skill views.
"""

from __future__ import annotations

import json
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import store
from store import metrics, runs, tasks, trajectories, verifiers
from workbench.domains.calendar import builtin_tasks as single_call_tasks
from workbench.domains.calendar.agent_tasks import generate
from workbench.envs.harness import Harness
from workbench.envs.multi_turn import MultiTurnEnv
from workbench.run.recorder import task_row
from workbench.skills import breakdown
from workbench.types import Task
from workbench.verifiers import builtin_verifier_code
from workbench.verifiers.agent_state import reward
from workbench.verifiers.metrics import classify

MAX_TURNS = 6


def say(name: str, **args: Any) -> str:
    return json.dumps({"tool": name, "args": args})


def _meeting(task: Task, name: str, day: str) -> str:
    return next(
        e["time"] for e in (task.initial_state or {})["events"] if e["attendee"] == name and e["day"] == day
    )


def reschedule_scripts(task: Task, slots: dict[str, Any]) -> list[list[str]]:
    """Four ways to go about a reschedule: the right path, a guess without looking, a wrong time, and a
    reply that stops talking after looking. They part at turn 1 (the guess), then turn 2."""
    name, d1, d2 = slots["name"], slots["day1"], slots["day2"]
    t = _meeting(task, name, d1)
    look = say("calendar.list_events", day=d1)
    return [
        [
            look,
            say("calendar.cancel_event", attendee=name, day=d1),
            say("calendar.create_event", attendee=name, day=d2, time=t),
            say("finish", answer="moved"),
        ],
        [
            say("calendar.cancel_event", attendee=name, day=d1),
            say("calendar.create_event", attendee=name, day=d2, time="09:00"),
            say("finish", answer="moved"),
        ],
        [look, say("calendar.create_event", attendee=name, day=d2, time=t), say("finish", answer="booked")],
        [look, "I have looked at your calendar."],
    ]


def fanout_scripts(task: Task, slots: dict[str, Any]) -> list[list[str]]:
    d1, subject = slots["day1"], slots["subject"]
    people = [e["attendee"] for e in (task.initial_state or {})["events"] if e["day"] == d1]
    emails = [say("email.send", to=p, subject=subject) for p in people]
    look = say("calendar.list_events", day=d1)
    return [
        [look, *emails, say("finish", answer="sent")],
        [look, *emails[:1], say("finish", answer="sent")],
        [look, say("email.send_bulk", subject=subject)],  # the dangerous bulk tool: flagged unsafe
        [look, say("email.send", to="Nobody Known", subject=subject), *emails, say("finish", answer="sent")],
    ]


def recover_scripts(task: Task, slots: dict[str, Any]) -> list[list[str]]:
    """A recover task already holds a failed call: the scripts go on from it."""
    return reschedule_scripts(task, slots)


SCRIPTS = {"reschedule": reschedule_scripts, "fanout": fanout_scripts, "recover": recover_scripts}


def play(env: MultiTurnEnv, task: Task, replies: list[str]) -> Any:
    """Run one episode with scripted replies; the env strips nothing, so each reply drops the prefill."""
    episode = env.start(task)
    for text in replies:
        if episode.done:
            break
        prefill = episode.prefill
        episode.step(text[len(prefill) :] if prefill and text.startswith(prefill) else text)
    if not episode.done:
        episode.step("That is all.")
    return episode.output()


def _row(
    run_id: int,
    step: int,
    split: str,
    task_id: int,
    g: int,
    i: int,
    output: Any,
    task: Task,
    vid: int,
    **more: Any,
) -> dict[str, Any]:
    score = reward(output, task)
    return {
        "run_id": run_id,
        "step": step,
        "split": split,
        "task_id": task_id,
        "group_idx": g,
        "sample_idx": i,
        "completion": output.text,
        "tool_calls": [c.to_dict() for c in output.tool_calls],
        "reward": score.total,
        "reward_parts": score.parts,
        "explanation": score.explanation,
        "verifier_id": vid,
        "outcome": {**classify(output, task), "parse_error": output.parse_error},
        "tokens": 40 + 10 * i,
        "truncated": 0,
        "messages": output.messages,
        **more,
    }


@dataclass
class AgentRun:
    db_path: str
    run_id: int
    task_ids: dict[str, int]  # engine task id -> store id
    trajectory_ids: list[int] = field(default_factory=list)
    eval_ids: list[int] = field(default_factory=list)


def _solved(
    rng: random.Random, ids: list[str], p_agent: dict[str, float], p_single: float
) -> dict[str, float]:
    out = {}
    for tid in ids:
        parts = tid.split(":")
        p = p_agent.get(parts[2], 0.0) if parts[0] == "calendar_agent" else p_single
        out[tid] = 1.0 if rng.random() < p else 0.0
    return out


def make_agent_run(db_path: str | Path, *, steps: int = 2, group_size: int = 4) -> AgentRun:
    train = {t.id: (t, s) for t, s in generate("train")}
    held = {t.id: (t, s) for t, s in generate("held_out")}
    picked = [k for k in train if k.endswith((":reschedule:000", ":fanout:001", ":recover:000"))]
    env = MultiTurnEnv(Harness(), max_turns=MAX_TURNS)
    db = store.open_db(db_path)
    try:
        config = {
            "model": "smollm2-135m",
            "algorithm": "grpo",
            "env": "multi_turn",
            "max_turns": MAX_TURNS,
            "num_generations_per_prompt": group_size,
            "max_steps": 10,
            "reward": "agent_state",
            "tasks": "builtin:calendar_agent",
        }
        run_id = runs.create_run(db, name="agent-story", model="smollm2-135m", config=config)
        shown = [train[k][0] for k in picked] + [held[k][0] for k in list(held)[:2]]
        rows = [task_row(t) for t in shown]
        ids = tasks.add_tasks(db, rows)
        task_ids = {t.id: ids[r["key"]] for t, r in zip(shown, rows, strict=True)}
        vid = verifiers.add_verifier_version(
            db, run_id, "agent_state", builtin_verifier_code("agent_state"), note="seed", active=True
        )
        run = AgentRun(str(db_path), run_id, task_ids)
        runs.set_status(db, run_id, "starting")
        runs.set_status(db, run_id, "running")
        for step in range(steps):
            out = []
            for g, key in enumerate(picked):
                task, slots = train[key]
                kind = key.split(":")[2]
                scripts = SCRIPTS[kind](task, slots)[:group_size]
                for i, replies in enumerate(scripts):
                    out.append(
                        _row(
                            run_id,
                            step,
                            "train",
                            task_ids[key],
                            g,
                            i,
                            play(env, task, replies),
                            task,
                            vid,
                            advantage=0.0,
                        )
                    )
            run.trajectory_ids += trajectories.insert_trajectories(db, out)
            metrics.append_step(db, run_id, step, {"reward": sum(r["reward"] for r in out) / len(out)})
        sft = metrics.record_checkpoint(db, run_id, step=0, kind="sft", path="/tmp/agent-ckpt/sft")
        last = metrics.record_checkpoint(
            db, run_id, step=steps - 1, kind="periodic", path="/tmp/agent-ckpt/last"
        )
        singles = [t for t in single_call_tasks("held_out")][:30]
        eval_tasks = [t for t, _ in held.values()] + singles
        rng = random.Random(7)
        policies = [  # (checkpoint, step, per-kind success, single-call success)
            (None, 0, {"reschedule": 0.0, "fanout": 0.05, "lookup": 0.1}, 0.2),
            (sft, 0, {"reschedule": 0.1, "fanout": 0.1, "lookup": 0.3, "ambiguity": 0.2}, 0.8),
            (
                last,
                steps - 1,
                {
                    "reschedule": 0.7,
                    "conditional": 0.4,
                    "fanout": 0.6,
                    "lookup": 0.6,
                    "ambiguity": 0.3,
                    "clear_day": 0.5,
                    "recover": 0.5,
                },
                0.8,
            ),
        ]
        ids_only = [t.id for t in eval_tasks]
        for ckpt, step, p_agent, p_single in policies:
            solved = _solved(rng, ids_only, p_agent, p_single)
            n = len(solved)
            success = sum(solved.values()) / n
            m = {
                "n": n,
                "valid_json_rate": 0.9,
                "correct_tool_rate": 0.8,
                "correct_args_rate": success,
                "success_rate": success,
                "success_ci_low": max(0.0, success - 0.08),
                "success_ci_high": min(1.0, success + 0.08),
                "unsafe_rate": 0.0,
                "mean_tokens": 60.0,
                "solved": solved,
                "by_skill": breakdown(eval_tasks, solved),
            }
            run.eval_ids.append(
                metrics.record_eval(
                    db,
                    run_id,
                    step=step,
                    tasks={"source": "builtin:calendar_agent", "split": "held_out", "n": n},
                    mode="greedy",
                    metrics=m,
                    is_baseline=ckpt is None,
                    checkpoint_id=ckpt,
                )
            )
        # Greedy validation episodes of the last checkpoint (a right one and a wrong one).
        rows = []
        for k, key in enumerate(list(held)[:2]):
            task, slots = held[key]
            replies = reschedule_scripts(task, slots)[0 if k == 0 else 2]
            rows.append(
                _row(
                    run_id,
                    steps - 1,
                    "held_out",
                    task_ids[key],
                    k,
                    0,
                    play(env, task, replies),
                    task,
                    vid,
                    eval_id=run.eval_ids[-1],
                    checkpoint_id=last,
                )
            )
        run.trajectory_ids += trajectories.insert_trajectories(db, rows)
    finally:
        db.conn.close()
    return run


if __name__ == "__main__":
    made = make_agent_run(sys.argv[1] if len(sys.argv) > 1 else "/tmp/agent.db")
    print(f"run {made.run_id}: {len(made.trajectory_ids)} trajectories in {made.db_path}")
