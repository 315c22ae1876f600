import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import store
from store import commands, labels, metrics, runs, tasks, trajectories, verifiers
from store.trajectories import TrajectoryFilter, page_trajectories
from tests.store_helpers import trajectory_row

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def db(tmp_path):
    return store.open_db(tmp_path / "wb.db")


@pytest.fixture
def run_id(db):
    return runs.create_run(db, name="t", model="tiny", config={"seed": 1})


def fill(db, run_id, steps=5, groups=4, g=8, task_ids=None):
    rng = random.Random(0)
    for step in range(steps):
        rows = [
            trajectory_row(run_id, step, grp, s, rng, task_ids[grp % len(task_ids)] if task_ids else None)
            for grp in range(groups)
            for s in range(g)
        ]
        trajectories.insert_trajectories(db, rows)


def test_open_sets_wal_foreign_keys_and_version(db):
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert store.db.schema_version(db) == store.db.SCHEMA_VERSION
    assert {
        "runs",
        "tasks",
        "trajectories",
        "steps",
        "evals",
        "checkpoints",
        "commands",
        "labels",
        "events",
        "verifiers",
    } <= set(db.table_names())


def test_reopen_is_idempotent(tmp_path):
    p = tmp_path / "wb.db"
    db = store.open_db(p)
    rid = runs.create_run(db, name="a", model="m", config={})
    db.close()
    db2 = store.open_db(p)
    assert runs.get_run(db2, rid)["name"] == "a"


def test_newer_schema_refuses_with_clear_message(tmp_path):
    p = tmp_path / "wb.db"
    db = store.open_db(p)
    runs.create_run(db, name="keep", model="m", config={})
    db.execute("UPDATE schema_version SET version = 99")
    db.close()
    with pytest.raises(store.SchemaTooNewError, match=r"wb\.db.*schema version 99.*upgrade"):
        store.open_db(p)
    # Nothing was touched.
    raw = sqlite3.connect(p)
    assert raw.execute("SELECT version FROM schema_version").fetchone()[0] == 99
    assert raw.execute("SELECT name FROM runs").fetchone()[0] == "keep"


def test_non_sqlite_file_gives_clear_error(tmp_path):
    p = tmp_path / "notes.db"
    p.write_bytes(b"this is not a database at all\n" * 200)
    with pytest.raises(store.StoreError, match=r"notes\.db: not a usable SQLite database"):
        store.open_db(p)
    assert p.read_bytes().startswith(b"this is not")


def test_corrupt_database_gives_clear_error(tmp_path):
    p = tmp_path / "wb.db"
    db = store.open_db(p)
    fill(db, runs.create_run(db, name="x", model="m", config={}), steps=2)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    data = bytearray(p.read_bytes())
    data[0:16] = b"garbage garbage!"  # the header is gone
    p.write_bytes(bytes(data))
    with pytest.raises(store.StoreError, match="not a usable SQLite database"):
        store.open_db(p)


def test_foreign_sqlite_file_is_refused(tmp_path):
    p = tmp_path / "other.db"
    c = sqlite3.connect(p)
    c.execute("CREATE TABLE x (a)")
    c.commit()
    c.close()
    with pytest.raises(store.StoreError, match="not a Workbench database"):
        store.open_db(p)


def test_missing_file_without_create(tmp_path):
    with pytest.raises(store.StoreError, match="no such database"):
        store.open_db(tmp_path / "nope.db", create=False)


def test_insert_batch_returns_contiguous_ids_and_roundtrips_json(db, run_id):
    rng = random.Random(1)
    rows = [trajectory_row(run_id, 0, 0, s, rng) for s in range(8)]
    ids = trajectories.insert_trajectories(db, rows)
    assert len(ids) == 8 and ids == list(range(ids[0], ids[0] + 8))
    got = trajectories.get_trajectory(db, ids[3])
    assert got["messages"] == rows[3]["messages"]
    assert got["reward_parts"] == rows[3]["reward_parts"]
    assert got["sample_idx"] == 3


