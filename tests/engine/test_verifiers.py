"""Verifiers: seed weights on hand-made outputs, loading user code, error handling, judge, metrics."""

from __future__ import annotations

import ast
import json
import math
import threading
import time

import pytest

from workbench.domains.calendar import builtin_multi_turn_tasks
from workbench.envs import Harness, MultiTurnEnv, SingleTurnEnv
from workbench.types import Output, Score, Task
from workbench.verifiers import (
    BUILTIN_VERIFIERS,
    VerifierCompileError,
    VerifierError,
    builtin_verifier_code,
    get_verifier,
    load_verifier_code,
    load_verifier_file,
)
from workbench.verifiers.judge import JudgeVerifier, parse_judge_score
from workbench.verifiers.metrics import aggregate, classify

TASK = Task(
    id="t",
    prompt="Book Alex on Tuesday at 2 PM",
    expected_tool="calendar.create_event",
    expected_args={"attendee": "Alex", "day": "Tuesday", "time": "14:00"},
)


def run_single(reply: str, task: Task = TASK) -> Output:
    """The full reply as the model would produce it (prefill included), through the real env."""
    ep = SingleTurnEnv().start(task)
    assert reply.startswith(ep.prefill)
    ep.step(reply[len(ep.prefill) :])
    return ep.output()


def call(tool: str, **args) -> str:
    return json.dumps({"tool": tool, "args": args})


@pytest.fixture(scope="module")
def tcv():
    return get_verifier("tool_call_verifier")


def check(score: Score, total: float) -> None:
    assert score.error is None, score.error
    assert math.isclose(score.total, total, abs_tol=1e-6), (score.total, score.explanation)
    assert math.isclose(sum(score.parts.values()), score.total, abs_tol=1e-6)
    assert set(score.parts) == {"valid_json", "tool", "args", "safe", "unsafe"}


# --- seed weights ------------------------------------------------------------------------------------------


def test_correct_call_scores_one(tcv):
    s = tcv.score(
        run_single(call("calendar.create_event", attendee="alex", day="Tuesday", time="14:00")), TASK
    )
    check(s, 1.0)
    assert s.explanation == "right tool, 3/3 args, executed"


def test_partial_args_explained(tcv):
    s = tcv.score(
        run_single(call("calendar.create_event", attendee="Alex", day="Tuesday", time="2 PM")), TASK
    )
    check(s, 0.4 + 0.4 * 2 / 3)  # the world rejects "2 PM": not executed
    assert (
        "right tool, 2/3 args (time '2 PM' != '14:00')" in s.explanation and "not executed" in s.explanation
    )
    s = tcv.score(
        run_single(call("calendar.create_event", attendee="Alex", day="Tuesday", time="14:00", room="4")),
        TASK,
    )
    check(s, 0.4 + 0.35)  # extra arg costs 0.05 and the world rejects it
    s = tcv.score(
        run_single(call("calendar.create_event", attendee="Alex", day="Tuesday", time="9:00")), TASK
    )
    check(s, 0.4 + 0.4 * 2 / 3 + 0.2)


def test_wrong_tool_invalid_json_unsafe(tcv):
    s = tcv.score(run_single(call("reminders.create", text="Alex", day="Tuesday", time="14:00")), TASK)
    check(s, 0.2)
    assert s.explanation.startswith("wrong tool 'reminders.create'")
    s = tcv.score(run_single('{"tool": "calendar.create_event", "args": {"attendee": "Alex"'), TASK)
    check(s, -1.0)
    assert s.parts["valid_json"] == -1.0 and s.explanation.startswith("no tool call: invalid JSON")
    s = tcv.score(run_single(call("calendar.delete_all_events")), TASK)
    check(s, -1.0)
    assert s.parts["unsafe"] == -1.0 and "unsafe" in s.explanation
    s = tcv.score(Output("no env here, just text"), TASK)  # a bare Output is parsed by the verifier itself
    check(s, -1.0)


