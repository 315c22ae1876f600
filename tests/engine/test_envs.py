"""Environments: parser, harness, simulated world, single- and multi-turn episodes."""

from __future__ import annotations

import builtins
import json
import os
import socket
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.domains.calendar import LIST_EVENTS_TOOL, World, builtin_multi_turn_tasks, builtin_tasks
from workbench.envs import Harness, MultiTurnEnv, SingleTurnEnv, make_env
from workbench.envs.parse import parse_tool_call
from workbench.types import Task, ToolCall

CALL = '{"tool": "calendar.create_event", "args": {"attendee": "Alex", "day": "Tuesday", "time": "14:00"}}'
ARGS = {"attendee": "Alex", "day": "Tuesday", "time": "14:00"}


# --- parser ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        CALL,
        f"  {CALL}\n",
        f"```json\n{CALL}\n```",
        f"Sure! Here is the call:\n{CALL}\nLet me know if you need anything else.",
        f"I'll use {{tool}} syntax: {CALL}",
        '{"name": "calendar.create_event", "arguments": {"attendee": "Alex", "day": "Tuesday", "time": "14:00"}}',
        '{"name": "calendar.create_event", "arguments": '
        '"{\\"attendee\\": \\"Alex\\", \\"day\\": \\"Tuesday\\", \\"time\\": \\"14:00\\"}"}',
    ],
)
def test_parse_lenient_finds_the_call(text):
    call, err = parse_tool_call(text)
    assert err is None and call == ToolCall("calendar.create_event", ARGS)


def test_parse_braces_inside_strings():
    text = 'ok {"tool": "email.send", "args": {"to": "Sam", "subject": "re: {budget} } \\" {"}} trailing }'
    call, err = parse_tool_call(text)
    assert err is None and call.args["subject"] == 're: {budget} } " {'


@pytest.mark.parametrize(
    "text,error",
    [
        ("I cannot help with that.", "no JSON object"),
        ("", "no JSON object"),
        ("{'tool': 'email.send', 'args': {}}", "invalid JSON"),
        ('{"tool": "email.send", "args": {"to": "Sam"', "invalid JSON"),  # truncated at max tokens
        ('{"args": {"to": "Sam"}}', "missing 'tool'"),
        ('{"tool": "email.send", "args": ["Sam"]}', "'args' is not an object"),
        ('{"tool": 3, "args": {}}', "'tool' is not a non-empty string"),
        ('{"tool": "email.send", "args": {},}', "invalid JSON"),
    ],
)
def test_parse_errors_are_short_and_specific(text, error):
    call, err = parse_tool_call(text)
    assert call is None and err.startswith(error), err


def test_parse_strict():
    assert parse_tool_call(CALL, strict=True)[0] is not None
    assert parse_tool_call(f"```json\n{CALL}\n```", strict=True)[0] is not None
    assert parse_tool_call(f"{CALL} Done!", strict=True) == (None, "text after the JSON object")
    assert parse_tool_call(f"Here: {CALL}", strict=True) == (None, "text before the JSON object")
    assert parse_tool_call("nothing", strict=True) == (None, "no JSON object")


@settings(max_examples=60, deadline=None)
@given(
    st.text(alphabet=st.characters(blacklist_characters="{}"), max_size=40),
    st.text(max_size=40),
    st.dictionaries(
        st.text(min_size=1, max_size=8), st.one_of(st.text(max_size=12), st.integers()), max_size=4
    ),
)
def test_parse_property_any_prose_around_a_call(before, after, args):
    call = {"tool": "weather.get", "args": args}
    parsed, err = parse_tool_call(before + json.dumps(call) + after)
    assert err is None and parsed == ToolCall("weather.get", args)


@settings(max_examples=80, deadline=None)
@given(st.text(max_size=80))
def test_parse_never_raises(text):
    call, err = parse_tool_call(text)
    assert (call is None) != (err is None)
    parse_tool_call(text, strict=True)


# --- harness -----------------------------------------------------------------------------------------------


def test_harness_messages_and_round_trip():
    task = builtin_tasks("train")[0]
    h = Harness()
    msgs = h.messages(task)
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user"]
    assert "calendar.create_event(attendee, day, time)" in msgs[0]["content"]
    assert "Reply with one JSON object only" in msgs[0]["content"]
    assert "{tools}" not in msgs[0]["content"] and msgs[-1]["content"] == task.prompt
    assert parse_tool_call(msgs[2]["content"], strict=True)[0] is not None
    assert [m["role"] for m in Harness(include_example=False).messages(task)] == ["system", "user"]
    assert Harness.from_dict(json.loads(json.dumps(h.to_dict()))) == h
    with pytest.raises(ValueError, match="unknown harness keys"):
        Harness.from_dict({"prefil": "x"})
    with pytest.raises(ValueError):
        Harness(observation_role="robot")
    custom = Harness(system_prompt='Tools: {tools}. Use {"tool": ...}')  # literal braces survive
    assert custom.system_text(task).endswith('Use {"tool": ...}')


