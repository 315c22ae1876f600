"""Verifier editor: edit the reward code, dry-run it on the last 100 training and 50 eval trajectories (old
vs new reward, label agreement), apply it through a set_verifier command, and diff against earlier versions.

The dry run is workbench.verifier_edit.dry_run (the engine's), run in a thread worker; Apply is enabled
only by an ok dry run of exactly the text in the editor, and a dry run is ok only when it re-scored at least
`MIN_ROWS` trajectories (it says how many of each kind). Leaving with an edit that was not applied asks first.
Below 120 columns the editor and the results take turns at the full height (ctrl+r). A dry run shows the rows
re-scored so far, and Esc cancels it (a looping verifier's row in flight is killed; nothing is stored).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Button, DataTable, Footer, Static, TabbedContent, TabPane, TextArea
from textual.worker import Worker, WorkerState

from screens.diff_view import diff_text
from screens.format import clip, num, pct, reward_style
from screens.modals import ConfirmScreen
from workbench.view import (
    DryRunOutcome,
    DryRunRow,
    VerifierVersion,
    View,
    allowed,
    builtin_verifier_code,
    dry_run_control,
)

if TYPE_CHECKING:
    from screens.host import Host
    from workbench.view.store_view import DryRunControl  # (its home: workbench.verifier_edit)

DRY_RUN_N = 100  # training trajectories re-scored, and the newest DRY_RUN_N // 2 eval ones
MIN_ROWS = (
    8  # one group of the default G: fewer re-scored rows and the dry run is not ok (it checked too little)
)
DRY_HINT = (
    f"No dry run yet: ctrl+d re-scores the last {DRY_RUN_N} training and {DRY_RUN_N // 2} eval "
    f"trajectories (at least {MIN_ROWS} in all, or it is not ok)."
)
BUILTIN = "tool_call_verifier"
NARROW = 120  # below this width the editor and the results stack vertically
PROGRESS_S = 0.25  # how often the status line shows the dry run's rows re-scored so far


def builtin_code(name: str) -> str:
    try:
        return builtin_verifier_code(name)
    except Exception as exc:  # any failure here must not stop the editor from opening
        return (
            f"# No verifier version is stored for this run, and the built-in {name!r} could not be loaded\n"
            f"# ({type(exc).__name__}: {exc}).\n\n"
            "def reward(output, task):\n    return 0.0\n"
        )


def summary_text(summary: dict[str, Any]) -> Text:
    t = Text()
    n = summary.get("n")
    kinds = summary.get("by_kind") or {}
    few = isinstance(n, int) and n < int(summary.get("min_rows") or MIN_ROWS)
    t.append(f"re-scored {n if n is not None else '?'}", style="bold red" if few else "bold")
    if kinds:
        t.append(f" (train {kinds.get('train', 0)}, eval {kinds.get('eval', 0)})")
    t.append(f"  changed {summary.get('changed', '?')}", style="bold")
    t.append("  mean ")
    t.append(num(summary.get("mean_old"), 2, signed=True), style=reward_style(summary.get("mean_old")))
    t.append(" → ")
    t.append(num(summary.get("mean_new"), 2, signed=True), style=reward_style(summary.get("mean_new")))
    t.append(
        f"  label agreement {pct(summary.get('label_agreement_old'))} → {pct(summary.get('label_agreement_new'))}"
    )
    if summary.get("errors"):
        t.append(f"  errors {summary['errors']}", style="bold red")
    return t


class VerifierEditorScreen(Screen):
    CSS_PATH = "verifier_editor.tcss"
    BINDINGS = [
        Binding("ctrl+d", "dry_run", "Dry run", id="verifier.dry_run", priority=True),
        Binding("ctrl+a", "apply", "Apply", id="verifier.apply", priority=True),
        Binding(
            "ctrl+o",
            "load_version",
            "Load version",
            id="verifier.load_version",
            priority=True,
            tooltip="Put the selected history version into the editor",
        ),
        Binding(
            "ctrl+r",
            "toggle_results",
            "Results",
            id="verifier.results",
            tooltip="Narrow terminal: show the dry run's results / the editor",
        ),
        # While a dry run runs Esc cancels it, wherever the focus is (the editor takes Esc to move the focus).
        Binding("escape", "cancel_dry_run", "Cancel dry run", id="verifier.cancel_dry_run", priority=True),
        Binding(
            "escape",
            "back",
            "Back",
            id="verifier.back",
            tooltip="Back (from the editor: twice; asks first when an edit was not applied)",
        ),
    ]

    class DryRunDone(Message):
        def __init__(self, result: DryRunOutcome | None, code: str, error: str | None = None) -> None:
            super().__init__()
            self.result, self.code, self.error = result, code, error

    def __init__(self) -> None:
        super().__init__()
        self.verifier_name = BUILTIN
        self.dry_code: str | None = None  # the exact text of the last ok dry run
        self.dry_verifier_id: int | None = None
        self.history: list[VerifierVersion] = []
        self.running = False
        self._control: DryRunControl | None = None  # the running dry run's progress and cancel
        self._progress_timer: Any = None  # shows the control's progress while it runs
        self.saved_code = ""  # what the run has (or was just sent): leaving with other text asks first

    @property
    def wb(self) -> Host:
        return self.app  # type: ignore[return-value]

    def compose(self) -> ComposeResult:
        with Horizontal(id="ve-bar"):
            yield Button("Dry run ^d", id="dry-run", compact=True, variant="primary")
            yield Button("Apply ^a", id="apply", compact=True, variant="success", disabled=True)
            yield Static(id="ve-status")
        with Horizontal(id="ve-main"):
            yield TextArea.code_editor("", language="python", id="code")
            with TabbedContent(id="ve-tabs"):
                with TabPane("Dry run", id="tab-dry"):
                    yield Static(DRY_HINT, id="dry-summary")
                    table: DataTable = DataTable(cursor_type="row", id="dry-table")
                    for label, key in (
                        ("traj", "traj"),
                        ("old", "old"),
                        ("new", "new"),
                        ("Δ", "delta"),
                        ("label", "label"),
                        ("new explanation / error", "why"),
                    ):
                        table.add_column(label, key=key)
                    yield table
                with TabPane("History", id="tab-history"):
                    hist: DataTable = DataTable(cursor_type="row", id="history-table")
                    for col in ("ver", "name", "active", "dry run", "note"):
                        hist.add_column(col, key=col)
                    yield hist
                    with VerticalScroll(id="diff-scroll"):
                        yield Static("Select a version to diff it against the editor.", id="diff")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        view, run_id, run = self.wb.view, self.wb.run_id, self.wb.current_run
        active = view.active_verifier(run_id) if view is not None and run_id is not None else None
        if active:
            self.verifier_name = active.name
            code = active.code
            where = f"active: {active.title}"
        else:
            reward = str((run.config if run else {}).get("reward") or BUILTIN)
            self.verifier_name = reward if re.fullmatch(r"\w+", reward) else BUILTIN
            code = builtin_code(self.verifier_name)
            where = f"built-in {self.verifier_name} (no version stored yet)"
        self.query_one("#code", TextArea).load_text(code)
        self.saved_code = code
        self._status(Text(where, style="cyan"))
        self._load_history()
        self.query_one("#code", TextArea).focus()

    def on_resize(self) -> None:
        self.set_class(self.size.width < NARROW, "-narrow")
        self.refresh_bindings()

    def _show_results(self, show: bool) -> None:
        """Narrow: the results (True) or the editor at the full height; wide: both, side by side."""
        self.set_class(show, "-results")
        if not self.has_class("-narrow"):
            return
        # The hidden one must not keep the focus (keys would edit code nobody sees).
        (self.query_one("#dry-table", DataTable) if show else self.query_one("#code", TextArea)).focus()

    # ---- helpers -------------------------------------------------------------------------------------

    @property
    def code(self) -> str:
        return self.query_one("#code", TextArea).text

    def _status(self, text: Text | str) -> None:
        self.query_one("#ve-status", Static).update(text)

    def can_apply(self) -> tuple[bool, str]:
        if self.dry_code is None or self.dry_verifier_id is None:
            return False, "dry-run first (ctrl+d)"
        if self.code != self.dry_code:
            return False, "edited since the dry run: dry-run again"
        if not allowed("set_verifier", self.wb.state()):
            return False, f"the run is {self.wb.current_run.status if self.wb.current_run else 'gone'}"
        return True, ""

    def _update_apply(self) -> None:
        ok, _ = self.can_apply()
        self.query_one("#apply", Button).disabled = not ok
        self.refresh_bindings()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "apply":
            return True if self.can_apply()[0] else None
        if action == "dry_run":
            return None if self.running else True
        if action == "cancel_dry_run":
            return self.running and self._control is not None and not self._control.cancelled
        if action == "back" and self.running:
            return (
                False  # Esc is the cancel then (its priority binding); one Esc never both cancels and leaves
            )
        if action == "toggle_results":
            return self.has_class("-narrow")
        return True

    def _load_history(self) -> None:
        view, run_id = self.wb.view, self.wb.run_id
        self.history = view.verifier_history(run_id) if view is not None and run_id is not None else []
        table = self.query_one("#history-table", DataTable)
        table.clear()
        for v in reversed(self.history):  # newest first
            dry = v.dry_run or {}
            table.add_row(
                f"v{v.version}",
                v.name,
                Text("✓", style="bold green") if v.active else "",
                f"{dry['changed']}/{dry['n']} changed" if "changed" in dry and "n" in dry else "–",
                clip(v.note or "", 40),
                key=str(v.id),
            )

    # ---- dry run -------------------------------------------------------------------------------------

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "dry-run":
            self.action_dry_run()
        elif event.button.id == "apply":
            self.action_apply()

    def action_dry_run(self) -> None:
        if self.running:
            return
        self.running = True
        self._control = dry_run_control()
        self._status(
            Text(f"dry run: re-scoring the last {DRY_RUN_N} trajectories… (esc cancels)", style="yellow")
        )
        self.query_one("#dry-run", Button).disabled = True
        self.refresh_bindings()
        self._progress_timer = self.set_interval(PROGRESS_S, self._show_progress)
        self._dry_run(self.code, self.verifier_name, self._control)

    def _show_progress(self) -> None:
        control = self._control
        if not self.running or control is None:
            return
        if control.cancelled:
            what = f"cancelling the dry run… ({control.done} re-scored)"
        elif control.total is None:
            what = "dry run: loading the verifier and reading the rows… (esc cancels)"
        else:
            what = f"dry run: re-scored {control.done}/{control.total}… (esc cancels)"
        self._status(Text(what, style="yellow"))

    def action_cancel_dry_run(self) -> None:
        if self.running and self._control is not None:
            self._control.cancel()
            self._show_progress()
            self.refresh_bindings()

    @work(thread=True, exclusive=True, group="dry-run", exit_on_error=False)
    def _dry_run(self, code: str, name: str, control: DryRunControl) -> None:
        run_id = self.wb.run_id
        assert run_id is not None
        with View.open(self.wb.db_path) as view:
            result = view.dry_run(
                run_id,
                code,
                n=DRY_RUN_N,
                n_eval=DRY_RUN_N // 2,
                name=name,
                min_rows=MIN_ROWS,
                control=control,
            )
        self.post_message(self.DryRunDone(result, code))

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.worker.group == "dry-run" and event.state == WorkerState.ERROR:
            event.stop()  # reported here, in the editor's status line, not as a second toast
            self._finish_dry_run(
                None, f"dry run raised {type(event.worker.error).__name__}: {event.worker.error}"
            )

    def on_verifier_editor_screen_dry_run_done(self, message: DryRunDone) -> None:
        if message.error is not None or message.result is None:
            self._finish_dry_run(None, message.error or "dry run returned nothing")
            return
        res = message.result
        if res.verifier_id is not None:  # it ran (ok or not): show what it re-scored, and how many
            self._fill_dry_table(list(res.rows))
            self._load_history()
        if not res.ok:
            self._finish_dry_run(None, res.error or "the verifier did not compile", res.summary)
            return
        self.dry_code, self.dry_verifier_id = message.code, res.verifier_id
        self.query_one("#dry-summary", Static).update(summary_text(res.summary or {}))
        self._finish_dry_run(res, None)

    def _finish_dry_run(
        self, result: DryRunOutcome | None, error: str | None, summary: dict[str, Any] | None = None
    ) -> None:
        self.running = False
        if self._progress_timer is not None:
            self._progress_timer.stop()
            self._progress_timer = None
        self.query_one("#dry-run", Button).disabled = False
        self.query_one(TabbedContent).active = "tab-dry"
        if error is not None:
            self.dry_code = self.dry_verifier_id = None
            self._status(Text(f"✗ {error}", style="bold red"))
            body = summary_text(summary) if summary and "n" in summary else Text()
            if body:
                body.append("\n")
            body.append(error, style="red")
            self.query_one("#dry-summary", Static).update(body)
            if m := re.search(r"line (\d+)", error):
                editor = self.query_one("#code", TextArea)
                editor.move_cursor((max(0, int(m.group(1)) - 1), 0))
                self._show_results(False)
            else:
                self._show_results(True)
        else:
            ok, why = self.can_apply()
            kinds = (result.summary if result else {}).get("by_kind") or {}
            n = (result.summary if result else {}).get("n", 0)
            # Short enough for 80 columns beside the buttons; the Apply button (ctrl+a) lights up when ok.
            what = f"✓ dry run ok, {n} re-scored ({kinds.get('train', 0)} train, {kinds.get('eval', 0)} eval)"
            self._status(Text(what if ok else f"{what}: {why}", style="green"))
            self._show_results(True)
        self._update_apply()

    def _fill_dry_table(self, rows: list[DryRunRow]) -> None:
        # Changed (or failed) first, largest change on top, whatever order the rows came in.
        rows.sort(key=lambda r: (not r.changed, -abs(r.delta or 0.0), r.trajectory_id))
        table = self.query_one("#dry-table", DataTable)
        table.clear()
        for r in rows:
            old, new, d = r.old_reward, r.new_reward, r.delta
            table.add_row(
                str(r.trajectory_id),
                Text(num(old), style=reward_style(old)),
                Text(num(new), style=reward_style(new)),
                Text(num(d, 2, signed=True), style="bold" if d else "dim"),
                Text(r.label or "", style="green" if r.label == "good" else "red"),
                Text(clip(r.error or r.explanation or "", 80), style="red" if r.error else ""),
                key=str(r.trajectory_id),
            )

    def on_text_area_changed(self, event: TextArea.Changed) -> None:
        if self.dry_code is not None and self.code != self.dry_code:
            self._status(Text("edited since the dry run: ctrl+d to dry-run again", style="yellow"))
        self._update_apply()
        self._refresh_diff()

    # ---- apply ---------------------------------------------------------------------------------------

    def action_apply(self) -> None:
        ok, why = self.can_apply()
        if not ok:
            self.notify(f"cannot apply: {why}", severity="warning")
            return
        # When it takes effect is the worker's rule (a step boundary): its answer arrives as a toast.
        self.wb.send_command("set_verifier", {"verifier_id": self.dry_verifier_id})
        self.saved_code = self.code  # sent: leaving now drops nothing
        self._status(
            Text(
                "set_verifier sent: the worker activates it at the next step boundary and answers",
                style="green",
            )
        )

    # ---- history and diff ----------------------------------------------------------------------------

    def _selected_version(self) -> VerifierVersion | None:
        table = self.query_one("#history-table", DataTable)
        if not table.row_count:
            return None
        key = table.coordinate_to_cell_key((table.cursor_row, 0)).row_key.value
        return next((v for v in self.history if str(v.id) == key), None)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.data_table.id == "history-table":
            self._refresh_diff()

    def _refresh_diff(self) -> None:
        v = self._selected_version()
        if v is not None:
            self.query_one("#diff", Static).update(diff_text(v.code, self.code, f"v{v.version}", "editor"))

    def action_load_version(self) -> None:
        v = self._selected_version()
        if v is None:
            self.notify("no version selected (History tab)", severity="warning")
            return
        self.query_one("#code", TextArea).load_text(v.code)
        self._status(Text(f"loaded {v.title} into the editor", style="cyan"))

    def action_toggle_results(self) -> None:
        self._show_results(not self.has_class("-results"))

    def action_back(self) -> None:
        if self.code == self.saved_code:
            self.app.pop_screen()
            return

        def answer(leave: bool | None) -> None:
            if leave:
                self.app.pop_screen()

        tested = self.dry_code == self.code and self.dry_verifier_id is not None
        detail = (
            "Its dry run passed but it was not applied (ctrl+a)."
            if tested
            else "It was not applied (a dry run, ctrl+d, then ctrl+a). Every dry-run version stays in History."
        )
        self.app.push_screen(
            ConfirmScreen("Leave the verifier editor and drop the edit?", detail, yes="Leave"), answer
        )
