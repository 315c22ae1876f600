"""`env: mcp` over real stdio MCP servers: the example calendar (examples/mcp_calendar/server.py) and a faulty one
(tests/mcp_faulty_server.py). A server start costs about a second here, so the environments are module-wide."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed: pip install 'agent-workbench[mcp]'")

import store  # noqa: E402
from workbench.config import ConfigError, McpServerConfig, config_from_dict, load_config  # noqa: E402
from workbench.envs import McpEnv  # noqa: E402
from workbench.envs.harness import DEFAULT_PREFILL  # noqa: E402
from workbench.envs.mcp_env import McpConfigError  # noqa: E402
from workbench.mcp.check import check_mcp_servers  # noqa: E402
from workbench.types import Task  # noqa: E402
from workbench.verifiers import load_verifier_file  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "mcp_calendar"
CALENDAR = dict(
    command="python",
    args=[str(EXAMPLE / "server.py")],
    tools=["create_event", "list_events", "delete_event", "clear_calendar"],
    dangerous=["clear_calendar"],
    state_tool="list_events",
)
FAULTY = dict(
    command="python",
    args=[str(ROOT / "tests" / "mcp_faulty_server.py")],
    tools=["echo", "hang", "fail", "die"],
    timeout_s=1.0,
)
TASK = Task(
    "t1",
    "Book a meeting with Ana on Monday at 09:00.",
    "create_event",
    {"attendee": "Ana", "day": "Monday", "time": "09:00"},
    expected_state={"events": [{"attendee": "Ana", "day": "Monday", "time": "09:00"}]},
)


def reply(tool: str, args: dict | None = None) -> str:
    """What the model generates after the harness's prefill for one JSON tool call."""
    text = json.dumps({"tool": tool, "args": args or {}})
    assert text.startswith(DEFAULT_PREFILL)
    return text[len(DEFAULT_PREFILL) :]


def observation(msg: dict) -> dict:
    assert msg["role"] == "tool"
    return json.loads(msg["content"])


@pytest.fixture(scope="module")
def calendar() -> McpEnv:  # processes reused between episodes, reset by the server's `reset` tool
    env = McpEnv(
        None, {"calendar": McpServerConfig(**CALENDAR, reset_tool="reset", pool_size=1)}, max_turns=4
    )
    yield env
    env.close()


@pytest.fixture(scope="module")
def faulty() -> McpEnv:  # a fresh process per episode
    env = McpEnv(None, {"faulty": McpServerConfig(**FAULTY, pool_size=1)}, max_turns=4)
    yield env
    env.close()


def test_tools_come_from_list_tools_narrowed_to_the_allowlist(calendar):
    specs = {s["name"]: s for s in calendar.specs}
    assert list(specs) == CALENDAR["tools"]  # `reset` is offered by the server, not allowlisted
    create = specs["create_event"]["parameters"]
    assert set(create["properties"]) == {"attendee", "day", "time"} and set(create["required"]) == {
        "attendee",
        "day",
        "time",
    }
    assert "weekday" in specs["create_event"]["description"]
    ep = calendar.start(TASK)
    system = ep.messages[0]["content"]
    assert (
        "create_event(attendee, day, time)" in system
        and "list_events(day?)" in system
        and "reset" not in system
    )
    ep.step(reply("finish"))


def test_calls_return_tool_messages_and_the_final_state(calendar):
    ep = calendar.start(TASK)
    obs = observation(ep.step(reply("create_event", TASK.expected_args)))
    assert obs["ok"] is True and obs["tool"] == "create_event"
    assert obs["result"] == {"id": "evt_1", **TASK.expected_args}
    listed = observation(ep.step(reply("list_events", {"day": "Monday"})))
    assert listed["result"] == [obs["result"]]
    assert ep.step(reply("finish", {"answer": "booked"})) is None and ep.done and ep.end_reason == "finish"
    out = ep.output()
    assert out.executed and out.error is None and not out.unsafe
    assert out.state == {"result": [obs["result"]]}  # the state tool, called after the episode
    assert [c.name for c in out.tool_calls] == ["create_event", "list_events", "finish"]
    score = load_verifier_file(EXAMPLE / "verifier.py", isolate=False).score(out, TASK)
    assert score.total == 1.0, score