def test_insert_rejects_bad_rows_and_writes_nothing(db, run_id):
    rng = random.Random(1)
    good = trajectory_row(run_id, 0, 0, 0, rng)
    with pytest.raises(store.StoreError, match="unknown field.*rewrd"):
        trajectories.insert_trajectories(db, [good, {**good, "rewrd": 1}])
    with pytest.raises(store.StoreError, match="missing required.*completion"):
        trajectories.insert_trajectories(db, [good, {k: v for k, v in good.items() if k != "completion"}])
    assert trajectories.count_trajectories(db, run_id) == 0


def _walk(db, flt, **kw):
    seen, after = [], None
    while True:
        page = page_trajectories(db, flt, after=after, limit=7, **kw)
        seen += page.rows
        if page.next_cursor is None:
            return seen
        after = page.next_cursor


def test_keyset_pages_cover_everything_once_in_order(db, run_id):
    fill(db, run_id, steps=3, groups=2, g=8)
    all_rows = _walk(db, TrajectoryFilter(run_id=run_id))
    ids = [r["id"] for r in all_rows]
    assert len(ids) == 48 and ids == sorted(ids, reverse=True)
    by_reward = _walk(db, TrajectoryFilter(run_id=run_id), order="reward", descending=False)
    keys = [(r["reward"], r["id"]) for r in by_reward]
    assert keys == sorted(keys) and len(keys) == 48
    assert "messages" not in by_reward[0]


def test_filters(db, run_id):
    tids = list(
        tasks.add_tasks(
            db, [{"key": f"c:{i}", "dataset": "c", "split": "train", "prompt": f"p{i}"} for i in range(2)]
        ).values()
    )
    fill(db, run_id, steps=4, groups=2, g=4, task_ids=tids)
    other = runs.create_run(db, name="o", model="m", config={})
    fill(db, other, steps=1)
    rows = _walk(db, TrajectoryFilter(run_id=run_id, step_min=1, step_max=2, reward_min=0.5, task_id=tids[1]))
    assert rows and all(1 <= r["step"] <= 2 and r["reward"] >= 0.5 and r["task_id"] == tids[1] for r in rows)
    assert all(r["run_id"] == run_id for r in _walk(db, TrajectoryFilter(run_id=run_id)))
    db.execute(
        "UPDATE trajectories SET completion = 'needle here' "
        "WHERE id = (SELECT MIN(id) FROM trajectories WHERE run_id = ?)",
        [run_id],
    )
    assert [r["completion"] for r in _walk(db, TrajectoryFilter(run_id=run_id, text="needle"))] == [
        "needle here"
    ]
    assert _walk(db, TrajectoryFilter(run_id=run_id, errors_only=True)) == []


def test_follow_since_id_and_group_members(db, run_id):
    fill(db, run_id, steps=1, groups=2, g=8)
    first = trajectories.trajectories_since(db, run_id, 0, limit=5)
    assert [r["id"] for r in first] == sorted(r["id"] for r in first)
    rest = trajectories.trajectories_since(db, run_id, first[-1]["id"])
    assert len(first) + len(rest) == 16
    group = trajectories.group_members(db, first[0]["id"])
    assert [g["sample_idx"] for g in group] == list(range(8))


def test_superseded_rows_are_kept_but_hidden(db, run_id):
    fill(db, run_id, steps=4, groups=1, g=2)
    for s in range(4):
        metrics.append_step(db, run_id, s, {"reward": s})
    assert trajectories.mark_superseded(db, run_id, after_step=1) == 4
    assert trajectories.count_trajectories(db, run_id) == 8  # nothing deleted
    assert {r["step"] for r in _walk(db, TrajectoryFilter(run_id=run_id))} == {0, 1}
    assert metrics.last_step(db, run_id) == 1
    metrics.append_step(db, run_id, 2, {"reward": 9})  # a re-done step is allowed once more
    with pytest.raises(sqlite3.IntegrityError):
        metrics.append_step(db, run_id, 2, {"reward": 9})


