"""Checkpoints: the adapter in peft format plus everything needed to continue bit-for-bit on CPU
(optimizer, scheduler, RNG states, step, the live learning rate and temperature)."""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path
from typing import Any

import torch


def save(path: Path, *, policy: Any, optimizer: torch.optim.Optimizer, scheduler: Any, state: dict[str, Any]) -> Path:
    """Write to a temp folder, then rename: a kill mid-save never leaves a half checkpoint behind."""
    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    policy.save_adapter(tmp / "adapter")
    torch.save(
        {
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict() if scheduler is not None else None,
            "torch_rng": torch.get_rng_state(),
            "python_rng": random.getstate(),
            **state,
        },
        tmp / "trainer_state.pt",
    )
    if path.exists():
        shutil.rmtree(path)
    os.replace(tmp, path)
    return path


def load(path: Path, *, policy: Any, optimizer: torch.optim.Optimizer, scheduler: Any) -> dict[str, Any]:
    policy.load_adapter(path / "adapter")
    state = torch.load(path / "trainer_state.pt", weights_only=False)
    optimizer.load_state_dict(state.pop("optimizer"))
    sched = state.pop("scheduler")
    if scheduler is not None and sched is not None:
        scheduler.load_state_dict(sched)
    torch.set_rng_state(state.pop("torch_rng"))
    random.setstate(state.pop("python_rng"))
    return state
