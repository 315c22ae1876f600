"""What the SFT benchmarks share: a config's warm-up batches (the demo's first ones, seeded as the trainer
draws them) and its LoRA policy, built the way the trainer builds them."""

from __future__ import annotations

import random
from typing import Any

from workbench.config import Config, load_config
from workbench.envs import env_for_config
from workbench.learn.sft_native import env_sft_examples
from workbench.models import load_policy
from workbench.splits import stage_tasks
from workbench.tasks import load_task_source


def sft_batches(config: str, steps: int) -> tuple[Config, Any, list[list[Any]]]:
    """The config, its env and `steps` warm-up batches of `sft_batch_size` examples."""
    cfg = load_config(config)
    env = env_for_config(cfg)
    sft_tasks, _ = stage_tasks(
        load_task_source(cfg.tasks, "train"), cfg.grpo_holdout, cfg.grpo_skills, cfg.sft_skill_weights
    )
    examples = env_sft_examples(env, sft_tasks)
    rng = random.Random(cfg.seed)
    return cfg, env, [rng.sample(examples, cfg.sft_batch_size) for _ in range(steps)]


def lora_policy(cfg: Config, **kwargs: Any) -> Any:
    """The config's model with its LoRA adapter, seeded (`kwargs`: load_policy's, e.g. dtype)."""
    return load_policy(
        cfg.model,
        adapter="lora",
        lora_r=cfg.lora.r,
        lora_alpha=cfg.lora.alpha,
        target_modules=cfg.lora.target_modules,
        seed=cfg.seed,
        **kwargs,
    )