def test_tool_errors_are_tool_results_and_the_episode_goes_on(calendar):
    ep = calendar.start(TASK)
    bad = observation(ep.step(reply("create_event", {"attendee": "Ana", "day": "Mon", "time": "9am"})))
    assert bad["ok"] is False and "day must be one of" in bad["error"]  # the tool's isError result
    unknown = observation(ep.step(reply("reset")))  # the server has it; the allowlist does not
    assert unknown["ok"] is False and "unknown tool 'reset'" in unknown["error"]
    missing = observation(ep.step(reply("delete_event")))  # no event_id: the SDK's argument validation
    assert missing["ok"] is False and "event_id" in missing["error"]
    ep.step(reply("finish"))
    out = ep.output()
    assert not out.executed and out.error is None and out.state == {"result": []}


def test_a_dangerous_tool_is_not_run_and_is_flagged_unsafe(calendar):
    ep = calendar.start(TASK)
    ep.step(reply("create_event", TASK.expected_args))
    refused = observation(ep.step(reply("clear_calendar")))
    assert refused["ok"] is False
    ep.step(reply("finish"))
    out = ep.output()
    assert out.unsafe == ["called clear_calendar, marked dangerous (not run)"]
    assert len(out.state["result"]) == 1  # the event is still there
    assert load_verifier_file(EXAMPLE / "verifier.py", isolate=False).score(out, TASK).total == -1.0


def test_each_episode_starts_from_a_reset_server(calendar):
    pool = calendar.pools["calendar"]
    first = calendar.start(TASK)
    pid = first._procs["calendar"].pid
    first.step(reply("create_event", TASK.expected_args))
    first.step(reply("finish"))
    second = calendar.start(TASK)
    assert second._procs["calendar"].pid == pid  # the same process, reused after `reset`
    assert observation(second.step(reply("list_events")))["result"] == []
    second.step(reply("finish"))
    assert pool.restarts == 0


def test_a_group_runs_side_by_side_with_separate_state(calendar):
    episodes = [calendar.start(TASK) for _ in range(3)]  # more than the pool's size: it grows
    assert len({ep._procs["calendar"].pid for ep in episodes}) == 3
    for i, ep in enumerate(episodes):
        ep.step(reply("create_event", {"attendee": f"P{i}", "day": "Friday", "time": "10:00"}))
    for i, ep in enumerate(episodes):
        assert [e["attendee"] for e in observation(ep.step(reply("list_events")))["result"]] == [f"P{i}"]
        ep.step(reply("finish"))


def test_restart_mode_gives_each_episode_a_fresh_process(faulty):
    a = faulty.start(TASK)
    pid_a = observation(a.step(reply("echo", {"text": "hi"})))["result"].split()[-1]
    a.step(reply("finish"))
    b = faulty.start(TASK)
    pid_b = observation(b.step(reply("echo", {"text": "hi"})))["result"].split()[-1]
    b.step(reply("finish"))
    assert pid_a != pid_b


def test_an_is_error_result_is_a_tool_error(faulty):
    ep = faulty.start(TASK)
    obs = observation(ep.step(reply("fail", {"reason": "disk full"})))
    assert obs == {"tool": "fail", "ok": False, "error": "Error executing tool fail: disk full"}
    ep.step(reply("finish"))
    assert ep.output().error is None


def test_a_long_tool_result_is_cut_to_max_result_chars_and_the_cut_is_recorded():
    env = McpEnv(None, {"faulty": McpServerConfig(**FAULTY, pool_size=1, max_result_chars=500)}, max_turns=4)
    try:
        ep = env.start(TASK)
        msg = ep.step(reply("echo", {"text": "x" * 100_000}))
        obs = observation(msg)
        assert obs["ok"] and obs["result"] == "x" * 500
        assert obs["truncated"].startswith("cut to the first 500 of 1000") and "'faulty'" in obs["truncated"]
        assert len(msg["content"]) < 1000  # what goes into the next prompt
        short = observation(ep.step(reply("echo", {"text": "hi"})))
        assert "truncated" not in short and short["result"].startswith("hi ")
        ep.step(reply("finish"))
        assert ep.output().observations[0]["truncated"] == obs["truncated"]  # recorded with the rollout
    finally:
        env.close()


def test_a_hung_server_fails_the_episode_and_is_restarted(faulty):
    pool = faulty.pools["faulty"]
    restarts = pool.restarts
    ep = faulty.start(TASK)
    pid = ep._procs["faulty"].pid
    assert ep.step(reply("hang", {"seconds": 60})) is None and ep.done and ep.end_reason == "server"
    out = ep.output()
    assert "hung: hang did not answer within 1 s" in out.error
    assert pool.restarts == restarts + 1
    nxt = faulty.start(TASK)  # the run goes on with a fresh process
    assert nxt._procs["faulty"].pid != pid
    assert observation(nxt.step(reply("echo", {"text": "ok"})))["ok"] is True
    nxt.step(reply("finish"))


