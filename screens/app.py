"""WorkbenchApp: attaches to a run in the store, shows it, and steers it through the commands table.

The UI writes only commands, verifier versions, labels and notes, all through workbench.view. It never
owns the worker: quitting leaves a worker running (unless the user chose stop), and a UI can attach to a
headless worker's run. Which controls are allowed when is workbench.view.run_state's table: the keys
(check_action), the footer, the command palette and the help screen all read it. The run controls' keys are
the command table's (`Action.key`); the screens' keys are their bindings here; the palette's "(key)" hints
are read from both, never written twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from textual import work
from textual.app import App
from textual.binding import Binding
from textual.driver import Driver
from textual.message import Message
from textual.screen import Screen
from textual.worker import Worker, WorkerState

from screens import heap
from screens.command_tracker import CommandTracker
from screens.dashboard import DashboardScreen
from screens.driver import prompt_escape
from screens.evals_screen import EvalsScreen
from screens.events_screen import EventsScreen
from screens.help_screen import HelpScreen
from screens.modals import ConfirmScreen, PromptScreen, QuitScreen
from screens.palette import WorkbenchCommands
from screens.runs_screen import RunsScreen
from screens.trajectory_screen import TrajectoryScreen
from screens.verifier_editor import VerifierEditorScreen
from workbench.view import (
    ACTIONS,
    PayloadError,
    Run,
    RunState,
    Sample,
    View,
    allowed,
    command_spec,
    key_action,
    payload_dict,
    start_worker,
)

PaletteEntry = tuple[str, str, Callable[[], Any]]
# Keys that open a screen: hidden while that screen is open (frees footer room for keys that do something).
SCREEN_KEYS: dict[str, type[Screen]] = {
    "trajectories": TrajectoryScreen,
    "evaluations": EvalsScreen,
    "verifier": VerifierEditorScreen,
    "events": EventsScreen,
}
# The run controls with a key of their own: (footer label, tooltip). Their keys are the actions' (the command
# table's), so a binding cannot disagree with the palette or the help screen.
RUN_KEY_LABELS: dict[str, tuple[str, str]] = {
    "pause": ("Pause", ""),
    "resume": ("Resume", "Resume, or start a worker when none runs"),
    "checkpoint": ("Ckpt", "Save a checkpoint now"),
    "eval": ("Eval", "Run a held-out eval now"),
    "stop": ("Stop", ""),
}
RUN_KEYS = tuple(RUN_KEY_LABELS)
ACTION_KEYS = {a.name: a.key for a in ACTIONS}


def run_bindings() -> list[Binding]:
    return [
        Binding(ACTION_KEYS[name], name, label, id=f"workbench.{name}", tooltip=tooltip)
        for name, (label, tooltip) in RUN_KEY_LABELS.items()
    ]


class WorkbenchApp(App[None]):
    CSS_PATH = "app.tcss"
    TITLE = "Workbench"
    COMMANDS = App.COMMANDS | {WorkbenchCommands}
    BINDINGS = [
        *run_bindings(),
        Binding("t", "trajectories", "Trajs", id="workbench.trajectories", tooltip="Browse trajectories"),
        Binding("E", "evaluations", "Evals", id="workbench.evaluations", tooltip="Evaluations screen"),
        Binding("v", "verifier", "Verif", id="workbench.verifier", tooltip="Verifier editor"),
        Binding("l", "events", "Log", id="workbench.events", tooltip="The run's event log", show=False),
        Binding("question_mark", "help", "Help", id="workbench.help"),
        Binding("q", "quit", "Quit", id="workbench.quit", tooltip="Quit the UI (the worker keeps running)"),
    ]

    class CommandQueued(Message):
        def __init__(self, command_id: int, kind: str, payload: dict[str, Any] | None) -> None:
            super().__init__()
            self.command_id, self.kind, self.payload = command_id, kind, payload

    class WorkerStarted(Message):
        def __init__(self, pid: int | None) -> None:
            super().__init__()
            self.pid = pid

    def __init__(
        self,
        db_path: str | Path,
        run_id: int | None = None,
        *,
        poll_s: float = 0.5,
        clock: Callable[[], float] = time.time,
        live_rows: int = 200,
        ask_on_quit: bool = False,
    ) -> None:
        super().__init__()
        self.ask_on_quit = ask_on_quit  # `workbench demo`: q asks whether the worker keeps training
        self.quit_choice: str | None = None  # "keep" or "stop" when the user answered that question
        self.db_path = str(db_path)
        self.poll_s, self.clock, self.live_rows = poll_s, clock, live_rows
        # Validate here (on a throwaway connection) so a bad --db or --run fails before the screen opens.
        with View.open(self.db_path) as check:
            runs = check.runs()
            if run_id is not None:
                check.run(run_id)
            elif len(runs) == 1:
                run_id = runs[0].id
        self.run_id: int | None = run_id
        self.runs_count = len(runs)
        self.view: View | None = None  # the event-loop thread's connection, opened on mount
        self.current_run: Run | None = None
        self.tracker = CommandTracker()
        self.stop_chosen = False
        self.worker_pid: int | None = None
        self._state: RunState | None = None
        self._resetting = False  # between dropping the screens of one run and showing the next
        self._settle_queued = False  # a heap.settle waits for the next paint

    # ---- lifecycle -----------------------------------------------------------------------------------

    def get_driver_class(self) -> type[Driver]:
        return prompt_escape(super().get_driver_class())  # a lone Esc in ESCDELAY, not ~100 ms

    @property
    def _background_screens(self) -> list[Screen]:
        # Textual counts the screen under the top one as visible even when the top one is opaque (the help
        # screen): the hidden dashboard then keeps laying out and hands its repaints up, and an open of the
        # help took three full 200x50 repaints instead of one (docs/benchmarks.md).
        if self._screen_stack and self.screen.styles.background.a == 1:
            return []
        return super()._background_screens

    def on_mount(self) -> None:
        self.view = View.open(self.db_path)
        if self.run_id is not None:
            self.open_run(self.run_id)
        else:
            self.push_screen(RunsScreen())
        self.set_interval(self.poll_s, self.tick)

    def open_run(self, run_id: int) -> None:
        assert self.view is not None
        self.run_id = run_id
        self.current_run = self.view.run(run_id)
        self.sub_title = f"#{run_id} {self.current_run.name}"
        self._state = None
        self.call_later(self._reset_to, DashboardScreen())

    def on_dashboard_screen_loaded(self, message: DashboardScreen.Loaded) -> None:
        self._settle_heap()

    def _settle_heap(self) -> None:
        # A run's first load made the objects the app keeps: freeze them, after this paint, and not while the
        # screens of the run before are being dropped (screens/heap.py).
        dash = next((s for s in self.screen_stack if isinstance(s, DashboardScreen)), None)
        busy = heap.settled() or self._resetting or self._settle_queued
        if not busy and dash is not None and dash.loaded:  # another screen may be open over it
            self._settle_queued = True
            self.call_after_refresh(self._settle_now)

    def _settle_now(self) -> None:
        self._settle_queued = False
        if not (heap.settled() or self._resetting):
            heap.settle()

    def show_runs(self) -> None:
        self.call_later(self._reset_to, RunsScreen())

    async def _reset_to(self, screen: Screen) -> None:
        self._resetting = True
        heap.release()  # the screens about to go must be collectable
        try:
            while len(self.screen_stack) > 2:
                await self.pop_screen()
            if len(self.screen_stack) == 2:
                await self.switch_screen(screen)
            else:
                await self.push_screen(screen)
        finally:
            self._resetting = False
        self._settle_heap()  # the new dashboard may have loaded before the old screens were gone

    def state(self) -> RunState | None:
        """The run's status and worker liveness now, on the app's clock (tests freeze it)."""
        return None if self.current_run is None else RunState.of(self.current_run, self.clock())

    def tick(self) -> None:
        """Refresh the run (one primary-key read) and collect worker answers to our commands."""
        if self.run_id is None or self.view is None:
            return
        self.current_run = self.view.run(self.run_id)
        state = self.state()
        if state != self._state:
            self._state = state
            self.refresh_bindings()
        if self.tracker.pending:
            answered, overdue = self.tracker.poll(self.view, self.clock(), bool(state and state.alive))
            for a in answered:
                self.notify(
                    a.message,
                    title=f"{a.kind}: {'done' if a.ok else 'failed'}",
                    severity="information" if a.ok else "error",
                )
            for s in overdue:
                self.notify(
                    "No live worker answers; it stays queued until a worker runs (r starts one).",
                    title=f"{s.kind}: queued",
                    severity="warning",
                )

    # ---- commands to the worker ----------------------------------------------------------------------

    def send_command(self, kind: str, payload: dict[str, Any] | None = None) -> None:
        if self.run_id is not None:
            self._enqueue(self.run_id, kind, payload)

    # Not exclusive: two quick commands must both be written, never one cancel the other.
    @work(thread=True, group="commands", exit_on_error=False)
    def _enqueue(self, run_id: int, kind: str, payload: dict[str, Any] | None) -> None:
        with View.open(self.db_path) as view:
            command_id = view.enqueue(run_id, kind, payload)
        self.post_message(self.CommandQueued(command_id, kind, payload))

    def on_workbench_app_command_queued(self, message: CommandQueued) -> None:
        self.tracker.add(message.command_id, message.kind, message.payload, self.clock())
        self.notify(f"sent to the worker (#{message.command_id})", title=message.kind, timeout=2)

    @work(thread=True, group="start-worker", exclusive=True, exit_on_error=False)
    def _start_worker(self, run_id: int) -> None:
        proc = start_worker(self.db_path, run_id)
        self.post_message(self.WorkerStarted(getattr(proc, "pid", None)))

    def on_workbench_app_worker_started(self, message: WorkerStarted) -> None:
        self.worker_pid = message.pid
        self.notify(
            f"worker process started (pid {message.pid}); it keeps running if you quit", title="worker"
        )

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        # Every thread worker is exit_on_error=False: its failure is reported here, once.
        if event.state == WorkerState.ERROR:
            error = event.worker.error
            self.notify(
                f"{type(error).__name__}: {error}",
                title=f"{event.worker.name} failed",
                severity="error",
                timeout=8,
            )

    # ---- what is allowed now -------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in SCREEN_KEYS:
            return self.current_run is not None and not isinstance(self.screen, SCREEN_KEYS[action])
        if action in RUN_KEYS:
            return key_action(action, self.state()) is not None
        return True

    def palette_commands(self) -> list[PaletteEntry]:
        """What the command palette offers now: the run controls the table allows, then the screens."""
        out: list[PaletteEntry] = []
        state = self.state()
        if self.current_run is not None and state is not None:
            config = self.current_run.config
            dash = self.dashboard()
            task_id = dash.task_filter if dash is not None else None
            handlers: dict[str, Callable[[], Any] | None] = {
                "pause": self.action_pause,
                "resume": self.action_resume,
                "start_worker": self.action_resume,
                "checkpoint": self.action_checkpoint,
                "eval": self.action_eval,
                "stop": self.action_stop,
                "set_lr": lambda: self._ask_number(
                    "set_lr", "New learning rate", config.get("learning_rate")
                ),
                "set_temperature": lambda: self._ask_number(
                    "set_temperature", "New sampling temperature", config.get("temperature")
                ),
                "sample": None
                if task_id is None
                else lambda: self.send_command("sample", payload_dict(Sample(task_id=task_id, n=8))),
            }
            now = {
                "set_lr": f"now {config.get('learning_rate', '?')}",
                "set_temperature": f"now {config.get('temperature', '?')}",
            }
            for action in ACTIONS:
                callback = handlers.get(action.name)
                if callback is None or not allowed(action.name, state):
                    continue
                title = (
                    action.title.replace("the selected task", f"task {task_id}")
                    if action.name == "sample"
                    else action.title
                )
                out.append((title, now.get(action.name, action.help) + self._key_hint(action.name), callback))
            out.append(
                (
                    "Trajectories",
                    "browse, filter, search and label" + self._key_hint("trajectories"),
                    self.action_trajectories,
                )
            )
            out.append(
                (
                    "Evaluations",
                    "baseline vs checkpoints, warning flags" + self._key_hint("evaluations"),
                    self.action_evaluations,
                )
            )
            out.append(
                (
                    "Verifier editor",
                    "edit, dry-run and apply the reward code" + self._key_hint("verifier"),
                    self.action_verifier,
                )
            )
            out.append(
                (
                    "Event log",
                    "status changes, resumes, verifier swaps, with their reasons" + self._key_hint("events"),
                    self.action_events,
                )
            )
        if self.runs_count > 1:
            out.append(("Switch run", "choose another run in this database", self.show_runs))
        out.append(("Keys", "every key binding" + self._key_hint("help"), self.action_help))
        out.append(
            ("Quit", "the worker keeps running unless you stopped it" + self._key_hint("quit"), self.exit)
        )
        return out

    def _key_hint(self, action: str) -> str:
        """ " (k)": the key of this app's binding for `action` (start_worker: resume's), "" when it has none
        (a palette-only control). Read from BINDINGS, so the palette never names a key twice."""
        action = "resume" if action == "start_worker" else action
        keys = [b.key for b in self.BINDINGS if isinstance(b, Binding) and b.action == action]
        return f" ({self.get_key_display(Binding(keys[0], action))})" if keys else ""

    # ---- actions -------------------------------------------------------------------------------------

    def action_pause(self) -> None:
        self.send_command("pause")

    def action_resume(self) -> None:
        if key_action("resume", self.state()) == "resume":
            self.send_command("resume")
        elif self.run_id is not None:
            self.notify("no live worker: starting one for this run", title="resume")
            self._start_worker(self.run_id)

    def action_checkpoint(self) -> None:
        self.send_command("checkpoint")

    def action_eval(self) -> None:
        self.send_command("eval")

    def action_stop(self) -> None:
        def answered(yes: bool | None) -> None:
            if yes:
                self.stop_chosen = True
                self.send_command("stop")

        name = self.current_run.name if self.current_run else ""
        # Before the first checkpoint (baseline eval, SFT warm-up) there is nothing to save: say so.
        first = (
            self.view is None or self.run_id is None or self.view.latest_checkpoint(self.run_id) is not None
        )
        what = (
            "The worker stops at its next safe point (within a second), saves a checkpoint of the last "
            "finished step and exits."
            if first
            else "No checkpoint yet (the first is written when the SFT warm-up ends): the worker exits at its "
            "next safe point and a resume starts the warm-up over. Everything stored so far is kept."
        )
        self.push_screen(ConfirmScreen(f"Stop run #{self.run_id} {name}?", what, yes="Stop"), answered)

    async def action_quit(self) -> None:
        """Quit; from `workbench demo`, with a worker training, first ask whether it keeps training."""
        state = self.state()
        if not (
            self.ask_on_quit
            and state is not None
            and state.alive
            and not self.stop_chosen
            and self.run_id is not None
        ) or isinstance(self.screen, QuitScreen):
            self.exit()
            return

        def answered(choice: str | None) -> None:
            if choice is None:
                return
            if choice == "stop" and self.view is not None and self.run_id is not None:
                self.view.enqueue(self.run_id, "stop")  # one INSERT, here: a thread worker dies with the app
            self.quit_choice = choice
            self.exit()

        self.push_screen(QuitScreen(self.run_id, self.db_path), answered)

    def dashboard(self) -> DashboardScreen | None:
        return next((s for s in self.screen_stack if isinstance(s, DashboardScreen)), None)

    def open_trajectories(self, *, anchor_id: int | None = None) -> None:
        if isinstance(self.screen, TrajectoryScreen):
            return
        dash = self.dashboard()
        self.push_screen(TrajectoryScreen(anchor_id=anchor_id, task_id=dash.task_filter if dash else None))

    def action_trajectories(self) -> None:
        dash = self.dashboard()
        self.open_trajectories(anchor_id=dash.highlighted_rollout() if dash is self.screen else None)

    def action_evaluations(self) -> None:
        if not isinstance(self.screen, EvalsScreen):
            self.push_screen(EvalsScreen())

    def action_verifier(self) -> None:
        if not isinstance(self.screen, VerifierEditorScreen):
            self.push_screen(VerifierEditorScreen())

    def action_events(self) -> None:
        if not isinstance(self.screen, EventsScreen):
            self.push_screen(EventsScreen())

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            # Composed once and kept installed: its tables of every screen's keys never change.
            if not self.is_screen_installed("help"):
                self.install_screen(HelpScreen(self.help_sections()), "help")
            self.push_screen("help")

    def help_sections(self) -> list[tuple[str, list[Binding]]]:
        return [("Everywhere", list(self.BINDINGS))] + [
            (title, list(cls.BINDINGS))
            for title, cls in (
                ("Dashboard", DashboardScreen),
                ("Trajectories", TrajectoryScreen),
                ("Verifier editor", VerifierEditorScreen),
                ("Evaluations", EvalsScreen),
                ("Event log", EventsScreen),
            )
        ]

    def _ask_number(self, kind: str, title: str, current: Any) -> None:
        """Ask for a command's one value; the command table checks it, and the prompt stays open showing
        the error (with the valid range) until the value passes or the user cancels."""
        spec = command_spec(kind)

        def check(value: str) -> str | None:
            if not value.strip():
                return None  # an empty answer cancels
            try:
                spec.from_text(value)
            except PayloadError as exc:
                return str(exc)
            return None

        def got(value: str | None) -> None:
            if value is None or not value.strip():
                return
            self.send_command(kind, spec.from_text(value))

        self.push_screen(PromptScreen(title, value="" if current is None else str(current), check=check), got)


def run_tui(
    db_path: str | Path = "workbench.db", run_id: int | None = None, *, ask_on_quit: bool = False
) -> str | None:
    """What `workbench tui [--db FILE] [--run ID]` calls; returns the quit question's answer ("keep",
    "stop", or None when it was not asked)."""
    app = WorkbenchApp(db_path, run_id, ask_on_quit=ask_on_quit)
    app.run()
    return app.quit_choice
