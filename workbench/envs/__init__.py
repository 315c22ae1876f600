"""Environments: turn a task into prompt messages, take the model's replies, run simulated tools, and hand
the verifier an `Output`. `make_env(name, harness)` is what the trainer and the config's `env:` key use."""

from __future__ import annotations

from typing import Any

from workbench.envs.harness import Harness
from workbench.envs.multi_turn import MultiTurnEnv, builtin_multi_turn_tasks
from workbench.envs.parse import parse_tool_call
from workbench.envs.single_turn import SingleTurnEnv
from workbench.envs.tools import World

ENVS: dict[str, type] = {"single_turn": SingleTurnEnv, "multi_turn": MultiTurnEnv}


def make_env(name: str, harness: Harness | None = None, **kwargs: Any) -> SingleTurnEnv | MultiTurnEnv:
    """An environment by registry name; kwargs go to its constructor (e.g. max_turns for multi_turn)."""
    if name not in ENVS:
        raise ValueError(f"unknown environment {name!r}; choose one of {sorted(ENVS)}")
    return ENVS[name](harness, **kwargs)


__all__ = [
    "ENVS", "Harness", "MultiTurnEnv", "SingleTurnEnv", "World", "builtin_multi_turn_tasks", "make_env",
    "parse_tool_call",
]