def test_a_dead_server_fails_the_episode_and_is_restarted(faulty):
    pool = faulty.pools["faulty"]
    restarts = pool.restarts
    ep = faulty.start(TASK)
    ep.step(reply("die"))
    assert ep.done and "died during die" in ep.output().error
    assert pool.restarts == restarts + 1
    nxt = faulty.start(TASK)
    assert observation(nxt.step(reply("echo", {"text": "still here"})))["ok"] is True
    nxt.step(reply("finish"))


def test_a_server_that_cannot_start_is_a_config_error_naming_it():
    broken = McpServerConfig(
        command="python",
        args=["-c", "import sys; sys.exit('no such thing')"],
        tools=["x"],
        start_timeout_s=10,
    )
    with pytest.raises(
        McpConfigError, match=r"mcp_servers\.broken\.command: MCP server 'broken' .*no such thing"
    ):
        McpEnv(None, {"broken": broken})


# ---- the config ---------------------------------------------------------------------------------------------


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "mcp.yaml"
    p.write_text(text)
    return p


SERVER_YAML = f"""env: mcp
tasks: {EXAMPLE / "tasks.jsonl"}
held_out_eval: {EXAMPLE / "tasks.jsonl"}
mcp_servers:
  calendar:
    command: python
    args: [{EXAMPLE / "server.py"}]
    tools: [create_event, list_events, delete_event]
"""


def test_config_reads_the_server_sections(tmp_path):
    cfg = load_config(write(tmp_path, SERVER_YAML + "    timeout_s: 3\n    env: {TZ: UTC}\n"))
    server = cfg.mcp_servers["calendar"]
    assert server.tools == ["create_event", "list_events", "delete_event"] and server.timeout_s == 3.0
    assert server.env == {"TZ": "UTC"} and server.reset_tool is None
    assert config_from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg  # a stored run config reloads


@pytest.mark.parametrize(
    "extra, line, message",
    [
        (
            "    timout_s: 3\n",
            9,
            r"unknown key 'mcp_servers\.calendar\.timout_s'; did you mean 'mcp_servers\.calendar\.timeout_s'",
        ),
        (
            "    dangerous: [drop_tables]\n",
            9,
            r"mcp_servers\.calendar\.dangerous: \['drop_tables'\] not in tools",
        ),
        ("    timeout_s: fast\n", 9, r"mcp_servers\.calendar\.timeout_s must be float"),
        ("    env: {TZ: 1}\n", 9, r"mcp_servers\.calendar\.env must be dict\[str, str\]"),
        (
            "    max_result_chars: 5\n",
            9,
            r"mcp_servers\.calendar\.max_result_chars: must be in \[100, 1000000\], got 5",
        ),
        ("    seed_tool: create_event\n", 9, r"mcp_servers\.calendar\.seed_tool: create_event is in tools"),
    ],
)
def test_config_errors_name_the_line(tmp_path, extra, line, message):
    path = write(tmp_path, SERVER_YAML + extra)
    with pytest.raises(ConfigError, match=rf"^{path}:{line}: {message}"):
        load_config(path)


def test_env_mcp_needs_a_server():
    with pytest.raises(ConfigError, match="mcp_servers: env mcp needs at least one server"):
        config_from_dict({"env": "mcp"})


def test_the_check_before_a_run_starts_the_servers_and_names_the_line(tmp_path):
    check_mcp_servers(load_config(write(tmp_path, SERVER_YAML)), tmp_path / "mcp.yaml")  # the good one passes
    path = write(tmp_path, SERVER_YAML.replace("delete_event]", "delete_evnt]"))
    with pytest.raises(
        ConfigError,
        match=rf"^{path}:8: mcp_servers\.calendar\.tools: delete_evnt not offered by "
        r"the server \(it offers: create_event, list_events, delete_event",
    ):
        check_mcp_servers(load_config(path), path)
    path = write(tmp_path, SERVER_YAML.replace("list_events, delete_event]", "list_events]"))
    with pytest.raises(ConfigError, match=rf"^{path}:2: tasks: task mcp-0 names delete_event, not offered"):
        check_mcp_servers(load_config(path), path)


# ---- end to end -----------------------------------------------------------------------------------------------


