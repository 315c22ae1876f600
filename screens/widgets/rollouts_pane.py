"""Live rollouts: the newest trajectories as they stream in, coloured by reward, at most N rows."""

from __future__ import annotations

from collections import deque
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import DataTable

from screens.format import call_text, clip, num, reward_style, split_short, task_label
from workbench.view import Task, Trajectory


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
        self.task_filter: int | None = None

    def compose(self) -> ComposeResult:
        # No cell padding: each width below includes its one-space gap, which saves 6 columns at 80x24.
        table: DataTable = DataTable(cursor_type="row", cell_padding=0, id="rollouts-table")
        for label, key, width in (("step", "step", 5), ("task", "task", 13), ("reward", "reward", 7),
                                  ("adv", "adv", 6), ("tool", "tool", 23), ("args", "args", None)):
            table.add_column(label, key=key, width=width)
        yield table

    def on_mount(self) -> None:
        self.border_title = "Live rollouts"
        self.border_subtitle = "enter: open"

    @property
    def table(self) -> DataTable:
        return self.query_one(DataTable)

    def replace(self, rows: list[Trajectory]) -> None:
        """Start over from these rows (oldest first), e.g. after the task filter changed."""
        self.table.clear()
        self._keys.clear()
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
            table.add_row(
                Text(str(r.step), style=style),
                Text(clip(split + task_label(task, r.task_id, 12), 12), style=style),
                Text(num(r.reward, 2), style=f"bold {style}"),
                Text(num(r.advantage, 1, signed=True), style=style),
                Text(clip(tool or "(no call)", 22), style=style),
                Text(clip(args, 60), style=style),
                key=key,
            )
            self._keys.append(key)
        while len(self._keys) > self.max_rows:
            table.remove_row(self._keys.popleft())
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
