"""Checks a config's sources before a run exists, so bad files are reported first (train, the ranks' launcher)."""

from __future__ import annotations

from typing import Any


def check_sources(cfg: Any, path: str | None = None) -> None:
    """Load the config's tasks and verifier once, start its MCP servers once and check the metric logger, so
    bad files are reported before a run exists (MCP errors name the line of `path`, the config file)."""
    from workbench.config import ConfigError
    from workbench.mcp_check import check_mcp_servers
    from workbench.metric_log import MetricLogUnavailable, check_log_to
    from workbench.tasks import load_task_source
    from workbench.verifiers import get_verifier

    load_task_source(cfg.tasks, "train")
    load_task_source(cfg.held_out_eval, "held_out")
    get_verifier(cfg.reward)
    try:
        check_log_to(cfg)
    except MetricLogUnavailable as e:
        raise ConfigError(f"{path or '<config>'}: {e}") from None
    check_mcp_servers(cfg, path)