def test_non_finite_metrics_are_stored_as_valid_json_with_a_flag(db, run_id):
    nan, inf = float("nan"), float("inf")
    metrics.append_step(db, run_id, 0, {"reward": nan, "loss": inf, "grad_norm": -inf, "kl": 0.1})
    metrics.append_step(db, run_id, 1, {"reward": 0.5})
    metrics.record_eval(
        db,
        run_id,
        step=1,
        tasks={"split": "held_out"},
        mode="greedy",
        metrics={"success_rate": 0.5, "by_skill": {"time_12h": nan}, "ci": [0.1, inf]},
    )
    metrics.record_checkpoint(db, run_id, step=1, kind="lora", path="/x", metrics={"loss": nan})
    # SQLite's JSON functions read every row (a bare NaN was "malformed JSON" to json_extract)
    for table in ("steps", "evals", "checkpoints"):
        assert db.execute(f"SELECT COUNT(*) FROM {table} WHERE NOT json_valid(metrics)").fetchone()[0] == 0
    assert db.execute(
        "SELECT json_extract(metrics, '$.reward'), json_extract(metrics, '$.nonfinite.loss') "
        "FROM steps WHERE step = 0"
    ).fetchone() == (None, "inf")
    step0, step1 = metrics.steps_since(db, run_id)
    assert step0["metrics"] == {
        "reward": None,
        "loss": None,
        "grad_norm": None,
        "kl": 0.1,
        "nonfinite": {"reward": "nan", "loss": "inf", "grad_norm": "-inf"},
    }
    assert step1["metrics"] == {"reward": 0.5}  # finite rows carry no flag
    [ev] = metrics.list_evals(db, run_id)
    assert ev["metrics"]["by_skill"] == {"time_12h": None} and ev["metrics"]["ci"] == [0.1, None]
    assert ev["metrics"]["nonfinite"] == {"by_skill.time_12h": "nan", "ci[1]": "inf"}
    assert metrics.list_checkpoints(db, run_id)[0]["metrics"] == {"loss": None, "nonfinite": {"loss": "nan"}}


def test_steps_evals_checkpoints(db, run_id):
    metrics.append_step(db, run_id, 0, {"reward": 0.1, "loss": 0.0})
    metrics.append_step(db, run_id, 1, {"reward": 0.3})
    assert [s["metrics"]["reward"] for s in metrics.steps_since(db, run_id)] == [0.1, 0.3]
    assert [s["step"] for s in metrics.steps_since(db, run_id, after_step=0)] == [1]
    ck = metrics.record_checkpoint(db, run_id, step=1, kind="periodic", path="/x/ck1")
    e = metrics.record_eval(
        db,
        run_id,
        step=1,
        tasks={"split": "held_out"},
        mode="greedy",
        metrics={"success": 0.5},
        checkpoint_id=ck,
    )
    base = metrics.record_eval(
        db,
        run_id,
        step=0,
        tasks={"split": "held_out"},
        mode="greedy",
        metrics={"success": 0.1},
        is_baseline=True,
    )
    evs = metrics.list_evals(db, run_id)
    assert [x["id"] for x in evs] == [base, e] and evs[0]["is_baseline"] == 1
    assert metrics.latest_checkpoint(db, run_id)["id"] == ck
    metrics.promote_checkpoint(db, ck)
    assert metrics.list_checkpoints(db, run_id)[0]["promoted"] == 1
    ck2 = metrics.record_checkpoint(db, run_id, step=2, kind="periodic", path="/x/ck2")
    metrics.promote_checkpoint(db, ck2)
    assert [c["promoted"] for c in metrics.list_checkpoints(db, run_id)] == [0, 1]
    assert metrics.promoted_checkpoint(db, run_id)["id"] == ck2


def test_verifier_versions_and_single_active(db, run_id):
    v1 = verifiers.add_verifier_version(db, run_id, "tool_call", "def reward(o, t): return 1.0", active=True)
    v2 = verifiers.add_verifier_version(
        db, run_id, "tool_call", "def reward(o, t): return 0.5", note="stricter"
    )
    assert verifiers.add_verifier_version(db, run_id, "tool_call", "def reward(o, t): return 1.0") == v1
    assert [v["version"] for v in verifiers.verifier_history(db, run_id)] == [1, 2]
    assert verifiers.active_verifier(db, run_id)["id"] == v1
    verifiers.activate_verifier(db, v2)
    assert verifiers.active_verifier(db, run_id)["id"] == v2
    assert db.execute("SELECT COUNT(*) FROM verifiers WHERE active = 1").fetchone()[0] == 1


