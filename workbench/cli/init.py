"""`workbench init DIR`: a starter project to edit (config, tasks, held-out tasks, verifier)."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

# `workbench init`'s config: its own run with the demo's recipe shape (SFT warm-up, then GRPO) at a fraction
# of its work (a quarter of the SFT steps, 4 GRPO steps of 2 prompts without refill rounds, 50 eval requests
# instead of 230), so a first run ends soon. The demo's config is the reference run, not a starting point: it
# says why each of its values was chosen, which a new project has not done yet.
STARTER_CONFIG = """\
# {name}: a small starter run of SmolLM2-135M (LoRA) on the calendar tool calls in tasks.jsonl: a baseline eval,
# a short SFT warm-up that teaches the reply format, a few GRPO steps, an eval after each stage; grow the step
# counts once it works. Every key and its default: workbench/config.py (README "Config"). `train --check`
# validates this file, the tasks and the verifier without training; `train --max-steps N` overrides max_steps.
name: {name}
model: smollm2-135m            # the embedded default, or a local HF folder
adapter: lora
lora:
  target_modules: all-linear
tasks: tasks.jsonl             # training requests, one JSON task a line (README "Tasks")
held_out_eval: held_out.jsonl  # split held_out: decides which checkpoint is promoted; split test: reported only
reward: verifier.py            # def reward(output, task); edit it, or name a built-in verifier
sft_steps: 40                  # warm-up batches: the base model rarely writes the JSON reply unaided
sft_batch_size: 8
sft_learning_rate: 1.0e-3
sft_lr_schedule: cosine
algorithm: grpo
num_generations_per_prompt: 8  # samples per request: GRPO learns from the reward differences among them
prompts_per_step: 2
max_steps: 4                   # GRPO steps
eval_interval: 4               # eval and checkpoint every N steps (and at the end)
max_completion_length: 48      # tokens per reply
learning_rate: 3.0e-5
temperature: 0.8
seed: 0
"""
STARTER_REWARD = "tool_call_gated"  # the demo's: "safe" is paid only with the right tool (README "Verifiers")
STARTER_TRAIN_PER_TEMPLATE = 2  # training requests per phrasing template of the built-in train split
STARTER_VALIDATION_PER_TEMPLATE = 1  # of validation_wide (30 templates)
STARTER_TEST_TASKS = 20  # of the built-in test split: phrasings that neither training nor validation uses


def starter_config(name: str) -> str:
    """`init`'s config.yaml for a project called `name` (quoted when YAML would not read it back as itself)."""
    import yaml

    plain = re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name) is not None and yaml.safe_load(name) == name
    return STARTER_CONFIG.replace("{name}", name if plain else json.dumps(name))


def starter_tasks() -> tuple[list, list]:
    """(training tasks, held-out tasks) for `init`: a few of each phrasing template of the built-in train split;
    one of each validation_wide template (split held_out: they decide promotion) and the first test-split tasks
    (split test: reported only), so a run's evals take tens of tasks, not hundreds."""
    import dataclasses

    from workbench.tasks import load_task_source

    def per_template(tasks: list, k: int) -> list:
        seen: dict[str | None, int] = {}
        kept = []
        for t in tasks:
            key = t.template or t.id
            if seen.get(key, 0) < k:
                seen[key] = seen.get(key, 0) + 1
                kept.append(t)
        return kept

    train = per_template(load_task_source("train", "train"), STARTER_TRAIN_PER_TEMPLATE)
    validation = [
        dataclasses.replace(t, split="held_out")
        for t in per_template(
            load_task_source("validation_wide", "held_out"), STARTER_VALIDATION_PER_TEMPLATE
        )
    ]
    test = load_task_source("test", "test")[:STARTER_TEST_TASKS]
    return train, validation + test


def cmd_init(args: argparse.Namespace) -> int:
    from workbench.invocation import workbench_command
    from workbench.tasks import write_tasks_jsonl
    from workbench.verifiers import builtin_verifier_code

    d = Path(args.dir)
    d.mkdir(parents=True, exist_ok=True)
    train, held_out = starter_tasks()
    made = []
    for name, write in (
        ("tasks.jsonl", lambda p: write_tasks_jsonl(p, train)),
        ("held_out.jsonl", lambda p: write_tasks_jsonl(p, held_out)),
        ("verifier.py", lambda p: p.write_text(builtin_verifier_code(STARTER_REWARD))),
        ("config.yaml", lambda p: p.write_text(starter_config(d.resolve().name))),
    ):
        p = d / name
        if p.exists():
            print(f"kept {p} (exists)")
            continue
        write(p)
        made.append(str(p))
    print("made " + ", ".join(made) if made else "nothing to do")
    wb = workbench_command(d.resolve())  # typed after the cd: a relative .venv path would no longer work
    print(f"next: cd {d} && {wb} train --check config.yaml && {wb} train config.yaml")
    return 0