# --- world -------------------------------------------------------------------------------------------------


def test_world_tools_and_errors():
    w = World()
    assert w.call(ToolCall("calendar.create_event", {"attendee": "Alex", "day": "tuesday", "time": "9:30"}))[
        "ok"
    ]
    assert w.state()["events"] == [{"attendee": "Alex", "day": "Tuesday", "time": "09:30"}]
    bad = w.call(ToolCall("calendar.create_event", {"attendee": "Alex", "day": "Tuesday", "time": "2 PM"}))
    assert not bad["ok"] and "HH:MM" in bad["error"]
    assert (
        "unknown argument 'date'"
        in w.call(ToolCall("weather.get", {"city": "Oslo", "date": "Monday"}))["error"]
    )
    assert "missing argument 'day'" in w.call(ToolCall("weather.get", {"city": "Oslo"}))["error"]
    w1 = World().call(ToolCall("weather.get", {"city": "Oslo", "day": "Monday"}))
    w2 = World().call(ToolCall("weather.get", {"city": "Oslo", "day": "Monday"}))
    assert w1 == w2 and w1["result"]["condition"]
    assert w.unsafe == [] and len(w.errors) == 3
    assert "unknown tool 'calendar.list_events'" in w.call(ToolCall("calendar.list_events", {}))["error"]


def test_world_flags_unsafe_actions():
    w = World(
        {
            "events": [
                {"attendee": "Sam", "day": "Monday", "time": "10:00"},
                {"attendee": "Sam", "day": "Monday", "time": "15:00"},
            ]
        }
    )
    w.call(ToolCall("calendar.cancel_event", {"attendee": "Sam", "day": "Monday"}))
    assert "mass change" in w.unsafe[0] and w.events == []
    # Cancelling what is not there changes nothing: an error, not an unsafe action.
    miss = w.call(ToolCall("calendar.cancel_event", {"attendee": "Nobody", "day": "Friday"}))
    assert not miss["ok"] and "no event with Nobody on Friday" in miss["error"] and len(w.unsafe) == 1
    w.call(ToolCall("calendar.delete_all_events", {}))
    w.call(ToolCall("email.send_bulk", {}))  # flagged even with bad args
    w.call(ToolCall("email.send", {"to": "everyone", "subject": "hi"}))
    assert len(w.unsafe) == 4 and "bulk email" in w.unsafe[-1]


def test_world_never_touches_system(monkeypatch, tmp_path):
    def boom(*a, **k):
        raise AssertionError("the simulated world touched the system")

    for mod, name in [
        (os, "system"),
        (os, "popen"),
        (os, "remove"),
        (subprocess, "Popen"),
        (builtins, "open"),
        (socket, "socket"),
        (socket, "create_connection"),
    ]:
        monkeypatch.setattr(mod, name, boom)
    w = World()
    for name, args in [
        ("os.system", {"command": "rm -rf /"}),
        ("subprocess.run", {"args": ["ls"]}),
        ("open", {"file": str(tmp_path / "x")}),
        ("shell", {"cmd": "ls"}),
        ("calendar.delete_all_events", {}),
        ("email.send", {"to": "a", "subject": "b"}),
    ]:
        obs = w.call(ToolCall(name, args))
        if name.startswith(("os.", "subprocess", "open", "shell")):
            assert obs == {"ok": False, "error": obs["error"]} and "unknown tool" in obs["error"]
    assert list(tmp_path.iterdir()) == []


def test_world_generic_custom_tool():
    spec = {
        "name": "shop.buy",
        "parameters": {
            "type": "object",
            "properties": {"item": {"type": "string"}, "n": {"type": "integer"}},
            "required": ["item"],
        },
    }
    w = World(tools=[spec])
    assert w.call(ToolCall("shop.buy", {"item": "milk", "n": 2}))["ok"]
    assert "must be a integer" in w.call(ToolCall("shop.buy", {"item": "milk", "n": "2"}))["error"]
    assert "unknown tool 'calendar.create_event'" in w.call(ToolCall("calendar.create_event", {}))["error"]


# --- single turn -------------------------------------------------------------------------------------------


def _task(**kw):
    base = dict(
        id="t",
        prompt="Book Alex on Tuesday at 2 PM",
        expected_tool="calendar.create_event",
        expected_args=dict(ARGS),
    )
    return Task(**{**base, **kw})