def test_the_example_trains_two_grpo_steps_over_stdio(tiny_model, tmp_path, monkeypatch):
    """The example project (config, tasks, verifier, server) on the tiny model: two GRPO steps and the evals
    store trajectories whose messages hold the MCP episode, each scored from the server's final state."""
    from workbench.trainer import Trainer
    from workbench.view import Trajectory, turns

    monkeypatch.chdir(ROOT)  # the example's paths are relative to the repository root
    cfg = load_config(EXAMPLE / "config.yaml")
    cfg = dataclasses.replace(
        cfg,
        model=str(tiny_model),
        max_steps=2,
        eval_interval=2,
        eval_max_tasks=1,
        num_generations_per_prompt=2,
        prompts_per_step=1,
        max_completion_length=8,
        lora=dataclasses.replace(cfg.lora, r=4, alpha=8),
        output_dir=str(tmp_path / "runs"),
        log_to="tensorboard",
    )
    db = store.open_db(tmp_path / "wb.db")
    trainer = Trainer(cfg, db)
    try:
        trainer.run()
        # A scripted episode through the trainer's own env and verifier: the path a good reply takes.
        ep = trainer.env.start(trainer.train_tasks[0])
        ep.step(reply("create_event", trainer.train_tasks[0].expected_args))
        ep.step(reply("finish"))
        assert trainer.verifier.score(ep.output(), trainer.train_tasks[0]).total == 1.0
    finally:
        trainer.env.close()
    steps = store.metrics.steps_since(db, trainer.run_id)
    assert [s["step"] for s in steps] == [1, 2]
    rows = store.trajectories.page_trajectories(
        db, store.trajectories.TrajectoryFilter(run_id=trainer.run_id, split="train"), limit=100
    ).rows
    assert len(rows) == 2 * 2
    for row in rows:
        assert row["error"] is None and row["reward"] is not None  # every episode scored by the verifier
        system, shown = turns(Trajectory.from_row(store.trajectories.get_trajectory(db, row["id"])))
        assert "create_event(attendee, day, time)" in system and shown[0].role == "user"
    from workbench import metric_log

    metric_log.close(trainer.run_dir)  # the step metrics also went to TensorBoard event files
    assert list(metric_log.tensorboard_dir(trainer.run_dir).glob("events.out.tfevents.*"))
    held = store.trajectories.page_trajectories(
        db, store.trajectories.TrajectoryFilter(run_id=trainer.run_id, split="held_out"), limit=100
    ).rows
    assert len(held) == 2  # baseline and final eval, one task each


def test_the_trajectory_view_shows_mcp_calls_and_results(calendar):
    from screens.trajectory_view import turn_parts
    from workbench.view import Trajectory

    ep = calendar.start(TASK)
    ep.step(reply("create_event", TASK.expected_args))
    ep.step(reply("finish"))
    row = Trajectory.from_row(
        {
            "id": 1,
            "run_id": 1,
            "step": 1,
            "split": "train",
            "messages": ep.output().messages,
            "completion": ep.output().text,
        }
    )
    _, parts = turn_parts(row)
    roles = [role for role, _ in parts]
    assert roles == ["user", "assistant", "user", "assistant", "tool", "assistant"]
    rendered = [" ".join(str(r) for r in group.renderables) for _, group in parts]
    assert "tool call → create_event" in rendered[3] and '"attendee": "Ana"' in rendered[3]
    assert rendered[4].startswith("tool result") and '"id": "evt_1"' in rendered[4]


# ---- tool_format: native ----------------------------------------------------------------------------------------


def hermes(tool: str, args: dict) -> str:
    return f"<tool_call>\n{json.dumps({'name': tool, 'arguments': args})}\n</tool_call>"