def test_dry_run_rows_changed_first(db, run_id):
    fill(db, run_id, steps=1, groups=1, g=3)
    ids = [r["id"] for r in trajectories.trajectories_since(db, run_id, 0)]
    vid = verifiers.add_verifier_version(db, run_id, "v", "code")
    labels.add_label(db, ids[2], "bad", "hallucinated arg")
    verifiers.record_dry_run(
        db,
        vid,
        [
            {"trajectory_id": ids[0], "old_reward": 1.0, "new_reward": 1.0},
            {"trajectory_id": ids[1], "old_reward": 1.0, "new_reward": 0.8},
            {"trajectory_id": ids[2], "old_reward": 1.0, "new_reward": -1.0},
        ],
        {"changed": 2},
    )
    rows = verifiers.dry_run_rows(db, vid)
    assert [r["trajectory_id"] for r in rows] == [ids[2], ids[1], ids[0]]
    assert rows[0]["label"] == "bad"
    assert verifiers.get_verifier(db, vid)["dry_run"] == {"changed": 2}


def test_labels_newest_verdict_wins(db, run_id):
    fill(db, run_id, steps=1, groups=1, g=2)
    a, b = (r["id"] for r in trajectories.trajectories_since(db, run_id, 0))
    labels.add_label(db, a, "good")
    labels.add_label(db, a, "bad", "on second look")
    labels.add_label(db, b, "good")
    assert labels.verdicts(db, [a, b]) == {a: "bad", b: "good"}
    with pytest.raises(store.StoreError, match="verdict"):
        labels.add_label(db, a, "meh")


def test_commands_claimed_once_in_order(db, run_id):
    c1 = commands.enqueue(db, run_id, "pause")
    c2 = commands.enqueue(db, run_id, "set_lr", {"lr": 1e-5})
    got = commands.claim_next(db, run_id)
    assert got["id"] == c1 and got["status"] == "claimed"
    assert commands.claim_next(db, run_id)["payload"] == {"lr": 1e-5}
    assert commands.claim_next(db, run_id) is None
    commands.finish(db, c2, {"lr": 1e-5})
    assert commands.get_command(db, c2)["status"] == "done"
    with pytest.raises(ValueError, match="unknown command"):
        commands.enqueue(db, run_id, "explode")


def test_run_lock_and_stale_steal(db, run_id):
    token = runs.acquire_lock(db, run_id, stale_after_s=30.0)
    with pytest.raises(runs.RunLockedError, match="already has a live worker"):
        runs.acquire_lock(db, run_id, stale_after_s=30.0)
    assert runs.get_run(db, run_id)["lock_token"] == token
    db.execute("UPDATE runs SET heartbeat = heartbeat - 120 WHERE id = ?", [run_id])
    thief = runs.acquire_lock(db, run_id, stale_after_s=30.0)
    assert thief != token
    assert runs.heartbeat(db, run_id, token) is False  # the old holder learns it lost the lock
    runs.release_lock(db, run_id, thief)
    assert runs.get_run(db, run_id)["lock_token"] is None


def dead_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_lock_of_a_dead_local_worker_is_taken_over_at_once(db, run_id):
    import socket

    token = runs.acquire_lock(db, run_id, stale_after_s=30.0)
    # A live local pid (this process), fresh heartbeat: refused, as before.
    with pytest.raises(runs.RunLockedError, match="already has a live worker"):
        runs.acquire_lock(db, run_id, stale_after_s=30.0)
    # The holder was killed -9 on this host: its heartbeat is fresh, but its pid is gone. No 30 s wait.
    gone = dead_pid()
    db.execute("UPDATE runs SET worker_pid = ? WHERE id = ?", [gone, run_id])
    assert runs.local_worker_gone(socket.gethostname(), gone)
    thief = runs.acquire_lock(db, run_id, stale_after_s=30.0)
    assert thief != token and runs.heartbeat(db, run_id, token) is False
    row = runs.get_run(db, run_id)
    assert row["worker_pid"] == os.getpid() and row["lock_token"] == thief
    assert any(
        f"from pid {gone}" in e["message"] and "process is gone" in e["message"]
        for e in runs.events_since(db, run_id)
    )
    # The same dead pid on another host proves nothing here: the heartbeat rule holds.
    db.execute("UPDATE runs SET worker_pid = ?, worker_host = 'another-host' WHERE id = ?", [gone, run_id])
    assert not runs.local_worker_gone("another-host", gone)
    with pytest.raises(runs.RunLockedError, match="already has a live worker"):
        runs.acquire_lock(db, run_id, stale_after_s=30.0)
    db.execute("UPDATE runs SET heartbeat = heartbeat - 60 WHERE id = ?", [run_id])
    runs.acquire_lock(db, run_id, stale_after_s=30.0)  # stale: taken over


