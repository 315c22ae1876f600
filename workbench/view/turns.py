"""An episode's messages as turns to show: the system prompt apart, each assistant tool call parsed by the
engine's own parser (the JSON harness's format) or taken from the message's `tool_calls` (the native format),
tool results marked as such."""

from __future__ import annotations

import json
from typing import Any

from workbench.envs.parse import parse_tool_call
from workbench.types import ToolCall
from workbench.view.records import Trajectory, Turn


def content_text(content: Any) -> str:
    """A message's content as text (strings as they are, structured content as JSON)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) and "text" in p for p in content):
        return "\n".join(str(p["text"]) for p in content)
    return json.dumps(content, ensure_ascii=False, indent=1)


def turns(row: Trajectory) -> tuple[str | None, list[Turn]]:
    """(the system prompt or None, the other turns in order). A row stored without its assistant turn
    shows its completion as one."""
    messages = list(row.messages or ())
    if not any(m.get("role") == "assistant" for m in messages) and row.completion:
        messages.append({"role": "assistant", "content": row.completion})
    system: str | None = None
    out: list[Turn] = []
    for m in messages:
        role = str(m.get("role", "?"))
        text = content_text(m.get("content"))
        if role == "system":
            system = text if system is None else f"{system}\n\n{text}"
            continue
        call = parse_tool_call(text, strict=True)[0] if role == "assistant" else None
        native = m.get("tool_calls") if role == "assistant" else None
        if isinstance(native, list) and native:  # the native format: the calls are structured already
            calls = [ToolCall.from_dict(c) for c in native]
            call = calls[0]
            text = "\n".join(
                filter(
                    None,
                    [
                        text,
                        *(
                            json.dumps({"name": c.name, "arguments": c.args}, ensure_ascii=False)
                            for c in calls
                        ),
                    ],
                )
            )
        out.append(Turn(role, text, call))
    return system, out