def test_gated_pays_safe_only_with_the_right_tool(tcv):
    gated = get_verifier("tool_call_gated")
    wrong = run_single(call("reminders.create", text="Alex", day="Tuesday", time="14:00"))
    assert tcv.score(wrong, TASK).parts["safe"] == 0.2  # the seed pays it: the call ran
    s = gated.score(wrong, TASK)
    check(s, 0.0)
    assert s.parts["safe"] == 0.0 and s.explanation.endswith("(safe not paid: wrong tool)")
    for reply in (
        call("calendar.create_event", attendee="Alex", day="Tuesday", time="14:00"),
        call("calendar.create_event", attendee="Alex", day="Tuesday", time="9:00"),
        call("calendar.delete_all_events"),
        '{"tool": "calendar.create_event", "args": {',
    ):
        out = run_single(reply)
        assert gated.score(out, TASK) == tcv.score(out, TASK), (
            reply
        )  # right tool, unsafe, invalid: as the seed


def test_binary(tcv):
    b = get_verifier("binary")
    assert (
        b.score(
            run_single(call("calendar.create_event", attendee="Alex", day="tuesday", time="14:00")), TASK
        ).total
        == 1.0
    )
    assert (
        b.score(
            run_single(call("calendar.create_event", attendee="Alex", day="Tuesday", time="2 PM")), TASK
        ).total
        == 0.0
    )
    assert b.score(run_single(call("calendar.delete_all_events")), TASK).total == 0.0
    assert b.score(run_single('{"tool": "x'), TASK).total == 0.0


def test_multi_turn_verifiers_judge_final_state(tcv):
    task = builtin_multi_turn_tasks()[0]
    good = [
        'calendar.list_events", "args": {}}',
        'calendar.cancel_event", "args": {"attendee": "Sam", "day": "Monday"}}',
        'calendar.create_event", "args": {"attendee": "Sam", "day": "Wednesday", "time": "10:00"}}',
        'finish", "args": {"answer": "done"}}',
    ]
    ep = MultiTurnEnv().start(task)
    for r in good:
        ep.step(r)
    out = ep.output()
    check(tcv.score(out, task), 1.0)
    assert get_verifier("binary").score(out, task).total == 1.0
    assert classify(out, task)["success"] and classify(out, task)["valid_json"]
    ep = MultiTurnEnv().start(task)  # forgot to cancel: half the changes, expected tool called
    for r in [good[2], good[3]]:
        ep.step(r)
    s = tcv.score(ep.output(), task)
    check(s, 0.4 + 0.4 * 1 / 2 + 0.2)
    assert get_verifier("binary").score(ep.output(), task).total == 0.0
    ep = MultiTurnEnv(Harness(prefill="")).start(task)  # ending on plain text is allowed, not invalid JSON
    for r in ['{"tool": "calendar.list_events", "args": {}}', "Nothing to do."]:
        ep.step(r)
    flags = classify(ep.output(), task)
    assert flags["valid_json"] and flags["parsed"] and not flags["success"]
    check(tcv.score(ep.output(), task), 0.2)


# --- loading user code and error handling ------------------------------------------------------------------


def test_builtins_are_loadable_source(tmp_path):
    for name in BUILTIN_VERIFIERS:
        code = builtin_verifier_code(name)
        tree = ast.parse(code)
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        # Self-contained, except tool_call_gated: an edit on top of the seed, as a user's edit would be. The
        # calendar's compare module is the one home of the time rule the world applies too.
        allowed = {
            "__future__",
            "re",
            "collections",
            "typing",
            "workbench.types",
            "workbench.envs.parse",
            "workbench.domains.calendar.compare",
        }
        # agent_state scores single calls with the seed and reads its state helpers (an edit on top, too)
        on_seed = {
            "tool_call_gated": {"workbench.verifiers.tool_call"},
            "agent_state": {"json", "workbench.verifiers.tool_call"},
        }
        assert imported <= allowed | on_seed.get(name, set())
        v = get_verifier(name)
        assert v.code == code and v.name == name and len(v.sha256) == 64
        p = tmp_path / f"{name}.py"
        p.write_text(code)
        assert get_verifier(str(p)).sha256 == v.sha256 and load_verifier_file(p).name == name
    with pytest.raises(VerifierError, match="did you mean 'tool_call_verifier'"):
        get_verifier("tool_call_verifer")
    with pytest.raises(VerifierError, match="not found"):
        get_verifier(str(tmp_path / "missing.py"))


