"""Run control from the shell (`workbench ls`, `pause`/`resume`/`stop N`) and the progress reports the
status bar and `ls` show: through the command table and the view layer, as the UI does."""

from __future__ import annotations

import threading
import time

import store
from workbench.cli import main
from workbench.progress import Progress, describe, eval_label
from workbench.view import View


def answer_commands(db_path: str, run_id: int, n: int, result: dict) -> threading.Thread:
    """A stand-in worker: claims the next `n` commands and answers them."""

    def work() -> None:
        db = store.open_db(db_path)
        done = 0
        deadline = time.monotonic() + 20
        while done < n and time.monotonic() < deadline:
            cmd = store.commands.claim_next(db, run_id)
            if cmd is None:
                time.sleep(0.05)
                continue
            store.commands.finish(db, cmd["id"], result)
            done += 1
        db.conn.close()

    t = threading.Thread(target=work)
    t.start()
    return t


def test_ls_lists_runs_with_status_phase_step_and_worker(fake, capsys):
    db = store.open_db(fake.db_path)
    Progress(db, fake.run_id, lambda m: None).report("sft", 3, 15, loss=0.8421)
    db.conn.close()
    assert main(["ls", "--db", fake.db_path]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["run", "name", "status", "phase", "step", "worker"]
    row = out[1]
    for part in (str(fake.run_id), "fake-grpo", "running", "SFT 3/15 loss 0.842", "5/100", "alive (pid"):
        assert part in row, part


def test_pause_waits_for_the_workers_answer(fake, capsys):
    t = answer_commands(fake.db_path, fake.run_id, 1, {"paused_at": "rollout", "step": 5})
    assert main(["pause", str(fake.run_id), "--db", fake.db_path, "--wait-s", "20"]) == 0
    t.join()
    out = capsys.readouterr().out
    assert "pause sent" in out and "pause: done" in out and "rollout" in out
    db = store.open_db(fake.db_path)
    assert store.commands.pending(db, fake.run_id) == []  # claimed and answered
    db.conn.close()


def test_stop_no_wait_queues_the_command(fake, capsys):
    assert main(["stop", str(fake.run_id), "--db", fake.db_path, "--no-wait"]) == 0
    db = store.open_db(fake.db_path)
    assert [c["kind"] for c in store.commands.pending(db, fake.run_id)] == ["stop"]
    db.conn.close()


def test_a_control_the_run_state_does_not_allow_is_refused(fake, capsys):
    # The run is running: resume is not allowed (run_state's table), so nothing is queued.
    assert main(["resume", str(fake.run_id), "--db", fake.db_path]) == 2
    assert "cannot resume now" in capsys.readouterr().err
    db = store.open_db(fake.db_path)
    assert store.commands.pending(db, fake.run_id) == []
    db.conn.close()


def test_progress_is_throttled_and_not_in_the_event_log(fake):
    db = store.open_db(fake.db_path)
    now = [100.0]
    logged: list[str] = []
    p = Progress(db, fake.run_id, logged.append, clock=lambda: now[0])
    for i in range(10):  # ten reports within a second: one stored (the phase is new), then throttled
        p.report("rollout", i, 48, step=6, max_steps=100, eta_s=120.0)
    now[0] += 1.5
    p.report("rollout", 20, 48, step=6, max_steps=100, eta_s=120.0)
    p.report("rollout", 48, 48, step=6, max_steps=100, eta_s=120.0)  # the end of a phase is always stored
    p.report(
        "eval", 0, 60, label=eval_label(is_baseline=False, sft_only=True, step=0)
    )  # a new phase: at once
    rows = [e for e in store.runs.events_since(db, fake.run_id, 0, 10_000) if e["kind"] == "progress"]
    db.conn.close()
    assert [r["data"]["done"] for r in rows] == [0, 20, 48, 0]
    assert rows[1]["message"] == "step 6/100 rollout 20/48 tok, ETA 2 min"
    assert describe(rows[-1]["data"]) == "eval (SFT-only) 0/60 tasks"
    with View.open(fake.db_path) as view:
        latest = view.progress(fake.run_id)
        assert latest is not None and latest.phase == "eval" and (latest.done, latest.total) == (0, 60)
        assert all(e.kind != "progress" for e in view.events(fake.run_id))
        assert all(e.kind != "progress" for e in view.last_events(fake.run_id, 50))
    # The headless log: rollout lines at most every 10 s (each step has its own line), a new eval at once.
    assert logged == ["step 6/100 rollout 0/48 tok, ETA 2 min", "eval (SFT-only) 0/60 tasks"]


def test_eval_labels_say_what_is_evaluated():
    assert eval_label(is_baseline=True, sft_only=False, step=0) == "base"
    assert eval_label(is_baseline=False, sft_only=True, step=0) == "SFT-only"
    assert eval_label(is_baseline=False, sft_only=False, step=10) == "GRPO step 10"


def test_ls_report_export_and_resume_refuse_a_damaged_database_naming_its_pages(tmp_path, capsys):
    from tests.store.test_store import _damage_a_middle_page

    path = tmp_path / "wb.db"
    _damage_a_middle_page(path)
    db = str(path)
    for argv in (
        ["ls", "--db", db],
        ["report", "--run", "1", "--db", db],
        ["export", "--run", "1", "--db", db],
        ["train", "--resume", "1", "--db", db],
    ):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert f"{path}: the database is damaged (page(s) " in err, (argv, err)
