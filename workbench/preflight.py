"""Checks a config's sources before a run exists, so bad files are reported first (train, the ranks' launcher)."""

from __future__ import annotations

from typing import Any


def check_sources(cfg: Any, path: str | None = None) -> None:
    """Load the config's tasks and verifier once, start its MCP servers once and check the metric logger, so
    bad files are reported before a run exists (MCP errors name the line of `path`, the config file)."""
    from workbench.config import ConfigError
    from workbench.mcp_check import check_mcp_servers
    from workbench.metric_log import MetricLogUnavailable, check_log_to
    from workbench.splits import stage_tasks
    from workbench.tasks import load_task_source
    from workbench.verifiers import get_verifier

    train = load_task_source(cfg.tasks, "train")
    try:  # grpo_skills or sft_skill_weights that no task of its stage exercises: a config error, before a run
        stage_tasks(train, cfg.grpo_holdout, cfg.grpo_skills, cfg.sft_skill_weights)
    except ValueError as e:
        raise ConfigError(f"{path or '<config>'}: {e}") from None
    load_task_source(cfg.held_out_eval, "held_out")
    get_verifier(cfg.reward)
    try:
        check_log_to(cfg)
    except MetricLogUnavailable as e:
        raise ConfigError(f"{path or '<config>'}: {e}") from None
    check_mcp_servers(cfg, path)


def run_for_args(db_path: str, resume: int | None, config: str | None) -> int | None:
    """`workbench train`'s run: `--resume RUN` (which must exist), or a new run made from CONFIG after its
    sources are checked. None (with the error printed) when neither is given."""
    import sys

    import store
    from workbench.config import load_config

    db = store.open_db(db_path)
    try:
        if resume is not None:
            store.runs.get_run(db, resume)
            return resume
        if not config:
            print("error: give a CONFIG file, or --resume RUN", file=sys.stderr)
            return None
        cfg = load_config(config)
        check_sources(cfg, config)  # a typo in tasks, reward or MCP servers fails here, not as a crashed run
        return store.runs.create_run(db, name=cfg.name, model=cfg.model, config=cfg.to_dict())
    finally:
        db.close()
