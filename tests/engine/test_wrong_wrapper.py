"""A well-formed call in the wrong wrapper (a ```json fence, bare JSON where <tool_call> tags are expected, another
format's tags) is a format failure with that reason, counted apart from wrong tool / wrong args; the parsers stay
strict (no call is taken from such a reply)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from workbench.envs.native import NativeEnv
from workbench.envs.tool_parsers import NO_CALL, WRONG_WRAPPER, parse_reply
from workbench.eval import evaluate
from workbench.report import wrapper_rows
from workbench.testing import build_tiny_tokenizer
from workbench.types import Task
from workbench.verifiers.metrics import aggregate, classify
from workbench.verifiers.tool_call import reward

CALL = '{"name": "email.send", "arguments": {"to": "Bo", "subject": "Lunch"}}'
TASK = Task("t1", "Email Bo about lunch.", "email.send", {"to": "Bo", "subject": "Lunch"})
NO_CALL_TASK = Task("n1", "Thanks, that is all.", None, {}, dataset="calendar_calls")


@pytest.mark.parametrize(
    ("parser", "reply", "reason"),
    [
        (
            "hermes",
            f"```json\n{CALL}\n```",
            "a ```json fence, not <tool_call> tags",
        ),  # Qwen2.5-Coder untrained
        (
            "hermes",
            f"Sure, here it is:\n```\n{CALL}\n```\nAnything else?",
            "a ``` fence, not <tool_call> tags",
        ),
        ("hermes", CALL, "bare JSON, not <tool_call> tags"),
        ("hermes", f"[{CALL}, {CALL}]", "bare JSON, not <tool_call> tags"),
        ("hermes", '{"tool": "email.send", "args": {"to": "Bo"}}', "bare JSON, not <tool_call> tags"),
        ("hermes", f"<TOOLCALL>[{CALL}]</TOOLCALL>", "<TOOLCALL> tags, not <tool_call> tags"),
        ("llama3_json", f"<tool_call>\n{CALL}\n</tool_call>", "<tool_call> tags, not a bare JSON object"),
        ("llama3_json", f"```json\n{CALL}\n```", "a ```json fence, not a bare JSON object"),
        ("mistral", CALL, "bare JSON, not [TOOL_CALLS]"),
    ],
)
def test_a_call_in_the_wrong_wrapper_has_its_reason_and_no_call(parser: str, reply: str, reason: str) -> None:
    parsed = parse_reply(reply, parser)
    assert parsed.calls == [] and parsed.error == f"{WRONG_WRAPPER}: {reason}"


@pytest.mark.parametrize(
    ("parser", "reply"),
    [
        ("hermes", "I can't help with that."),
        ("hermes", '```json\n{"answer": 42}\n```'),  # JSON, but not a call
        (
            "hermes",
            '```json\n{"name": "email.send", "arguments": \n```',
        ),  # a broken call is not a well-formed one
        (
            "hermes",
            f"Call it like this: {CALL} and you are done.",
        ),  # bare JSON inside prose: not the whole reply
        ("llama3_json", "Nothing to do."),
    ],
)
def test_replies_without_a_well_formed_call_stay_no_call(parser: str, reply: str) -> None:
    assert parse_reply(reply, parser).error == NO_CALL


def test_the_right_wrapper_still_parses() -> None:
    parsed = parse_reply(f"<tool_call>\n{CALL}\n</tool_call>", "hermes")
    assert parsed.error is None and [c.name for c in parsed.calls] == ["email.send"]
    assert parse_reply(CALL, "llama3_json").error is None


def episode_output(reply: str, task: Task) -> object:
    episode = NativeEnv("hermes").start(task)
    episode.step(reply)
    return episode.output()


def test_classify_and_aggregate_count_wrapper_failures_apart() -> None:
    replies = [
        f"```json\n{CALL}\n```",  # wrong wrapper
        '<tool_call>\n{"name": "email.send", "arguments": {"to": \n</tool_call>',  # invalid JSON
        '<tool_call>\n{"name": "weather.get", "arguments": {"city": "Oslo"}}\n</tool_call>',  # wrong tool
        '<tool_call>\n{"name": "email.send", "arguments": {"to": "Al", "subject": "Lunch"}}\n</tool_call>',  # args
        f"<tool_call>\n{CALL}\n</tool_call>",  # right
    ]
    outputs = [episode_output(r, TASK) for r in replies]
    assert outputs[0].parse_error == f"{WRONG_WRAPPER}: a ```json fence, not <tool_call> tags"
    flags = [classify(o, TASK) for o in outputs]
    assert [f.get("wrong_wrapper", False) for f in flags] == [True, False, False, False, False]
    assert not flags[0]["parsed"] and not flags[0]["valid_json"] and not flags[0]["correct_tool"]
    rates = aggregate(flags)
    assert (
        rates["wrong_wrapper"],
        rates["invalid_json"],
        rates["wrong_tool"],
        rates["wrong_args"],
        rates["success"],
    ) == (0.2, 0.2, 0.2, 0.2, 0.2)
    assert reward(outputs[0], TASK).total == reward(episode_output("no call here", TASK), TASK).total


def test_a_wrapped_call_on_a_no_call_task_is_not_a_plain_answer() -> None:
    wrapped = episode_output(f"```json\n{CALL}\n```", NO_CALL_TASK)
    flags = classify(wrapped, NO_CALL_TASK)
    assert flags["wrong_wrapper"] and not flags["success"] and not flags["correct_tool"]
    assert reward(wrapped, NO_CALL_TASK).explanation.startswith(f"broken tool call: {WRONG_WRAPPER}")
    plain = episode_output("You're welcome!", NO_CALL_TASK)
    assert classify(plain, NO_CALL_TASK)["success"] and "wrong_wrapper" not in classify(plain, NO_CALL_TASK)


class FixedEngine:
    """Replies the same text to every prompt, as a real engine returns it (ids + text)."""

    def __init__(self, tok: object, text: str) -> None:
        self.tok, self.text = tok, text

    def generate(self, prompts: list, n: int, **kw: object) -> list:
        from workbench.types import Completion

        ids = self.tok(self.text, add_special_tokens=False)["input_ids"] + [self.tok.eos_token_id]
        return [
            [Completion(self.text, ids, [-0.5] * len(ids), "stop", list(p)) for _ in range(n)]
            for p in prompts
        ]


def test_eval_metrics_and_the_report_skill_table_show_the_wrapper_share() -> None:
    tok = build_tiny_tokenizer(512, "qwen2.5")
    tasks = [TASK, Task("t2", "Email Al about tea.", "email.send", {"to": "Al", "subject": "Tea"})]
    fenced = evaluate(
        FixedEngine(tok, f"```json\n{CALL}\n```"), tok, NativeEnv("hermes"), tasks, max_new_tokens=8
    )
    tagged = evaluate(
        FixedEngine(tok, f"<tool_call>\n{CALL}\n</tool_call>"),
        tok,
        NativeEnv("hermes"),
        tasks,
        max_new_tokens=8,
    )
    assert fenced.metrics["wrong_wrapper_rate"] == 1.0 and fenced.metrics["correct_tool_rate"] == 0.0
    assert tagged.metrics["wrong_wrapper_rate"] == 0.0 and tagged.metrics["success_rate"] == 0.5

    def row(eval_id: int, kind: str, metrics: dict) -> SimpleNamespace:
        return SimpleNamespace(
            kind=kind, promoted=False, eval=SimpleNamespace(id=eval_id, metric=metrics.get)
        )

    base, sft = row(1, "base", fenced.metrics), row(2, "sft", tagged.metrics)
    assert wrapper_rows([base, sft]) == [["wrong wrapper (share)", "2", "1.00", "0.00"]]
    assert wrapper_rows([sft]) == []  # no policy has any: no line
