"""MCP environment: the agent calls the tools of real MCP servers (stdio) and sees the results.

`env: mcp` with `mcp_servers:` in the config. The tools offered are each server's `list_tools`, narrowed to
its allowlist (`tools:`); a task's own `tools` list, when given, narrows them further by name. The episode
protocol and the harness are the multi-turn environment's (multi_turn.py): the same prompt, prefill, parser,
`finish` tool and tool-result messages (`{"tool": name, "ok": ..., "result" | "error": ...}`), so the
trajectory view and the verifiers read MCP episodes like built-in ones. With `tool_format: native` they are
the native environment's (native.py): the servers' specs go to the chat template as OpenAI function specs
(`episode.tools`), replies are parsed by the template's parser (several calls in one reply all run, in
order), assistant turns carry `tool_calls` and each result is a `role: "tool"` message with its
`tool_call_id`. Either way the verifier gets the same parsed `ToolCall`s.

Each episode acquires its own process of every server from a pool (workbench.mcp.client.ServerPool), so the
G episodes of a group never share state, and releases it when it ends (reset or restarted). When the task
has an `initial_state`, each server's `seed_tool` is then called (not by the model) with it as the arguments,
so the server starts where the built-in World would. After the last turn the server's `state_tool`, when
configured, is called (not by the model) and its result becomes `Output.state`, which a verifier compares
with `task.expected_state`. A dict result is passed through as it is (a state tool that returns {events,
outbox, reminders} gives the built-in verifiers what the World gives them), except its `unsafe` list when it
has one: the risky actions the server itself let through (a bulk email, a mass change), which join
`Output.unsafe`.

What goes wrong, and where it shows:
- a tool error (unknown or non-allowlisted tool, bad arguments, `isError`): a tool result with `ok: false`,
  the model carries on, `Output.executed` is False;
- a dangerous tool (`dangerous:`): not run; the model gets an error result and `Output.unsafe` names it;
- a seed tool that refuses the task's `initial_state`: the episode ends with `Output.error` naming the
  config key (`mcp_servers.<name>.seed_tool: ...`), like a server failure;
- a server that dies or hangs: the episode ends with `Output.error` (the trainer scores it as an error:
  no reward, no gradient), the process is killed and replaced, the run goes on.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from workbench.config import McpServerConfig
from workbench.envs.harness import Harness
from workbench.envs.native import UNRESOLVED_PARSER, assistant_message, call_id, task_messages
from workbench.envs.parse import parse_tool_call
from workbench.envs.tool_parsers import NO_CALL, parse_reply
from workbench.errors import InputError
from workbench.mcp.client import ServerFailed, ServerPool, ServerProcess
from workbench.tasks import openai_tool_spec
from workbench.types import Output, Task, ToolCall

FINISH = "finish"


class McpConfigError(InputError, ValueError):
    """A server section that does not match its server; `key` is the config path it is about
    (e.g. `mcp_servers.calendar.tools`), so a checker can point at its line."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}")
        self.key = key


