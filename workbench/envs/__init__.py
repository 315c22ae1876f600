"""Environments: turn a task into prompt messages, take the model's replies, run simulated tools, and hand
the verifier an `Output`. `make_env(name, harness)` is what the trainer and the config's `env:` key use.
The tools, world and built-in tasks an environment runs belong to a domain (`workbench.domains.calendar`)."""

from __future__ import annotations

from typing import Any

from workbench.envs.harness import Harness, harness_from_config
from workbench.envs.mcp_env import McpEnv
from workbench.envs.multi_turn import MultiTurnEnv
from workbench.envs.parse import parse_tool_call
from workbench.envs.single_turn import SingleTurnEnv

ENVS: dict[str, type] = {"single_turn": SingleTurnEnv, "multi_turn": MultiTurnEnv, "mcp": McpEnv}


def make_env(name: str, harness: Harness | None = None, **kwargs: Any) -> SingleTurnEnv | MultiTurnEnv:
    """An environment by registry name; kwargs go to its constructor (e.g. max_turns for multi_turn)."""
    if name not in ENVS:
        raise ValueError(f"unknown environment {name!r}; choose one of {sorted(ENVS)}")
    return ENVS[name](harness, **kwargs)


def env_for_config(cfg: Any, tokenizer: Any = None) -> Any:
    """The environment a run config (workbench.config.Config) asks for, with its harness. With
    `tool_format: native` the model's chat template does the format (workbench.envs.native): `tokenizer` is
    needed when `tool_parser` is auto (the parser is read from its template)."""
    if getattr(cfg, "tool_format", "json") == "native":
        if cfg.env not in ("single_turn", "multi_turn"):
            raise ValueError(f"tool_format native: env {cfg.env!r} speaks only the json harness; "
                             "use env single_turn or multi_turn")
        from workbench.envs.native import native_env

        return native_env(cfg, tokenizer, harness_from_config(cfg.harness))
    if cfg.env == "mcp":  # starts the servers' pools; the trainer closes them (McpEnv.close)
        return McpEnv(harness_from_config(cfg.harness), cfg.mcp_servers, max_turns=cfg.max_turns,
                      pool_size=cfg.num_generations_per_prompt)
    kw = {"max_turns": cfg.max_turns} if cfg.env == "multi_turn" else {}
    return make_env(cfg.env, harness_from_config(cfg.harness), **kw)


__all__ = [
    "ENVS", "env_for_config", "Harness", "McpEnv", "MultiTurnEnv", "SingleTurnEnv", "make_env", "parse_tool_call",
]