def test_pid_alive_edge_cases():
    assert runs.pid_alive(os.getpid())
    assert not runs.pid_alive(dead_pid())
    assert runs.pid_alive(0) and runs.pid_alive(-1)  # never a process group: unknown reads as alive
    assert not runs.local_worker_gone(None, None)
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])  # ended but not reaped: gone too
    try:
        deadline = time.time() + 30
        while runs.pid_alive(zombie.pid) and time.time() < deadline:
            time.sleep(0.05)
        if sys.platform == "linux":
            assert not runs.pid_alive(zombie.pid)
    finally:
        zombie.wait()


def test_status_changes_are_events(db, run_id):
    runs.set_status(db, run_id, "running", "started by test")
    runs.set_status(db, run_id, "crashed", "OOM", error="Traceback ...")
    run = runs.get_run(db, run_id)
    assert run["status"] == "crashed" and run["error"] == "Traceback ..."
    assert [e["message"] for e in runs.events_since(db, run_id)] == [
        "running: started by test",
        "crashed: OOM",
    ]
    with pytest.raises(ValueError):
        runs.set_status(db, run_id, "dancing")


def test_task_stats(db, run_id):
    ids = tasks.add_tasks(
        db, [{"key": "c:0", "dataset": "c", "split": "train", "prompt": "p", "expected_tool": "t"}]
    )
    again = tasks.add_tasks(db, [{"key": "c:0", "dataset": "c", "split": "train", "prompt": "p2"}])
    assert ids == again and tasks.get_task(db, ids["c:0"])["prompt"] == "p2"
    fill(db, run_id, steps=2, groups=1, g=4, task_ids=[ids["c:0"]])
    (stat,) = tasks.task_stats(db, run_id)
    assert stat["attempts"] == stat["rewarded"] == 8 and -8.0 <= stat["reward_sum"] <= 8.0
    assert stat["classified"] == 0 and stat["successes"] == 0  # rows without an outcome are not counted
    trajectories.insert_trajectories(
        db,
        [
            dict(trajectory_row(run_id, 9, 0, i, random.Random(i), ids["c:0"]), outcome={"success": i == 0})
            for i in range(2)
        ],
    )
    (stat,) = tasks.task_stats(db, run_id)
    assert (stat["attempts"], stat["classified"], stat["successes"]) == (10, 2, 1)


def test_task_stats_keeps_each_eval_of_a_task_apart(db, run_id):
    """Two evals of one held-out task (the baseline and the SFT policy) are two rows, each with its own counts;
    the training rollouts of the same task are a third (eval_id None)."""
    tid = tasks.add_tasks(db, [{"key": "c:h", "dataset": "c", "split": "held_out", "prompt": "p"}])["c:h"]
    held = {"split": "held_out", "n": 1}
    base = metrics.record_eval(db, run_id, step=0, tasks=held, mode="greedy", metrics={}, is_baseline=True)
    sft = metrics.record_eval(db, run_id, step=0, tasks=held, mode="greedy", metrics={})

    def rows(eval_id, split, rewards):
        return [
            dict(
                trajectory_row(run_id, 0, 0, i, random.Random(i), tid),
                split=split,
                eval_id=eval_id,
                reward=r,
                outcome={"success": r == 1.0},
            )
            for i, r in enumerate(rewards)
        ]

    trajectories.insert_trajectories(
        db,
        rows(base, "held_out", [-1.0, 0.0])
        + rows(sft, "held_out", [1.0, 1.0, 0.5])
        + rows(None, "train", [0.2]),
    )
    got = {
        (s["split"], s["eval_id"]): (s["attempts"], s["reward_sum"], s["successes"])
        for s in tasks.task_stats(db, run_id)
    }
    assert got == {
        ("held_out", base): (2, -1.0, 0),
        ("held_out", sft): (3, 2.5, 2),
        ("train", None): (1, 0.2, 0),
    }


