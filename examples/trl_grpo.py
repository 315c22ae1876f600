"""TRL's GRPOTrainer on the calendar tasks, streaming into the workbench store (issue 19).

pip install 'agent-workbench[trl]'
python examples/trl_grpo.py --db trl.db --steps 4                  # the tiny random fixture model (seconds)
python examples/trl_grpo.py --db trl.db --model smollm2-135m        # the embedded SmolLM2 (~30 s a step on CPU)
workbench tui --db trl.db --run <id>                   # watch it; p pauses, r resumes, v edits the verifier
"""

from __future__ import annotations

import argparse
import tempfile

from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer

from workbench.envs import Harness
from workbench.integrations.trl import WorkbenchCallback, task_columns, workbench_reward
from workbench.models import resolve_model
from workbench.tasks import load_task_source
from workbench.testing import tiny_model_dir


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", default="workbench.db")
    ap.add_argument("--model", default="tiny", help="tiny (the random fixture) | smollm2-135m | an HF folder")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--tasks", type=int, default=8)
    ap.add_argument("--verifier", default="tool_call_gated")
    ap.add_argument("--output-dir", default=None)
    args = ap.parse_args(argv)

    from transformers import AutoTokenizer

    work = tempfile.mkdtemp(prefix="trl-grpo-")
    model_dir = str(tiny_model_dir(work) if args.model == "tiny" else resolve_model(args.model))
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    harness = (
        Harness()
    )  # the JSON harness: system prompt with the tools, one example, the prefill `{"tool": "`
    tasks = load_task_source("builtin:calendar", "train")[: args.tasks]
    dataset = Dataset.from_list([task_columns(t, harness, tokenizer) for t in tasks])

    cb = WorkbenchCallback(
        args.db,
        name=f"trl-{args.model}",
        model_name=args.model,
        verifier=args.verifier,
        harness=harness,
        log=print,
    )
    config = GRPOConfig(
        output_dir=args.output_dir or f"{work}/out",
        use_cpu=True,
        num_generations=4,
        per_device_train_batch_size=4,
        max_completion_length=16,
        max_steps=args.steps,
        report_to=[],
        logging_steps=1,
        save_strategy="no",
        learning_rate=1e-5,
        seed=0,
    )
    trainer = GRPOTrainer(
        model=model_dir,
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        reward_funcs=[workbench_reward(cb)],
        callbacks=[cb],
    )
    with cb.watch():
        trainer.train()
    print(f"run {cb.run_id}: {cb.status}. Browse it: workbench tui --db {args.db} --run {cb.run_id}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
