"""Rendering one trajectory: turns with role styling, reward parts, explanation, and group members."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from screens.format import clip, compact_json, num, reward_style
from workbench.view import Label, Trajectory, turns

ROLE_STYLE = {"system": "dim", "user": "bold blue", "assistant": "bold green", "tool": "bold yellow"}


def turn_parts(row: Trajectory) -> tuple[str | None, list[tuple[str, Group]]]:
    """(the system prompt or None, [(role class, renderable)] for the other turns in order)."""
    system, parts = turns(row)
    out: list[tuple[str, Group]] = []
    for t in parts:
        head = Text(t.role, style=ROLE_STYLE.get(t.role, "bold"))
        body = Text(t.text)
        if t.tool_call is not None:
            head.append("  tool call → ", style="dim")
            head.append(t.tool_call.name, style="bold green")
            body = Text(json.dumps(t.tool_call.args, ensure_ascii=False, indent=1) if t.tool_call.args else "(no args)")
        elif t.role == "tool":
            head = Text("tool result", style=ROLE_STYLE["tool"])
        out.append((t.role if t.role in ROLE_STYLE else "other", Group(head, body)))
    return system, out


def head_text(row: Trajectory, *, task: str, verifier: str, label: str | None) -> Text:
    t = Text()
    t.append(f"#{row.id}", style="bold")
    t.append(f"  step {row.step} · {row.split} · task {task} · group {row.group_idx} sample {row.sample_idx}")
    t.append("  reward ")
    t.append(num(row.reward), style=f"bold {reward_style(row.reward)}")
    t.append(f"  adv {num(row.advantage, 2, signed=True)}")
    t.append(f"  {verifier}", style="cyan")
    if row.tokens is not None:
        t.append(f"  {row.tokens} tok")
    if row.success is not None:
        t.append("  solved" if row.success else "  not solved", style="bold green" if row.success else "dim")
    if row.truncated:
        t.append("  truncated", style="bold yellow")
    if row.error:
        t.append("  error", style="bold red")
    if label:
        t.append(f"  label: {label}", style="bold green" if label == "good" else "bold red")
    return t


def side_text(row: Trajectory, labels: list[Label]) -> Group:
    table = Table(show_header=False, box=None, pad_edge=False, expand=False)
    table.add_column("part", style="dim")
    table.add_column("value", justify="right")
    for name, value in row.reward_parts.items():
        table.add_row(name, Text(num(value, 2, signed=True), style=reward_style(value) if value else "dim"))
    table.add_row(Text("total", style="bold"), Text(num(row.reward), style=f"bold {reward_style(row.reward)}"))
    items: list[Any] = [Text("reward parts", style="bold"), table, Text("")]
    items += [Text("verifier says", style="bold"), Text(row.explanation or "–"), Text("")]
    if row.error:
        items += [Text("error", style="bold red"), Text(row.error, style="red"), Text("")]
    if row.parse_error:
        items += [Text("not a tool call", style="bold yellow"), Text(row.parse_error, style="yellow"), Text("")]
    if row.tool_calls:
        calls = [{"name": c.name, "arguments": c.args} for c in row.tool_calls]
        items += [Text("tool calls", style="bold"), Text(compact_json(calls)), Text("")]
    if labels:
        items.append(Text("labels", style="bold"))
        for lab in labels:
            items.append(Text(f"{lab.verdict}: {lab.note or ''}", style="green" if lab.verdict == "good" else "red"))
    return Group(*items)


def member_text(row: Trajectory, *, current: bool) -> Group:
    head = Text()
    head.append(f"sample {row.sample_idx}", style="bold reverse" if current else "bold")
    head.append("  ")
    head.append(num(row.reward), style=f"bold {reward_style(row.reward)}")
    head.append(f"  adv {num(row.advantage, 2, signed=True)}")
    parts_line = Text(" ".join(f"{k[:5]}{num(v, 1, signed=True)}" for k, v in row.reward_parts.items()), style="dim")
    items = [head, parts_line, Text(row.completion or "")]
    if row.explanation:
        items.append(Text(clip(row.explanation, 200), style="italic"))
    if row.error:
        items.append(Text(row.error, style="red"))
    return Group(*items)
