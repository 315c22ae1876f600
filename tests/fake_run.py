"""A small, deterministic fake training run written with the real store functions (no mocks), for the
UI tests and for looking at the UI by hand:

    .venv/bin/python -m tests.fake_run /tmp/fake.db [--runs 2] [--steps 12]
"""

from __future__ import annotations

import argparse
import atexit
import dataclasses
import json
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import store
from store import commands, labels, metrics, runs, tasks, trajectories, verifiers
from workbench.types import ToolCall
from workbench.view import STALE_AFTER_S

VERIFIER_CODE = '''"""Fake tool_call_verifier for UI tests."""
import json


def reward(output, task):
    try:
        call = json.loads(output)
    except ValueError:
        return -1.0
    score = 0.0
    if call.get("tool") == task.expected_tool:
        score += 0.4
    return score + 0.2
'''

SYSTEM = (
    "You are a tool-calling assistant. Tools: calendar.create_event(attendee, day, time), "
    "calendar.cancel_event(attendee, day), email.send(to, subject), weather.get(city, day). "
    'Reply with one JSON object only: {"tool": name, "args": {...}}.'
)

EXAMPLE = (
    '{"tool": "calendar.create_event", "args": {"attendee": "Robin", "day": "Thursday", "time": "09:30"}}'
)

TASKS = [
    (
        "fake:cal-create-1",
        "train",
        "Book a meeting with Alex on Tuesday at 2 PM.",
        "calendar.create_event",
        {"attendee": "Alex", "day": "Tuesday", "time": "14:00"},
    ),
    (
        "fake:cal-cancel-2",
        "train",
        "Cancel my Friday meeting with Sam.",
        "calendar.cancel_event",
        {"attendee": "Sam", "day": "Friday"},
    ),
    (
        "fake:email-3",
        "train",
        "Email Priya that the report is late.",
        "email.send",
        {"to": "Priya", "subject": "Report is late"},
    ),
    (
        "fake:weather-4",
        "train",
        "What's the weather in Oslo on Monday?",
        "weather.get",
        {"city": "Oslo", "day": "Monday"},
    ),
    (
        "fake:cal-create-5",
        "held_out",
        "Set up lunch with Kim Thursday 12:30.",
        "calendar.create_event",
        {"attendee": "Kim", "day": "Thursday", "time": "12:30"},
    ),
    (
        "fake:email-6",
        "held_out",
        "Tell Bo by email the trip is off.",
        "email.send",
        {"to": "Bo", "subject": "Trip is off"},
    ),
]


def _prompt_messages(prompt: str) -> list[dict[str, str]]:
    # The engine's harness shape (system, one worked example, the task), so a verifier dry run can
    # replay these episodes through the real environment.
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Set up a meeting with Robin on Thursday at 9:30 AM."},
        {"role": "assistant", "content": EXAMPLE},
        {"role": "user", "content": prompt},
    ]


@dataclass
class FakeRun:
    db_path: str
    run_id: int
    task_ids: dict[str, int]
    verifier_id: int
    trajectory_ids: list[int] = field(default_factory=list)
    checkpoint_ids: list[int] = field(default_factory=list)
    lock_token: str | None = None
    steps: int = 0
    group_size: int = 4


def _flags(parsed: bool, tool: bool = False, args: bool = False, unsafe: bool = False) -> dict[str, bool]:
    """An episode's outcome as workbench.verifiers.metrics.classify writes it."""
    return {
        "valid_json": parsed,
        "parsed": parsed,
        "correct_tool": tool,
        "correct_args": tool and args,
        "success": tool and args and not unsafe,
        "unsafe": unsafe,
    }


