"""A checkpoint's eval is wholly recorded or redone: a stop (or kill) inside any part of it leaves nothing of it,
a part-written one from before is superseded and redone, and a run that starts over keeps one SFT-only eval."""

from __future__ import annotations

import shutil
from pathlib import Path

import store
from tests.trainer_helpers import tiny_cfg
from workbench.run.recorder import expected_parts, missing_parts, part_name
from workbench.run.records import Eval
from workbench.trainer import Hooks, Trainer


class StopInTestEval(Hooks):
    """Asks for a stop the moment the n-th test-split eval starts decoding (after validation was computed)."""

    def __init__(self, nth: int) -> None:
        self.nth, self.seen, self.stop = nth, 0, False

    def attach(self, trainer: Trainer) -> None:
        original = trainer.evaluation.evaluate

        def evaluate(engine, **kw):
            if kw.get("tasks") is trainer.test_tasks:
                self.seen += 1
                self.stop = self.seen == self.nth
            return original(engine, **kw)

        trainer.evaluation.evaluate = evaluate

    def should_stop(self, trainer: Trainer) -> bool:
        return self.stop


def live_evals(db, run_id):
    return [Eval.from_row(e) for e in store.metrics.list_evals(db, run_id)]


def by_checkpoint(db, run_id):
    out: dict[int | None, list[str]] = {}
    for e in live_evals(db, run_id):
        out.setdefault(None if e.is_baseline else e.checkpoint_id, []).append(part_name(e))
    return out


def test_a_stop_inside_the_test_eval_records_nothing_of_that_checkpoint_and_resume_redoes_it(
    tiny_model, tmp_path, verifier_path
):  # noqa: F811
    db = store.open_db(tmp_path / "wb.db")
    cfg = tiny_cfg(tiny_model, tmp_path, verifier_path, sft_steps=2, max_steps=2, eval_interval=2)
    hooks = StopInTestEval(nth=2)  # 1: the baseline's test eval; 2: the SFT checkpoint's
    t = Trainer(cfg, db, hooks=hooks)
    hooks.attach(t)
    t.run()
    rid = t.run_id
    (sft,) = store.metrics.list_checkpoints(db, rid)
    assert sft["kind"] == "sft" and hooks.seen == 2
    # The SFT checkpoint's validation eval was computed before the stop; none of it may be recorded.
    assert sft["id"] not in by_checkpoint(db, rid)
    assert not [e for e in store.runs.events_since(db, rid) if e["kind"] == "promotion"]
    rows = db.execute(
        "SELECT COUNT(*) FROM trajectories WHERE run_id = ? AND checkpoint_id = ?", [rid, sft["id"]]
    ).fetchone()[0]
    assert rows == 0
    parts = expected_parts(sampled=False, test=True)
    assert by_checkpoint(db, rid) == {None: parts}  # the baseline, whole

    resumed = Trainer(cfg, db, run_id=rid)
    assert resumed.resume() == 0
    resumed.run()
    checkpoints = store.metrics.list_checkpoints(db, rid)
    assert [c["kind"] for c in checkpoints] == ["sft", "final"]
    got = by_checkpoint(db, rid)
    for key in (None, *(c["id"] for c in checkpoints)):  # one whole eval per checkpoint, each part once
        assert sorted(got[key]) == sorted(parts), key
        own = [e for e in live_evals(db, rid) if (None if e.is_baseline else e.checkpoint_id) == key]
        assert missing_parts(db, own, parts) == []
    decisions = [
        e["data"]["checkpoint_id"] for e in store.runs.events_since(db, rid) if e["kind"] == "promotion"
    ]
    assert decisions == [c["id"] for c in checkpoints]  # one decision per checkpoint


def test_a_part_written_eval_from_before_is_superseded_and_redone(tiny_model, tmp_path, verifier_path):  # noqa: F811
    db = store.open_db(tmp_path / "wb.db")
    cfg = tiny_cfg(tiny_model, tmp_path, verifier_path, sft_steps=2, max_steps=2, eval_interval=2)
    hooks = StopInTestEval(nth=2)
    t = Trainer(cfg, db, hooks=hooks)
    hooks.attach(t)
    t.run()
    rid = t.run_id
    (sft,) = store.metrics.list_checkpoints(db, rid)
    # What the old trainer left after a kill inside the eval: the validation metrics row, no rows, no test eval.
    half = store.metrics.record_eval(
        db,
        rid,
        step=0,
        tasks={"source": cfg.held_out_eval, "n": 3},
        mode="greedy",
        metrics={"success_rate": 0.5},
        checkpoint_id=sft["id"],
    )
    resumed = Trainer(cfg, db, run_id=rid)
    resumed.resume()
    assert db.execute("SELECT superseded FROM evals WHERE id = ?", [half]).fetchone()[0] == 1
    own = [e for e in live_evals(db, rid) if e.checkpoint_id == sft["id"]]
    assert half not in {e.id for e in own}
    assert missing_parts(db, own, expected_parts(sampled=False, test=True)) == []
    assert any("lacks" in e["message"] for e in store.runs.events_since(db, rid) if e["kind"] == "eval")


def test_a_run_that_starts_over_keeps_one_live_sft_only_eval(tiny_model, tmp_path, verifier_path):  # noqa: F811
    db = store.open_db(tmp_path / "wb.db")
    cfg = tiny_cfg(tiny_model, tmp_path, verifier_path, sft_steps=2, max_steps=2, eval_interval=2)
    hooks = StopInTestEval(nth=3)  # stop in the step-2 checkpoint's eval: the SFT eval is whole
    t = Trainer(cfg, db, hooks=hooks)
    hooks.attach(t)
    t.run()
    rid = t.run_id
    for c in store.metrics.list_checkpoints(db, rid):  # every checkpoint lost (a wiped run folder)
        shutil.rmtree(Path(c["path"]))
    resumed = Trainer(cfg, db, run_id=rid)
    assert resumed.resume() is None
    resumed.run()
    sft_only = [
        e
        for e in live_evals(db, rid)
        if e.step == 0 and not e.is_baseline and part_name(e) == "held_out greedy"
    ]
    assert len(sft_only) == 1
    assert [e.is_baseline for e in live_evals(db, rid) if part_name(e) == "held_out greedy"].count(True) == 1