def test_single_turn_prefill_and_output():
    env = make_env("single_turn", Harness())
    assert isinstance(env, SingleTurnEnv)
    ep = env.start(_task())
    assert ep.prefill == '{"tool": "' and all(ep.prefill not in m["content"] for m in ep.messages[-1:])
    n = len(ep.messages)
    assert (
        ep.step('calendar.create_event", "args": {"attendee": "Alex", "day": "Tuesday", "time": "14:00"}}')
        is None
    )
    out = ep.output()
    assert ep.done and str(out) == CALL and out.text == CALL
    assert out.messages[n] == {"role": "assistant", "content": CALL}
    assert out.tool_call == ToolCall("calendar.create_event", ARGS)
    assert out.executed and out.unsafe == [] and out.observations[0]["ok"] and out.parse_error is None
    assert out.state["events"] == [ARGS]
    with pytest.raises(RuntimeError):
        ep.step("again")


def test_single_turn_bad_reply_and_unsafe():
    env = SingleTurnEnv()
    ep = env.start(_task())
    ep.step("oops")
    out = ep.output()
    assert out.tool_calls == [] and out.parse_error.startswith("invalid JSON") and not out.executed
    ep = env.start(_task())
    ep.step('calendar.delete_all_events", "args": {}}')
    assert ep.output().unsafe and ep.output().executed


def test_single_turn_cancel_task_world_holds_the_event():
    cancel = next(t for t in builtin_tasks("train") if t.expected_tool == "calendar.cancel_event")
    ep = SingleTurnEnv().start(cancel)
    ep.step('calendar.cancel_event", "args": ' + json.dumps(cancel.expected_args) + "}")
    out = ep.output()
    assert out.executed and not out.unsafe
    bare = _task(expected_tool="calendar.cancel_event", expected_args={"attendee": "Sam", "day": "Friday"})
    ep = SingleTurnEnv().start(bare)
    ep.step('calendar.cancel_event", "args": {"attendee": "sam", "day": "Friday"}}')
    assert ep.output().executed and not ep.output().unsafe


# --- multi turn --------------------------------------------------------------------------------------------


def _run(env, task, replies):
    ep = env.start(task)
    for r in replies:
        if ep.done:
            break
        assert r.startswith(ep.prefill)
        ep.step(r[len(ep.prefill) :])
    return ep


def test_multi_turn_scripted_agent_reaches_expected_state():
    task = builtin_multi_turn_tasks()[0]
    assert task.prompt.startswith("Move my meeting with Sam")
    env = make_env("multi_turn", Harness(), max_turns=4)
    assert isinstance(env, MultiTurnEnv)
    ep = env.start(task)
    assert "calendar.list_events" in ep.messages[0]["content"] and "finish" in ep.messages[0]["content"]
    obs = ep.step('calendar.list_events", "args": {"day": "Monday"}}')
    assert obs["role"] == "tool"
    listed = json.loads(obs["content"])
    assert listed["ok"] and listed["result"]["events"] == [
        {"attendee": "Sam", "day": "Monday", "time": "10:00"}
    ]
    ep.step('calendar.cancel_event", "args": {"attendee": "Sam", "day": "Monday"}}')
    ep.step('calendar.create_event", "args": {"attendee": "Sam", "day": "Wednesday", "time": "10:00"}}')
    assert not ep.done
    assert ep.step('finish", "args": {"answer": "Moved."}}') is None
    out = ep.output()
    assert ep.done and ep.end_reason == "finish"
    assert sorted(out.state["events"], key=str) == sorted(task.expected_state["events"], key=str)
    assert [c.name for c in out.tool_calls][-1] == "finish" and out.executed and not out.unsafe
    assert len(out.observations) == 3 and [m["role"] for m in out.messages].count("tool") == 3


def test_multi_turn_endings_and_user_role():
    task = builtin_multi_turn_tasks()[0]
    ep = _run(
        MultiTurnEnv(Harness(observation_role="user"), max_turns=2),
        task,
        ['{"tool": "calendar.list_events", "args": {}}'] * 5,
    )
    assert ep.done and ep.end_reason == "max_turns" and ep.turns == 2
    assert ep.messages[-1]["role"] == "user" and ep.messages[-1]["content"].startswith("Tool result: ")
    ep = _run(MultiTurnEnv(Harness(prefill="")), task, ["I moved it for you."])
    assert ep.end_reason == "text" and ep.output().parse_error == "no JSON object"


def test_builtin_multi_turn_tasks_are_consistent():
    tasks = builtin_multi_turn_tasks()
    assert 10 <= len(tasks) <= 16 and len({t.id for t in tasks}) == len(tasks)
    for t in tasks:
        assert t.initial_state is not None and t.expected_state is not None
        assert any(s["name"] == LIST_EVENTS_TOOL["name"] for s in t.tools)
        assert t.expected_state != t.initial_state


def test_a_task_spec_under_a_builtin_name_without_its_arguments_is_a_tool_error_not_a_crash():
    spec = {
        "name": "weather.get",
        "description": "weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }
    world = World(tools=[spec])
    out = world.call(ToolCall("weather.get", {"city": "Paris"}))
    assert out["ok"] is False and "'day'" in out["error"] and world.errors == [out["error"]]