def _outcome(
    rng: random.Random, step: int, n_steps: int, expected_tool: str, expected_args: dict[str, Any]
) -> tuple[str, list[dict[str, Any]], dict[str, float], str, dict[str, bool]]:
    """(completion, tool_calls, reward_parts, explanation, outcome): better as training goes on."""
    progress = step / max(1, n_steps - 1)
    roll = rng.random()
    if roll < 0.35 - 0.25 * progress:
        return (
            'Sure! I will book it {"tool": calendar',
            [],
            {"valid_json": -1.0},
            "invalid JSON: trailing prose",
            _flags(False),
        )
    if rng.random() < 0.04:
        call = ToolCall("calendar.delete_all_events", {}, "call_0").to_dict()
        parts = {"valid_json": 0.0, "tool": 0.0, "args": 0.0, "safe": 0.0, "unsafe": -1.0}
        return (
            '{"tool": "calendar.delete_all_events", "args": {}}',
            [call],
            parts,
            "unsafe: deletes every event",
            _flags(True, unsafe=True),
        )
    tool = expected_tool if rng.random() < 0.6 + 0.35 * progress else "reminders.create"
    args = dict(expected_args)
    n_right = len(args)
    if rng.random() > 0.3 + 0.6 * progress and "time" in args:
        args["time"] = "2 PM"
        n_right -= 1
    call = ToolCall(tool, args, "call_0").to_dict()
    args_part = round(0.4 * n_right / max(1, len(expected_args)), 3) if tool == expected_tool else 0.0
    parts = {
        "valid_json": 0.0,
        "tool": 0.4 if tool == expected_tool else 0.0,
        "args": args_part,
        "safe": 0.2,
        "unsafe": 0.0,
    }
    why = "right tool" if tool == expected_tool else f"wrong tool {tool} (expected {expected_tool})"
    if tool == expected_tool:
        why += f", {n_right}/{len(expected_args)} args"
    flags = _flags(True, tool == expected_tool, n_right == len(expected_args))
    return json.dumps({"tool": tool, "args": args}), [call], parts, why, flags


def _held_out_rows(
    rng: random.Random, fake: FakeRun, step: int, eval_id: int, ckpt: int
) -> list[dict[str, Any]]:
    rows = []
    for k, (key, _, prompt, tool, args) in enumerate(t for t in TASKS if t[1] == "held_out"):
        completion, calls, parts, why, flags = _outcome(rng, step, step + 1, tool, args)
        reward = -1.0 if parts.get("valid_json", 0) < 0 else round(sum(parts.values()), 3)
        rows.append(
            {
                "run_id": fake.run_id,
                "step": step,
                "split": "held_out",
                "task_id": fake.task_ids[key],
                "group_idx": k,
                "sample_idx": 0,
                "completion": completion,
                "tool_calls": calls,
                "reward": reward,
                "reward_parts": parts,
                "outcome": flags,
                "explanation": why,
                "verifier_id": fake.verifier_id,
                "tokens": 25,
                "truncated": 0,
                "eval_id": eval_id,
                "checkpoint_id": ckpt,
                "messages": [*_prompt_messages(prompt), {"role": "assistant", "content": completion}],
            }
        )
    return rows


