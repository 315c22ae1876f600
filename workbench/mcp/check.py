"""Check a config's MCP section before a run starts: every server starts, its allowlisted (and
reset/state/seed) tools exist, the tasks name only tools the servers offer, and a seed tool takes the first
task's initial_state. Errors are `ConfigError`s that name the config file's line, like the loader's own
(`config.yaml:12: mcp_servers.calendar.tools: ...`)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from workbench.config import Config, ConfigError, _key_lines
from workbench.envs.mcp_env import FINISH, McpConfigError, McpEnv
from workbench.mcp.client import McpUnavailable, require_mcp
from workbench.tasks import load_task_source
from workbench.types import Task


def _at(path: str | Path | None, lines: dict[str, int], key: str) -> str:
    where = str(path) if path is not None else "<config>"
    while key and key not in lines:  # the nearest enclosing key that has a line
        key = key.rpartition(".")[0]
    return f"{where}:{lines[key]}" if key in lines else where


def check_mcp_servers(cfg: Config, path: str | Path | None = None) -> None:
    """Start each server once (a pool of one) and check it against the config and the tasks; no-op unless
    `env: mcp`. Costs about a second a server."""
    if cfg.env != "mcp":
        return
    lines: dict[str, int] = {}
    if path is not None:
        try:
            lines = _key_lines(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            lines = {}
    try:
        require_mcp()
    except McpUnavailable as e:
        raise ConfigError(f"{_at(path, lines, 'env')}: {e}") from None
    servers = {name: replace(s, pool_size=1) for name, s in cfg.mcp_servers.items()}
    try:
        env = McpEnv(None, servers, max_turns=cfg.max_turns, pool_size=1)
    except McpConfigError as e:
        raise ConfigError(f"{_at(path, lines, e.key)}: {e}") from None
    with env:
        offered = {s["name"] for s in env.specs}
        seeded = None  # the first task with an initial_state: the seed tools must take it
        for key, source, split in (
            ("tasks", cfg.tasks, "train"),
            ("held_out_eval", cfg.held_out_eval, "held_out"),
        ):
            for task in load_task_source(source, split):
                if seeded is None and task.initial_state is not None:
                    seeded = task
                named = [task.expected_tool] + [t.get("name") for t in task.tools or []]
                stray = sorted({n for n in named if n and n != FINISH and n not in offered})
                if stray:
                    raise ConfigError(
                        f"{_at(path, lines, key)}: {key}: task {task.id} names {', '.join(stray)}, not offered by "
                        f"mcp_servers (allowlisted: {', '.join(sorted(offered))})"
                    )
        if seeded is not None:
            _check_seed(env, seeded, path, lines)


def _check_seed(env: McpEnv, task: Task, path: str | Path | None, lines: dict[str, int]) -> None:
    """Seed one process of each server with `task`'s initial_state: a seed tool that refuses it (a wrong
    signature, a state shape it does not know) is found here, not in every episode of the run."""
    procs = {name: pool.acquire() for name, pool in env.pools.items()}
    try:
        env.seed(procs, task)
    except McpConfigError as e:
        raise ConfigError(f"{_at(path, lines, e.key)}: {e}") from None
    finally:
        for name, proc in procs.items():
            env.pools[name].release(proc)
