"""WorkbenchApp: attaches to a run in the store, shows it, and steers it through the commands table.

The UI writes only commands, verifier versions, labels and notes. It never owns the worker: quitting
leaves a worker running (unless the user chose stop), and a UI can attach to a headless worker's run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from textual import work
from textual.app import App
from textual.binding import Binding
from textual.message import Message
from textual.screen import Screen
from textual.worker import Worker, WorkerState

from screens.command_tracker import CommandTracker
from screens.db import open_ui_db, thread_db
from screens.format import LIVE_STATUSES, worker_state
from screens.palette import WorkbenchCommands
from store import commands as sc
from store import metrics as sm
from store import runs as sr

RUN_ACTIONS = frozenset({"pause", "resume", "checkpoint", "eval", "stop", "trajectories", "evaluations", "verifier"})
PaletteEntry = tuple[str, str, Callable[[], Any]]
SCREEN_FOR = {"trajectories": "TrajectoryScreen", "evaluations": "EvalsScreen", "verifier": "VerifierEditorScreen"}


class WorkbenchApp(App[None]):
    CSS_PATH = "app.tcss"
    TITLE = "Workbench"
    COMMANDS = App.COMMANDS | {WorkbenchCommands}
    BINDINGS = [
        Binding("p", "pause", "Pause", id="workbench.pause"),
        Binding("r", "resume", "Resume", id="workbench.resume"),
        Binding("c", "checkpoint", "Ckpt", id="workbench.checkpoint", tooltip="Save a checkpoint now"),
        Binding("e", "eval", "Eval", id="workbench.eval", tooltip="Run a held-out eval now"),
        Binding("s", "stop", "Stop", id="workbench.stop"),
        Binding("t", "trajectories", "Trajs", id="workbench.trajectories", tooltip="Browse trajectories"),
        Binding("E", "evaluations", "Evals", id="workbench.evaluations", tooltip="Evaluations screen"),
        Binding("v", "verifier", "Verif", id="workbench.verifier", tooltip="Verifier editor"),
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
    ) -> None:
        super().__init__()
        self.db_path = str(db_path)
        self.poll_s, self.clock, self.live_rows = poll_s, clock, live_rows
        # Validate here (on a throwaway connection) so a bad --db or --run fails before the screen opens.
        check = open_ui_db(self.db_path)
        try:
            runs = sr.list_runs(check)
            if run_id is not None:
                sr.get_run(check, run_id)
            elif len(runs) == 1:
                run_id = runs[0]["id"]
        finally:
            check.conn.close()
        self.run_id: int | None = run_id
        self.runs_count = len(runs)
        self.db: Any = None  # the event-loop thread's connection, opened on mount
        self.run_row: dict[str, Any] | None = None
        self.tracker = CommandTracker()
        self.stop_chosen = False
        self.worker_pid: int | None = None
        self._state_key: tuple | None = None

    @property
    def db_ok(self) -> bool:
        return self.db is not None

    # ---- lifecycle -----------------------------------------------------------------------------------

    def on_mount(self) -> None:
        self.db = open_ui_db(self.db_path)
        if self.run_id is not None:
            self.open_run(self.run_id)
        else:
            from screens.runs_screen import RunsScreen

            self.push_screen(RunsScreen())
        self.set_interval(self.poll_s, self.tick)

    def open_run(self, run_id: int) -> None:
        from screens.dashboard import DashboardScreen

        self.run_id = run_id
        self.run_row = sr.get_run(self.db, run_id)
        self.sub_title = f"#{run_id} {self.run_row['name']}"
        self._state_key = None
        self.call_later(self._reset_to, DashboardScreen())

    def show_runs(self) -> None:
        from screens.runs_screen import RunsScreen

        self.call_later(self._reset_to, RunsScreen())

    async def _reset_to(self, screen: Screen) -> None:
        while len(self.screen_stack) > 2:
            await self.pop_screen()
        if len(self.screen_stack) == 2:
            await self.switch_screen(screen)
        else:
            await self.push_screen(screen)

    def tick(self) -> None:
        """Refresh the run row (one primary-key read) and collect worker answers to our commands."""
        if self.run_id is None or self.db is None:
            return
        self.run_row = sr.get_run(self.db, self.run_id)
        now = self.clock()
        state = worker_state(self.run_row, now)
        key = (self.run_row["status"], state)
        if key != self._state_key:
            self._state_key = key
            self.refresh_bindings()
        if self.tracker.pending:
            answered, overdue = self.tracker.poll(self.db, now, state == "alive")
            for a in answered:
                self.notify(a.message, title=f"{a.kind}: {'done' if a.ok else 'failed'}",
                            severity="information" if a.ok else "error")
            for s in overdue:
                self.notify("No live worker answers; it stays queued until a worker runs (r starts one).",
                            title=f"{s.kind}: queued", severity="warning")

    # ---- commands to the worker ----------------------------------------------------------------------

    def send_command(self, kind: str, payload: dict[str, Any] | None = None) -> None:
        if self.run_id is not None:
            self._enqueue(self.run_id, kind, payload)

    # Not exclusive: two quick commands must both be written, never one cancel the other.
    @work(thread=True, group="commands", exit_on_error=False)
    def _enqueue(self, run_id: int, kind: str, payload: dict[str, Any] | None) -> None:
        with thread_db(self.db_path) as db:
            command_id = sc.enqueue(db, run_id, kind, payload)
        self.post_message(self.CommandQueued(command_id, kind, payload))

    def on_workbench_app_command_queued(self, message: CommandQueued) -> None:
        self.tracker.add(message.command_id, message.kind, message.payload, self.clock())
        self.notify(f"sent to the worker (#{message.command_id})", title=message.kind, timeout=2)

    @work(thread=True, group="start-worker", exclusive=True, exit_on_error=False)
    def _start_worker(self, run_id: int) -> None:
        from workbench.worker import start_worker  # lazy: the engine (and torch) load only when asked

        proc = start_worker(self.db_path, run_id)
        self.post_message(self.WorkerStarted(getattr(proc, "pid", None)))

    def on_workbench_app_worker_started(self, message: WorkerStarted) -> None:
        self.worker_pid = message.pid
        self.notify(f"worker process started (pid {message.pid}); it keeps running if you quit", title="worker")

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        # Every thread worker is exit_on_error=False: its failure is reported here, once.
        if event.state == WorkerState.ERROR:
            error = event.worker.error
            self.notify(f"{type(error).__name__}: {error}", title=f"{event.worker.name} failed", severity="error",
                        timeout=8)

    # ---- state ---------------------------------------------------------------------------------------

    def worker_alive(self) -> bool:
        return self.run_row is not None and worker_state(self.run_row, self.clock()) == "alive"

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action not in RUN_ACTIONS:
            return True
        if self.run_row is None:
            return False
        if action in ("trajectories", "evaluations", "verifier"):
            # No key for the screen already open: it frees footer room for the keys that do something.
            return type(self.screen).__name__ != SCREEN_FOR[action]
        status, alive = self.run_row["status"], self.worker_alive()
        # Controls only a live worker can answer are hidden without one (r then starts a worker).
        if action == "pause":
            return status in ("running", "starting") and alive
        if action == "resume":
            return status in ("paused", "pausing") or (not alive and status != "finished")
        if action == "stop":
            return alive or status in (*LIVE_STATUSES, "paused")
        if action in ("checkpoint", "eval"):
            return alive
        return True

    # ---- actions -------------------------------------------------------------------------------------

    def action_pause(self) -> None:
        self.send_command("pause")

    def action_resume(self) -> None:
        if self.worker_alive():
            self.send_command("resume")
        elif self.run_id is not None:
            self.notify("no live worker: starting one for this run", title="resume")
            self._start_worker(self.run_id)

    def action_checkpoint(self) -> None:
        self.send_command("checkpoint")

    def action_eval(self) -> None:
        self.send_command("eval")

    def action_stop(self) -> None:
        from screens.modals import ConfirmScreen

        def answered(yes: bool | None) -> None:
            if yes:
                self.stop_chosen = True
                self.send_command("stop")

        name = (self.run_row or {}).get("name", "")
        # Before the first checkpoint (baseline eval, SFT warm-up) there is nothing to save: say so.
        first = self.db is None or sm.latest_checkpoint(self.db, self.run_id) is not None
        what = ("The worker finishes its current group, saves a checkpoint and exits." if first else
                "No checkpoint yet (the first is written when the SFT warm-up ends): the worker exits at its "
                "next safe point and a resume starts the warm-up over. Everything stored so far is kept.")
        self.push_screen(
            ConfirmScreen(f"Stop run #{self.run_id} {name}?", what, yes="Stop"),
            answered,
        )

    def dashboard(self) -> Any:
        from screens.dashboard import DashboardScreen

        return next((s for s in self.screen_stack if isinstance(s, DashboardScreen)), None)

    def open_trajectories(self, *, anchor_id: int | None = None) -> None:
        from screens.trajectory_screen import TrajectoryScreen

        if isinstance(self.screen, TrajectoryScreen):
            return
        dash = self.dashboard()
        self.push_screen(TrajectoryScreen(anchor_id=anchor_id, task_id=dash.task_filter if dash else None))

    def action_trajectories(self) -> None:
        dash = self.dashboard()
        self.open_trajectories(anchor_id=dash.highlighted_rollout() if dash is self.screen else None)

    def action_evaluations(self) -> None:
        from screens.evals_screen import EvalsScreen

        if not isinstance(self.screen, EvalsScreen):
            self.push_screen(EvalsScreen())

    def action_verifier(self) -> None:
        from screens.verifier_editor import VerifierEditorScreen

        if not isinstance(self.screen, VerifierEditorScreen):
            self.push_screen(VerifierEditorScreen())

    def action_help(self) -> None:
        from screens.help_screen import HelpScreen

        if not isinstance(self.screen, HelpScreen):
            # Composed once and kept installed: its tables of every screen's keys never change.
            if not self.is_screen_installed("help"):
                self.install_screen(HelpScreen(), "help")
            self.push_screen("help")

    def _ask_number(self, kind: str, key: str, title: str, current: Any) -> None:
        from screens.modals import PromptScreen

        def got(value: str | None) -> None:
            if value is None or not value.strip():
                return
            try:
                number = float(value)
            except ValueError:
                self.notify(f"not a number: {value!r}", severity="error")
                return
            self.send_command(kind, {key: number})

        self.push_screen(PromptScreen(title, value="" if current is None else str(current)), got)

    def palette_commands(self) -> list[PaletteEntry]:
        """What the command palette offers now; state decides (Resume only when paused, ...)."""
        out: list[PaletteEntry] = []
        if self.run_row is not None:
            status, alive = self.run_row["status"], self.worker_alive()
            config = self.run_row.get("config") or {}
            if status in ("running", "starting") and alive:
                out.append(("Pause training", "pause at the next safe point (p)", self.action_pause))
            if status in ("paused", "pausing") and alive:
                out.append(("Resume training", "continue from where it paused (r)", self.action_resume))
            if not alive and status != "finished":
                out.append(("Start worker", "spawn the training worker for this run (r)", self.action_resume))
            if alive:
                out.append(("Save checkpoint now", "adapter, optimizer, RNG and step (c)", self.action_checkpoint))
                out.append(("Run held-out eval now", "evaluate the current policy (e)", self.action_eval))
                out.append(("Set learning rate…", f"now {config.get('learning_rate', '?')}",
                            lambda: self._ask_number("set_lr", "lr", "New learning rate", config.get("learning_rate"))))
                out.append(("Set sampling temperature…", f"now {config.get('temperature', '?')}",
                            lambda: self._ask_number("set_temperature", "temperature", "New sampling temperature",
                                                     config.get("temperature"))))
                dash = self.dashboard()
                if dash is not None and dash.task_filter is not None:
                    tid = dash.task_filter
                    out.append((f"Sample 8 completions of task {tid}", "the worker samples the selected task",
                                lambda: self.send_command("sample", {"task_id": tid, "n": 8})))
            if alive or status in (*LIVE_STATUSES, "paused"):
                out.append(("Stop run", "checkpoint and exit the worker, after a confirm (s)", self.action_stop))
            out.append(("Trajectories", "browse, filter, search and label (t)", self.action_trajectories))
            out.append(("Evaluations", "baseline vs checkpoints, warning flags (E)", self.action_evaluations))
            out.append(("Verifier editor", "edit, dry-run and apply the reward code (v)", self.action_verifier))
        if self.runs_count > 1:
            out.append(("Switch run", "choose another run in this database", self.show_runs))
        out.append(("Keys", "every key binding (?)", self.action_help))
        out.append(("Quit", "the worker keeps running unless you stopped it (q)", self.exit))
        return out


def run_tui(db_path: str | Path = "workbench.db", run_id: int | None = None) -> None:
    """What `workbench tui [--db FILE] [--run ID]` calls."""
    WorkbenchApp(db_path, run_id).run()
