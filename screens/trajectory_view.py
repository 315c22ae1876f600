"""Rendering one trajectory: turns with role styling, reward parts, explanation, and group members."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from screens.format import clip, compact_json, content_text, num, reward_style

ROLE_STYLE = {"system": "dim", "user": "bold blue", "assistant": "bold green", "tool": "bold yellow"}


def _tool_call(text: str) -> tuple[str, Any] | None:
    """(tool, args) when an assistant turn is exactly one tool-call JSON object."""
    try:
        obj = json.loads(text)
    except (ValueError, TypeError):
        return None
    if isinstance(obj, dict) and isinstance(obj.get("tool") or obj.get("name"), str):
        return obj.get("tool") or obj.get("name"), obj.get("args", obj.get("arguments"))
    return None


def turn_parts(row: dict[str, Any]) -> tuple[str | None, list[tuple[str, Group]]]:
    """(the system prompt or None, [(role class, renderable)] for the other turns in order)."""
    messages = list(row.get("messages") or [])
    if not any(m.get("role") == "assistant" for m in messages) and row.get("completion"):
        messages.append({"role": "assistant", "content": row["completion"]})
    system: str | None = None
    out: list[tuple[str, Group]] = []
    for m in messages:
        role = str(m.get("role", "?"))
        text = content_text(m.get("content"))
        if role == "system":
            system = text if system is None else f"{system}\n\n{text}"
            continue
        head = Text(role, style=ROLE_STYLE.get(role, "bold"))
        body = Text(text)
        if role == "assistant" and (call := _tool_call(text)):
            head.append("  tool call → ", style="dim")
            head.append(call[0], style="bold green")
            body = Text(json.dumps(call[1], ensure_ascii=False, indent=1) if call[1] is not None else "(no args)")
        elif role == "tool":
            head = Text("tool result", style=ROLE_STYLE["tool"])
        out.append((role if role in ROLE_STYLE else "other", Group(head, body)))
    return system, out


def head_text(row: dict[str, Any], *, task: str, verifier: str, label: str | None) -> Text:
    t = Text()
    t.append(f"#{row['id']}", style="bold")
    t.append(f"  step {row['step']} · {row['split']} · task {task} · group {row['group_idx']} sample {row['sample_idx']}")
    t.append("  reward ")
    t.append(num(row.get("reward")), style=f"bold {reward_style(row.get('reward'))}")
    t.append(f"  adv {num(row.get('advantage'), 2, signed=True)}")
    t.append(f"  {verifier}", style="cyan")
    if row.get("tokens") is not None:
        t.append(f"  {row['tokens']} tok")
    if row.get("truncated"):
        t.append("  truncated", style="bold yellow")
    if row.get("error"):
        t.append("  error", style="bold red")
    if label:
        t.append(f"  label: {label}", style="bold green" if label == "good" else "bold red")
    return t


def side_text(row: dict[str, Any], labels: list[dict[str, Any]]) -> Group:
    parts = row.get("reward_parts") or {}
    table = Table(show_header=False, box=None, pad_edge=False, expand=False)
    table.add_column("part", style="dim")
    table.add_column("value", justify="right")
    for name, value in parts.items():
        table.add_row(name, Text(num(value, 2, signed=True), style=reward_style(value) if value else "dim"))
    table.add_row(Text("total", style="bold"), Text(num(row.get("reward")), style=f"bold {reward_style(row.get('reward'))}"))
    items: list[Any] = [Text("reward parts", style="bold"), table, Text("")]
    items += [Text("verifier says", style="bold"), Text(row.get("explanation") or "–"), Text("")]
    if row.get("error"):
        items += [Text("error", style="bold red"), Text(str(row["error"]), style="red"), Text("")]
    if row.get("tool_calls"):
        items += [Text("tool calls", style="bold"), Text(compact_json(row["tool_calls"])), Text("")]
    if labels:
        items.append(Text("labels", style="bold"))
        for lab in labels:
            items.append(Text(f"{lab['verdict']}: {lab.get('note') or ''}",
                              style="green" if lab["verdict"] == "good" else "red"))
    return Group(*items)


def member_text(row: dict[str, Any], *, current: bool) -> Group:
    head = Text()
    head.append(f"sample {row['sample_idx']}", style="bold reverse" if current else "bold")
    head.append("  ")
    head.append(num(row.get("reward")), style=f"bold {reward_style(row.get('reward'))}")
    head.append(f"  adv {num(row.get('advantage'), 2, signed=True)}")
    parts = row.get("reward_parts") or {}
    parts_line = Text(" ".join(f"{k[:5]}{num(v, 1, signed=True)}" for k, v in parts.items()), style="dim")
    items = [head, parts_line, Text(row.get("completion") or "")]
    if row.get("explanation"):
        items.append(Text(clip(row["explanation"], 200), style="italic"))
    if row.get("error"):
        items.append(Text(str(row["error"]), style="red"))
    return Group(*items)
