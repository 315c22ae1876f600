"""builtin:calendar_agent against a real MCP server (examples/mcp_agent/server.py, over stdio): every episode
starts from the task's initial_state (`seed_tool`), the server's final state is read back (`state_tool`), and
the agent_state verifier must give each episode exactly the score and success it gets in the built-in
multi-turn env. A server start costs about a second, so the environment is module-wide."""

from __future__ import annotations

import ast
import dataclasses
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed: pip install 'agent-workbench[mcp]'")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "mcp_agent"
sys.path[:0] = [str(ROOT / "bench"), str(EXAMPLE)]

import agent_fixed_sequences as fixed  # noqa: E402
from reading_policy import MAX_TURNS, play  # noqa: E402  (the example's own side-by-side script)

from workbench.config import ConfigError, McpServerConfig, load_config  # noqa: E402
from workbench.domains.calendar.agent_tasks import KINDS, generate  # noqa: E402
from workbench.envs import McpEnv, MultiTurnEnv  # noqa: E402
from workbench.envs.mcp_env import McpConfigError  # noqa: E402
from workbench.mcp.check import check_mcp_servers  # noqa: E402
from workbench.types import Output, Task, ToolCall  # noqa: E402
from workbench.verifiers.agent_state import reward  # noqa: E402
from workbench.verifiers.metrics import classify  # noqa: E402

CONFIG = EXAMPLE / "config.yaml"


def server_config(**changes: Any) -> McpServerConfig:
    """The example config's server section, its script by absolute path (the tests run from anywhere)."""
    cfg = load_config(CONFIG).mcp_servers["agent"]
    return dataclasses.replace(cfg, args=[str(EXAMPLE / "server.py")], pool_size=1, **changes)


@pytest.fixture(scope="module")
def mcp() -> McpEnv:
    env = McpEnv(None, {"agent": server_config()}, max_turns=MAX_TURNS)
    yield env
    env.close()


def judged(out: Output, task: Task) -> tuple[Any, ...]:
    score = reward(out, task)
    return score.total, score.parts, classify(out, task)


def tasks_of_each_kind(n: int) -> list[tuple[Task, dict[str, Any]]]:
    """The first `n` validation tasks of every kind (both branches of a branched kind: they alternate)."""
    tasks = generate("held_out")
    return [pair for kind in KINDS for pair in [(t, s) for t, s in tasks if s["kind"] == kind][:n]]


