"""RunSession and CommandLoop (workbench.run): the run protocol the worker and the TRL callback share: lock,
heartbeat, statuses, one crash classification, the pause loop."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

import store
from workbench.run.loop import CommandLoop
from workbench.run.session import LockLost, RunSession, crash_reason


def _wait(pred, timeout: float = 10.0, what: str = "condition") -> None:
    end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


@pytest.fixture
def run(tmp_path):
    path = str(tmp_path / "wb.db")
    db = store.open_db(path)
    run_id = store.runs.create_run(db, name="r", model="m", config={})
    yield path, db, run_id
    db.close()


CUDA_OOM = "CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.1 GiB total capacity)"


def test_one_crash_classification():
    assert crash_reason(MemoryError("")) == "out of memory: "
    assert crash_reason(RuntimeError(CUDA_OOM)).startswith("out of memory: CUDA out of memory")
    assert crash_reason(ValueError("bad")) == "ValueError: bad"
    assert len(crash_reason(RuntimeError("x" * 1000))) == len("RuntimeError: ") + 200


def test_session_holds_beats_and_releases(run):
    path, db, run_id = run
    cmd = store.commands.enqueue(db, run_id, "checkpoint")
    store.commands.claim_next(db, run_id)  # claimed by a worker that then died
    s = RunSession(db, path, run_id, heartbeat_s=0.05).start()
    try:
        assert store.commands.get_command(db, cmd)["status"] == "failed"  # the UI stops waiting for it
        with pytest.raises(store.runs.RunLockedError):
            RunSession(store.open_db(path), path, run_id).start()  # a second live driver is refused
        s.set_status("running", "started")
        beat = store.runs.get_run(db, run_id)["heartbeat"]
        store.commands.enqueue(db, run_id, "pause")
        _wait(lambda: store.runs.get_run(db, run_id)["status"] == "pausing", what="the heartbeat's pausing")
        assert store.runs.get_run(db, run_id)["heartbeat"] > beat
    finally:
        s.release()
    assert store.runs.get_run(db, run_id)["lock_token"] is None and s.status == "running"


def test_a_stolen_lock_is_seen_and_stops_the_driver(run):
    path, db, run_id = run
    s = RunSession(db, path, run_id, heartbeat_s=0.05).start()
    try:
        db.execute("UPDATE runs SET lock_token = 'someone-else' WHERE id = ?", [run_id])
        _wait(s.lock_lost.is_set, what="lock_lost")
        with pytest.raises(LockLost, match="another worker took the lock"):
            s.check_lock()
        loop = CommandLoop(
            db,
            run_id,
            "trl",
            {n: (lambda *a: {}) for n in ("pause", "resume", "stop", "checkpoint", "set_verifier", "set_lr")},
            lock_lost=s.lock_lost,
        )
        with pytest.raises(LockLost):
            loop.check_lock()
    finally:
        s.release()


def test_crashed_status_names_oom_for_both_drivers(run, tmp_path):
    """The worker used to call a CUDA OOM "out of memory" and the TRL callback "RuntimeError": one rule now."""
    from workbench.integrations.trl import WorkbenchCallback
    from workbench.worker import run_worker

    path, db, run_id = run

    def oom(*a, **kw):
        raise RuntimeError(CUDA_OOM)

    with pytest.raises(RuntimeError):
        run_worker(path, run_id, ranks=object(), make_trainer=oom)
    r = store.runs.get_run(db, run_id)
    assert r["status"] == "crashed" and r["status_reason"].startswith("out of memory: CUDA")
    assert r["lock_token"] is None and "Traceback" in r["error"]

    cb = WorkbenchCallback(path, run_id=run_id)
    cb._open(SimpleNamespace(to_dict=lambda: {}), None)
    with pytest.raises(RuntimeError), cb.watch():
        raise RuntimeError(CUDA_OOM)
    r = store.runs.get_run(db, run_id)
    assert r["status"] == "crashed" and r["status_reason"].startswith("out of memory: CUDA")
    assert r["lock_token"] is None and cb.status == "crashed"


FULL_DISK_RUN = textwrap.dedent(
    """
    import os, resource, signal, sys
    sys.path.insert(0, {root!r})
    import store
    from workbench.progress import Progress
    from workbench.run.session import RunSession
    path, run_id = sys.argv[1], int(sys.argv[2])
    db = store.open_db(path)
    session = RunSession(db, path, run_id).start()
    session.set_status("running", "started")
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # past the limit a write fails with EFBIG, not a signal
    resource.setrlimit(resource.RLIMIT_FSIZE, (os.path.getsize(path) + 64 * 1024, resource.RLIM_INFINITY))
    progress = Progress(db, run_id, lambda m: None, every_s=0)
    try:
        for i in range(100_000):  # progress events: written outside any other transaction, as the trainer's are
            progress.report("sft", i, 100_000, loss=0.5, note="x" * 500)
    except Exception as exc:
        print(type(exc).__name__ + ":", exc)
        session.crashed(exc)
    finally:
        session.release()
    """
)


def test_a_full_disk_is_one_clear_error_and_the_status_still_says_crashed(run):
    """A progress write on a full disk used to raise a raw sqlite3.OperationalError, and the "crashed" status
    write failed too, so `workbench ls` went on saying "running"."""
    path, db, run_id = run
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            FULL_DISK_RUN.format(root=str(Path(__file__).resolve().parents[2])),
            path,
            str(run_id),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.stdout.startswith("DiskFullError: " + path), out.stdout + out.stderr
    assert "the disk is full or failing" in out.stdout
    r = store.runs.get_run(db, run_id)
    assert r["status"] == "crashed", r["status_reason"]
    assert r["status_reason"].startswith(f"DiskFullError: {path}: the write failed")
    assert store.integrity_ok(db)
    assert store.runs.latest_event(db, run_id, "progress") is not None  # what was committed before is kept


def _hold_in_thread(path: str, run_id: int, seen: list[str], beats: list[str]) -> threading.Thread:
    """A driver paused at "after_step" in its own thread (its own connection, as a worker has)."""

    def run() -> None:
        db = store.open_db(path)
        loop: CommandLoop

        def handler(name: str):
            def h(ctx, payload, where):
                seen.append(name)
                if name == "resume":
                    loop.paused = False
                if name == "stop":
                    loop.request_stop()
                return {"ok": name}

            return h

        loop = CommandLoop(db, run_id, "worker", {n: handler(n) for n in store.commands.KINDS}, poll_s=0.02)
        loop.paused = True
        loop.hold(None, "after_step", "paused by a test", while_paused=lambda ctx, where: beats.append(where))
        db.close()

    t = threading.Thread(target=run)
    t.start()
    return t


def test_the_pause_loop_holds_until_resumed_and_obeys_meanwhile(run):
    path, db, run_id = run
    seen: list[str] = []
    beats: list[str] = []
    t = _hold_in_thread(path, run_id, seen, beats)
    _wait(lambda: store.runs.get_run(db, run_id)["status"] == "paused", what="paused")
    assert store.runs.get_run(db, run_id)["status_reason"] == "paused by a test"
    _wait(lambda: beats, what="a beat while paused (rank 0 tells the others)")
    store.commands.enqueue(db, run_id, "checkpoint")
    store.commands.enqueue(db, run_id, "resume")
    t.join(timeout=10)
    assert not t.is_alive() and seen == ["checkpoint", "resume"] and set(beats) == {"after_step"}
    assert store.runs.get_run(db, run_id)["status"] == "running"


def test_stop_ends_the_pause_without_resuming(run):
    path, db, run_id = run
    seen: list[str] = []
    t = _hold_in_thread(path, run_id, seen, [])
    _wait(lambda: store.runs.get_run(db, run_id)["status"] == "paused", what="paused")
    store.commands.enqueue(db, run_id, "stop")
    t.join(timeout=10)
    assert not t.is_alive() and seen == ["stop"]
    assert store.runs.get_run(db, run_id)["status"] == "stopping"  # not "running": it leaves, checkpointed
