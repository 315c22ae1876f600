"""The dashboard: status bar, banner, and four panes (tasks, live rollouts, verifier scores, curves).

One timer polls the store for rows newer than what it has (by id / step); the first, full load, the feed of
new rows and the scores pane's step rows run in thread workers on their own connections. Whatever the worker's
write rate, the UI thread handles at most FEED_LIMIT rows a poll: a feed that fell behind skips to the newest
rows, and the rows it skipped reach the Tasks pane (and a task's curve) as per-task sums aggregated in SQLite.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid
from textual.events import DescendantFocus, Resize
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Static

from screens.curves import StepSeries
from screens.format import task_label
from screens.widgets.curves_pane import CurvesPane
from screens.widgets.footer import KeyFooter
from screens.widgets.rollouts_pane import RolloutsPane
from screens.widgets.scores_pane import ScoresPane
from screens.widgets.status_bar import Banner, StatusBar, banner_text, status_text
from screens.widgets.tasks_pane import TasksPane
from workbench.view import (
    Checkpoint,
    Eval,
    Feed,
    Progress,
    Step,
    Task,
    TaskRow,
    Trajectory,
    TrajectoryFilter,
    VerifierVersion,
    View,
    started_again,
)

if TYPE_CHECKING:
    from screens.host import Host

FEED_LIMIT = 128  # rows a poll hands the UI thread at most (16 groups of 8); a bigger backlog is skipped over
FEED_BEHIND_S = 2.0  # a feed that had to skip reads again only this much later: one batch of panes per 2 s
SCORES_EVERY_S = 2.0  # the scores pane re-reads its step's rows at most this often while rows stream in
TASK_SERIES_CAP = 20_000  # rows read to build a task's reward curve (newest first)
SLOW_EVERY = 4  # polls between reads of things that change rarely (evals, checkpoint, verifier)
NARROW_BELOW = 120  # columns: below this the panes take turns at the full width (keys 1-4)
PANES = (("tasks", "Tasks"), ("rollouts", "Rollouts"), ("scores", "Scores"), ("curves", "Curves"))


@dataclass
class Initial:
    newest: list[Trajectory]
    boundary: int
    stats: list[TaskRow]
    tasks: dict[int, Task]
    steps: list[Step]
    evals: list[Eval]
    verifier: VerifierVersion | None
    checkpoint: Checkpoint | None
    generation: int = 0
    sft: list[tuple[int, float]] = field(default_factory=list)  # the SFT warm-up's (step, loss)
    sft_event: int = 0  # the last event read for them
    policies: dict[int, str] = field(default_factory=dict)  # eval id -> policy name (the Tasks pane's column)
    extra: dict[str, Any] = field(default_factory=dict)


class DashboardScreen(Screen):
    CSS_PATH = "dashboard.tcss"
    BINDINGS = [
        # Pane keys stay out of the footer (80 columns hold only the run controls); each pane's subtitle
        # shows its keys, and ? lists them all.
        Binding("o", "sort_tasks", "Sort tasks", id="dashboard.sort_tasks", show=False),
        Binding("right_square_bracket", "curve(1)", "Next curve", id="dashboard.next_curve", show=False),
        Binding("left_square_bracket", "curve(-1)", "Prev curve", id="dashboard.prev_curve", show=False),
        Binding(
            "escape", "clear_task", "All tasks", id="dashboard.clear_task", tooltip="Clear the task filter"
        ),
        Binding(
            "x",
            "show_error",
            "Traceback",
            id="dashboard.show_error",
            tooltip="The crashed worker's traceback",
        ),
        *(
            Binding(str(i), f"pane('{key}')", title, id=f"dashboard.pane_{key}", show=False)
            for i, (key, title) in enumerate(PANES, 1)
        ),
    ]

    class Loaded(Message):
        def __init__(self, data: Initial) -> None:
            super().__init__()
            self.data = data

    class Fed(Message):
        def __init__(self, generation: int, after_id: int, task_id: int | None, feed: Feed | None) -> None:
            super().__init__()
            self.generation, self.after_id, self.task_id, self.feed = generation, after_id, task_id, feed

    class ScoreRowsLoaded(Message):
        def __init__(self, generation: int, step: int, task_id: int | None, rows: list[Trajectory]) -> None:
            super().__init__()
            self.generation, self.step, self.task_id, self.rows = generation, step, task_id, rows

    class TaskSeriesLoaded(Message):
        def __init__(self, task_id: int, series: StepSeries, token: int = 0) -> None:
            super().__init__()
            self.task_id, self.series, self.token = task_id, series, token

    def __init__(self) -> None:
        super().__init__()
        self.loaded = False
        self.last_id = 0
        self.last_step = -1
        self.steps: list[Step] = []
        self.evals: list[Eval] = []
        self.verifier: VerifierVersion | None = None
        self.checkpoint: Checkpoint | None = None
        self.tasks: dict[int, Task] = {}
        self.task_filter: int | None = None
        self.score_step: int | None = None
        self._score_dirty = True
        self._score_loading = False  # a thread is reading the scores pane's rows
        self._score_read_at = 0.0  # when the last one started (monotonic)
        self._feeding = False  # a thread is reading the feed: the next poll does not start another
        self._feed_at = 0.0  # when the last feed read started (monotonic)
        self._feed_behind = False  # the last feed skipped rows: the worker writes faster than panes are worth
        self.skipped_rows = 0  # rows a lagging feed skipped over (counted in the Tasks pane, not listed)
        self._polls = 0
        self._generation = 0
        self._last_status: str | None = None
        self._last_lock: str | None = None  # the lock token at the last poll: a new one is a new worker
        self._task_series: StepSeries | None = None
        self._series_token = 0  # the task series read whose answer counts
        self.progress: Progress | None = None
        self._sft_event = 0  # the last event read for SFT losses
        self.front = "rollouts"  # the pane shown when the terminal is narrow

    @property
    def wb(self) -> Host:
        return self.app  # type: ignore[return-value]

    def compose(self) -> ComposeResult:
        yield StatusBar(id="status")
        yield Banner(id="banner")
        yield Static(id="pane-tabs")
        with Grid(id="panes"):
            yield TasksPane(id="tasks", classes="pane")
            yield RolloutsPane(max_rows=self.wb.live_rows, id="rollouts", classes="pane")
            yield ScoresPane(id="scores", classes="pane")
            yield CurvesPane(id="curves", classes="pane")
        yield KeyFooter(compact=True)

    def on_mount(self) -> None:
        self.sub_title = self.wb.current_run.name if self.wb.current_run else ""
        self._show_pane(self.front)
        self.reload()
        self.set_interval(self.wb.poll_s, self.poll)

    # ---- loading -------------------------------------------------------------------------------------

    def reload(self) -> None:
        """Start over from a fresh snapshot (at start, and when a resume may have superseded rows)."""
        self._generation += 1
        self.loaded = False
        self._load(self._generation)

    @work(thread=True, exclusive=True, group="dashboard-load", exit_on_error=False)
    def _load(self, generation: int) -> None:
        run_id, n = self.wb.run_id, self.wb.live_rows
        assert run_id is not None
        with View.open(self.wb.db_path) as view, view.snapshot():
            data = Initial(
                newest=view.page(TrajectoryFilter(run_id), limit=n).rows[::-1],
                boundary=view.newest_id(run_id),
                stats=view.task_stats(run_id),
                tasks=view.tasks(),
                steps=view.steps(run_id),
                evals=view.evals(run_id),
                verifier=view.active_verifier(run_id),
                checkpoint=view.latest_checkpoint(run_id),
                generation=generation,
            )
            data.sft, data.sft_event = view.sft_losses(run_id)
            data.policies = view.policy_labels(run_id)
        self.post_message(self.Loaded(data))

    def on_dashboard_screen_loaded(self, message: Loaded) -> None:
        d = message.data
        if d.generation != self._generation:
            return
        self.tasks = d.tasks
        self.steps = d.steps
        self.last_step = d.steps[-1].step if d.steps else -1
        self.evals, self.verifier, self.checkpoint = d.evals, d.verifier, d.checkpoint
        self.last_id = d.boundary
        self._feeding = self._score_loading = False  # an older generation's reads are ignored when they land
        tasks_pane, rollouts = self.query_one(TasksPane), self.query_one(RolloutsPane)
        tasks_pane.tasks = rollouts.tasks = self.tasks
        tasks_pane.policies = d.policies
        tasks_pane.stats.load(d.stats, d.boundary)
        tasks_pane.redraw()
        if self.task_filter is None:
            rollouts.replace(d.newest)
        else:
            self._filter_changed()
        train = [r for r in d.newest if r.split == "train"]
        self.score_step = max(
            (r.step for r in train), default=self.last_step if self.last_step >= 0 else None
        )
        self._score_dirty, self._score_read_at = True, 0.0
        curves = self.query_one(CurvesPane)
        curves.sft, self._sft_event = [], d.sft_event
        curves.set_data(steps=self.steps, evals=self.evals)
        curves.add_sft(d.sft)
        self.loaded = True
        self.refresh_view()

    # ---- polling -------------------------------------------------------------------------------------

    def poll(self) -> None:
        """Read only what is new since the last poll: rows by id, steps by number (indexed, fast)."""
        run, view, run_id = self.wb.current_run, self.wb.view, self.wb.run_id
        if run is None or view is None or run_id is None or not self.loaded:
            return
        status = run.status
        again = started_again(self._last_status, status, self._last_lock, run.lock_token)
        self._last_status, self._last_lock = status, run.lock_token
        if again:
            # A resume may restart from a checkpoint and supersede later rows: take a fresh snapshot.
            self.reload()
            return
        self._polls += 1
        self.progress = view.progress(run_id)  # one indexed read: the newest progress event
        if (self.progress is not None and self.progress.phase == "sft") or self._polls % SLOW_EVERY == 0:
            sft, self._sft_event = view.sft_losses(run_id, self._sft_event)
            self.query_one(CurvesPane).add_sft(sft, stream=True)
        # One feed read at a time (a slow one is never queued behind another); behind a fast writer, one a
        # FEED_BEHIND_S: every pane then redraws once for the lot instead of once a poll.
        if not self._feeding and (not self._feed_behind or time.monotonic() - self._feed_at >= FEED_BEHIND_S):
            self._feeding, self._feed_at = True, time.monotonic()
            self._feed(self._generation, run_id, self.last_id, self.task_filter)
        new_steps = view.steps(run_id, self.last_step)
        if new_steps:
            self.steps = self.steps + new_steps
            self.last_step = new_steps[-1].step
            self._score_dirty = True
        if new_steps or self._polls % SLOW_EVERY == 0:
            self.evals = view.evals(run_id)
            self.checkpoint = view.latest_checkpoint(run_id)
            self.verifier = view.active_verifier(run_id)
            self.query_one(CurvesPane).set_data(
                steps=self.steps if new_steps else None, evals=self.evals, stream=True
            )
        self.refresh_view()

    @work(thread=True, group="dashboard-feed", exit_on_error=False)
    def _feed(self, generation: int, run_id: int, after_id: int, task_id: int | None) -> None:
        """The rows past `after_id` (bounded: `View.feed`), read and decoded off the UI thread."""
        feed = None
        try:
            with View.open(self.wb.db_path) as view:
                feed = view.feed(run_id, after_id, limit=FEED_LIMIT, task_id=task_id)
        finally:  # answer even on an error, or the feed would stop for good
            self.post_message(self.Fed(generation, after_id, task_id, feed))

    def on_dashboard_screen_fed(self, message: Fed) -> None:
        if message.generation != self._generation:
            return  # read before a reload: the new snapshot covers it
        self._feeding = False
        feed, view = message.feed, self.wb.view
        self._feed_behind = bool(feed is not None and feed.skipped_rows)
        if feed is None or view is None or message.after_id != self.last_id or not feed.rows:
            return
        rows = feed.rows
        self.last_id = rows[-1].id
        live = [r for r in rows if not r.superseded]
        for tid in {r.task_id for r in live if r.task_id is not None} - self.tasks.keys():
            task = view.task(tid)
            if task:
                self.tasks[tid] = task
        tasks_pane = self.query_one(TasksPane)
        # An eval and its rows are written in one transaction: rows of an eval not named yet mean a new eval.
        new_evals = {
            r.eval_id for r in [*live, *feed.skipped] if r.eval_id is not None
        } - tasks_pane.policies.keys()
        if new_evals and self.wb.run_id is not None:
            tasks_pane.policies = view.policy_labels(self.wb.run_id)
        if feed.skipped:
            self.skipped_rows += feed.skipped_rows
            tasks_pane.merge(feed.skipped)
        tasks_pane.add_rows(live)
        self.query_one(RolloutsPane).add(live)
        if self._task_series is not None and feed.skipped_rows and message.task_id != self.task_filter:
            # Skipped rows summed for another task (the filter changed meanwhile): read this task's series
            # again, up to the rows taken now.
            self._task_series = StepSeries()
            self._series_token += 1
            self._load_task_series(self.task_filter, self.last_id, self._series_token)
        elif self._task_series is not None:
            for step, (s, n) in feed.skipped_steps.items():  # the filter's task only (asked for by id)
                s0, n0 = self._task_series.sums.get(step, (0.0, 0))
                self._task_series.sums[step] = (s0 + s, n0 + n)
            self._task_series.add([r for r in live if r.task_id == self.task_filter])
            self.query_one(CurvesPane).set_task_series(self._task_series, self._task_name())
        train_steps = [r.step for r in live if r.split == "train"]
        if train_steps and (self.score_step is None or max(train_steps) >= self.score_step):
            self.score_step = max(train_steps)
            self._score_dirty = True
        if not self._feed_behind:  # behind a fast writer the next poll redraws the rest, in its own frame
            self.refresh_view()

    def refresh_view(self) -> None:
        run, state = self.wb.current_run, self.wb.state()
        if run is None or state is None:
            return
        now = self.wb.clock()
        note = f"task {self._task_name()}" if self.task_filter is not None else ""
        bar = self.query_one(StatusBar)
        bar.show(
            status_text(
                run,
                state,
                self.steps,
                verifier=self.verifier,
                checkpoint=self.checkpoint,
                task_note=note,
                width=bar.content_size.width,
                progress=self.progress,
            )
        )
        self.query_one(Banner).show(banner_text(run, state, now))
        self.query_one(CurvesPane).set_waiting(self.progress.text if self.progress is not None else "")
        # Behind a fast writer every pane has news at every poll: redrawing them all in one frame made a key
        # that came meanwhile wait for all of them. Then one pane a poll, in turn (the rollouts pane has its own
        # frame when its feed lands) with a poll between, so a frame holds about what a key's own repaint does
        # and most polls draw nothing.
        turn = self._polls % 6 if self._feed_behind else None
        if turn in (None, 0):
            self.query_one(TasksPane).redraw()
        if turn in (None, 2):
            self._read_scores()
        if turn in (None, 4):
            self.query_one(CurvesPane).redraw()

    def _read_scores(self) -> None:
        """Re-read the scores pane's step (a thread), at most every SCORES_EVERY_S while rows stream in: a
        step holds up to thousands of rows, and a fast writer would otherwise have them re-read every poll."""
        run_id = self.wb.run_id
        if not (self._score_dirty and self.loaded) or self._score_loading or run_id is None:
            return
        if self.score_step is None:
            self._score_dirty = False
            self.query_one(ScoresPane).show(None, [], self.steps, self._score_note())
            return
        if (
            time.monotonic() - self._score_read_at < SCORES_EVERY_S
            and self.query_one(ScoresPane).step is not None
        ):
            return  # shown recently: the next poll after the interval reads it (the first read never waits)
        self._score_dirty, self._score_loading = False, True
        self._score_read_at = time.monotonic()
        self._load_score_rows(self._generation, run_id, self.score_step, self.task_filter)

    def _score_note(self) -> str:
        return f"task {self._task_name()}" if self.task_filter is not None else ""

    @work(thread=True, group="dashboard-scores", exit_on_error=False)
    def _load_score_rows(self, generation: int, run_id: int, step: int, task_id: int | None) -> None:
        rows: list[Trajectory] = []
        try:
            with View.open(self.wb.db_path) as view:
                rows = view.step_rows(run_id, step, task_id=task_id)
        finally:
            self.post_message(self.ScoreRowsLoaded(generation, step, task_id, rows))

    def on_dashboard_screen_score_rows_loaded(self, message: ScoreRowsLoaded) -> None:
        if message.generation != self._generation:
            return
        self._score_loading = False
        if message.task_id != self.task_filter:  # the filter changed meanwhile: read again for the new one
            self._score_dirty = True
            self._score_read_at = 0.0
        else:
            self.query_one(ScoresPane).show(message.step, message.rows, self.steps, self._score_note())
        self._read_scores()

    # ---- narrow terminals: one pane at a time -------------------------------------------------------

    def on_resize(self, event: Resize) -> None:
        self.set_class(event.size.width < NARROW_BELOW, "-narrow")

    def _show_pane(self, key: str) -> None:
        self.front = key
        for k, _ in PANES:
            self.query_one(f"#{k}").set_class(k == key, "-front")
        tabs = Text(no_wrap=True)
        for i, (k, title) in enumerate(PANES, 1):
            tabs.append(f" {i} {title} ", style="reverse bold" if k == key else "dim")
        self.query_one("#pane-tabs", Static).update(tabs)

    def action_pane(self, key: str) -> None:
        """Bring a pane to the front (narrow) and focus what it holds."""
        self._show_pane(key)
        pane = self.query_one(f"#{key}")
        target = next((w for w in pane.query("*") if w.focusable), None)
        if target is not None:
            target.focus()
        elif pane.focusable:
            pane.focus()

    def on_descendant_focus(self, event: DescendantFocus) -> None:
        for k, _ in PANES:  # the focused pane is the one in front (tab moves between panes' tables)
            if self.query_one(f"#{k}") in event.widget.ancestors_with_self:
                if k != self.front:
                    self._show_pane(k)
                return

    # ---- task filter ---------------------------------------------------------------------------------

    def _task_name(self) -> str:
        return task_label(self.tasks.get(self.task_filter), self.task_filter, 24)

    def on_tasks_pane_selected(self, message: TasksPane.Selected) -> None:
        self.set_task_filter(message.task_id)

    def set_task_filter(self, task_id: int | None) -> None:
        if task_id == self.task_filter:
            return
        self.task_filter = task_id
        self.query_one(TasksPane).set_selected(task_id)
        self._filter_changed()

    def _filter_changed(self) -> None:
        rollouts = self.query_one(RolloutsPane)
        rollouts.task_filter = self.task_filter
        assert self.wb.view is not None and self.wb.run_id is not None
        flt = TrajectoryFilter(self.wb.run_id, task_id=self.task_filter)
        # Indexed on (run_id, task_id, id): the newest rows of one task come straight off the index.
        rollouts.replace(self.wb.view.page(flt, limit=self.wb.live_rows).rows[::-1])
        curves = self.query_one(CurvesPane)
        self._task_series = None
        curves.set_task_series(None)
        if self.task_filter is not None:
            self._task_series = StepSeries()
            self._series_token += 1
            self._load_task_series(self.task_filter, self.last_id, self._series_token)
        self._score_dirty, self._score_read_at = True, 0.0  # a new filter's scores come at once
        self.refresh_view()

    @work(thread=True, exclusive=True, group="task-series", exit_on_error=False)
    def _load_task_series(self, task_id: int, boundary: int, token: int = 0) -> None:
        """The task's per-step mean reward from its rows up to `boundary`; newer ones come from the feed."""
        series = StepSeries()
        assert self.wb.run_id is not None
        flt = TrajectoryFilter(self.wb.run_id, task_id=task_id, split="train")
        after: tuple | None = (boundary + 1,)
        read = 0
        with View.open(self.wb.db_path) as view:
            while after is not None and read < TASK_SERIES_CAP:
                page = view.page(flt, after=after, limit=500)
                series.add(page.rows)
                read += len(page.rows)
                after = page.next_cursor
        self.post_message(self.TaskSeriesLoaded(task_id, series, token))

    def on_dashboard_screen_task_series_loaded(self, message: TaskSeriesLoaded) -> None:
        if (
            message.task_id != self.task_filter
            or self._task_series is None
            or message.token != self._series_token
        ):
            return  # another task's, or an earlier read of this one (its rows would count twice)
        for step, (s, n) in message.series.sums.items():
            s0, n0 = self._task_series.sums.get(step, (0.0, 0))
            self._task_series.sums[step] = (s0 + s, n0 + n)
        self.query_one(CurvesPane).set_task_series(self._task_series, self._task_name())
        self.refresh_view()

    # ---- actions -------------------------------------------------------------------------------------

    def on_rollouts_pane_open(self, message: RolloutsPane.Open) -> None:
        from screens.trajectory_screen import TrajectoryScreen

        self.wb.open_trajectories(anchor_id=message.trajectory_id)
        if isinstance(self.app.screen, TrajectoryScreen):  # a row is a group: open it as one (g toggles)
            self.app.screen.group_view = True

    def highlighted_rollout(self) -> int | None:
        rollouts = self.query_one(RolloutsPane)
        return rollouts.highlighted_id() if rollouts.table.has_focus else None

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "clear_task":
            return self.task_filter is not None
        if action == "show_error":
            run = self.wb.current_run
            state = self.wb.state()
            return bool(run and state and state.crashed and run.error)
        return True

    def action_sort_tasks(self) -> None:
        self.query_one(TasksPane).cycle_sort()

    def action_curve(self, delta: int) -> None:
        self.query_one(CurvesPane).switch(delta)

    def action_clear_task(self) -> None:
        self.set_task_filter(None)

    def action_show_error(self) -> None:
        from screens.modals import TextScreen

        run = self.wb.current_run
        if run is not None:
            self.app.push_screen(TextScreen(f"Run #{run.id} crashed", run.error or ""))