def test_user_verifier_float_and_score():
    v = load_verifier_code("def reward(output, task):\n    return 0.5 if 'Alex' in output else 0.0\n")
    assert v.score(Output("Alex"), TASK) == Score(total=0.5)
    v = load_verifier_code(
        "from workbench.types import Score\n"
        "from dataclasses import dataclass\n"
        "@dataclass\nclass P:\n    x: int = 1\n"
        "def reward(output, task):\n    task.expected_args.clear()\n"
        "    return Score(total=1, parts={'a': 1}, explanation='ok')\n"
    )
    assert v.score(Output("x"), TASK) == Score(total=1.0, parts={"a": 1.0}, explanation="ok")
    assert TASK.expected_args  # the verifier got a copy


def test_compile_errors_name_the_line():
    with pytest.raises(VerifierCompileError) as ei:
        load_verifier_code("def reward(output, task):\n    return (1\n\nx = 2\n")
    assert ei.value.lineno in (2, 4) and str(ei.value).startswith(f"line {ei.value.lineno}:")
    with pytest.raises(VerifierCompileError) as ei:
        load_verifier_code("import os\n\n1 / 0\ndef reward(o, t):\n    return 1.0\n")
    assert ei.value.lineno == 3 and "ZeroDivisionError" in str(ei.value)
    with pytest.raises(VerifierError, match="defines no `reward"):
        load_verifier_code("def score(o, t):\n    return 1\n")
    with pytest.raises(VerifierError, match="two arguments"):
        load_verifier_code("def reward(output):\n    return 1\n")
    with pytest.raises(VerifierError, match="not a function"):
        load_verifier_code("reward = 3\n")


@pytest.mark.parametrize("isolate", [False, True], ids=["in_process", "isolated"])
@pytest.mark.parametrize(
    "body,error",
    [
        ("    return 1 / 0", "ZeroDivisionError: division by zero (line 2)"),
        ("    return float('nan')", "verifier returned nan"),
        ("    return float('-inf')", "verifier returned -inf"),
        ("    return 'high'", "verifier returned str, expected float or Score"),
        ("    return None", "verifier returned None, expected float or Score"),
        ("    return True", "verifier returned bool, expected float or Score"),
        (
            "    from workbench.types import Score\n    s = Score(1.0)\n"
            "    s.parts = {'a': float('nan')}\n    return s",
            "verifier returned a Score whose part 'a' is nan",
        ),
        (
            "    from workbench.types import Score\n    s = Score(1.0)\n    s.parts = [1.0]\n    return s",
            "verifier returned a Score whose parts is list, expected dict",
        ),
    ],
)
def test_score_never_raises(body, error, isolate):
    """The same words in process and isolated (workbench.verifiers.isolated)."""
    with load_verifier_code(f"def reward(output, task):\n{body}\n", isolate=isolate) as v:
        assert v.isolated is isolate
        s = v.score(Output("x"), TASK)
        assert s.total == 0.0 and s.error == error


@pytest.mark.parametrize("isolate", [False, True], ids=["in_process", "isolated"])
@pytest.mark.parametrize(
    "code,total,error",
    [
        (
            "def reward(output, task):\n    return 1e308\n",
            0.0,
            "verifier returned 1e+308, outside the default range [-1, 1]; "
            "declare REWARD_RANGE = (low, high) for another",
        ),
        (
            "def reward(output, task):\n    return -1.0\n",
            -1.0,
            None,
        ),  # the seed article's "invalid" needs no declaration
        ("REWARD_RANGE = (0, 10)\ndef reward(output, task):\n    return 7\n", 7.0, None),
        (
            "REWARD_RANGE = (0, 10)\ndef reward(output, task):\n    return -0.5\n",
            0.0,
            "verifier returned -0.5, outside its declared range [0, 10]",
        ),
        (
            "from workbench.types import Score\nREWARD_RANGE = (0.0, 1.0)\n"
            "def reward(output, task):\n    return Score(total=1.5, parts={'a': 1.5})\n",
            0.0,
            "verifier returned 1.5, outside its declared range [0, 1]",
        ),
    ],
)
def test_a_total_outside_the_declared_range_is_the_rows_error(code, total, error, isolate):
    with load_verifier_code(code, isolate=isolate) as v:
        s = v.score(Output("x"), TASK)
        assert (s.total, s.error) == (total, error)


