"""Shared by the trainer tests: a cheap verifier whose reward depends on the reply's length (so groups have
spread on a random model) and a tiny run config on the conftest's random Llama."""

from __future__ import annotations

LENGTH_VERIFIER = """
from workbench.types import Score

def reward(output, task):
    n = len(output)
    return Score(total=(n % 5) / 4.0, parts={"len": (n % 5) / 4.0}, explanation=f"{n} chars")
"""


def tiny_cfg(tiny_model, tmp_path, verifier_path, **kw):
    base = dict(
        model=str(tiny_model),
        reward=verifier_path,
        num_generations_per_prompt=4,
        prompts_per_step=2,
        max_completion_length=8,
        max_steps=3,
        eval_interval=2,
        eval_max_tasks=3,
        sft_steps=0,
        learning_rate=1e-2,
        output_dir=str(tmp_path / "runs"),
        lora={"r": 4, "alpha": 8},
        seed=3,
    )
    base.update(kw)
    from workbench.config import config_from_dict

    return config_from_dict(base)
