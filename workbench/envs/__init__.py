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
    native = getattr(cfg, "tool_format", "json") == "native"
    if cfg.env == "mcp":  # starts the servers' pools; the trainer closes them (McpEnv.close)
        from workbench.envs.native import config_parser

        return McpEnv(
            harness_from_config(cfg.harness),
            cfg.mcp_servers,
            max_turns=cfg.max_turns,
            pool_size=cfg.num_generations_per_prompt,
            tool_format="native" if native else "json",
            parser=config_parser(cfg, tokenizer) if native else None,
            system_prompt=cfg.harness.system_prompt,
        )
    if native:
        from workbench.envs.native import native_env

        return native_env(cfg, tokenizer, harness_from_config(cfg.harness))
    kw = {"max_turns": cfg.max_turns} if cfg.env == "multi_turn" else {}
    return make_env(cfg.env, harness_from_config(cfg.harness), **kw)


def bind_tokenizer(env: Any, cfg: Any, tokenizer: Any) -> Any:
    """A native env built before the model was loaded (`tool_parser: auto`) gets its parser from the model's
    template, in place: an MCP env's servers are already running and must not be started a second time."""
    if getattr(cfg, "tool_format", "json") == "native" and getattr(env, "parser", None) is None:
        from workbench.envs.native import config_parser

        env.parser = config_parser(cfg, tokenizer)
    return env


__all__ = [
    "ENVS",
    "bind_tokenizer",
    "env_for_config",
    "Harness",
    "McpEnv",
    "MultiTurnEnv",
    "SingleTurnEnv",
    "make_env",
    "parse_tool_call",
]
