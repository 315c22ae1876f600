"""Native tool calling: the model's own chat template renders the tools and the turns, its own format is parsed.

`tool_format: native` (the config) makes `env_for_config` build a `NativeEnv` instead of the JSON harness:
- the tools go to the template as OpenAI function specs (`apply_chat_template(messages, tools=...)`: the
  episode's `tools`, which the rollout runner passes on); no JSON instructions, no example, no prefill;
- the reply is parsed by the template's parser (`workbench.envs.tool_parsers`: hermes, llama3_json,
  mistral, nemotron), into the same `ToolCall`s the JSON harness gives, so verifiers see one shape;
- an assistant turn is stored as `{"role": "assistant", "content": text, "tool_calls": [...]}` and each
  tool result as `{"role": "tool", "name": ..., "tool_call_id": ..., "content": JSON}`, which the template
  renders in its own way on the next turn (Qwen: `<tool_response>` in a user turn; Llama: `ipython`).

Single-turn: one reply, every call in it executed in a fresh World. Multi-turn: the calls of each reply are
executed and their results returned as tool messages; the episode ends on a reply with no call (the final
answer), a `finish` call, or `max_turns` replies. A reply that is not a call is never an error by itself:
it is the right answer when the task expects no call (`Output.parse_error` is `tool_parsers.NO_CALL`).
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from workbench.domains.calendar import BUILTIN_TOOLS, MULTI_TURN_TOOLS, World
from workbench.envs.single_turn import world_for
from workbench.envs.tool_parsers import NO_CALL, parse_reply, resolve_parser
from workbench.tasks import openai_tool_spec
from workbench.types import Output, Task, ToolCall

FINISH = "finish"
UNRESOLVED_PARSER = (
    "tool_parser auto: build the environment with the model's tokenizer "
    "(env_for_config(cfg, tokenizer)) so the parser can be read from its template"
)


def task_messages(task: Task, system_prompt: str | None) -> list[dict[str, Any]]:
    """The conversation a native episode starts from: the task's own `messages` (mid-conversation tasks) or
    its prompt as one user message, after `system_prompt` when one is configured (else the template's own)."""
    msgs = [dict(m) for m in task.messages] if task.messages else [{"role": "user", "content": task.prompt}]
    if system_prompt and msgs[0].get("role") != "system":
        msgs.insert(0, {"role": "system", "content": system_prompt})
    return msgs


def assistant_message(content: str, calls: list[ToolCall]) -> dict[str, Any]:
    """An assistant turn as chat templates take it (arguments as a dict: Qwen2.5 and Llama 3.x templates
    double-encode a JSON string)."""
    msg: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        msg["tool_calls"] = [c.to_dict() for c in calls]
    return msg


def call_id(turn: int, index: int) -> str:
    """9 alphanumerics (what Mistral's template insists on), unique within an episode."""
    return f"c{turn:03d}{index:05d}"


class NativeEpisode:
    """One episode in the model's native format. Loop: render `messages` with `tools`, `step(text)` until `done`.

    `prefill` is always "" (the template opens the assistant turn; forcing text would be the JSON harness).
    """

    native = True  # its turns are parsed calls (`take`): what the verifier dry run replays

    def __init__(
        self, task: Task, parser: str | None, *, system_prompt: str | None, multi_turn: bool, max_turns: int
    ):
        default = MULTI_TURN_TOOLS if multi_turn else BUILTIN_TOOLS
        if task.tools is None:
            task = replace(task, tools=default)
        self.task = task
        self.parser = parser
        self.multi_turn = multi_turn
        self.max_turns = max_turns if multi_turn else 1
        self.prefill = ""
        self.tools: list[dict[str, Any]] = [openai_tool_spec(t) for t in task.tools or []]
        self.messages: list[dict[str, Any]] = task_messages(task, system_prompt)
        self.world = World(task.initial_state, task.tools) if multi_turn else world_for(task)
        self.turns = 0
        self.done = False
        self.end_reason: str | None = None
        self.calls: list[ToolCall] = []
        self.observations: list[Any] = []
        self.last_reply = ""
        self.last_error: str | None = None

    def step(self, assistant_text: str) -> dict[str, Any] | None:
        """Take the generated text; return the (last) tool-result message, or None when the episode ended.
        Every result of a parallel reply is appended to `messages`; `observation_messages()` lists them."""
        if self.done:
            raise RuntimeError("episode is done; start a new one")
        if self.parser is None:
            raise RuntimeError(UNRESOLVED_PARSER)
        parsed = parse_reply(assistant_text, self.parser)
        return self.take(assistant_text, parsed.calls, parsed.error, content=parsed.content)

    def take(
        self, reply: str, calls: list[ToolCall], error: str | None, *, content: str = ""
    ) -> dict[str, Any] | None:
        """One assistant turn already parsed: `step` after its parser, and the verifier dry run's replay with a
        stored turn's `tool_calls` (no parser, no tokenizer: the calls the verifier saw, in the one shape)."""
        if self.done:
            raise RuntimeError("episode is done; start a new one")
        self.turns += 1
        self.last_reply, self.last_error = reply, error
        calls = [replace(c, id=c.id or call_id(self.turns, i)) for i, c in enumerate(calls)]
        self.messages.append(assistant_message(content if calls else reply, calls))
        self._new: list[dict[str, Any]] = []
        if not calls:
            return self._end("text")
        self.calls += calls
        for c in calls:
            if c.name == FINISH:
                continue
            obs = self.world.call(c)
            self.observations.append(obs)
            self._new.append(
                {"role": "tool", "name": c.name, "tool_call_id": c.id, "content": json.dumps(obs)}
            )
        self.messages += self._new
        if not self.multi_turn:
            return self._end("single_turn")
        if any(c.name == FINISH for c in calls):
            return self._end("finish")
        if self.turns >= self.max_turns:
            return self._end("max_turns")
        return self._new[-1] if self._new else None

    def observation_messages(self) -> list[dict[str, Any]]:
        """The messages the last `step` added after the assistant turn (several for parallel calls)."""
        return list(getattr(self, "_new", []))

    def _end(self, reason: str) -> None:
        self.done, self.end_reason = True, reason
        return None

    def output(self) -> Output:
        if not self.done:
            raise RuntimeError("episode not finished" if self.turns else "no reply yet: call step() first")
        acted = [c for c in self.calls if c.name != FINISH]
        # A multi-turn episode that ends on a plain answer after its calls is a normal ending, not a failure.
        error = None if self.calls and self.last_error == NO_CALL else self.last_error
        return Output(
            self.last_reply,
            messages=[dict(m) for m in self.messages],
            tool_calls=list(self.calls),
            parse_error=error,
            unsafe=list(self.world.unsafe),
            executed=bool(acted) and not self.world.errors,
            observations=list(self.observations),
            state=self.world.state(),
            tool_format="native",
        )


class NativeEnv:
    """Factory of native-format episodes. `parser` is resolved from `tool_parser` (auto: from the template)."""

    def __init__(
        self,
        parser: str | None,
        *,
        multi_turn: bool = False,
        max_turns: int = 4,
        system_prompt: str | None = None,
        harness: Any = None,
    ):
        if max_turns < 1:
            raise ValueError("max_turns must be at least 1")
        self.parser = parser
        self.multi_turn = multi_turn
        self.max_turns = max_turns
        self.system_prompt = system_prompt
        self.harness = (
            harness  # the JSON harness of the same config: stored with the run, used by nothing here
        )
        self.name = "native_multi_turn" if multi_turn else "native_single_turn"

    def start(self, task: Task) -> NativeEpisode:
        """An episode; with the parser still unresolved (auto, no tokenizer) it can only `take` parsed turns
        (a replay), and `step` says why not."""
        return NativeEpisode(
            task,
            self.parser,
            system_prompt=self.system_prompt,
            multi_turn=self.multi_turn,
            max_turns=self.max_turns,
        )


def config_parser(cfg: Any, tokenizer: Any) -> str | None:
    """The parser a native run uses: `cfg.tool_parser`, or (auto) the one its template names; None while auto
    and no tokenizer is at hand (resolved when the model is loaded: `bind_tokenizer`)."""
    if tokenizer is None and cfg.tool_parser == "auto":
        return None
    return resolve_parser(cfg.tool_parser, getattr(tokenizer, "chat_template", None) if tokenizer else None)


def native_env(cfg: Any, tokenizer: Any, harness: Any = None) -> NativeEnv:
    """The native environment a run config asks for; the parser comes from `cfg.tool_parser` or the template."""
    parser = config_parser(cfg, tokenizer)
    return NativeEnv(
        parser,
        multi_turn=cfg.env == "multi_turn",
        max_turns=cfg.max_turns,
        system_prompt=cfg.harness.system_prompt,
        harness=harness,
    )
