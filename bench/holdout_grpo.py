"""Recipe experiment (validation only, no test split): SFT on 2/3 of the train phrasing templates, GRPO only
on requests from the other 1/3, which SFT never saw, so GRPO's groups have reward variance to learn from.
CONFIG must say `test_tasks: none`: a recipe experiment is decided on validation. docs/results.md ("holdout")
used workbench/data/demo.yaml with `max_steps: 16`, `test_tasks: none` and EVERY 3.

    python bench/holdout_grpo.py CONFIG DB [EVERY]    # templates with index % EVERY == 0 are GRPO's
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import store  # noqa: E402
from workbench.config import load_config  # noqa: E402
from workbench.trainer import Trainer  # noqa: E402

cfg_path, db_path = sys.argv[1], sys.argv[2]
every = int(sys.argv[3]) if len(sys.argv) > 3 else 3
cfg = load_config(cfg_path)
assert cfg.test_tasks == "none", "a recipe experiment decides on validation: no test split"
db = store.open_db(db_path)
tr = Trainer(cfg, db, log=lambda m: print(m, flush=True))


def grpo_only(t) -> bool:
    return int(t.template.rsplit(":", 1)[1]) % every == 0


sft_tasks = [t for t in tr.train_tasks if not grpo_only(t)]
grpo_tasks = [t for t in tr.train_tasks if grpo_only(t)]
print(f"SFT on {len(sft_tasks)} tasks, GRPO on {len(grpo_tasks)} (templates index % {every} == 0)", flush=True)
orig = tr.run_sft_phase


def sft_phase() -> None:
    tr.train_tasks = sft_tasks
    try:
        orig()
    finally:
        tr.train_tasks = grpo_tasks


tr.run_sft_phase = sft_phase
tr.run()
print("done", flush=True)