WRITER = textwrap.dedent(
    """
    import random, sys
    sys.path.insert(0, {root!r})
    import store
    from store import runs, trajectories
    from tests.store_helpers import trajectory_row
    db = store.open_db(sys.argv[1])
    run_id = int(sys.argv[2])
    rng = random.Random(0)
    step = 0
    while True:
        trajectories.insert_trajectories(db, [trajectory_row(run_id, step, 0, s, rng) for s in range(50)])
        print(step, flush=True)  # printed only after the batch committed
        step += 1
        if step >= int(sys.argv[3]):
            break
    """
)


def _writer(tmp_path, db_path, run_id, batches):
    script = tmp_path / "writer.py"
    script.write_text(WRITER.format(root=str(ROOT)))
    return subprocess.Popen(
        [sys.executable, str(script), str(db_path), str(run_id), str(batches)],
        stdout=subprocess.PIPE,
        text=True,
    )


def test_reader_never_sees_half_a_batch(tmp_path):
    path = tmp_path / "wb.db"
    db = store.open_db(path)
    run_id = runs.create_run(db, name="x", model="m", config={})
    proc = _writer(tmp_path, path, run_id, batches=60)
    reader = store.open_db(path)
    seen = set()
    while proc.poll() is None:
        n = trajectories.count_trajectories(reader, run_id)
        assert n % 50 == 0, n
        seen.add(n)
    assert proc.returncode == 0
    assert trajectories.count_trajectories(reader, run_id) == 3000
    assert len(seen) > 1  # the reader really ran while the writer wrote


def test_killed_writer_loses_nothing_committed(tmp_path):
    path = tmp_path / "wb.db"
    db = store.open_db(path)
    run_id = runs.create_run(db, name="x", model="m", config={})
    proc = _writer(tmp_path, path, run_id, batches=10**9)
    committed = -1
    deadline = time.time() + 60
    while committed < 20 and time.time() < deadline:
        committed = int(proc.stdout.readline())
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    db2 = store.open_db(path)
    assert store.integrity_ok(db2)
    n = trajectories.count_trajectories(db2, run_id)
    assert n % 50 == 0 and n >= (committed + 1) * 50


def test_keyset_walk_with_bounds_returns_exactly_the_filtered_rows(db, run_id):
    fill(db, run_id, steps=6, groups=2, g=4)
    for flt, order in [
        (TrajectoryFilter(run_id=run_id, step_min=1, step_max=4), "id"),
        (TrajectoryFilter(run_id=run_id, reward_min=0.4, reward_max=0.8), "reward"),
        (TrajectoryFilter(run_id=run_id, step_min=2), "step"),
    ]:
        for descending in (True, False):
            got = [r["id"] for r in _walk(db, flt, order=order, descending=descending)]
            clauses, params = flt.where()
            want = {
                i for (i,) in db.execute(f"SELECT id FROM trajectories WHERE {' AND '.join(clauses)}", params)
            }
            assert len(got) == len(set(got)) and set(got) == want, (flt, order, descending)


def test_mark_pausing_only_from_running_with_a_queued_pause(db, run_id):
    runs.set_status(db, run_id, "running")
    assert runs.mark_pausing(db, run_id) is False  # nothing queued
    commands.enqueue(db, run_id, "pause")
    assert runs.mark_pausing(db, run_id) is True
    assert runs.get_run(db, run_id)["status"] == "pausing"
    runs.set_status(db, run_id, "paused")
    assert runs.mark_pausing(db, run_id) is False and runs.get_run(db, run_id)["status"] == "paused"


def test_omitted_optional_fields_take_the_schema_defaults(db, run_id):
    (tid,) = trajectories.insert_trajectories(
        db, [{"run_id": run_id, "step": 0, "split": "train", "messages": [], "completion": "x"}]
    )
    row = trajectories.get_trajectory(db, tid)
    assert (row["group_idx"], row["sample_idx"], row["truncated"], row["reward"]) == (0, 0, 0, None)


def test_unmark_pausing_and_fail_claimed(db, run_id):
    runs.set_status(db, run_id, "running")
    commands.enqueue(db, run_id, "pause")
    runs.mark_pausing(db, run_id)
    claimed = commands.claim_next(db, run_id)
    runs.unmark_pausing(db, run_id)  # the pause is no longer pending (a resume followed it)
    assert runs.get_run(db, run_id)["status"] == "running"
    assert commands.fail_claimed(db, run_id, "worker died") == 1
    assert commands.get_command(db, claimed["id"])["status"] == "failed"