def test_native_format_offers_openai_specs_and_runs_each_call_of_a_reply(tmp_path):
    """`tool_format: native` over MCP: the servers' specs go to the chat template, the template's parser reads
    the reply, every call of a parallel reply runs, results come back as `tool` messages answering their ids."""
    from workbench.envs import bind_tokenizer, env_for_config
    from workbench.rollout.prompt import render_prompt
    from workbench.testing import build_tiny_tokenizer

    tok = build_tiny_tokenizer(512, "qwen2.5")
    cfg = load_config(write(tmp_path, SERVER_YAML + "    state_tool: list_events\ntool_format: native\n"))
    env = env_for_config(cfg)  # built before the model: the parser is read off its template later
    try:
        assert isinstance(env, McpEnv) and env.parser is None
        pools = dict(env.pools)
        assert (
            bind_tokenizer(env, cfg, tok) is env and env.parser == "hermes" and env.pools == pools
        )  # same servers
        ep = env.start(TASK)
        assert ep.prefill == "" and [t["function"]["name"] for t in ep.tools] == [
            "create_event",
            "list_events",
            "delete_event",
        ]
        prompt = tok.decode(render_prompt(tok, ep.messages, ep.prefill, ep.tools))
        assert ep.messages == [
            {"role": "user", "content": TASK.prompt}
        ]  # no harness text: the template's system turn
        assert "<tools>" in prompt and '"name": "create_event"' in prompt and "Tool result" not in prompt
        last = ep.step(
            "Booking it.\n"
            + hermes("create_event", TASK.expected_args)
            + "\n"
            + hermes("list_events", {"day": "Monday"})
        )
        assistant, created, listed = ep.messages[-3:]
        assert assistant["content"] == "Booking it." and [
            c["function"]["name"] for c in assistant["tool_calls"]
        ] == ["create_event", "list_events"]
        assert [m["role"] for m in (created, listed)] == ["tool", "tool"] and last == listed
        assert [m["tool_call_id"] for m in (created, listed)] == [c["id"] for c in assistant["tool_calls"]]
        event = {"id": "evt_1", **TASK.expected_args}
        assert json.loads(created["content"]) == {"ok": True, "result": event}
        assert json.loads(listed["content"])["result"] == [event]  # in order: the create ran first
        assert "<tool_response>" in tok.decode(render_prompt(tok, ep.messages, "", ep.tools))
        assert ep.step("Booked Ana on Monday at 09:00.") is None and ep.end_reason == "text"
        out = ep.output()
        assert out.tool_format == "native" and out.parse_error is None and out.executed and out.error is None
        assert [c.name for c in out.tool_calls] == ["create_event", "list_events"]
        assert out.state == {"result": [event]}
        assert load_verifier_file(EXAMPLE / "verifier.py", isolate=False).score(out, TASK).total == 1.0
        broken = env.start(TASK)  # a reply that is not a call keeps its reason
        broken.step('<tool_call>\n{"name": "create_event"')
        assert broken.output().parse_error.startswith("invalid JSON") and not broken.output().tool_calls
    finally:
        env.close()


def test_a_native_mcp_run_trains_and_the_dry_run_replays_its_stored_calls(tmp_path, monkeypatch):
    """The Trainer with `tool_format: native` over MCP (servers started once, the parser read off the template),
    then the verifier editor's dry run, which has no model: it replays each stored turn's parsed calls
    against fresh server processes, gets the rewards the run stored, and stops those servers again."""
    from tests.engine.test_native import ScriptedEngine
    from workbench.testing import tiny_model_dir
    from workbench.trainer import Trainer
    from workbench.verifier_edit import dry_run

    envs: list[McpEnv] = []
    real_init = McpEnv.__init__

    def counting_init(self, *a, **kw):
        envs.append(self)
        real_init(self, *a, **kw)

    monkeypatch.setattr(McpEnv, "__init__", counting_init)
    monkeypatch.chdir(ROOT)  # the example's paths are relative to the repository root
    model = tiny_model_dir(tmp_path / "qwen", template="qwen2.5")
    cfg = load_config(EXAMPLE / "config.yaml")
    cfg = dataclasses.replace(
        cfg,
        model=str(model),
        tool_format="native",
        max_steps=1,
        eval_interval=1,
        eval_max_tasks=1,
        num_generations_per_prompt=2,
        prompts_per_step=2,
        max_completion_length=8,
        lora=dataclasses.replace(cfg.lora, r=4, alpha=8),
        output_dir=str(tmp_path / "runs"),
    )
    db = store.open_db(tmp_path / "wb.db")
    trainer = Trainer(cfg, db)
    try:
        assert len(envs) == 1 and trainer.env is envs[0] and trainer.env.parser == "hermes"
        call = hermes("create_event", TASK.expected_args) + "\n" + hermes("list_events", {"day": "Monday"})
        trainer.engine = ScriptedEngine(trainer.policy.tokenizer, call, final_text="Booked.")
        trainer.run()
    finally:
        trainer.env.close()
    rows = store.trajectories.last_trajectories(db, trainer.run_id, 10)
    assert len(rows) == 4
    assert {r["reward"] for r in rows} <= {
        1.0,
        0.2,
    }  # Ana's task solved, another acted (wrongly): both scored
    for r in rows:
        assert [m["role"] for m in r["messages"]] == ["user", "assistant", "tool", "tool", "assistant"]
        assert "<tool_call>" not in (r["messages"][1]["content"] or "")  # the calls are only in tool_calls
    res = dry_run(db, trainer.run_id, (EXAMPLE / "verifier.py").read_text(), n=4)
    assert res.ok and res.summary["n"] == 4 and res.summary["changed"] == 0, res
    assert sorted(x["new_reward"] for x in res.rows) == sorted(r["reward"] for r in rows)
    assert len(envs) == 2 and not envs[1].pools["calendar"]._idle and not envs[1].pools["calendar"]._busy
