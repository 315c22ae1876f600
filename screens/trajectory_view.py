"""Rendering one trajectory: turns with role styling, reward parts, explanation, and group members; a multi-step
episode as a story (each turn's call, result and world diff, the final state against the expected one) and its
group lined up turn by turn."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from screens.format import clip, compact_json, num, reward_style
from workbench.view import Label, ToolCall, Trajectory, turns
from workbench.view.episode import FINISH, Alignment, Change, Story, StoryTurn
from workbench.view.turns import content_text

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
            body = Text(
                json.dumps(t.tool_call.args, ensure_ascii=False, indent=1)
                if t.tool_call.args
                else "(no args)"
            )
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
    table.add_row(
        Text("total", style="bold"), Text(num(row.reward), style=f"bold {reward_style(row.reward)}")
    )
    items: list[Any] = [Text("reward parts", style="bold"), table, Text("")]
    items += [Text("verifier says", style="bold"), Text(row.explanation or "–"), Text("")]
    if row.error:
        items += [Text("error", style="bold red"), Text(row.error, style="red"), Text("")]
    if row.parse_error:
        items += [
            Text("not a tool call", style="bold yellow"),
            Text(row.parse_error, style="yellow"),
            Text(""),
        ]
    if row.tool_calls:
        calls = [{"name": c.name, "arguments": c.args} for c in row.tool_calls]
        items += [Text("tool calls", style="bold"), Text(compact_json(calls)), Text("")]
    if labels:
        items.append(Text("labels", style="bold"))
        for lab in labels:
            items.append(
                Text(f"{lab.verdict}: {lab.note or ''}", style="green" if lab.verdict == "good" else "red")
            )
    return Group(*items)


def member_text(row: Trajectory, *, current: bool) -> Group:
    head = Text()
    head.append(f"sample {row.sample_idx}", style="bold reverse" if current else "bold")
    head.append("  ")
    head.append(num(row.reward), style=f"bold {reward_style(row.reward)}")
    head.append(f"  adv {num(row.advantage, 2, signed=True)}")
    parts_line = Text(
        " ".join(f"{k[:5]}{num(v, 1, signed=True)}" for k, v in row.reward_parts.items()), style="dim"
    )
    items = [head, parts_line, Text(row.completion or "")]
    if row.explanation:
        items.append(Text(clip(row.explanation, 200), style="italic"))
    if row.error:
        items.append(Text(row.error, style="red"))
    return Group(*items)


# ---- a multi-step episode as a story -----------------------------------------------------------------

STATUS_MARK = {
    "ok": ("✓", "dim"),
    "missing": ("✗ missing", "bold red"),
    "extra": ("✗ not expected", "bold yellow"),
}


def item_text(collection: str, item: dict[str, Any]) -> str:
    """One state item in words: an event, a sent email, a reminder (anything else as compact JSON)."""
    get = lambda k: str(item.get(k, "?"))  # noqa: E731
    if collection == "events" and {"attendee", "day", "time"} <= set(item):
        return f"event {get('attendee')} · {get('day')} {get('time')}"
    if collection == "outbox" and {"to", "subject"} <= set(item):
        return f"email to {get('to')}: {get('subject')}"
    if collection == "reminders" and {"text", "day", "time"} <= set(item):
        return f"reminder “{get('text')}” · {get('day')} {get('time')}"
    return f"{collection} {compact_json(item)}"


def args_text(call: ToolCall) -> str:
    return (
        "  ".join(f"{k}={v if isinstance(v, str) else compact_json(v)}" for k, v in call.args.items())
        or "(no args)"
    )


def result_text(result: Any, width: int = 400) -> Text:
    """A stored tool result: green when the tool took the call, red with its error when it did not."""
    if isinstance(result, dict) and result.get("ok") is False:
        return Text(f"✗ {result.get('error', compact_json(result))}", style="red")
    # ", " separators (not compact JSON): a long result wraps at its items instead of mid-word
    if isinstance(result, dict) and result.get("ok") is True:
        return Text(f"→ {clip(json.dumps(result.get('result'), ensure_ascii=False), width)}", style="green")
    return Text(
        f"→ {clip(json.dumps(result, ensure_ascii=False) if not isinstance(result, str) else result, width)}"
    )


def changes_text(changes: tuple[Change, ...]) -> Text:
    if not changes:
        return Text("world: unchanged", style="dim")
    out = Text("world: ", style="bold")
    for k, c in enumerate(changes):
        if k:
            out.append("; ")
        out.append(
            f"{'−' if c.sign == '-' else '+'} {item_text(c.collection, c.item)}",
            style="red" if c.sign == "-" else "green",
        )
    return out


def story_turn(turn: StoryTurn) -> Group:
    """One turn of the story: the call(s), each stored result, the world's diff after it."""
    head = Text(f"turn {turn.number}" if not turn.given else "turn given by the task", style="bold")
    if turn.given:
        head.append("  (its conversation already held this call)", style="dim")
    items: list[Any] = [head]
    if not turn.calls:
        items.append(Text("no call: the episode ends on this reply", style="bold yellow"))
        items.append(Text(clip(turn.reply, 400) or "(empty reply)"))
        return Group(*items)
    ran = [c for c in turn.calls if c.name != FINISH]
    for k, call in enumerate(turn.calls):
        line = Text("call → ", style="dim")
        line.append(call.name, style="bold cyan" if call.name == FINISH else "bold green")
        line.append(f"  {args_text(call)}")
        items.append(line)
        if call.name != FINISH:
            idx = ran.index(call) if call in ran else k
            items.append(
                result_text(turn.results[idx])
                if idx < len(turn.results)
                else Text("(no stored result)", style="dim")
            )
    if ran:
        items.append(changes_text(turn.changes))
    for reason in turn.unsafe:
        items.append(Text(f"⚠ unsafe: {reason}", style="bold red"))
    if turn.replay_differs:
        items.append(
            Text(
                "the replay gave another result than the stored one: the world shown may differ from "
                "the run's",
                style="bold yellow",
            )
        )
    return Group(*items)


