"""Live rollouts: one row per group (the G samples of one prompt at one step) as they stream in, with the
group's mean reward and its spread (a group whose rewards do not spread teaches GRPO nothing), at most N
groups. Enter opens the group side by side."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import DataTable

from screens.format import PROMPT_MIN, call_text, clip, num, reward_style, split_short, task_label
from screens.widgets.columns import ColumnSpec, FixedTable, set_columns
from workbench.view import GroupKey, RolloutGroup, Task, Trajectory, group_key

SPARK_MAX = 16  # samples drawn in the rewards column; more are summarised by the spread alone
FIXED = (("step", "step", 5), ("mean", "mean", 6), ("sprd", "spread", 5))
TOOL_WIDTH = 17
TASK_WIDTH = 13
ROOMY = 60  # prompt + args cells below which the task column is left to be cut at the pane's edge
PROMPT_SHARE = 0.45  # of what the numbers and the tool leave: the rest is the best call's arguments
BARS = "▁▂▃▄▅▆▇█"


def column_widths(pane_width: int, group_size: int = 8) -> tuple[int, int, int]:
    """(rewards, prompt, args) widths: the prompt first (what the row is about), the best call after it."""
    spark = min(SPARK_MAX, max(group_size, 7)) + 1  # never narrower than its label
    rest = max(0, pane_width - sum(w for _, _, w in FIXED) - spark - TOOL_WIDTH - 1)
    if rest - TASK_WIDTH >= ROOMY:  # the task's id last, on screen only when the prompt and args have room
        rest -= TASK_WIDTH
    prompt = max(PROMPT_MIN, int(rest * PROMPT_SHARE))
    return spark, prompt, max(8, rest - prompt)


def rollout_columns(widths: tuple[int, int, int]) -> list[ColumnSpec]:
    spark, prompt, args = widths
    return [
        *FIXED,
        ("rewards", "rewards", spark),
        ("prompt", "prompt", prompt),
        ("best call", "tool", TOOL_WIDTH),
        ("args", "args", args),
        ("task", "task", TASK_WIDTH),
    ]


def spark(rewards: list[float], width: int) -> Text:
    """The group's rewards, sorted, one bar each (-1 .. 1 mapped to the bar heights), coloured by reward."""
    out = Text()
    for r in sorted(rewards)[:width]:
        level = round((max(-1.0, min(1.0, r)) + 1.0) / 2.0 * (len(BARS) - 1))
        out.append(BARS[level], style=reward_style(r))
    return out


