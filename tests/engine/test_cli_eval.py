"""`workbench eval` in a model's native tool format: from --config (model, tool_format, tool_parser, harness) or
--tool-format / --tool-parser, on a tiny Qwen2.5-templated model (its replies are noise: what is checked is
the environment it was evaluated in, and that the run goes through)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from workbench import eval as wb_eval
from workbench.cli import main
from workbench.envs.native import NativeEnv
from workbench.testing import tiny_model_dir


@pytest.fixture(scope="module")
def qwen_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_model_dir(tmp_path_factory.mktemp("qwen"), template="qwen2.5")


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Each evaluate() call's environment and arguments; the real evaluate still runs."""
    calls: list[dict[str, Any]] = []
    real = wb_eval.evaluate

    def spy(engine: Any, tokenizer: Any, env: Any, tasks: list, **kw: Any) -> Any:
        calls.append({"env": env, "tasks": tasks, **kw})
        return real(engine, tokenizer, env, tasks, **kw)

    monkeypatch.setattr(wb_eval, "evaluate", spy)
    return calls


def test_default_is_the_json_harness(qwen_model: Path, seen: list, capsys: pytest.CaptureFixture) -> None:
    assert main(["eval", "--model", str(qwen_model), "--limit", "1", "--max-new-tokens", "2", "--json"]) == 0
    (call,) = seen
    assert not isinstance(call["env"], NativeEnv) and call["max_new_tokens"] == 2
    assert json.loads(capsys.readouterr().out)["n"] == 1


def test_tool_format_and_parser_flags(qwen_model: Path, seen: list, capsys: pytest.CaptureFixture) -> None:
    assert (
        main(
            [
                "eval",
                "--model",
                str(qwen_model),
                "--tool-format",
                "native",
                "--limit",
                "2",
                "--max-new-tokens",
                "2",
            ]
        )
        == 0
    )
    assert (
        isinstance(seen[0]["env"], NativeEnv) and seen[0]["env"].parser == "hermes"
    )  # read from the template
    out = capsys.readouterr().out
    assert "native, hermes parser" in out and "valid_json_rate" in out
    assert (
        main(
            [
                "eval",
                "--model",
                str(qwen_model),
                "--tool-format",
                "native",
                "--tool-parser",
                "llama3_json",
                "--limit",
                "1",
                "--max-new-tokens",
                "2",
                "--json",
            ]
        )
        == 0
    )
    assert seen[1]["env"].parser == "llama3_json"


def test_config_file_gives_model_format_harness_tasks_and_length(
    qwen_model: Path, tmp_path: Path, seen: list, capsys: pytest.CaptureFixture
) -> None:
    cfg = tmp_path / "run.yaml"
    cfg.write_text(
        f"model: {qwen_model}\ntool_format: native\ntool_parser: hermes\nheld_out_eval: test\n"
        "max_completion_length: 3\nharness:\n  system_prompt: Answer with one call.\n"
    )
    assert main(["eval", "--config", str(cfg), "--limit", "1", "--json"]) == 0
    (call,) = seen
    env = call["env"]
    assert (
        isinstance(env, NativeEnv) and env.parser == "hermes" and env.system_prompt == "Answer with one call."
    )
    assert call["max_new_tokens"] == 3 and call["tasks"][0].split == "test"
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["n"] == 1
    # The flags override the file: the JSON harness, tool_call_eval tasks, 2 tokens.
    assert (
        main(
            [
                "eval",
                "--config",
                str(cfg),
                "--tool-format",
                "json",
                "--tasks",
                "tool_call_eval",
                "--max-new-tokens",
                "2",
                "--limit",
                "1",
                "--json",
            ]
        )
        == 0
    )
    assert not isinstance(seen[1]["env"], NativeEnv) and seen[1]["max_new_tokens"] == 2
    assert seen[1]["tasks"][0].split == "held_out"


def test_bad_config_and_a_template_without_tools_are_clear_errors(
    tiny_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(f"model: {tiny_model}\ntool_formt: native\n")
    assert main(["eval", "--config", str(cfg)]) == 2
    assert f"{cfg}:2: unknown key 'tool_formt'; did you mean 'tool_format'?" in capsys.readouterr().err
    # The tiny Llama's template renders no tools: native needs a parser named or a template that has one.
    assert main(["eval", "--model", str(tiny_model), "--tool-format", "native", "--limit", "1"]) == 2
    err = capsys.readouterr().err
    assert "error: workbench eval: tool_format native:" in err and "tool_parser" in err