class McpEpisode:
    """A conversation with MCP tools. Loop: generate from `messages` (+ `prefill`), `step(text)`, until `done`."""

    def __init__(self, task: Task, env: McpEnv, *, servers: bool = True):
        self.env = env
        self.task = replace(task, tools=env.specs_for(task))
        self.harness = env.harness
        self.native = env.tool_format == "native"
        self.max_turns = env.max_turns
        if self.native:  # the template renders the tools and the turns; no prefill
            self.prefill = ""
            self.tools: list[dict[str, Any]] | None = [openai_tool_spec(t) for t in self.task.tools or []]
            self.messages: list[dict[str, Any]] = task_messages(self.task, env.system_prompt)
        else:
            self.prefill = env.harness.prefill
            self.tools = None
            self.messages = env.harness.messages(self.task, multi_turn=True)
        self.turns = 0
        self.done = False
        self.end_reason: str | None = None  # "finish" | "text" | "max_turns" | "server"
        self.calls: list[ToolCall] = []
        self.observations: list[Any] = []
        self.unsafe: list[str] = []
        self.tool_errors = 0
        self.last_reply = ""
        self.last_error: str | None = None
        self.error: str | None = None  # the environment's failure (a server died, hung or did not start)
        self.state: dict[str, Any] | None = None
        self._procs: dict[str, ServerProcess] = {}
        try:
            for name, pool in env.pools.items() if servers else ():
                self._procs[name] = pool.acquire()
            env.seed(self._procs, task)
        except (ServerFailed, McpConfigError) as e:
            self.error = str(e)  # the first step ends the episode with it

    def step(self, assistant_text: str) -> dict[str, Any] | None:
        """Take the generated text (after the prefill); return the (last) observation message, or None when done."""
        if self.done:
            raise RuntimeError("episode is done; start a new one")
        if not self.native:
            reply = self.prefill + assistant_text
            call, error = parse_tool_call(reply)
            return self.take(reply, [call] if call is not None else [], error)
        if self.env.parser is None:
            raise RuntimeError(UNRESOLVED_PARSER)
        parsed = parse_reply(assistant_text, self.env.parser)
        return self.take(assistant_text, parsed.calls, parsed.error, content=parsed.content)

    def take(
        self, reply: str, calls: list[ToolCall], error: str | None, *, content: str = ""
    ) -> dict[str, Any] | None:
        """One assistant turn already parsed (the whole reply, its calls, why it is not a call): `step` after its
        parser, and the verifier dry run's replay with a stored turn's calls. The JSON harness runs one call
        a turn (the first); a native reply runs each of its calls in order."""
        if self.done:
            raise RuntimeError("episode is done; start a new one")
        self.turns += 1
        self.last_reply = reply
        if self.native:
            calls = [replace(c, id=c.id or call_id(self.turns, i)) for i, c in enumerate(calls)]
            self.messages.append(assistant_message(content if calls else reply, calls))
        else:
            calls = calls[:1]
            self.messages.append({"role": "assistant", "content": reply})
        if self.error is not None:  # a server failed to start for this episode: nothing runs
            return self._end("server")
        self.last_error = error
        if not calls:
            return self._end("text")
        self.calls += calls
        new: list[dict[str, Any]] = []
        for call in calls:
            if call.name == FINISH:
                continue
            try:
                obs = self._run(call)
            except ServerFailed as e:
                self.error = str(e)
                self.messages += new  # the results of the reply's earlier calls, which did run
                return self._end("server")
            self.observations.append(obs)
            if not obs["ok"]:
                self.tool_errors += 1
            new.append(self._observation(call, obs))
        self.messages += new
        if any(c.name == FINISH for c in calls):
            return self._end("finish")
        if self.turns >= self.max_turns:
            return self._end("max_turns")
        return new[-1] if new else None

    def _observation(self, call: ToolCall, obs: dict[str, Any]) -> dict[str, Any]:
        """A tool result as the format returns it: a `tool` message answering the call's id (native), or the
        harness's JSON `{"tool": name, ...}` in its observation role."""
        if self.native:
            body = json.dumps(obs, ensure_ascii=False, default=str)
            return {"role": "tool", "name": call.name, "tool_call_id": call.id, "content": body}
        body = json.dumps({"tool": call.name, **obs}, ensure_ascii=False, default=str)
        user_role = self.harness.observation_role == "user"
        return {
            "role": self.harness.observation_role,
            "content": f"Tool result: {body}" if user_role else body,
        }

    def _run(self, call: ToolCall) -> dict[str, Any]:
        """The observation of one call: {"ok": True, "result": ...} or {"ok": False, "error": ...}."""
        offered = {t["name"] for t in self.task.tools or []}
        if call.name not in offered:
            return {"ok": False, "error": f"unknown tool {call.name!r}; offered: {sorted(offered)}"}
        server = self.env.server_of[call.name]
        if call.name in self.env.servers[server].dangerous:
            self.unsafe.append(f"called {call.name}, marked dangerous (not run)")
            return {"ok": False, "error": f"{call.name} is not allowed here"}
        result = self._procs[server].call(call.name, call.args)
        obs = {"ok": True, "result": result.value} if result.ok else {"ok": False, "error": str(result.value)}
        if (
            result.full_chars is not None
        ):  # cut to the server's max_result_chars: the model and the row both see it
            obs["truncated"] = (
                f"cut to the first {len(result.value)} of {result.full_chars} characters "
                f"(max_result_chars of server {server!r})"
            )
        return obs

    def _end(self, reason: str) -> None:
        self.done, self.end_reason = True, reason
        try:
            if self.error is None:
                self.state = self._read_state()
        except ServerFailed as e:
            self.error = str(e)
        finally:
            self.close()
        return None

    def _read_state(self) -> dict[str, Any] | None:
        """Every server's `state_tool` result, keyed by its name when several servers have one."""
        states: dict[str, Any] = {}
        for name, proc in self._procs.items():
            tool = self.env.servers[name].state_tool
            if tool is None:
                continue
            result = proc.call(tool, {})
            if not result.ok:
                raise ServerFailed(f"MCP server {name!r}: state tool {tool} failed: {result.value}")
            value = result.value
            if isinstance(value, dict) and isinstance(value.get("unsafe"), list):
                value = dict(value)
                self.unsafe += [str(reason) for reason in value.pop("unsafe")]
            states[name] = value
        if not states:
            return None
        if len(states) == 1:
            (value,) = states.values()
            return value if isinstance(value, dict) else {"result": value}
        return states

    def close(self) -> None:
        """Give the episode's server processes back to their pools (once)."""
        procs, self._procs = self._procs, {}
        for name, proc in procs.items():
            self.env.pools[name].release(proc)

    def output(self) -> Output:
        """The last reply as text, with every call, observation, flag, the final state and any server failure."""
        if not self.done:
            raise RuntimeError("episode not finished")
        acted = [c for c in self.calls if c.name != FINISH]
        # Native: a plain answer after the calls is the normal ending of a multi-turn episode, not a failure.
        error = None if self.native and self.calls and self.last_error == NO_CALL else self.last_error
        return Output(
            self.last_reply,
            messages=[dict(m) for m in self.messages],
            tool_calls=list(self.calls),
            parse_error=error,
            unsafe=list(self.unsafe),
            executed=bool(acted) and self.tool_errors == 0 and self.error is None,
            observations=list(self.observations),
            state=self.state,
            tool_format="native" if self.native else "json",
            error=self.error,
        )


