"""One exception base: every exception class the engine defines derives from a kind in workbench.errors,
keeps its older base, and the command line exits with the kind's stable code."""

from __future__ import annotations

import argparse
import importlib
import inspect
import pkgutil

import pytest

import store
import workbench
from workbench import cli, errors
from workbench.errors import WorkbenchError

# The exit codes are the command line's interface: changing one breaks scripts that read them.
KIND_CODES = {
    errors.InputError: 2,
    errors.UnavailableError: 3,
    errors.StoredDataError: 4,
    errors.RunLostError: 5,
    errors.InternalError: 70,
}
STORE_CODES = {
    store.StoreError: 2,
    store.SchemaTooNewError: 6,
    store.DiskFullError: 7,
    store.runs.RunLockedError: 8,
}
# Every exception class defined under workbench/, by where it is defined, with its exit code. A new class
# must be added here: choosing its kind (and so its exit code) is a decision, not an accident.
CLASS_CODES = {
    "workbench.config.ConfigError": 2,
    "workbench.tasks.TaskFileError": 2,
    "workbench.verifiers.base.VerifierError": 2,
    "workbench.verifiers.base.VerifierCompileError": 2,
    "workbench.export.ExportError": 2,
    "workbench.export_model.ExportModelError": 2,
    "workbench.envs.mcp_env.McpConfigError": 2,
    "workbench.envs.tool_parsers.TemplateError": 2,
    "workbench.models.ModelNotFoundError": 3,
    "workbench.model_fetch.ModelFetchError": 3,
    "workbench.rollout.vllm.BackendUnavailable": 3,
    "workbench.mcp.client.McpUnavailable": 3,
    "workbench.metric_log.MetricLogUnavailable": 3,
    "workbench.checkpoint.CheckpointError": 4,
    "workbench.distributed.collective.RankLost": 5,
    "workbench.mcp.client.ServerFailed": 5,
    "workbench.run.session.LockLost": 5,
    "workbench.run.commands.PayloadError": 2,
    "workbench.domains.calendar.world.ToolError": 70,
    "workbench.safe_points.Interrupted": 70,
    "workbench.verifier_edit.DryRunCancelled": 70,
    "workbench.verifiers.base.BadReturn": 70,
    "workbench.verifiers.judge.JudgeTimeout": 70,
}
# A BaseException on purpose: injected into a verifier thread, it must get past the user's `except Exception`.
NOT_ERRORS = {"workbench.verifiers.base.VerifierTimeout"}


def _defined_exceptions() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(workbench.__path__, "workbench."):
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == info.name:
                found[f"{info.name}.{name}"] = obj
    return found


@pytest.fixture(scope="module")
def defined() -> dict[str, type[BaseException]]:
    return _defined_exceptions()


def test_every_exception_class_derives_from_a_kind_with_its_stable_code(defined):
    checked = {
        k: v for k, v in defined.items() if k not in NOT_ERRORS and not k.startswith("workbench.errors.")
    }
    assert sorted(checked) == sorted(CLASS_CODES), (
        "a class was added or removed: give it a kind in CLASS_CODES"
    )
    for path, cls in checked.items():
        kinds = [k for k in KIND_CODES if issubclass(cls, k)]
        assert len(kinds) == 1, f"{path} derives from {kinds}, expected exactly one kind of workbench.errors"
        assert cls.exit_code == CLASS_CODES[path] == KIND_CODES[kinds[0]], path


def test_kinds_and_store_errors_have_distinct_codes():
    codes = list(KIND_CODES.values()) + [c for cls, c in STORE_CODES.items() if cls is not store.StoreError]
    assert len(codes) == len(set(codes))
    assert {k: k.exit_code for k in KIND_CODES} == KIND_CODES
    assert {k: k.exit_code for k in STORE_CODES} == STORE_CODES
    assert WorkbenchError.exit_code not in codes  # the base itself is never raised


def test_older_bases_are_kept_so_existing_except_clauses_still_catch():
    from workbench.checkpoint import CheckpointError
    from workbench.config import ConfigError
    from workbench.rollout.vllm import BackendUnavailable
    from workbench.tasks import TaskFileError
    from workbench.verifiers.base import BadReturn, VerifierCompileError, VerifierError, VerifierTimeout
    from workbench.verifiers.judge import JudgeTimeout

    assert issubclass(ConfigError, ValueError) and issubclass(TaskFileError, ValueError)
    assert issubclass(CheckpointError, RuntimeError) and issubclass(BackendUnavailable, RuntimeError)
    assert issubclass(BadReturn, ValueError) and issubclass(JudgeTimeout, TimeoutError)
    assert issubclass(VerifierCompileError, VerifierError)
    assert not issubclass(VerifierTimeout, Exception)


def _run_main(monkeypatch, exc: BaseException) -> int:
    def fail(args: argparse.Namespace) -> int:
        raise exc

    parser = argparse.ArgumentParser()
    parser.set_defaults(fn=fail)
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    return cli.main([])


@pytest.mark.parametrize("cls", sorted(KIND_CODES, key=lambda k: k.exit_code), ids=lambda k: k.__name__)
def test_the_cli_prints_the_message_and_exits_with_the_kinds_code(monkeypatch, capsys, cls):
    class Concrete(cls):  # any class of the kind
        pass

    assert _run_main(monkeypatch, Concrete("the named thing is wrong")) == KIND_CODES[cls]
    assert capsys.readouterr().err == "error: the named thing is wrong\n"


@pytest.mark.parametrize("cls", list(STORE_CODES), ids=lambda k: k.__name__)
def test_the_cli_exits_with_a_store_errors_code(monkeypatch, capsys, cls):
    assert _run_main(monkeypatch, cls("wb.db: busy")) == STORE_CODES[cls]
    assert "error: wb.db: busy" in capsys.readouterr().err


def test_the_cli_reports_real_errors_by_kind(monkeypatch, capsys):
    from workbench.models import ModelNotFoundError
    from workbench.rollout.vllm import BackendUnavailable

    assert _run_main(monkeypatch, ModelNotFoundError("no model 'x'")) == 3
    assert _run_main(monkeypatch, BackendUnavailable("rollout: vllm needs vLLM")) == 3
    assert _run_main(monkeypatch, FileNotFoundError("tasks.jsonl")) == 2
    with pytest.raises(KeyError):  # anything else is a bug: its traceback is not swallowed
        _run_main(monkeypatch, KeyError("x"))