def final_text(story: Story) -> Group:
    """The final state against the expected one, what differs highlighted."""
    check = story.check
    head = Text("final state vs expected: ", style="bold")
    if check.matches:
        head.append("matches ✓", style="bold green")
    else:
        head.append(
            f"{check.differences} difference{'s' if check.differences != 1 else ''} ✗", style="bold red"
        )
    if story.unsafe:
        head.append(f"  · unsafe: {story.unsafe[0]}", style="bold red")
    lines: list[Any] = [head]
    before = {(c, json.dumps(i, sort_keys=True)) for c in story.initial for i in story.initial[c] or []}
    for status, collection, item in check.items:
        mark, style = STATUS_MARK[status]
        if status == "extra" and (collection, json.dumps(item, sort_keys=True)) in before:
            mark = "✗ still there (expected gone)"  # the episode left an item it should have removed
        lines.append(Text(f"  {mark} {item_text(collection, item)}", style=style))
    if not check.items:
        lines.append(Text("  (empty: no events, emails or reminders, as expected)", style="dim"))
    if story.replay_differs:
        lines.append(
            Text(
                "replayed from the stored calls; some stored results differed (see the turns)", style="yellow"
            )
        )
    return Group(*lines)


def story_parts(story: Story) -> tuple[str | None, list[tuple[str, Group]]]:
    """(the system prompt or None, [(class, renderable)]): the harness's example and the request as turns, then
    one block per turn (call, result, world diff), then the final state against the expected one."""
    system = (
        "\n\n".join(content_text(m.get("content")) for m in story.lead if m.get("role") == "system") or None
    )
    lead = [m for m in story.lead if m.get("role") != "system"]
    out: list[tuple[str, Group]] = []
    if len(lead) > 1:  # the harness's worked example: one dim block, so the episode itself starts high up
        lines = [Text("harness example", style="dim bold")]
        lines += [
            Text(f"{m.get('role', '?')}: {clip(content_text(m.get('content')), 300)}", style="dim")
            for m in lead[:-1]
        ]
        out.append(("other", Group(*lines)))
    if lead:
        out.append(
            (
                "user",
                Group(Text("request", style=ROLE_STYLE["user"]), Text(content_text(lead[-1].get("content")))),
            )
        )
    for turn in story.turns:
        out.append(("given" if turn.given else "step", story_turn(turn)))
    out.append(("final-ok" if story.check.matches and not story.unsafe else "final-bad", final_text(story)))
    return system, out


def _line(text: str, style: str = "") -> Text:
    # One terminal line whatever the column's width: the G columns stay lined up turn by turn.
    return Text(text, style=style, no_wrap=True, overflow="ellipsis")


def aligned_member_text(
    row: Trajectory, story: Story, alignment: Alignment, index: int, *, current: bool
) -> Group:
    """One member of a group, its turns on the same lines as the others' (three lines a turn), the turn where
    the group parts marked, and its final state."""
    head = Text(no_wrap=True, overflow="ellipsis")
    head.append(f"sample {row.sample_idx}", style="bold reverse" if current else "bold")
    head.append("  ")
    head.append(num(row.reward), style=f"bold {reward_style(row.reward)}")
    head.append(f"  adv {num(row.advantage, 2, signed=True)}")
    items: list[Any] = [
        head,
        _line(" ".join(f"{k[:5]}{num(v, 1, signed=True)}" for k, v in row.reward_parts.items()), "dim"),
    ]
    for k, turns_at in enumerate(alignment.rows):
        turn = turns_at[index]
        marked = alignment.diverge == k + 1
        prefix = "▶" if marked else " "
        style = "bold yellow" if marked else ""
        if turn is None:
            items += [_line(f"{prefix}{k + 1} ·", "dim"), _line(""), _line("")]
            continue
        if not turn.calls:
            items += [
                _line(f"{prefix}{k + 1} no call (ends)", style or "yellow"),
                _line(f"   {turn.reply}", "dim"),
                _line(""),
            ]
            continue
        names = ", ".join(c.name for c in turn.calls)
        items.append(_line(f"{prefix}{k + 1} {names}", style or "bold"))
        items.append(_line("   " + " | ".join(args_text(c) for c in turn.calls)))
        result = next((r for r in turn.results), None)
        if turn.unsafe:
            items.append(_line(f"   ⚠ {turn.unsafe[0]}", "bold red"))
        elif isinstance(result, dict) and result.get("ok") is False:
            items.append(_line(f"   ✗ {result.get('error', '')}", "red"))
        elif turn.changes:
            items.append(
                _line(
                    "   "
                    + "; ".join(
                        f"{'−' if c.sign == '-' else '+'}{item_text(c.collection, c.item)}"
                        for c in turn.changes
                    ),
                    "green",
                )
            )
        else:
            items.append(_line("   ok, world unchanged" if result is not None else "", "dim"))
    check = story.check
    items.append(
        _line(
            "state ✓ as expected"
            if check.matches and not story.unsafe
            else f"state ✗ {check.differences} off" + (" · unsafe" if story.unsafe else ""),
            "bold green" if check.matches and not story.unsafe else "bold red",
        )
    )
    for status, collection, item in check.items:
        if status != "ok":
            items.append(
                _line(f"  {STATUS_MARK[status][0]} {item_text(collection, item)}", STATUS_MARK[status][1])
            )
    if row.explanation:
        items.append(Text(clip(row.explanation, 200), style="italic"))
    return Group(*items)
