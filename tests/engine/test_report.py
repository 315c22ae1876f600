"""`workbench report`'s answer to "what do I deploy": the last line names the promoted checkpoint's folder and
why, and the footnote states the part of the promotion rule that applied to the starred row."""

from __future__ import annotations

from pathlib import Path

import pytest

import store
from workbench.cli import main

TASKS = [f"t{i}" for i in range(40)]


def _run(tmp_path: Path, solved: dict[str, int]) -> tuple[str, int, dict[str, int]]:
    """A run with greedy validation evals of the baseline and each named checkpoint ("sft" at step 0,
    "periodic" at step 4 and 8), each solving the first `solved[name]` of 40 tasks; returns checkpoint ids."""
    db_path = str(tmp_path / "wb.db")
    db = store.open_db(db_path)
    rid = store.runs.create_run(db, name="r", model="m", config={})
    ids = {}
    for name, n in solved.items():
        kind, step = (
            ("sft", 0) if name == "sft" else ("periodic", int(name[1:])) if name != "base" else (None, 0)
        )
        folder = tmp_path / f"ck-{name}"
        folder.mkdir()
        ck = (
            store.metrics.record_checkpoint(db, rid, step=step, kind=kind, path=str(folder)) if kind else None
        )
        if ck:
            ids[name] = ck
        metrics = {
            "success_rate": n / 40,
            "unsafe_rate": 0.0,
            "solved": {t: float(i < n) for i, t in enumerate(TASKS)},
        }
        store.metrics.record_eval(
            db,
            rid,
            step=step,
            tasks={"n": 40, "split": "validation"},
            mode="greedy",
            metrics=metrics,
            checkpoint_id=ck,
            is_baseline=kind is None,
        )
    db.conn.close()
    return db_path, rid, ids


def _report(db_path: str, rid: int, capsys: pytest.CaptureFixture[str]) -> list[str]:
    assert main(["report", "--db", db_path, "--run", str(rid), "--events", "0"]) == 0
    return capsys.readouterr().out.splitlines()


def test_sft_only_promoted_reads_as_compared_with_the_baseline_only(tmp_path, capsys) -> None:
    db_path, rid, ids = _run(tmp_path, {"base": 2, "sft": 30, "s4": 31, "s8": 31})
    db = store.open_db(db_path)
    store.metrics.promote_checkpoint(db, ids["sft"])
    store.runs.add_event(db, rid, "promotion", "step 0: promoted: vs base +70pp [+55, +85]")
    store.runs.add_event(
        db, rid, "promotion", "step 4: not promoted: vs SFT-only +2pp [+0, +8]: not clearly better"
    )
    store.runs.add_event(
        db, rid, "promotion", "step 8: not promoted: vs SFT-only +2pp [+0, +8]: not clearly better"
    )
    for i in range(250):  # older than the last 200 events the report used to search
        store.runs.add_event(db, rid, "sft", f"SFT step {i}: loss 0.1")
    db.conn.close()
    lines = _report(db_path, rid, capsys)
    foot = next(line for line in lines if line.startswith("* promoted"))
    assert "the SFT-only checkpoint, so compared with the baseline only" in foot
    assert "than SFT-only" not in foot.split(";")[0]  # the old footnote said it beat itself
    assert lines[-1] == (
        f"deploy: {tmp_path / 'ck-sft'} (sft @ step 0, promoted on validation: vs base +70pp "
        "[+55, +85]; later: step 8: not promoted: vs SFT-only +2pp [+0, +8]: not clearly better)"
    )


def test_grpo_checkpoint_promoted_says_it_beat_sft_only_and_a_missing_folder_is_flagged(
    tmp_path, capsys
) -> None:
    db_path, rid, ids = _run(tmp_path, {"base": 2, "sft": 10, "s4": 30})
    (tmp_path / "ck-s4").rmdir()
    db = store.open_db(db_path)
    store.metrics.promote_checkpoint(db, ids["sft"])
    store.metrics.promote_checkpoint(db, ids["s4"])
    store.runs.add_event(
        db, rid, "promotion", "step 4: promoted: vs base +70pp [+55, +85]; vs SFT-only +50pp [+35, +65]"
    )
    db.conn.close()
    lines = _report(db_path, rid, capsys)
    foot = next(line for line in lines if line.startswith("* promoted"))
    assert (
        "clearly better than SFT-only" in foot
        and "more successful than the checkpoint promoted before" in foot
    )
    assert lines[-1].startswith(
        f"deploy: {tmp_path / 'ck-s4'} [not on this machine] (periodic @ step 4, promoted"
    )
    assert lines[-1].endswith("vs SFT-only +50pp [+35, +65])")


def test_nothing_promoted_says_so_with_the_last_decision(tmp_path, capsys) -> None:
    db_path, rid, _ = _run(tmp_path, {"base": 2})
    assert _report(db_path, rid, capsys)[-1].startswith(f"deploy: nothing yet from run {rid}")
    (tmp_path / "b").mkdir()
    db_path, rid, _ = _run(tmp_path / "b", {"base": 2, "sft": 3})
    db = store.open_db(db_path)
    store.runs.add_event(
        db, rid, "promotion", "step 0: not promoted: vs base +2pp [-3, +8]: not clearly better"
    )
    db.conn.close()
    lines = _report(db_path, rid, capsys)
    assert lines[-1] == (
        f"deploy: nothing from run {rid}: no checkpoint passed the promotion rule "
        "(last: step 0: not promoted: vs base +2pp [-3, +8]: not clearly better)"
    )
    assert next(line for line in lines if line.startswith("* promoted")).endswith(
        "no checkpoint of this run passed"
    )
