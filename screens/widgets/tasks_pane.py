"""Tasks pane: attempts, mean reward and success per task, split and policy (the training rollouts, or one
eval's: base, sft, step N), never averaged across policies; Enter filters the dashboard."""

from __future__ import annotations

import contextlib
import time
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import DataTable
from textual.widgets.data_table import RowDoesNotExist

from screens.format import PROMPT_MIN, clip, num, pct, prompt_width, reward_style, split_short, task_label
from screens.widgets.columns import ColumnSpec, FixedTable, set_columns
from workbench.view import SORTS, Task, TaskRow, TaskStats, Trajectory

POLICY_WIDTH = 10  # "training", "base", "sft", "step 1200"
NUMBERS = (
    ("split", "split", 6),
    ("policy", "policy", POLICY_WIDTH),
    ("n", "n", 6),
    ("mean", "mean", 6),
    ("succ", "succ", 5),
)
ID_WIDTH = 13
STREAM_REDRAW_S = 1.0  # new rows redraw the table at most this often (a rebuild costs ~ one row per task)


def task_columns(prompt: int) -> list[ColumnSpec]:
    """Every column at a width we chose (each with its gap): the prompt first, the task's id last."""
    return [("prompt", "prompt", prompt), *NUMBERS, ("task", "task", ID_WIDTH)]


class TasksPane(Vertical):
    class Selected(Message):
        def __init__(self, task_id: int) -> None:
            super().__init__()
            self.task_id = task_id

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.stats = TaskStats()
        self.tasks: dict[int, Task] = {}
        self.policies: dict[int, str] = {}  # eval id -> its policy's name (`View.policy_labels`)
        self.sort = SORTS[0]
        self.selected: int | None = None
        self._dirty = True
        self._rows_changed = False  # new rows folded in, not drawn yet (drawn within STREAM_REDRAW_S)
        self._drawn_at = 0.0
        self._prompt_width = PROMPT_MIN

    def compose(self) -> ComposeResult:
        # No cell padding: widths include a one-space gap. The prompt comes first and takes what the numbers
        # leave (what a person reads a task by); the task's id comes last, cut first when narrow.
        table: DataTable = FixedTable(cursor_type="row", zebra_stripes=True, cell_padding=0, id="tasks-table")
        set_columns(table, task_columns(self._prompt_width))
        yield table

    def _width_now(self) -> int:
        """The prompt column's width for the pane's size now (the last known one while it has no size)."""
        if not self.content_size.width:
            return self._prompt_width
        return prompt_width(self.content_size.width, sum(w for _, _, w in NUMBERS), ID_WIDTH)

    def on_resize(self) -> None:
        if self._width_now() != self._prompt_width:
            self._dirty = True
            self.redraw(force=True)

    def on_mount(self) -> None:
        self.border_title = "Tasks"
        self._subtitle()

    def _subtitle(self) -> None:
        sel = f" · task {self.selected} (esc clears)" if self.selected is not None else ""
        self.border_subtitle = f"o sort: {self.sort}{sel}"

    def cycle_sort(self) -> None:
        self.sort = SORTS[(SORTS.index(self.sort) + 1) % len(SORTS)]
        self._subtitle()
        self._dirty = True
        self.redraw()

    def set_selected(self, task_id: int | None) -> None:
        self.selected = task_id
        self._subtitle()
        self._dirty = True
        self.redraw()

    def add_rows(self, rows: list[Trajectory]) -> None:
        if rows:
            self.stats.add(rows)
            self._rows_changed = True

    def merge(self, counts: list[TaskRow]) -> None:
        """Counts of rows the feed skipped over (`TaskStats.merge`)."""
        if counts:
            self.stats.merge(counts)
            self._rows_changed = True

    def redraw(self, *, force: bool = False) -> None:
        """Redraw when rows changed; `force`: also before the stats are loaded (a resize: the header).
        A sort, a selection or a resize redraws at once; streamed rows at most every STREAM_REDRAW_S, so a
        fast writer costs one rebuild a second, not one a poll."""
        if self._rows_changed and time.monotonic() - self._drawn_at >= STREAM_REDRAW_S:
            self._dirty = True
        if not self._dirty or not (self.stats.loaded or force):
            return
        # Read off the size at each draw: rows that arrive before the pane's first resize (a busy machine)
        # were drawn at the minimum width and stayed so until the terminal changed size.
        self._prompt_width = self._width_now()
        table = self.query_one(DataTable)
        keep = None
        if table.row_count and table.cursor_row is not None:
            with contextlib.suppress(Exception):  # cursor beyond the rows: nothing to keep
                keep = table.coordinate_to_cell_key((table.cursor_row, 0)).row_key.value
        if not set_columns(table, task_columns(self._prompt_width)):
            table.clear()
        if not self.stats.loaded:
            return
        self._dirty = self._rows_changed = False
        self._drawn_at = time.monotonic()
        for r in self.stats.sorted(self.sort, self.policies):
            task = self.tasks.get(r.task_id)
            mean = r.mean_reward
            mark = "▶ " if r.task_id == self.selected else ""
            table.add_row(
                Text(
                    mark
                    + clip(r.prompt or (task.prompt if task else ""), self._prompt_width - 1 - len(mark)),
                    style="bold magenta" if mark else "",
                ),
                Text(split_short(r.split), style="dim" if r.split != "train" else ""),
                clip(r.policy(self.policies), POLICY_WIDTH - 1),
                str(r.attempts),
                Text(num(mean, 2), style=reward_style(mean)),
                pct(r.success_rate),
                task_label(task, r.task_id, ID_WIDTH - 1),
                key=f"{r.task_id}:{r.split}" + ("" if r.eval_id is None else f":{r.eval_id}"),
            )
        if keep is not None:
            with contextlib.suppress(RowDoesNotExist):  # the row left the table
                table.move_cursor(row=table.get_row_index(keep), animate=False)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        if event.row_key.value:
            self.post_message(self.Selected(int(event.row_key.value.split(":")[0])))