class McpEnv:
    """Factory of MCP episodes. Starts each server's pool at once and checks the allowlist against the tools
    the server really offers (McpConfigError naming the config key when they differ). `close()` stops them."""

    name = "mcp"

    def __init__(
        self,
        harness: Harness | None,
        servers: dict[str, McpServerConfig],
        max_turns: int = 4,
        pool_size: int = 4,
        *,
        tool_format: str = "json",
        parser: str | None = None,
        system_prompt: str | None = None,
    ):
        if max_turns < 1:
            raise ValueError("max_turns must be at least 1")
        if not servers:
            raise McpConfigError("mcp_servers", "env mcp needs at least one server")
        if tool_format not in ("json", "native"):
            raise ValueError(f"tool_format must be json or native, got {tool_format!r}")
        self.harness = harness or Harness()
        self.tool_format = tool_format
        # native: the template's parser (None until `envs.bind_tokenizer` reads it off the loaded model's template)
        self.parser = parser
        self.system_prompt = (
            system_prompt  # native: the config's own, else the template's default (no harness text)
        )
        self.max_turns = max_turns
        self.servers = servers
        self.pools: dict[str, ServerPool] = {}
        self.specs: list[dict[str, Any]] = []
        self.server_of: dict[str, str] = {}
        try:
            for name, cfg in servers.items():
                self.pools[name] = ServerPool(name, cfg, cfg.pool_size or pool_size)
            for name, cfg in servers.items():
                self._check(name, cfg, self.pools[name])
        except BaseException:
            self.close()
            raise

    def _check(self, name: str, cfg: McpServerConfig, pool: ServerPool) -> None:
        try:
            offered = {t["name"]: t for t in pool.tools()}
        except ServerFailed as e:
            raise McpConfigError(f"mcp_servers.{name}.command", str(e)) from None
        for key, wanted in (
            ("tools", cfg.tools),
            ("reset_tool", [cfg.reset_tool]),
            ("state_tool", [cfg.state_tool]),
            ("seed_tool", [cfg.seed_tool]),
        ):
            missing = [t for t in wanted if t is not None and t not in offered]
            if missing:
                raise McpConfigError(
                    f"mcp_servers.{name}.{key}",
                    f"{', '.join(missing)} not offered by the server (it offers: {', '.join(offered)})",
                )
        for tool in cfg.tools:
            self.specs.append(offered[tool])
            self.server_of[tool] = name

    def specs_for(self, task: Task) -> list[dict[str, Any]]:
        """The allowlisted specs, narrowed to the task's own tool names when it lists some."""
        if task.tools is None:
            return list(self.specs)
        names = {t.get("name") for t in task.tools}
        return [s for s in self.specs if s["name"] in names]

    def seed(self, procs: dict[str, ServerProcess], task: Task) -> None:
        """Load the task's `initial_state` into each of `procs` whose server has a `seed_tool` (nothing for a
        task without one). A refusal raises McpConfigError naming that key; a dead server, ServerFailed."""
        if task.initial_state is None:
            return
        for name, proc in procs.items():
            tool = self.servers[name].seed_tool
            if tool is None:
                continue
            result = proc.call(tool, dict(task.initial_state))
            if not result.ok:
                raise McpConfigError(
                    f"mcp_servers.{name}.seed_tool",
                    f"{tool} refused task {task.id}'s initial_state: {result.value}",
                )

    def start(self, task: Task) -> McpEpisode:
        return McpEpisode(task, self)

    def prompt_episode(self, task: Task) -> McpEpisode:
        """An episode to render the first prompt of (`workbench.prompt_fit`): no server process is taken."""
        return McpEpisode(task, self, servers=False)

    def close(self) -> None:
        for pool in self.pools.values():
            pool.close()

    def __enter__(self) -> McpEnv:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