def test_migration_from_v1_keeps_data_and_adds_eval_superseded(tmp_path):
    p = tmp_path / "old.db"
    raw = sqlite3.connect(p)
    from store.schema import MIGRATIONS

    for sql in MIGRATIONS[0][1]:  # a file made by schema v1
        raw.execute(sql)
    raw.execute("INSERT INTO schema_version VALUES (1, 1, 0)")
    raw.execute("INSERT INTO runs (name, model, config, created, updated) VALUES ('old', 'm', '{}', 0, 0)")
    raw.execute(
        "INSERT INTO evals (run_id, step, tasks, mode, metrics, created) VALUES (1, 5, '{}', 'greedy', '{}', 0)"
    )
    raw.commit()
    raw.close()
    db = store.open_db(p)
    assert store.db.schema_version(db) == store.db.SCHEMA_VERSION
    assert runs.get_run(db, 1)["name"] == "old"
    assert [e["step"] for e in metrics.list_evals(db, 1)] == [5]
    trajectories.mark_superseded(db, 1, after_step=4)
    assert metrics.list_evals(db, 1) == []  # hidden, not deleted
    assert db.execute("SELECT COUNT(*) FROM evals").fetchone()[0] == 1


DISK_FULL = textwrap.dedent(
    """
    import os, random, resource, signal, sys
    sys.path.insert(0, {root!r})
    import store
    from tests.store_helpers import trajectory_row
    db = store.open_db(sys.argv[1])
    run_id = store.runs.create_run(db, name="full", model="m", config={{}})
    store.trajectories.insert_trajectories(db, [trajectory_row(run_id, 0, 0, i, random.Random(i)) for i in range(50)])
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    size = os.path.getsize(sys.argv[1])
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # past the limit a write fails with EFBIG, not a signal
    resource.setrlimit(resource.RLIMIT_FSIZE, (size + 64 * 1024, size + 64 * 1024))
    try:
        rows = [trajectory_row(run_id, 1, 0, i, random.Random(i)) for i in range(3000)]
        store.trajectories.insert_trajectories(db, rows)
    except store.DiskFullError as exc:
        print("DiskFullError:", exc)
    """
)


def test_a_full_disk_mid_batch_is_a_clear_error_and_keeps_everything_committed(tmp_path):
    path = tmp_path / "full.db"
    out = subprocess.run(
        [sys.executable, "-c", DISK_FULL.format(root=str(Path(__file__).resolve().parents[2])), str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.stdout.startswith("DiskFullError:"), out.stdout + out.stderr
    assert str(path) in out.stdout and "nothing of this write was kept" in out.stdout
    db = store.open_db(path)
    assert store.integrity_ok(db)
    assert trajectories.count_trajectories(db, 1) == 50  # the failed batch left nothing half-written


def _damage_a_middle_page(path: Path) -> None:
    """Overwrite part of a b-tree page in the middle of the file, as a bad disk sector would: the header and
    the schema (page 1) stay readable, so an unchecked open still works and reads around the hole."""
    db = store.open_db(path)
    run_id = runs.create_run(db, name="r", model="m", config={})
    for i in range(2000):
        runs.add_event(db, run_id, "log", f"event {i} " + "x" * 100)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    pages = path.stat().st_size // 4096
    with path.open("r+b") as f:
        f.seek((pages // 2) * 4096 + 8)  # past the page header: the cell pointers are garbage now
        f.write(b"\x13" * 64)


def test_a_damaged_database_is_refused_with_its_pages_named_when_checked(tmp_path):
    path = tmp_path / "wb.db"
    _damage_a_middle_page(path)
    assert runs.list_runs(store.open_db(path, create=False))  # unchecked, it still reads (what ls used to do)
    with pytest.raises(store.StoreError) as ei:
        store.open_db(path, create=False, check=True)
    msg = str(ei.value)
    assert msg.startswith(f"{path}: the database is damaged (page(s) ") and "quick_check" in msg
    assert re.search(r"page\(s\) \d+", msg) and ".recover" in msg
    good = tmp_path / "good.db"
    store.open_db(good).close()
    store.open_db(good, create=False, check=True).close()  # a whole file passes
