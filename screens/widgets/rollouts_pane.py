"""Live rollouts: the newest trajectories as they stream in, coloured by reward, at most N rows."""

from __future__ import annotations

from collections import deque
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import DataTable

from screens.format import PROMPT_MIN, call_text, clip, num, reward_style, split_short, task_label
from workbench.view import Task, Trajectory

FIXED = (("step", "step", 5), ("reward", "reward", 7), ("adv", "adv", 6))
TOOL_WIDTH = 17
PROMPT_SHARE = 0.45  # of what the numbers and the tool leave: the rest is the call's arguments


def column_widths(pane_width: int) -> tuple[int, int]:
    """(prompt, args) widths: the prompt first (what the row is about), the reply's arguments after it."""
    rest = max(0, pane_width - sum(w for _, _, w in FIXED) - TOOL_WIDTH - 1)
    prompt = max(PROMPT_MIN, int(rest * PROMPT_SHARE))
    return prompt, max(8, rest - prompt)


class RolloutsPane(Vertical):
    class Open(Message):
        def __init__(self, trajectory_id: int) -> None:
            super().__init__()
            self.trajectory_id = trajectory_id

    def __init__(self, max_rows: int = 200, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.max_rows = max_rows
        self.tasks: dict[int, Task] = {}
        self._keys: deque[str] = deque()
        self._rows: dict[str, Trajectory] = {}  # what is shown, to redraw at a new width
        self.task_filter: int | None = None
        self._widths = column_widths(80)

    def compose(self) -> ComposeResult:
        # No cell padding: each width below includes its one-space gap, which saves 6 columns at 80x24.
        table: DataTable = DataTable(cursor_type="row", cell_padding=0, id="rollouts-table")
        for label, key, width in (*FIXED, ("prompt", "prompt", None), ("tool", "tool", TOOL_WIDTH),
                                  ("args", "args", None), ("task", "task", 13)):
            table.add_column(label, key=key, width=width)
        yield table

    def on_resize(self) -> None:
        widths = column_widths(self.content_size.width)
        if widths != self._widths:
            self._widths = widths
            if self._rows:  # the auto-width columns only grow: start over at the new widths, same row
                table, keep = self.table, self.highlighted_id()
                follow = table.cursor_row >= table.row_count - 1
                self.replace(list(self._rows.values()))
                if keep is not None and not follow and str(keep) in table.rows:
                    table.move_cursor(row=table.get_row_index(str(keep)), animate=False)

    def on_mount(self) -> None:
        self.border_title = "Live rollouts"
        self.border_subtitle = "enter: open"

    @property
    def table(self) -> DataTable:
        return self.query_one(DataTable)

    def replace(self, rows: list[Trajectory]) -> None:
        """Start over from these rows (oldest first), e.g. after the task filter changed."""
        self.table.clear(columns=False)
        self._keys.clear()
        self._rows.clear()
        self.add(rows, follow=True)

    def add(self, rows: list[Trajectory], *, follow: bool | None = None) -> None:
        if self.task_filter is not None:
            rows = [r for r in rows if r.task_id == self.task_filter]
        rows = [r for r in rows if not r.superseded][-self.max_rows:]
        if not rows:
            return
        table = self.table
        # Follow the stream unless the user moved the cursor up to read something.
        if follow is None:
            follow = table.row_count == 0 or table.cursor_row >= table.row_count - 1
        for r in rows:
            key = str(r.id)
            if key in table.rows:
                continue
            style = reward_style(r.reward)
            tool, args = call_text(r.first_call)
            if r.error:
                tool = tool or "error"
            split = "" if r.split == "train" else f"{split_short(r.split)}:"
            task = self.tasks.get(r.task_id) if r.task_id is not None else None
            prompt_w, args_w = self._widths
            table.add_row(
                Text(str(r.step), style=style),
                Text(num(r.reward, 2), style=f"bold {style}"),
                Text(num(r.advantage, 1, signed=True), style=style),
                # Auto-width columns have no gap of their own: the trailing space is it.
                Text(clip(split + (task.prompt if task else ""), prompt_w - 1) + " ", style=style),
                Text(clip(tool or "(no call)", TOOL_WIDTH - 1), style=style),
                Text(clip(args, args_w - 1) + " ", style=style),
                Text(task_label(task, r.task_id, 12), style="dim"),
                key=key,
            )
            self._keys.append(key)
            self._rows[key] = r
        while len(self._keys) > self.max_rows:
            old = self._keys.popleft()
            table.remove_row(old)
            self._rows.pop(old, None)
        if follow and table.row_count:
            table.move_cursor(row=table.row_count - 1, animate=False)

    def highlighted_id(self) -> int | None:
        table = self.table
        if not table.row_count:
            return None
        try:
            return int(table.coordinate_to_cell_key((table.cursor_row, 0)).row_key.value)
        except Exception:  # empty or stale cursor
            return None

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        if event.row_key.value:
            self.post_message(self.Open(int(event.row_key.value)))
