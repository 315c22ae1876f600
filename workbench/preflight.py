"""Checks a config's sources before a run exists, so bad files are reported first (train, the ranks' launcher)."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class SourcesOk:
    """What the checked sources hold: `workbench train --check` prints it."""

    train: int  # training tasks
    validation: int  # tasks that decide promotion
    test: int  # tasks reported beside validation
    reward: str
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class TrainRequest:
    """What `workbench train` was asked, as plain values (the command line parses its flags into this; the
    ranks' launcher, `workbench.distributed`, reads it): a CONFIG file for a new run, or a run to resume."""

    db: str
    config: str | None = None
    resume: int | None = None
    max_steps: int | None = None
    nproc: int = 1


def _key_line(path: str | None, key: str) -> str:
    from workbench.config import key_line

    return key_line(path, key)


def check_model(cfg: Any, path: str | None = None) -> None:
    """A model named by a local path (./x, ../x, /x, ~/x or a .gguf file) must exist. Hub ids and the embedded
    default are resolved when the run loads them (a download or a ~20 s conversion: too slow for a check)."""
    from workbench.config import ConfigError

    text = str(cfg.model)
    local = Path(text).expanduser()
    looks_local = text.startswith(("./", "../", "/", "~")) or text.endswith(".gguf")
    if looks_local and not local.exists():
        raise ConfigError(f"{_key_line(path, 'model')}: model: {text!r}: no such folder or file")
    if local.is_dir() and not (local / "config.json").is_file():  # what resolve_model would refuse, later
        raise ConfigError(
            f"{_key_line(path, 'model')}: model: {text!r}: a folder but not an HF model (no config.json)"
        )


def check_sources(cfg: Any, path: str | None = None) -> SourcesOk:
    """Load the config's tasks, validation/test splits and verifier once, start its MCP servers once and check
    the model path and the metric logger, so bad files are reported before a run exists (MCP errors name the
    line of `path`, the config file)."""
    from workbench.config import ConfigError
    from workbench.mcp.check import check_mcp_servers
    from workbench.metric_log import MetricLogUnavailable, check_log_to
    from workbench.run.inputs import prepare
    from workbench.verifiers import VerifierCompileError, VerifierError, get_verifier

    check_model(cfg, path)
    inputs = prepare(
        cfg, path
    )  # what the trainer will read, read the same way: a clash fails here, not there
    try:
        get_verifier(cfg.reward)
    except (
        VerifierCompileError
    ) as e:  # its own message says only "line N": name the file, and the config's line
        where = f"{cfg.reward}:{e.lineno}" if e.lineno else str(cfg.reward)
        raise VerifierError(f"{where}: {e.message} (reward: at {_key_line(path, 'reward')})") from None
    except VerifierError as e:
        raise VerifierError(f"{_key_line(path, 'reward')}: reward: {e}") from None
    try:
        check_log_to(cfg)
    except MetricLogUnavailable as e:
        raise ConfigError(f"{path or '<config>'}: {e}") from None
    check_mcp_servers(cfg, path)
    return SourcesOk(
        len(inputs.train), len(inputs.validation), len(inputs.test), str(cfg.reward), inputs.warnings
    )


def check_loaded(cfg: Any, env: Any, policy: Any, inputs: Any, warn: Callable[[str], None]) -> None:
    """The checks that need the loaded model (the trainer's, right after loading it): every prompt of the
    run's tasks (`inputs`, a `RunInputs`) must leave the model room to answer (`workbench.prompt_fit`), and a
    GRPO step must fit the device's memory (`workbench.memory_fit`: refused now, not after minutes). The
    prompts' warnings go to `warn` before the memory check; on a refusal (TaskFileError, ConfigError) the
    environment is closed first, so MCP servers it started are not left behind."""
    from workbench.config import ConfigError
    from workbench.memory_fit import check_step_fits
    from workbench.prompt_fit import check_prompts_fit, model_context
    from workbench.rollout.turn_tokens import first_prompt
    from workbench.tasks import TaskFileError

    try:
        every = inputs.train + inputs.validation + inputs.test
        for w in check_prompts_fit(
            env,
            policy.tokenizer,
            every,
            model_context(policy.model),
            sources=[cfg.tasks, cfg.held_out_eval, cfg.test_tasks],
            max_completion_length=cfg.max_completion_length,
        ):
            warn(w)
        if inputs.rl:
            start = getattr(env, "prompt_episode", env.start)  # an MCP env: no server taken
            first = first_prompt(policy.tokenizer, start(inputs.rl[0]))
            check_step_fits(policy.model, cfg, len(first), policy.device)
    except (TaskFileError, ConfigError):
        getattr(env, "close", lambda: None)()
        raise


def load_checked(config: str, *, max_steps: int | None = None) -> tuple[Any, SourcesOk]:
    """The config at `config` (with `max_steps` in place of its own when given) and its checked sources.
    Raises ConfigError, TaskFileError, VerifierError, FileNotFoundError... naming the file: nothing is written."""
    from workbench.config import ConfigError, load_config

    cfg = load_config(config)
    if max_steps is not None:
        if max_steps < 1:
            raise ConfigError(f"--max-steps: must be >= 1, got {max_steps}")
        cfg = dataclasses.replace(cfg, max_steps=max_steps)  # __post_init__ re-checks; presets are idempotent
    return cfg, check_sources(cfg, config)  # a typo in tasks, reward or MCP servers fails here


def run_for_args(
    db_path: str, resume: int | None, config: str | None, *, max_steps: int | None = None
) -> int | None:
    """`workbench train`'s run: `--resume RUN` (which must exist), or a new run made from CONFIG (its
    `max_steps` replaced when given) after its sources are checked. None (with the error printed) when neither
    is given. The database is opened only after the checks pass: a failed check leaves no file behind."""
    import sys

    import store

    if resume is not None:
        # resuming needs the run's database, whole: a damaged one is refused here, naming its pages
        with contextlib.closing(store.open_db(db_path, create=False, check=True)) as db:
            store.runs.get_run(db, resume)
        return resume
    if not config:
        print("error: give a CONFIG file, or --resume RUN", file=sys.stderr)
        return None
    from workbench.run.inputs import new_run

    cfg, _ = load_checked(config, max_steps=max_steps)
    with contextlib.closing(store.open_db(db_path)) as db:
        return new_run(db, cfg)