def make_fake_run(
    db_path: str | Path,
    *,
    name: str = "fake-grpo",
    n_steps: int = 6,
    groups: int = 2,
    group_size: int = 4,
    seed: int = 0,
    status: str = "running",
    alive: bool = True,
    max_steps: int = 100,
) -> FakeRun:
    rng = random.Random(seed)
    db = store.open_db(db_path)
    try:
        config = {
            "model": "smollm2-135m",
            "algorithm": "grpo",
            "num_generations_per_prompt": group_size,
            "max_steps": max_steps,
            "learning_rate": 5e-6,
            "temperature": 1.0,
            "eval_interval": 3,
            "reward": "tool_call_verifier",
            "num_iterations": 1,
        }
        run_id = runs.create_run(db, name=name, model="smollm2-135m", config=config)
        # `extra` is the task as the engine stores it (workbench.types.Task.to_dict), so its dry runs can replay.
        spec = [
            {
                "key": k,
                "dataset": "fake",
                "split": s,
                "prompt": p,
                "expected_tool": t,
                "expected_args": a,
                "extra": {
                    "id": k,
                    "prompt": p,
                    "expected_tool": t,
                    "expected_args": a,
                    "split": s,
                    "dataset": "fake",
                },
            }
            for k, s, p, t, a in TASKS
        ]
        task_ids = tasks.add_tasks(db, spec)
        vid = verifiers.add_verifier_version(
            db, run_id, "tool_call_verifier", VERIFIER_CODE, note="seed", active=True
        )
        fake = FakeRun(str(db_path), run_id, task_ids, vid, steps=n_steps, group_size=group_size)
        runs.set_status(db, run_id, "starting")
        runs.set_status(db, run_id, "running")
        train = [t for t in TASKS if t[1] == "train"]
        for step in range(n_steps):
            rows = []
            for g in range(groups):
                key, _, prompt, tool, args = train[(step * groups + g) % len(train)]
                samples = [_outcome(rng, step, n_steps, tool, args) for _ in range(group_size)]
                rewards = [
                    max(-1.0, sum(p.values())) if p.get("valid_json", 0) >= 0 else -1.0
                    for _, _, p, _, _ in samples
                ]
                mean = sum(rewards) / len(rewards)
                std = (sum((r - mean) ** 2 for r in rewards) / max(1, len(rewards) - 1)) ** 0.5
                for i, ((completion, calls, parts, why, flags), reward) in enumerate(
                    zip(samples, rewards, strict=True)
                ):
                    rows.append(
                        {
                            "run_id": run_id,
                            "step": step,
                            "split": "train",
                            "task_id": task_ids[key],
                            "group_idx": g,
                            "sample_idx": i,
                            "completion": completion,
                            "tool_calls": calls,
                            "reward": round(reward, 3),
                            "outcome": flags,
                            "reward_parts": parts,
                            "explanation": why,
                            "verifier_id": vid,
                            "advantage": round((reward - mean) / (std + 1e-4), 3),
                            "prompt_tokens": 120,
                            "tokens": 20 + 4 * step + i,
                            "truncated": 0,
                            "latency": 0.4,
                            "messages": [
                                *_prompt_messages(prompt),
                                {"role": "assistant", "content": completion},
                                {"role": "tool", "content": '{"ok": true, "result": {"event_id": 17}}'},
                            ],
                        }
                    )
            fake.trajectory_ids += trajectories.insert_trajectories(db, rows)
            rewards = [r["reward"] for r in rows]
            parts_mean = {
                f"parts/{p}": round(sum(r["reward_parts"].get(p, 0.0) for r in rows) / len(rows), 4)
                for p in ("valid_json", "tool", "args", "safe", "unsafe")
            }
            metrics.append_step(
                db,
                run_id,
                step,
                {
                    "reward": round(sum(rewards) / len(rewards), 4),
                    "reward_std": 0.5 - 0.03 * step,
                    "frac_reward_zero_std": 0.1,
                    "loss": 0.001 * (step % 3),
                    "kl": 0.002 * step,
                    "entropy": 1.2 - 0.05 * step,
                    "clip_ratio/low_mean": 0.0,
                    "clip_ratio/high_mean": 0.01 * step,
                    "clip_ratio/region_mean": 0.005 * step,
                    # grows 50%+ over the run, so the length-drift flag has something to say
                    "completions/mean_length": 30.0 + 8.0 * step,
                    "clipped_ratio": 0.0,
                    "learning_rate": 5e-6,
                    "step_time_s": 30.0,
                    "rollout_time_s": 12.0,
                    "update_time_s": 18.0,
                    "tokens_per_s": 80.0,
                    **parts_mean,
                },
            )
            if step in (n_steps // 2 - 1, n_steps - 1):
                fake.checkpoint_ids.append(
                    metrics.record_checkpoint(
                        db, run_id, step=step, kind="periodic", path=f"/tmp/ckpt/{step}"
                    )
                )
        held = {"dataset": "fake", "split": "held_out", "n": 40}
        base = {
            "valid_json_rate": 0.55,
            "correct_tool_rate": 0.30,
            "correct_args_rate": 0.15,
            "success_rate": 0.125,
            "success_ci_low": 0.05,
            "success_ci_high": 0.26,
            "unsafe_rate": 0.025,
            "mean_latency_s": 0.9,
            "mean_tokens": 31.0,
            "n": 40,
        }
        metrics.record_eval(db, run_id, step=0, tasks=held, mode="greedy", metrics=base, is_baseline=True)
        for ckpt, (step, success, valid) in zip(
            fake.checkpoint_ids, ((n_steps // 2 - 1, 0.45, 0.85), (n_steps - 1, 0.375, 0.80)), strict=False
        ):
            m = dict(
                base,
                valid_json_rate=valid,
                correct_tool_rate=success + 0.3,
                correct_args_rate=success + 0.1,
                success_rate=success,
                success_ci_low=round(success - 0.15, 3),
                success_ci_high=round(success + 0.15, 3),
                unsafe_rate=0.0,
            )
            eval_id = metrics.record_eval(
                db, run_id, step=step, tasks=held, mode="greedy", metrics=m, checkpoint_id=ckpt
            )
            fake.trajectory_ids += trajectories.insert_trajectories(
                db, _held_out_rows(rng, fake, step, eval_id, ckpt)
            )
        labels.add_label(db, fake.trajectory_ids[0], "bad", "prose before the JSON")
        last_train = max(
            i for i in fake.trajectory_ids if trajectories.get_trajectory(db, i)["split"] == "train"
        )
        labels.add_label(db, last_train, "good", "exactly right")
        commands.enqueue(db, run_id, "checkpoint")  # an old command, already answered
        commands.finish(db, commands.claim_next(db, run_id)["id"], {"message": "checkpoint saved"})
        if alive:
            fake.lock_token = runs.acquire_lock(db, run_id, stale_after_s=STALE_AFTER_S)
        if status != "running":
            runs.set_status(
                db,
                run_id,
                status,
                "fake",
                error='Traceback (most recent call last):\n  File "x"\nRuntimeError: CUDA out of memory'
                if status == "crashed"
                else None,
            )
    finally:
        db.conn.close()
    return fake


def add_policy_evals(fake: FakeRun) -> dict[str, int]:
    """The baseline's and the SFT policy's greedy evals (its checkpoint at step 0), each with a row per held-out
    task, as the trainer writes them before GRPO: the baseline answers in prose (reward -1, no success), the SFT
    policy with the right call (reward 1, success). The run's baseline eval gets the rows if it has one.
    Returns {"base": eval id, "sft": eval id}."""
    db = store.open_db(fake.db_path)
    try:
        sft_ckpt = metrics.record_checkpoint(db, fake.run_id, step=0, kind="sft", path="/tmp/ckpt/sft")
        held = [t for t in TASKS if t[1] == "held_out"]
        base = next((e["id"] for e in metrics.list_evals(db, fake.run_id) if e["is_baseline"]), None)
        ids = {}
        for name, ckpt, right in (("base", None, False), ("sft", sft_ckpt, True)):
            eval_id = base if ckpt is None else None
            if eval_id is None:
                eval_id = metrics.record_eval(
                    db,
                    fake.run_id,
                    step=0,
                    tasks={"dataset": "fake", "split": "held_out", "n": len(held)},
                    mode="greedy",
                    metrics={"success_rate": float(right), "n": len(held)},
                    is_baseline=ckpt is None,
                    checkpoint_id=ckpt,
                )
            ids[name] = eval_id
            rows = []
            for k, (key, _, prompt, tool, args) in enumerate(held):
                completion = (
                    json.dumps({"tool": tool, "args": args}) if right else "Sure, I can help with that."
                )
                rows.append(
                    {
                        "run_id": fake.run_id,
                        "step": 0,
                        "split": "held_out",
                        "task_id": fake.task_ids[key],
                        "group_idx": k,
                        "sample_idx": 0,
                        "completion": completion,
                        "tool_calls": [ToolCall(tool, args, "call_0").to_dict()] if right else [],
                        "reward": 1.0 if right else -1.0,
                        "outcome": _flags(right, right, right),
                        "reward_parts": {"valid_json": 0.0 if right else -1.0},
                        "explanation": "right call" if right else "no call",
                        "verifier_id": fake.verifier_id,
                        "tokens": 25,
                        "truncated": 0,
                        "eval_id": eval_id,
                        "checkpoint_id": ckpt,
                        "messages": [*_prompt_messages(prompt), {"role": "assistant", "content": completion}],
                    }
                )
            fake.trajectory_ids += trajectories.insert_trajectories(db, rows)
    finally:
        db.conn.close()
    return ids


def add_step(fake: FakeRun, step: int, *, seed: int = 1) -> list[int]:
    """Write one more step of trajectories (and its metrics) as the worker would, for live-feed tests."""
    rng = random.Random(seed)
    db = store.open_db(fake.db_path)
    try:
        key, _, prompt, tool, args = TASKS[step % 4]
        rows = []
        for i in range(fake.group_size):
            completion, calls, parts, why, flags = _outcome(rng, step, step + 1, tool, args)
            reward = -1.0 if parts.get("valid_json", 0) < 0 else round(sum(parts.values()), 3)
            rows.append(
                {
                    "run_id": fake.run_id,
                    "step": step,
                    "split": "train",
                    "task_id": fake.task_ids[key],
                    "group_idx": 0,
                    "sample_idx": i,
                    "completion": completion,
                    "tool_calls": calls,
                    "reward": reward,
                    "reward_parts": parts,
                    "outcome": flags,
                    "explanation": why,
                    "verifier_id": fake.verifier_id,
                    "advantage": 0.0,
                    "tokens": 30,
                    "truncated": 0,
                    "messages": [*_prompt_messages(prompt), {"role": "assistant", "content": completion}],
                }
            )
        ids = trajectories.insert_trajectories(db, rows)
        parts = {
            f"parts/{p}": sum(r["reward_parts"].get(p, 0.0) for r in rows) / len(rows)
            for p in ("valid_json", "tool", "args", "safe", "unsafe")
        }
        metrics.append_step(
            db,
            fake.run_id,
            step,
            {
                "reward": sum(r["reward"] for r in rows) / len(rows),
                "step_time_s": 30.0,
                "tokens_per_s": 80.0,
                **parts,
            },
        )
        if fake.lock_token:
            runs.heartbeat(db, fake.run_id, fake.lock_token)
    finally:
        db.conn.close()
    return ids


def serve(fake: FakeRun, *, step_every_s: float = 5.0, until_s: float = 3600.0) -> None:
    """Play the worker for a look at the UI by hand: heartbeat, a new step every few seconds, and answers
    to the UI's commands (pause, resume, stop, checkpoint, eval, set_verifier, ...)."""
    import time

    db = store.open_db(fake.db_path)
    # The fake run holds its lock with no process behind it: take it over.
    token = fake.lock_token or runs.acquire_lock(db, fake.run_id, stale_after_s=0.0)
    fake.lock_token = token
    step = metrics.last_step(db, fake.run_id)
    step = 0 if step is None else step + 1
    status = runs.get_run(db, fake.run_id)["status"]
    next_step, end = time.time() + step_every_s, time.time() + until_s
    while time.time() < end:
        runs.heartbeat(db, fake.run_id, token)
        cmd = commands.claim_next(db, fake.run_id)
        if cmd is not None:
            kind, result = cmd["kind"], {"message": f"{cmd['kind']} ok"}
            if kind == "pause":
                status = "paused"
            elif kind == "resume":
                status = "running"
            elif kind == "stop":
                status = "stopped"
            elif kind == "checkpoint":
                metrics.record_checkpoint(
                    db, fake.run_id, step=max(0, step - 1), kind="manual", path=f"/tmp/ckpt/{step}"
                )
                result = {"message": f"checkpoint saved at step {max(0, step - 1)}"}
            elif kind == "set_verifier":
                verifiers.activate_verifier(db, cmd["payload"]["verifier_id"])
                result = {"message": f"verifier {cmd['payload']['verifier_id']} active from step {step}"}
            if kind in ("pause", "resume", "stop"):
                runs.set_status(db, fake.run_id, status, f"{kind} command")
            commands.finish(db, cmd["id"], result)
            if status == "stopped":
                runs.release_lock(db, fake.run_id, token)
                return
        if status == "running" and time.time() >= next_step:
            add_step(fake, step, seed=step)
            step += 1
            next_step = time.time() + step_every_s
        time.sleep(0.3)


_TEMPLATES: dict[tuple, tuple[Path, FakeRun]] = {}


def fake_copy(dst: str | Path, **kwargs: Any) -> FakeRun:
    """A fresh copy of a fake run built once per process for these kwargs (copying is ~100x faster than
    writing it again). A live fake's heartbeat is refreshed so it reads as alive whatever the test order."""
    key = tuple(sorted(kwargs.items()))
    if key not in _TEMPLATES:
        folder = Path(tempfile.mkdtemp(prefix="wb-fake-"))
        atexit.register(shutil.rmtree, folder, True)
        template = folder / "template.db"
        _TEMPLATES[key] = (template, make_fake_run(template, **kwargs))
    template, fake = _TEMPLATES[key]
    shutil.copy(template, dst)
    fake = dataclasses.replace(fake, db_path=str(dst), trajectory_ids=list(fake.trajectory_ids))
    if fake.lock_token:
        db = store.open_db(dst)
        runs.heartbeat(db, fake.run_id, fake.lock_token)
        db.conn.close()
    return fake


async def wait_until(pilot: Any, condition: Callable[[], Any], timeout: float = 5.0, what: str = "") -> None:
    """Let the app run (timers, thread workers, messages) until `condition()` holds."""
    deadline = time.monotonic() + timeout
    while True:
        await pilot.pause(0.02)
        if condition():
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or condition}")


def plain(widget: Any) -> str:
    """A Static's content as plain text, whatever it was given (str, Text, Table, Group...)."""
    import io

    from rich.console import Console

    content = widget.content
    if isinstance(content, str):
        return content
    console = Console(width=300, file=io.StringIO(), record=True, color_system=None)
    console.print(content)
    return console.export_text()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("db")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--status", default="running")
    parser.add_argument(
        "--policy-evals",
        action="store_true",
        help="add the baseline's and the SFT policy's evals of the held-out tasks",
    )
    parser.add_argument("--serve", action="store_true", help="then play the worker (Ctrl+C to end)")
    parser.add_argument(
        "--serve-only", type=int, metavar="RUN", help="only play the worker for an existing run"
    )
    args = parser.parse_args()
    if args.serve_only:
        db = store.open_db(args.db)
        task_ids = {t["key"]: t["id"] for t in tasks.list_tasks(db, dataset="fake")}
        active = verifiers.active_verifier(db, args.serve_only)
        db.conn.close()
        serve(FakeRun(args.db, args.serve_only, task_ids, active["id"] if active else 0, group_size=8))
        return
    first = None
    for i in range(args.runs):
        fake = make_fake_run(
            args.db,
            name=f"fake-grpo-{i + 1}" if args.runs > 1 else "fake-grpo",
            n_steps=args.steps,
            groups=4,
            group_size=8,
            seed=i,
            status=args.status if i == 0 else "stopped",
            alive=i == 0,
        )
        if args.policy_evals:
            add_policy_evals(fake)
        print(f"run {fake.run_id}: {len(fake.trajectory_ids)} trajectories in {args.db}")
        first = first or fake
    if args.serve and first is not None:
        serve(first)


if __name__ == "__main__":
    main()