class RolloutsPane(Vertical):
    class Open(Message):
        """Open a trajectory (a group's best member) with its group beside it."""

        def __init__(self, trajectory_id: int) -> None:
            super().__init__()
            self.trajectory_id = trajectory_id

    def __init__(self, max_rows: int = 200, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.max_rows = max_rows  # groups shown
        self.tasks: dict[int, Task] = {}
        self.groups: OrderedDict[str, RolloutGroup] = OrderedDict()  # what is shown, oldest first
        self.task_filter: int | None = None
        self.group_size = 1  # the largest group seen: sizes the rewards column
        self._widths = column_widths(80, 1)
        self._pane_width = 0  # the last width it was shown at

    def compose(self) -> ComposeResult:
        # No cell padding: each width includes its one-space gap, which saves columns at 80x24.
        table: DataTable = FixedTable(cursor_type="row", cell_padding=0, id="rollouts-table")
        set_columns(table, rollout_columns(self._widths))
        yield table

    def on_resize(self) -> None:
        self._fit()

    def _fit(self) -> bool:
        """Rebuild the columns (and the rows) when the pane's width or the group size asks for new widths."""
        # A hidden pane (narrow: another in front) has no size, and showing it again at the size it had sends
        # no resize: fit to the last width it had, or a group that grew meanwhile keeps a too-narrow column.
        self._pane_width = self.content_size.width or self._pane_width
        if not self._pane_width:
            return False
        widths = column_widths(self._pane_width, self.group_size)
        if widths == self._widths:
            return False
        self._widths = widths
        table, keep = self.table, self.highlighted_key()
        follow = table.row_count == 0 or table.cursor_row >= table.row_count - 1
        set_columns(table, rollout_columns(widths))
        table.clear()
        for key, group in self.groups.items():
            table.add_row(*self._cells(group), key=key)
        self._place_cursor(follow, keep)
        return True

    def on_mount(self) -> None:
        self.border_title = "Live rollouts"
        self.border_subtitle = "one row a group · enter: open the group"

    @property
    def table(self) -> DataTable:
        return self.query_one(DataTable)

    def replace(self, rows: list[Trajectory]) -> None:
        """Start over from these rows (oldest first), e.g. after the task filter changed."""
        self.table.clear()
        self.groups.clear()
        self.add(rows, follow=True)

    def add(self, rows: list[Trajectory], *, follow: bool | None = None) -> None:
        if self.task_filter is not None:
            rows = [r for r in rows if r.task_id == self.task_filter]
        rows = [r for r in rows if not r.superseded]
        if not rows:
            return
        table = self.table
        # Follow the stream unless the user moved the cursor up to read something.
        if follow is None:
            follow = table.row_count == 0 or table.cursor_row >= table.row_count - 1
        keep = self.highlighted_key()
        touched: list[str] = []
        for r in rows:
            key = _key(group_key(r))
            group = self.groups.get(key)
            if group is None:
                group = self.groups[key] = RolloutGroup(group_key(r))
            group.add(r)
            if key not in touched:
                touched.append(key)
        self.group_size = max(self.group_size, *(len(g.members) for g in self.groups.values()))
        while len(self.groups) > self.max_rows:
            old, _ = self.groups.popitem(last=False)
            if old in table.rows:
                table.remove_row(old)
        if not self._fit():  # a bigger group widens the rewards column: then every row is redrawn
            for key in touched:
                group = self.groups.get(key)
                if group is None:
                    continue
                cells = self._cells(group)
                if key in table.rows:
                    for column, cell in zip(table.ordered_columns, cells, strict=True):
                        table.update_cell(key, column.key, cell)
                else:
                    table.add_row(*cells, key=key)
        self._place_cursor(follow, keep)

    def _place_cursor(self, follow: bool, keep: str | None) -> None:
        table = self.table
        if follow and table.row_count:
            table.move_cursor(row=table.row_count - 1, animate=False)
        elif keep is not None and keep in table.rows:
            table.move_cursor(row=table.get_row_index(keep), animate=False)

    def _cells(self, g: RolloutGroup) -> tuple[Text, ...]:
        spark_w, prompt_w, args_w = self._widths
        best = g.best
        mean, spread = g.mean, g.spread
        style = reward_style(mean)
        tool, args = call_text(best.first_call)
        if best.error:
            tool = tool or "error"
        split = "" if best.split == "train" else f"{split_short(best.split)}:"
        task = self.tasks.get(best.task_id) if best.task_id is not None else None
        flat = spread is not None and spread < 1e-9
        return (
            Text(str(best.step), style=style),
            Text(num(mean, 2), style=f"bold {style}"),
            # Zero spread: every advantage is 0, the group teaches nothing (dim, not an error).
            Text(
                "–" if spread is None else num(spread, 2), style="dim" if flat or spread is None else "bold"
            ),
            spark(g.rewards, spark_w - 1),
            Text(clip(split + (task.prompt if task else ""), prompt_w - 1), style=style),
            Text(clip(tool or "(no call)", TOOL_WIDTH - 1), style=reward_style(best.reward)),
            Text(clip(args, args_w - 1), style=reward_style(best.reward)),
            Text(task_label(task, best.task_id, TASK_WIDTH - 1), style="dim"),
        )

    def highlighted_key(self) -> str | None:
        table = self.table
        if not table.row_count:
            return None
        try:
            return str(table.coordinate_to_cell_key((table.cursor_row, 0)).row_key.value)
        except Exception:  # empty or stale cursor
            return None

    def highlighted_id(self) -> int | None:
        """The highlighted group's best member (what `t` and Enter open)."""
        key = self.highlighted_key()
        group = self.groups.get(key) if key is not None else None
        return group.best.id if group is not None and group.members else None

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        group = self.groups.get(str(event.row_key.value))
        if group is not None and group.members:
            self.post_message(self.Open(group.best.id))


def _key(key: GroupKey) -> str:
    step, split, idx, eval_id = key
    return f"{step}:{split}:{idx}:{'' if eval_id is None else eval_id}"
