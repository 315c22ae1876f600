"""Environments: turn a task into prompt messages, take the model's replies, run simulated tools, and hand
the verifier an `Output`. `make_env(name, harness)` is what the trainer and the config's `env:` key use.
The tools, world and built-in tasks an environment runs belong to a domain (`workbench.domains.calendar`)."""

from __future__ import annotations

from typing import Any

from workbench.envs.harness import Harness, harness_from_config
from workbench.envs.multi_turn import MultiTurnEnv
from workbench.envs.parse import parse_tool_call
from workbench.envs.single_turn import SingleTurnEnv

ENVS: dict[str, type] = {"single_turn": SingleTurnEnv, "multi_turn": MultiTurnEnv}


def make_env(name: str, harness: Harness | None = None, **kwargs: Any) -> SingleTurnEnv | MultiTurnEnv:
    """An environment by registry name; kwargs go to its constructor (e.g. max_turns for multi_turn)."""
    if name not in ENVS:
        raise ValueError(f"unknown environment {name!r}; choose one of {sorted(ENVS)}")
    return ENVS[name](harness, **kwargs)


def env_for_config(cfg: Any) -> SingleTurnEnv | MultiTurnEnv:
    """The environment a run config (workbench.config.Config) asks for, with its harness."""
    kw = {"max_turns": cfg.max_turns} if cfg.env == "multi_turn" else {}
    return make_env(cfg.env, harness_from_config(cfg.harness), **kw)


__all__ = [
    "ENVS", "env_for_config", "Harness", "MultiTurnEnv", "SingleTurnEnv", "make_env", "parse_tool_call",
]