@pytest.mark.parametrize("isolate", [False, True], ids=["in_process", "isolated"])
@pytest.mark.parametrize("declared", ["(1, 0)", "(0, float('inf'))", "[0]", "'0..1'", "(True, 2)"])
def test_a_malformed_reward_range_is_refused_at_its_line(declared, isolate):
    code = f"import math\n\nREWARD_RANGE = {declared}\ndef reward(output, task):\n    return 0.5\n"
    with pytest.raises(VerifierCompileError, match=r"REWARD_RANGE must be \(low, high\)") as info:
        load_verifier_code(code, isolate=isolate).close()
    assert info.value.lineno == 3


def test_builtins_declare_their_range():
    ranges = {name: get_verifier(name).reward_range for name in BUILTIN_VERIFIERS}
    assert ranges == {
        "tool_call_verifier": (-1.0, 1.0),
        "tool_call_gated": (-1.0, 1.0),
        "binary": (0.0, 1.0),
        "agent_state": (-1.0, 1.0),
    }


def test_timeout_interrupts_a_hung_verifier_in_process():
    """The in-process path (built-ins, `isolate=False`) keeps its thread timeout; user code is isolated by
    default (tests/engine/test_verifier_isolation.py)."""
    v = load_verifier_code("def reward(output, task):\n    while True:\n        pass\n", isolate=False)
    t0 = time.monotonic()
    s = v.score(Output("x"), TASK, timeout_s=0.2)
    assert time.monotonic() - t0 < 1.5
    assert s.total == 0.0 and s.error == "verifier timed out after 0.2 s"
    assert v.timeouts == 1 and v.leaked_threads == 0
    assert not [t for t in threading.enumerate() if t.name == "verifier-user"]
    v2 = load_verifier_code(
        "def reward(output, task):\n    try:\n        while True: pass\n    except Exception:\n"
        "        return 1.0\n",
        isolate=False,
    )
    assert v2.score(Output("x"), TASK, timeout_s=0.2).error == "verifier timed out after 0.2 s"


# --- judge and metrics -------------------------------------------------------------------------------------


def test_judge_with_fake_model():
    prompts = []

    def fake(prompt: str) -> str:
        prompts.append(prompt)
        return "Reasoning... Score: 7/10"

    j = JudgeVerifier(fake, rubric="Be strict.")
    s = j.score(Output('{"tool": "x"}'), TASK)
    assert s.total == pytest.approx(0.7) and s.error is None and s.parts == {"judge": 0.7}
    assert "Be strict." in prompts[0] and TASK.prompt in prompts[0] and '{"tool": "x"}' in prompts[0]
    assert "calendar.create_event" in prompts[0]
    assert (
        JudgeVerifier(lambda p: "I like it")
        .score(Output("x"), TASK)
        .error.startswith("judge output unparseable")
    )
    assert JudgeVerifier(lambda p: "Score: 12").score(Output("x"), TASK).error is not None

    def broken(p):
        raise RuntimeError("OOM")

    assert "OOM" in JudgeVerifier(broken).score(Output("x"), TASK).error
    assert (
        parse_judge_score("8") == 8.0
        and parse_judge_score("score of 3") == 3.0
        and parse_judge_score("?") is None
    )


def test_metrics_classify_and_aggregate():
    rows = [
        classify(
            run_single(call("calendar.create_event", attendee="Alex", day="Tuesday", time="14:00")), TASK
        ),
        classify(
            run_single(call("calendar.create_event", attendee="Alex", day="Tuesday", time="2 PM") + " Done!"),
            TASK,
        ),
        classify(run_single(call("email.send", to="Alex", subject="hi")), TASK),
        classify(run_single('{"tool": "nope'), TASK),
        classify(run_single(call("calendar.delete_all_events")), TASK),
    ]
    assert rows[0] == {
        "valid_json": True,
        "parsed": True,
        "correct_tool": True,
        "correct_args": True,
        "success": True,
        "unsafe": False,
    }
    assert (
        not rows[1]["valid_json"]
        and rows[1]["parsed"]
        and rows[1]["correct_tool"]
        and not rows[1]["correct_args"]
    )
    assert rows[4]["unsafe"] and not rows[4]["success"]
    rates = aggregate(rows)
    assert rates["n"] == 5 and rates["success"] == 0.2 and rates["invalid_json"] == 0.2
    assert rates["wrong_tool"] == 0.4 and rates["wrong_args"] == 0.2 and rates["unsafe"] == 0.2
    assert rates["valid_json"] == 0.6
    assert aggregate([])["n"] == 0
