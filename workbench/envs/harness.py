"""The harness: how a task is put to the model (system prompt with tool specs, a one-shot example, a prefill).

It is part of the environment, not a detail: on SmolLM2-135M the prefill `{"tool": "` alone takes strict
JSON from ~1/32 to ~13/32 (shared/NOTES.md), which is what makes GRPO's groups non-degenerate. So it is a
plain dataclass that the UI can show and edit and the store can keep with a run (`to_dict`/`from_dict`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from workbench.domains.calendar import BUILTIN_TOOLS
from workbench.types import Task

DEFAULT_SYSTEM_PROMPT = (
    "You are an assistant that acts by calling tools.\n"
    "Tools:\n"
    "{tools}\n"
    'Reply with one JSON object only, in this form: {"tool": "<tool name>", "args": {"<arg>": "<value>"}}. '
    "No other text."
)
DEFAULT_MULTI_TURN_NOTE = (
    "Call one tool per reply. Each tool result comes back to you as a message. "
    'When the request is done, reply {"tool": "finish", "args": {"answer": "<one short sentence>"}}.'
)
DEFAULT_EXAMPLE_USER = "Set up a meeting with Robin on Thursday at 9:30 AM."
DEFAULT_EXAMPLE_ASSISTANT = (
    '{"tool": "calendar.create_event", "args": {"attendee": "Robin", "day": "Thursday", "time": "09:30"}}'
)
DEFAULT_PREFILL = '{"tool": "'
# Task families (datasets) where "no call" can be the right answer: the forced prefill would rule it out, and
# giving it to only the tasks that need a call would leak the answer, so the whole family goes without.
NO_PREFILL_DATASETS = ("calendar_calls",)


def render_tools(tools: list[dict[str, Any]]) -> str:
    """One line per tool: `- name(arg, opt?): description. arg: what it is; ...` (short: the model is 135M)."""
    lines = []
    for spec in tools:
        params = spec.get("parameters") or {}
        props: dict[str, Any] = params.get("properties") or {}
        required = set(params.get("required", list(props)))
        sig = ", ".join(p if p in required else f"{p}?" for p in props)
        hints = "; ".join(
            f"{p}: {d['description']}"
            for p, d in props.items()
            if isinstance(d, dict) and d.get("description")
        )
        desc = spec.get("description", "").strip()
        lines.append(f"- {spec['name']}({sig}): {desc}" + (f" {hints}" if hints else ""))
    return "\n".join(lines)


@dataclass
class Harness:
    """Prompt construction for one environment. The `{tools}` placeholder is replaced literally (not with
    str.format), so a system prompt may contain JSON braces. The example, when included, goes in as one
    user/assistant exchange before the task; it is shown whatever tools the task offers, so edit it for
    custom tool sets. `prefill` is the text the assistant reply is forced to begin with."""

    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    include_example: bool = True
    example_user: str = DEFAULT_EXAMPLE_USER
    example_assistant: str = DEFAULT_EXAMPLE_ASSISTANT
    prefill: str = DEFAULT_PREFILL
    multi_turn_note: str = DEFAULT_MULTI_TURN_NOTE
    observation_role: str = "tool"  # role of tool-result messages in multi-turn: "tool" or "user"
    no_prefill_datasets: list[str] = field(default_factory=lambda: list(NO_PREFILL_DATASETS))

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            want = {"include_example": bool, "no_prefill_datasets": list}.get(f.name, str)
            if not isinstance(value, want):
                raise ValueError(f"harness.{f.name} must be a {want.__name__}, got {type(value).__name__}")
        if not all(isinstance(d, str) for d in self.no_prefill_datasets):
            raise ValueError("harness.no_prefill_datasets must be a list of dataset names")
        if self.observation_role not in ("tool", "user"):
            raise ValueError(
                f"harness.observation_role must be 'tool' or 'user', got {self.observation_role!r}"
            )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Harness:
        """Unknown keys are an error (a typo would otherwise silently fall back to a default)."""
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"unknown harness keys {unknown}; valid: {sorted(names)}")
        return cls(**d)

    def system_text(self, task: Task, *, multi_turn: bool = False) -> str:
        tools = task.tools if task.tools is not None else BUILTIN_TOOLS
        text = self.system_prompt.replace("{tools}", render_tools(tools))
        if multi_turn and self.multi_turn_note:
            text += "\n" + self.multi_turn_note
        return text

    def prefill_for(self, task: Task) -> str:
        """The prefill, or "" for a task of a family where no call may be the answer (`no_prefill_datasets`)."""
        return "" if task.dataset in self.no_prefill_datasets else self.prefill

    def messages(self, task: Task, *, multi_turn: bool = False) -> list[dict[str, Any]]:
        """Chat messages for the first turn: system, optional example exchange, the task's prompt (or, for a
        task that starts mid-conversation, its `messages` after any system message of its own)."""
        msgs: list[dict[str, Any]] = [
            {"role": "system", "content": self.system_text(task, multi_turn=multi_turn)}
        ]
        if self.include_example:
            msgs.append({"role": "user", "content": self.example_user})
            msgs.append({"role": "assistant", "content": self.example_assistant})
        if task.messages:
            msgs += [dict(m) for m in task.messages if m.get("role") != "system"]
        else:
            msgs.append({"role": "user", "content": task.prompt})
        return msgs


def harness_from_config(cfg: Any) -> Harness:
    """The run config's `harness:` section (workbench.config.HarnessConfig) over the defaults."""
    h = Harness()
    overrides = {"include_example": cfg.include_example, "prefill": cfg.prefill}
    if getattr(cfg, "no_prefill_datasets", None) is not None:
        overrides["no_prefill_datasets"] = list(cfg.no_prefill_datasets)
    if cfg.system_prompt is not None:
        overrides["system_prompt"] = cfg.system_prompt
    return Harness.from_dict({**h.to_dict(), **overrides})
