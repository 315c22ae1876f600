"""Trajectories one at a time (n / p), their group side by side (g), filters, search, sort, labels.

A multi-step episode (a task judged on the world's final state) reads as a story: each turn's call, the tool's
result and the world's diff after it, then the final state against the expected one; its group lines the G
episodes up turn by turn and marks the turn where they part (workbench.view.episode replays the stored calls).

Pages come from workbench.view's keyset pages in a thread worker, so a text search over a
million rows never stalls the UI; the row on screen is then read by primary key.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, HorizontalScroll, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Collapsible, Static

from screens.filter_screen import FilterScreen
from screens.format import task_label
from screens.modals import PromptScreen
from screens.traj_browser import ORDERS, Browser, FetchRequest, describe, fetch
from screens.trajectory_view import (
    aligned_member_text,
    head_text,
    member_text,
    side_text,
    story_parts,
    turn_parts,
)
from screens.widgets.footer import KeyFooter
from workbench.view import Task, Trajectory, TrajectoryFilter, VerifierVersion, View
from workbench.view.episode import Story, align, story_for

if TYPE_CHECKING:
    from screens.host import Host


class TrajectoryScreen(Screen):
    CSS_PATH = "trajectory.tcss"
    BINDINGS = [
        Binding("n", "move(1)", "Next", id="trajectories.next"),
        Binding("p", "move(-1)", "Prev", id="trajectories.prev"),
        Binding(
            "g", "toggle_group", "Group", id="trajectories.group", tooltip="Show the G members of the group"
        ),
        Binding("plus", "label('good')", "Good", id="trajectories.good", tooltip="Label good, with a note"),
        Binding("minus", "label('bad')", "Bad", id="trajectories.bad", tooltip="Label bad, with a note"),
        Binding("slash", "search", "Search", id="trajectories.search"),
        Binding("f", "filters", "Filter", id="trajectories.filters"),
        Binding("o", "sort", "Sort", id="trajectories.sort", tooltip="Newest / best / worst first"),
        Binding("x", "toggle_system", "System", id="trajectories.system", tooltip="Expand the system prompt"),
        Binding("escape", "back", "Back", id="trajectories.back"),
    ]

    class PageLoaded(Message):
        def __init__(self, request: FetchRequest, rows: list[Trajectory]) -> None:
            super().__init__()
            self.request, self.rows = request, rows

    class Labeled(Message):
        def __init__(self, trajectory_id: int, verdict: str) -> None:
            super().__init__()
            self.trajectory_id, self.verdict = trajectory_id, verdict

    def __init__(self, *, anchor_id: int | None = None, task_id: int | None = None) -> None:
        super().__init__()
        self.anchor_id = anchor_id
        self.initial_task = task_id
        self.browser: Browser | None = None
        self.group_view = False
        self.shown: Trajectory | None = None
        self._task_cache: dict[int, Task | None] = {}
        self._verifier_cache: dict[int, VerifierVersion | None] = {}

    @property
    def wb(self) -> Host:
        return self.app  # type: ignore[return-value]

    def compose(self) -> ComposeResult:
        yield Static(id="traj-head")
        yield Static(id="traj-filter")
        with Horizontal(id="traj-body"):
            with VerticalScroll(id="turns"):
                yield Collapsible(
                    Static(id="system-body"), title="system", id="system", classes="turn turn-system"
                )
            yield VerticalScroll(Static(id="side-body"), id="side")
        yield HorizontalScroll(id="group")
        yield KeyFooter(compact=True)

    def on_mount(self) -> None:
        # Opened on a group (the live pane's Enter sets group_view first): the members side by side.
        self.query_one("#group").display = self.group_view
        self.query_one("#traj-body").display = not self.group_view
        assert self.wb.run_id is not None and self.wb.view is not None
        self.browser = Browser(TrajectoryFilter(self.wb.run_id, task_id=self.initial_task))
        anchor = self.wb.view.trajectory(self.anchor_id) if self.anchor_id is not None else None
        self._request(self.browser.restart(anchor=anchor))

    # ---- fetching ------------------------------------------------------------------------------------

    def _request(self, req: FetchRequest | None) -> None:
        if req is not None:
            self._show_filter(loading=True)
            self._fetch(req)

    @work(thread=True, exclusive=True, group="traj-page", exit_on_error=False)
    def _fetch(self, req: FetchRequest) -> None:
        with View.open(self.wb.db_path) as view:
            rows = fetch(view, req)
        self.post_message(self.PageLoaded(req, rows))

    def on_trajectory_screen_page_loaded(self, message: PageLoaded) -> None:
        b = self.browser
        if b is None or message.request.generation != b.generation:
            return
        moved = b.apply(message.request, message.rows)
        if message.request.direction == "start" or moved:
            self.show_current()
        elif message.request.direction == "forward":
            self.notify("no older trajectory matches", timeout=2)
        else:
            self.notify("no newer trajectory matches", timeout=2)
        self._show_filter()

    # ---- display -------------------------------------------------------------------------------------

    def _task_record(self, task_id: int | None) -> Task | None:
        if task_id is None:
            return None
        if task_id not in self._task_cache and self.wb.view is not None:
            self._task_cache[task_id] = self.wb.view.task(task_id)
        return self._task_cache.get(task_id)

    def _task_text(self, task_id: int | None) -> str:
        return "–" if task_id is None else task_label(self._task_record(task_id), task_id, 24)

    def _story(self, row: Trajectory) -> Story | None:
        """The episode replayed turn by turn when its task is multi-step (a few dict operations: no worker)."""
        return story_for(row, self._task_record(row.task_id))

    def _verifier_text(self, verifier_id: int | None) -> str:
        if verifier_id is None:
            return "verifier –"
        if verifier_id not in self._verifier_cache and self.wb.view is not None:
            self._verifier_cache[verifier_id] = self.wb.view.verifier(verifier_id)
        v = self._verifier_cache.get(verifier_id)
        return v.title if v else f"verifier #{verifier_id}"

    def _show_filter(self, *, loading: bool = False) -> None:
        b = self.browser
        if b is None:
            return
        pos = f"{b.index + 1}/{len(b.rows)}{'' if b.at_end else '+'} loaded" if b.rows else "none match"
        mode = "group view · " if self.group_view else ""
        self.query_one("#traj-filter", Static).update(
            f"{mode}{describe(b.flt, b.order, b.descending)} · {'loading…' if loading else pos}"
        )

    def show_current(self) -> None:
        b = self.browser
        current = b.current if b else None
        turns = self.query_one("#turns", VerticalScroll)
        view = self.wb.view
        if current is None or view is None:
            self._show_turns(None)
            self.shown = None
            self.query_one("#traj-head", Static).update(
                "No trajectory matches these filters (f: filters, /: search)."
            )
            self.query_one("#side-body", Static).update("")
            self.query_one("#group", HorizontalScroll).remove_children()
            return
        row = view.trajectory(current.id) or current
        self.shown = row
        labels = view.labels(row.id)
        verdict = labels[-1].verdict if labels else None
        self.query_one("#traj-head", Static).update(
            head_text(
                row,
                task=self._task_text(row.task_id),
                verifier=self._verifier_text(row.verifier_id),
                label=verdict,
            )
        )
        self._show_turns(row, self._story(row))
        turns.scroll_home(animate=False)
        self.query_one("#side-body", Static).update(side_text(row, labels))
        if self.group_view:
            self._show_group(row)

    def _show_turns(self, row: Trajectory | None, story: Story | None = None) -> None:
        """Update the turn widgets in place (mounting new ones only when a trajectory has more turns than
        any before): stepping with n / p then costs a repaint, not a remount."""
        system, parts = (
            story_parts(story) if story is not None else turn_parts(row) if row is not None else (None, [])
        )
        box = self.query_one("#system", Collapsible)
        box.display = system is not None
        if system is not None:
            box.title = f"system · {len(system)} chars"
            self.query_one("#system-body", Static).update(Text(system))
        turns = self.query_one("#turns", VerticalScroll)
        pool = list(turns.query(".turn-msg").results(Static))
        if len(pool) < len(parts):
            extra = [Static(classes="turn turn-msg") for _ in range(len(parts) - len(pool))]
            turns.mount_all(extra)
            pool += extra
        for widget, (role, renderable) in zip(pool, parts, strict=False):
            widget.set_classes(f"turn turn-msg turn-{role}")
            widget.update(renderable)
            widget.display = True
        for widget in pool[len(parts) :]:
            widget.display = False

    def _show_group(self, row: Trajectory) -> None:
        group = self.query_one("#group", HorizontalScroll)
        group.remove_children()
        members = self.wb.view.group(row.id) if self.wb.view is not None else []
        group.border_title = f"group {row.group_idx} of step {row.step} · {len(members)} members"
        stories = [self._story(m) for m in members]
        if members and all(s is not None for s in stories):
            # Multi-step: the members' turns on the same lines, the first turn where they part marked.
            told = [s for s in stories if s is not None]
            lined = align(told)
            group.border_title += (
                f" · they part at turn {lined.diverge} (▶)"
                if lined.diverge is not None
                else " · every member took the same turns"
            )
            bodies = [
                aligned_member_text(m, s, lined, k, current=m.id == row.id)
                for k, (m, s) in enumerate(zip(members, told, strict=True))
            ]
        else:
            bodies = [member_text(m, current=m.id == row.id) for m in members]
        widgets = [
            VerticalScroll(Static(body), classes="member -current" if m.id == row.id else "member")
            for m, body in zip(members, bodies, strict=True)
        ]
        # Share the screen when the group fits; below 22 columns a member is unreadable, so scroll instead.
        width = max(22, (self.size.width - 4) // max(1, len(widgets)) - 1)
        for w in widgets:
            w.styles.width = width
        group.mount_all(widgets)
        current = next((w for w, m in zip(widgets, members, strict=True) if m.id == row.id), None)
        if current is not None:
            group.call_after_refresh(group.scroll_to_widget, current, animate=False)

    # ---- actions -------------------------------------------------------------------------------------

    def action_move(self, delta: int) -> None:
        if self.browser is None:
            return
        req = self.browser.step(delta)
        if req is not None:
            self._request(req)
        elif self.browser.rows and 0 <= self.browser.index < len(self.browser.rows):
            current = self.browser.current
            if self.shown is not None and current is not None and current.id == self.shown.id:
                edge = "oldest" if delta > 0 else "newest"
                self.notify(f"that is the {edge} matching trajectory", timeout=2)
            else:
                self.show_current()
        self._show_filter()

    def action_toggle_group(self) -> None:
        self.group_view = not self.group_view
        self.query_one("#group").display = self.group_view
        self.query_one("#traj-body").display = not self.group_view
        if self.group_view and self.shown is not None:
            self._show_group(self.shown)
        self._show_filter()

    def action_toggle_system(self) -> None:
        box = self.query_one("#system", Collapsible)
        box.collapsed = not box.collapsed

    def _restart(self, flt: TrajectoryFilter | None = None, *, keep_anchor: bool = True) -> None:
        b = self.browser
        if b is None:
            return
        if flt is not None:
            b.flt = flt
        anchor = self.shown if keep_anchor else None
        self._request(b.restart(anchor=anchor))

    def action_sort(self) -> None:
        b = self.browser
        if b is None:
            return
        i = next((k for k, o in enumerate(ORDERS) if o == (b.order, b.descending)), 0)
        b.order, b.descending = ORDERS[(i + 1) % len(ORDERS)]
        self._restart(keep_anchor=False)

    def action_search(self) -> None:
        b = self.browser
        if b is None:
            return

        def got(text: str | None) -> None:
            if text is not None:
                self._restart(dataclasses.replace(b.flt, text=text.strip() or None), keep_anchor=False)

        self.app.push_screen(
            PromptScreen(
                "Search completions and explanations",
                value=b.flt.text or "",
                placeholder="text (empty clears)",
            ),
            got,
        )

    def action_filters(self) -> None:
        b, view, run_id = self.browser, self.wb.view, self.wb.run_id
        if b is None or view is None or run_id is None:
            return

        def got(flt: TrajectoryFilter | None) -> None:
            if flt is not None:
                self._restart(flt, keep_anchor=False)

        self.app.push_screen(FilterScreen(b.flt, view.verifier_history(run_id)), got)

    def action_label(self, verdict: str) -> None:
        row = self.shown
        if row is None:
            return

        def got(note: str | None) -> None:
            if note is not None:
                self._add_label(row.id, verdict, note.strip())

        self.app.push_screen(
            PromptScreen(
                f"Label #{row.id} {verdict.upper()}: a note (optional)",
                placeholder="why, e.g. 'right tool, 2 PM is fine'",
            ),
            got,
        )

    @work(thread=True, group="labels", exit_on_error=False)
    def _add_label(self, trajectory_id: int, verdict: str, note: str) -> None:
        with View.open(self.wb.db_path) as view:
            view.add_label(trajectory_id, verdict, note)
        self.post_message(self.Labeled(trajectory_id, verdict))

    def on_trajectory_screen_labeled(self, message: Labeled) -> None:
        self.notify(f"#{message.trajectory_id} labelled {message.verdict}", timeout=2)
        if self.shown is not None and self.shown.id == message.trajectory_id:
            self.show_current()

    def action_back(self) -> None:
        self.app.pop_screen()
