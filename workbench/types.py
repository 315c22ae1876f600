"""Plain data types shared by the engine's parts: tasks, tool calls, outputs, scores, completions.

They are dataclasses with no behaviour beyond conversion, so every module (and a user's verifier) can
depend on them without pulling torch or the store in.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Task:
    """One prompt with the tool call that answers it. `id` is stable across loads (dataset:index).

    `expected_tool` None means the right answer is no call at all (the request needs none, or is unsafe).
    `expected_calls` (several calls in one turn, matched in any order) replaces `expected_tool`/`args` when
    set; each is `{"name": ..., "arguments": {...}}`. `messages`: a conversation the task starts in (ending
    with the turn the model answers); None means one user message, `prompt`.
    """

    id: str
    prompt: str
    expected_tool: str | None
    expected_args: dict[str, Any]
    tools: list[dict[str, Any]] | None = None  # JSON-schema function specs offered to the model
    split: str = "train"
    dataset: str = "custom"
    # Multi-turn tasks: the simulated world before the episode and the state a correct episode leaves.
    initial_state: dict[str, Any] | None = None
    expected_state: dict[str, Any] | None = None
    messages: list[dict[str, Any]] | None = None
    expected_calls: list[dict[str, Any]] | None = None
    # The phrasing template a generated task came from: tasks of one template are not independent, so
    # confidence intervals resample templates (clusters) as well as tasks.
    template: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Task:
        names = cls.__dataclass_fields__.keys()
        return cls(**{k: v for k, v in d.items() if k in names})


@dataclass
class ToolCall:
    """One call of a tool. Stored in the OpenAI shape (what chat templates' `tool_calls` and vLLM's server
    use), with `arguments` kept as a dict (Qwen2.5 and Llama 3.x templates double-encode a JSON string)."""

    name: str
    args: dict[str, Any]
    id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        call: dict[str, Any] = {"type": "function", "function": {"name": self.name, "arguments": self.args}}
        if self.id is not None:
            call["id"] = self.id
        return call

    @classmethod
    def from_dict(cls, d: Any) -> ToolCall:
        """The OpenAI shape; also rows stored before it (`{"tool": ..., "args": ...}`) and a JSON-string
        `arguments` (vLLM's API). Anything else becomes a call named by its text, with no args."""
        if not isinstance(d, dict):
            return cls(str(d), {})
        fn = d.get("function") if isinstance(d.get("function"), dict) else d
        name = fn.get("name", fn.get("tool", ""))
        args = fn.get("arguments", fn.get("args"))
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except (ValueError, RecursionError):  # RecursionError: nested deeper than the recursion limit
                args = {"_raw": args}
        return cls(str(name or ""), args if isinstance(args, dict) else {}, d.get("id"))


class Output(str):
    """What a verifier receives: the final assistant text (it *is* a str, so `json.loads(output)` works)
    plus what the environment learnt from the episode.

    Attributes: `messages` (the whole conversation), `tool_calls` (parsed, in order), `parse_error`
    (why the last reply was not a tool call, or None), `unsafe` (reasons the environment flagged),
    `executed` (every call ran without a tool error), `observations` (tool results, in order),
    `state` (the simulated world's state when the episode ended, or None: multi-turn verifiers compare it
    with `task.expected_state`), `tool_format` ("json": the project's harness, or "native": the model's
    chat-template format; the calls are parsed into the same `ToolCall`s either way), `error` (the
    environment failed, e.g. an MCP tool server died or hung: not the model's doing, so the trainer scores
    the episode as an error, with no reward and no gradient).
    """

    messages: list[dict[str, Any]]
    tool_calls: list[ToolCall]
    parse_error: str | None
    unsafe: list[str]
    executed: bool
    observations: list[Any]
    state: dict[str, Any] | None
    tool_format: str
    error: str | None

    def __new__(
        cls,
        text: str,
        *,
        messages: list[dict[str, Any]] | None = None,
        tool_calls: list[ToolCall] | None = None,
        parse_error: str | None = None,
        unsafe: list[str] | None = None,
        executed: bool = False,
        observations: list[Any] | None = None,
        state: dict[str, Any] | None = None,
        tool_format: str = "json",
        error: str | None = None,
    ) -> Output:
        obj = super().__new__(cls, text)
        obj.messages = messages or []
        obj.tool_calls = tool_calls or []
        obj.parse_error = parse_error
        obj.unsafe = unsafe or []
        obj.executed = executed
        obj.observations = observations or []
        obj.state = state
        obj.tool_format = tool_format
        obj.error = error
        return obj

    @property
    def text(self) -> str:
        return str.__str__(self)

    @property
    def tool_call(self) -> ToolCall | None:
        """The first tool call, the one single-turn tasks are judged on."""
        return self.tool_calls[0] if self.tool_calls else None


@dataclass
class Score:
    """A verifier's verdict: the total reward, its named parts and one line saying why."""

    total: float
    parts: dict[str, float] = field(default_factory=dict)
    explanation: str = ""
    error: str | None = None  # set when the verifier raised, timed out or returned garbage

    def __post_init__(self) -> None:
        if not isinstance(self.total, (int, float)) or isinstance(self.total, bool):
            raise TypeError(f"Score.total must be a number, got {type(self.total).__name__}")
        self.total = float(self.total)
        if math.isnan(self.total) or math.isinf(self.total):
            raise ValueError("Score.total is NaN or infinite")


@dataclass
class Completion:
    """One sampled reply. `logprobs[i]` is the sampling log-probability of `token_ids[i]` (after temperature),
    so the old policy's log-probs need no second pass when num_iterations == 1."""

    text: str
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str  # "stop" (EOS or stop string) | "length" (hit max_new_tokens: truncated)
    prompt_token_ids: list[int] = field(default_factory=list)
    latency_s: float = 0.0

    @property
    def truncated(self) -> bool:
        return self.finish_reason == "length"
