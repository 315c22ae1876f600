"""Held-out metrics: per-task success, the CI over tasks, paired differences, and `workbench report`."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

import store
from workbench.cli import main
from workbench.eval import bootstrap_ci, paired_difference, solved_by_task, summarize


def flags(success: bool) -> dict[str, bool]:
    return {
        "valid_json": True,
        "parsed": True,
        "correct_tool": success,
        "correct_args": success,
        "success": success,
        "unsafe": False,
    }


def rollout(task_id: str) -> SimpleNamespace:
    return SimpleNamespace(
        task=SimpleNamespace(id=task_id), latency_s=0.1, completion_tokens=10, truncated=False
    )


def test_solved_is_per_task_and_the_ci_resamples_tasks() -> None:
    # Sampled eval: task a solved 2 of 2, task b 0 of 2. Resampling tasks, a mean is 0, 0.5 or 1.
    rs = [rollout("a"), rollout("a"), rollout("b"), rollout("b")]
    fs = [flags(True), flags(True), flags(False), flags(False)]
    assert solved_by_task(rs, fs) == {"a": 1.0, "b": 0.0}
    m = summarize(rs, fs)
    assert m["success_rate"] == 0.5 and m["solved"] == {"a": 1.0, "b": 0.0}
    assert (m["success_ci_low"], m["success_ci_high"]) == bootstrap_ci([1.0, 0.0]) == (0.0, 1.0)


def test_paired_difference_uses_only_shared_tasks_and_counts_discordant_pairs() -> None:
    d = paired_difference({"a": 1.0, "b": 1.0, "c": 0.0}, {"a": 0.0, "b": 1.0, "c": 1.0, "d": 1.0})
    assert d is not None
    assert (d.delta, d.n_tasks, d.only_candidate, d.only_reference) == (0.0, 3, 1, 1)
    assert d.ci_low < 0 < d.ci_high and not d.clearly_better
    assert paired_difference({"a": 1.0}, {"b": 1.0}) is None


def test_paired_difference_is_clear_when_the_candidate_wins_most_pairs() -> None:
    ref = {f"t{i}": float(i < 10) for i in range(40)}  # solves 10 of 40
    cand = {f"t{i}": float(i < 25) for i in range(40)}  # the same 10 and 15 more
    d = paired_difference(cand, ref)
    assert d is not None and d.delta == pytest.approx(15 / 40)
    assert d.only_candidate == 15 and d.only_reference == 0
    assert d.ci_low > 0 and d.clearly_better  # every resample has a positive mean: no pair goes the other way


def test_report_shows_paired_differences_to_base_and_sft(tmp_path, capsys) -> None:
    db = store.open_db(tmp_path / "wb.db")
    rid = store.runs.create_run(db, name="r", model="m", config={})
    tasks = [f"t{i}" for i in range(20)]

    def record(step: int, n_solved: int, kind: str | None) -> None:
        solved = {t: float(i < n_solved) for i, t in enumerate(tasks)}
        ck = (
            store.metrics.record_checkpoint(db, rid, step=step, kind=kind, path=str(tmp_path))
            if kind
            else None
        )
        metrics = {
            "valid_json_rate": 1.0,
            "correct_tool_rate": 1.0,
            "correct_args_rate": 1.0,
            "unsafe_rate": 0.0,
            "success_rate": n_solved / 20,
            "success_ci_low": 0.0,
            "success_ci_high": 1.0,
            "mean_tokens": 9.0,
            "solved": solved,
        }
        store.metrics.record_eval(
            db,
            rid,
            step=step,
            tasks={"n": 20},
            mode="greedy",
            metrics=metrics,
            checkpoint_id=ck,
            is_baseline=kind is None,
        )

    record(0, 0, None)
    record(0, 6, "sft")
    record(10, 12, "periodic")
    assert main(["report", "--db", str(tmp_path / "wb.db"), "--run", str(rid)]) == 0
    out = capsys.readouterr().out
    lo, hi = bootstrap_ci([1.0] * 6 + [0.0] * 14)  # sft vs base: 6 of 20 more, all one way
    assert f"+0.30 [{lo:+.2f}, {hi:+.2f}]" in out and lo > 0
    assert main(["report", "--db", str(tmp_path / "wb.db"), "--run", str(rid), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["vs_base"] is None for r in rows] == [True, False, False]
    assert [r["vs_sft"] is None for r in rows] == [True, True, False]
    assert rows[2]["vs_sft"]["delta"] == pytest.approx(0.30) and rows[2]["vs_sft"]["only_candidate"] == 6
    assert rows[2]["vs_base"]["delta"] == pytest.approx(0.60)


def test_report_shows_test_beside_validation_with_skills_and_why_promoted(tmp_path, capsys) -> None:
    db = store.open_db(tmp_path / "wb.db")
    rid = store.runs.create_run(db, name="r", model="m", config={})
    tasks = [f"t{i}" for i in range(20)]

    def record(step, n_solved, kind, split, twelve_hour):
        solved = {t: float(i < n_solved) for i, t in enumerate(tasks)}
        ck = (
            store.metrics.record_checkpoint(db, rid, step=step, kind=kind, path=str(tmp_path))
            if kind
            else None
        )
        metrics = {
            "success_rate": n_solved / 20,
            "unsafe_rate": 0.0,
            "solved": solved,
            "by_skill": {
                "tool:calendar.create_event": {"n": 20, "success": n_solved / 20},
                "time_12h": {"n": 8, "success": twelve_hour},
            },
        }
        store.metrics.record_eval(
            db,
            rid,
            step=step,
            tasks={"n": 20, "split": split},
            mode="greedy",
            metrics=metrics,
            checkpoint_id=ck,
            is_baseline=kind is None,
        )
        return ck

    record(0, 2, None, "validation", 0.125)
    record(0, 3, None, "test", 0.25)
    ck = record(10, 18, "periodic", "validation", 0.875)
    store.metrics.promote_checkpoint(db, ck)
    store.runs.add_event(db, rid, "promotion", "step 10: promoted: vs base +80pp [+60, +95]")
    assert main(["report", "--db", str(tmp_path / "wb.db"), "--run", str(rid)]) == 0
    out = capsys.readouterr().out
    assert "validation (decides promotion)" in out and "test (reported only" in out
    assert "validation: success per skill" in out and "12-hour times" in out and "0.88" in out
    assert out.splitlines()[-1].endswith(
        "(periodic @ step 10, promoted on validation: vs base +80pp [+60, +95])"
    )
    assert main(["report", "--db", str(tmp_path / "wb.db"), "--run", str(rid), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["split"], r["label"]) for r in rows] == [
        ("validation", "base"),
        ("validation", "periodic @ step 10"),
        ("test", "base"),
    ]


def test_no_call_accuracy_and_parallel_success_count_their_own_families(tmp_path, capsys) -> None:
    from workbench.types import Output, Task, ToolCall
    from workbench.verifiers.metrics import classify

    def task(tid: str, tool: str | None, args: dict | None = None, calls: list | None = None) -> Task:
        return Task(id=tid, prompt=tid, expected_tool=tool, expected_args=args or {}, expected_calls=calls)

    def call(name: str, **args: str) -> ToolCall:
        return ToolCall(name, dict(args))

    pair = [
        {"name": "weather.get", "arguments": {"city": "Oslo"}},
        {"name": "weather.get", "arguments": {"city": "Lima"}},
    ]
    cases = [  # (task, the policy's output)
        (task("none-a", None), Output("Happy to help, no tool needed.")),  # no call: right
        (task("none-b", None), Output("x", tool_calls=[call("email.send", to="bob")])),  # called: wrong
        (task("none-c", None), Output("I can't do that.", parse_error="no tool call")),  # no call: right
        (task("none-d", None), Output("Done.")),  # no call: right
        (
            task("par-a", None, calls=pair),
            Output("x", tool_calls=[call("weather.get", city="Lima"), call("weather.get", city="Oslo")]),
        ),  # any order
        (
            task("par-b", None, calls=pair),
            Output("x", tool_calls=[call("weather.get", city="Oslo")]),
        ),  # one of two
        (
            task("one", "weather.get", {"city": "Oslo"}),
            Output("x", tool_calls=[call("weather.get", city="Oslo")]),
        ),
    ]
    rs = [SimpleNamespace(task=t, latency_s=0.1, completion_tokens=10, truncated=False) for t, _ in cases]
    fs = [classify(o, t) for t, o in cases]
    m = summarize(rs, fs)
    assert m["no_call_accuracy"] == pytest.approx(3 / 4) and m["no_call_n"] == 4
    assert m["parallel_success"] == pytest.approx(0.5) and m["parallel_n"] == 2
    assert m["success_rate"] == pytest.approx(5 / 7)  # both families and the plain task, together

    # A split with neither family: None (not 0), so it never reads as "never abstains".
    plain = summarize(rs[-1:], fs[-1:])
    assert plain["no_call_accuracy"] is None and plain["parallel_success"] is None
    assert plain["no_call_n"] == plain["parallel_n"] == 0

    # `workbench report` shows them (and "-" where the split has none).
    db = store.open_db(tmp_path / "wb.db")
    rid = store.runs.create_run(db, name="r", model="m", config={})
    store.metrics.record_eval(
        db,
        rid,
        step=0,
        tasks={"n": 7},
        mode="greedy",
        is_baseline=True,
        metrics={k: v for k, v in m.items() if k != "by_skill"},
    )
    assert main(["report", "--db", str(tmp_path / "wb.db"), "--run", str(rid)]) == 0
    out = capsys.readouterr().out
    base = next(line for line in out.splitlines() if "│ base" in line)
    assert [c.strip() for c in base.split("│")][7:9] == ["0.75", "0.50"], (
        base
    )  # the "no call", "parallel" cells
    assert main(["report", "--db", str(tmp_path / "wb.db"), "--run", str(rid), "--json"]) == 0
    row = json.loads(capsys.readouterr().out)[0]
    assert row["no_call_accuracy"] == 0.75 and row["parallel_success"] == 0.5