def test_the_server_is_an_independent_implementation():
    tree = ast.parse((EXAMPLE / "server.py").read_text())
    imported = {n.name for node in ast.walk(tree) if isinstance(node, ast.Import) for n in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert "mcp.server.lowlevel" in imported and not any(m.split(".")[0] == "workbench" for m in imported)


def test_the_server_offers_the_built_in_tools_so_the_prompt_is_the_same(mcp):
    task, _ = generate("held_out")[0]
    assert mcp.start(task).messages == MultiTurnEnv(max_turns=MAX_TURNS).start(task).messages
    assert "calendar.create_event(attendee, day, time)" in mcp.start(task).messages[0]["content"]


def task_id(x: Any) -> str:
    return x.id if isinstance(x, Task) else ""


@pytest.mark.parametrize("task, slots", tasks_of_each_kind(4), ids=task_id)
def test_the_reading_policy_scores_the_same_through_the_mcp_server(mcp, task, slots):
    builtin = MultiTurnEnv(max_turns=MAX_TURNS)
    policy = lambda seen: fixed.reading_calls(task, slots, seen)  # noqa: E731
    want, got = play(builtin, task, policy), play(mcp, task, policy)
    assert got.error is None and got.state == want.state  # in the same order, too
    assert got.observations == want.observations  # the same results, read the same way
    assert judged(got, task) == judged(want, task)
    assert reward(got, task).total == 1.0 and classify(got, task)["success"]


def loose(time: str) -> str:
    """The same clock time written loosely: "09:15" -> "9:15", "14:15" -> "14:15:00" (both accepted)."""
    return time[1:] if time.startswith("0") else time + ":00"


MISTAKES = {  # what an untrained model gets wrong, as call sequences on the first validation task
    "a bad day and time, then right": lambda s, ev: [
        ToolCall("calendar.cancel_event", {"attendee": s["name"], "day": s["day1"][:3]}),
        ToolCall("calendar.create_event", {"attendee": s["name"], "day": s["day2"], "time": "2 PM"}),
        ToolCall("calendar.cancel_event", {"attendee": s["name"].lower(), "day": s["day1"].upper()}),
        ToolCall(
            "calendar.create_event",
            {"attendee": f" {s['name']} ", "day": s["day2"], "time": loose(ev["time"])},
        ),
    ],
    "an unknown argument, a wrong type, a missing one": lambda s, ev: [
        ToolCall("calendar.list_events", {"date": s["day1"]}),
        ToolCall("calendar.create_event", {"attendee": s["name"], "day": s["day2"], "time": 1400}),
        ToolCall("email.send", {"to": s["name"]}),
    ],
    "an unknown tool and a repeat": lambda s, ev: [
        ToolCall("calendar.move_event", {"attendee": s["name"]}),
        ToolCall("calendar.list_events", {}),
        ToolCall("calendar.list_events", {}),
    ],
    "a bulk email": lambda s, ev: [ToolCall("email.send", {"to": "everyone", "subject": "Moved"})],
    "one cancel that removes two meetings": lambda s, ev: [
        ToolCall("calendar.create_event", {"attendee": s["name"], "day": s["day1"], "time": "07:00"}),
        ToolCall("calendar.cancel_event", {"attendee": s["name"], "day": s["day1"]}),
    ],
}


@pytest.mark.parametrize("mistake", list(MISTAKES))
def test_mistakes_score_the_same_through_the_mcp_server(mcp, mistake):
    """Tool errors, wasted calls and the server's own unsafe flags (a bulk email, a mass cancel) reach the
    verifier as they do in the built-in env: same observations' outcome, same state, same score."""
    task, slots = tasks_of_each_kind(1)[0]  # a reschedule
    events = task.initial_state["events"]
    [event] = [e for e in events if e["attendee"] == slots["name"] and e["day"] == slots["day1"]]
    calls = MISTAKES[mistake](slots, event)
    script = lambda seen: calls[len(seen)] if len(seen) < len(calls) else None  # noqa: E731
    want, got = play(MultiTurnEnv(max_turns=MAX_TURNS), task, script), play(mcp, task, script)
    assert got.error is None and got.state == want.state
    assert [o["ok"] for o in got.observations] == [o["ok"] for o in want.observations]
    assert bool(got.unsafe) == bool(want.unsafe) and got.unsafe == want.unsafe
    assert judged(got, task) == judged(want, task)


def test_a_dangerous_tool_scores_the_same_but_is_never_run(mcp):
    """The built-in World runs a dangerous tool and flags it; the MCP env refuses to run it. Both are unsafe
    (-1, no success); only the MCP server's calendar is still there."""
    task, _ = tasks_of_each_kind(1)[0]
    script = lambda seen: ToolCall("calendar.delete_all_events", {}) if not seen else None  # noqa: E731
    want, got = play(MultiTurnEnv(max_turns=MAX_TURNS), task, script), play(mcp, task, script)
    assert want.unsafe and got.unsafe == ["called calendar.delete_all_events, marked dangerous (not run)"]
    assert reward(got, task).total == reward(want, task).total == -1.0
    assert not classify(got, task)["success"] and not classify(want, task)["success"]
    assert want.state["events"] == [] and got.state == task.initial_state


# ---- the seed tool: a wrong one is named by its key ------------------------------------------------------


def test_a_state_the_seed_tool_refuses_ends_the_episode_naming_the_key(mcp):
    task, _ = tasks_of_each_kind(1)[0]
    bad = dataclasses.replace(task, initial_state={**task.initial_state, "contacts": ["Ana"]})
    ep = mcp.start(bad)
    assert ep.step('calendar.list_events", "args": {}}') is None and ep.end_reason == "server"
    out = ep.output()
    assert out.error.startswith(
        f"mcp_servers.agent.seed_tool: load_state refused task {task.id}'s "
        "initial_state: unknown argument 'contacts'"
    )
    assert out.state is None
    again = play(mcp, task, lambda seen: None if seen else ToolCall("calendar.list_events", {}))
    assert again.error is None and again.observations[0]["result"]["events"] == task.initial_state["events"]


def test_a_seed_tool_the_server_lacks_or_the_model_could_call_is_a_config_error():
    with pytest.raises(McpConfigError, match=r"^mcp_servers\.agent\.seed_tool: load_stat not offered by"):
        McpEnv(None, {"agent": server_config(seed_tool="load_stat")})
    with pytest.raises(ConfigError, match=r"^seed_tool: load_state is in tools \(the allowlist\)"):
        server_config(tools=[*server_config().tools, "load_state"])


def test_the_check_before_a_run_seeds_the_first_task_and_names_the_line(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # the example's paths are relative to the repository root
    check_mcp_servers(load_config(CONFIG), CONFIG)  # the example passes
    text = CONFIG.read_text()
    assert "seed_tool: load_state " in text
    path = tmp_path / "config.yaml"
    path.write_text(text.replace("seed_tool: load_state ", "seed_tool: reset "))  # takes no arguments
    line = next(i for i, s in enumerate(path.read_text().splitlines(), 1) if "seed_tool:" in s)
    with pytest.raises(
        ConfigError,
        match=rf"^{path}:{line}: mcp_servers\.agent\.seed_tool: reset refused "
        r"task \S+'s initial_state: unknown argument 'events' for reset",
    ):
        check_mcp_servers(load_config(path), path)
