"""The verifier dry run says what it checked: how many rows of each kind (train, eval), and it is ok only
when it re-scored at least `min_rows` (a dry run of nothing once read "changed 0/0" and then "ok")."""

from __future__ import annotations

import pytest

import store
from workbench.verifier_edit import applicable_version, dry_run
from workbench.verifiers import builtin_verifier_code


def test_dry_run_rescores_train_and_eval_rows_and_counts_them(fake):
    db = store.open_db(fake.db_path)
    try:
        res = dry_run(db, fake.run_id, builtin_verifier_code("tool_call_verifier"), n=100, n_eval=50)
        assert res.ok and res.error is None
        assert res.summary["n"] == 52 and res.summary["by_kind"] == {"train": 48, "eval": 4}
        assert res.summary["by_split"] == {"train": 48, "held_out": 4}
        rescored = {r["trajectory_id"] for r in res.rows}
        evals = {
            r["id"] for r in store.trajectories.last_trajectories(db, fake.run_id, 100, split="held_out")
        }
        assert evals and evals <= rescored  # the eval rows are re-scored, not skipped
        assert applicable_version(db, fake.run_id, res.verifier_id)["id"] == res.verifier_id
    finally:
        db.conn.close()


def test_dry_run_of_too_few_rows_is_not_ok_and_cannot_be_applied(fake):
    db = store.open_db(fake.db_path)
    try:
        res = dry_run(db, fake.run_id, builtin_verifier_code("tool_call_verifier"), n=4, min_rows=8)
        assert not res.ok and res.summary["n"] == 4 and res.summary["min_rows"] == 8
        assert "at least 8" in res.error and "train 4, eval 0" in res.error
        assert res.verifier_id is not None and len(res.rows) == 4  # stored, shown, but not applicable
        with pytest.raises(ValueError, match="no successful dry run"):
            applicable_version(db, fake.run_id, res.verifier_id)
        store.trajectories.mark_superseded(db, fake.run_id, after_step=-1)
        empty = dry_run(db, fake.run_id, builtin_verifier_code("tool_call_verifier"), n=100, n_eval=50)
        assert (
            not empty.ok and empty.summary["n"] == 0 and "at least 1 " in empty.error
        )  # the engine's floor and empty.summary["by_kind"] == {"train": 0, "eval": 0}
    finally:
        db.conn.close()
