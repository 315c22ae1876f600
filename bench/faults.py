"""Fault injection, by hand: kill -9 a small real run at chosen moments, resume it to the end, and check that
nothing committed was lost. Plus a full disk during a batch insert and a database held by another writer.

    .venv/bin/python bench/faults.py --trials 20 --out docs/faults.json

One straight run (the tiny random model, LoRA, HF engine, SFT then GRPO with evals and checkpoints) gives
the timeline: when each phase (baseline eval, SFT, each step's rollout and update, checkpoint, eval) ran.
Each trial starts the same run afresh, kills the process (SIGKILL) at a moment inside one phase, then runs
`workbench train --resume` to the end and checks: every trajectory committed before the kill is still
there (live or superseded), no step or episode is live twice, `PRAGMA integrity_check`, the run finished,
the final adapter equals the straight run's, and every policy's eval (baseline, each checkpoint's) is there
once and whole, part by part and row by row, as in the straight run. "checkpoint" trials also tear the newest
checkpoint's weights file after the kill (as a torn write would leave it): the resume must name that file and fall back
to the checkpoint before it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import store  # noqa: E402
from workbench.testing import tiny_model_dir  # noqa: E402

PHASES = ("rollout", "update", "sft", "eval", "checkpoint")


def config(model: Path, out: Path) -> dict[str, Any]:
    return dict(
        name="faults",
        model=str(model),
        num_generations_per_prompt=4,
        prompts_per_step=2,
        max_completion_length=8,
        max_steps=6,
        eval_interval=3,
        checkpoint_interval=1,
        eval_max_tasks=4,
        sft_steps=3,
        sft_batch_size=4,
        learning_rate=1e-2,
        output_dir=str(out),
        lora={"r": 4, "alpha": 8},
        seed=1,
    )


def write_config(cfg: dict[str, Any], path: Path) -> Path:
    import yaml

    path.write_text(yaml.safe_dump(cfg))
    return path


def train(args: list[str], log: list[tuple[float, str]] | None = None) -> subprocess.Popen:
    """`workbench train ...` in its own process group; its stdout lines are timestamped into `log`."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "workbench.cli", "train", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    start = time.monotonic()

    def pump() -> None:
        for line in proc.stdout:  # type: ignore[union-attr]
            if log is not None:
                log.append((time.monotonic() - start, line.rstrip()))

    threading.Thread(target=pump, daemon=True).start()
    return proc


def timeline(log: list[tuple[float, str]], db_path: Path) -> dict[str, list[tuple[str, float, float]]]:
    """Phase -> [(anchor, start, end)]: a kill inside that phase is `start..end` seconds after the log line
    that starts with `anchor` (anchored to lines, not to process start: start-up time varies with load)."""
    db = store.open_db(db_path, create=False)
    steps = {s["step"]: s["metrics"] for s in store.metrics.steps_since(db, 1, -1)}
    db.conn.close()
    out: dict[str, list[tuple[str, float, float]]] = {p: [] for p in PHASES}
    times = {line.split(":")[0]: t for t, line in log}  # first time each kind of line appeared
    evals = [t for t, line in log if line.startswith("eval at step 0")]
    if "baseline eval on held-out tasks" in times and evals:
        out["eval"].append(("baseline eval", 0.0, evals[0] - times["baseline eval on held-out tasks"]))
    if "SFT warm-up" in times and len(evals) > 1:
        span = evals[1] - times["SFT warm-up"]  # SFT steps, its checkpoint, then the SFT-only eval
        out["sft"].append(("SFT warm-up", 0.0, 0.6 * span))
        out["eval"].append(("SFT warm-up", 0.7 * span, span))
    for k in sorted(steps):
        nxt = steps.get(k + 1)
        out["checkpoint"].append((f"step {k}:", 0.0, 0.03))  # checkpoint_interval 1: right after the line
        if nxt is not None:  # step k+1 starts right after step k's line (and its checkpoint)
            roll, upd = float(nxt.get("rollout_time_s", 0)), float(nxt.get("update_time_s", 0))
            out["rollout"].append((f"step {k}:", 0.05, 0.05 + roll))
            out["update"].append((f"step {k}:", 0.05 + roll, 0.05 + roll + upd))
        if f"eval at step {k}" in times:
            out["eval"].append((f"step {k}:", 0.05, times[f"eval at step {k}"] - times[f"step {k}"]))
    return {k: [(a, lo, hi) for a, lo, hi in v if hi > lo] for k, v in out.items()}


def snapshot(db_path: Path) -> dict[str, Any]:
    raw = sqlite3.connect(db_path)
    ids = [r[0] for r in raw.execute("SELECT id FROM trajectories ORDER BY id")]
    steps = raw.execute("SELECT COUNT(*) FROM steps").fetchone()[0]
    raw.close()
    return {"ids": ids, "steps": steps}


def checks(db_path: Path, before: dict[str, Any]) -> dict[str, Any]:
    raw = sqlite3.connect(db_path)
    have = {r[0] for r in raw.execute("SELECT id FROM trajectories")}
    dup_steps = raw.execute(
        "SELECT COUNT(*) FROM (SELECT step FROM steps WHERE superseded = 0 AND run_id = 1 "
        "GROUP BY step HAVING COUNT(*) > 1)"
    ).fetchone()[0]
    dup_rows = raw.execute(
        "SELECT COUNT(*) FROM (SELECT 1 FROM trajectories WHERE superseded = 0 GROUP BY step, split, group_idx, "
        "sample_idx, COALESCE(eval_id, -1) HAVING COUNT(*) > 1)"
    ).fetchone()[0]
    integrity = raw.execute("PRAGMA integrity_check").fetchone()[0]
    evals = eval_sets(raw)
    status = raw.execute("SELECT status FROM runs WHERE id = 1").fetchone()[0]
    final = raw.execute(
        "SELECT path FROM checkpoints WHERE run_id = 1 AND kind = 'final' ORDER BY id DESC"
    ).fetchone()
    raw.close()
    return {
        "lost": sum(1 for i in before["ids"] if i not in have),
        "dup_live_steps": dup_steps,
        "dup_live_rows": dup_rows,
        "integrity": integrity,
        "status": status,
        "final_adapter": final[0] if final else None,
        "eval_sets": evals,
    }


def eval_sets(raw: sqlite3.Connection) -> dict[str, list[list[Any]]]:
    """The live evals per policy ("baseline", or the checkpoint's "kind@step"): each part (split, mode) with
    its live row count, sorted. A trial's must equal the straight run's: a part missing, half-written (fewer
    rows) or there twice (two live SFT-only evals) shows as a difference."""
    out: dict[str, list[list[Any]]] = {}
    for is_base, kind, step, tasks, mode, rows in raw.execute(
        "SELECT e.is_baseline, c.kind, e.step, e.tasks, e.mode, "
        "(SELECT COUNT(*) FROM trajectories t WHERE t.eval_id = e.id AND t.superseded = 0) "
        "FROM evals e LEFT JOIN checkpoints c ON c.id = e.checkpoint_id "
        "WHERE e.run_id = 1 AND e.superseded = 0"
    ):
        split = (json.loads(tasks) or {}).get("split", "held_out") if tasks else "held_out"
        key = "baseline" if is_base else f"{kind}@{step}"
        out.setdefault(key, []).append([split, mode, rows])
    return {k: sorted(v) for k, v in sorted(out.items())}


def adapter_diff(a: str | None, b: str | None) -> float | None:
    if a is None or b is None:
        return None
    from safetensors.torch import load_file

    ta = load_file(next(Path(a, "adapter").glob("*.safetensors")))
    tb = load_file(next(Path(b, "adapter").glob("*.safetensors")))
    return max(float((ta[k] - tb[k]).abs().max()) for k in ta)


def tear_newest_checkpoint(db_path: Path) -> str | None:
    raw = sqlite3.connect(db_path)
    row = raw.execute("SELECT path FROM checkpoints WHERE run_id = 1 ORDER BY id DESC LIMIT 1").fetchone()
    raw.close()
    if row is None:
        return None
    weights = next(Path(row[0], "adapter").glob("*.safetensors"), None)
    if weights is None:
        return None
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    return str(weights)


def trial(
    i: int,
    phase: str,
    anchor: str,
    at: float,
    cfg_path: Path,
    work: Path,
    straight_final: str | None,
    straight_evals: dict[str, list[list[Any]]],
) -> dict[str, Any]:
    db_path = work / f"trial{i}.db"
    log: list[tuple[float, str]] = []
    proc = train([str(cfg_path), "--db", str(db_path)], log)
    while not any(line.startswith(anchor) for _, line in log) and proc.poll() is None:
        time.sleep(0.005)
    time.sleep(at)
    killed = proc.poll() is None
    if killed:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = snapshot(db_path)
    torn = tear_newest_checkpoint(db_path) if phase == "checkpoint" else None
    resume_log: list[tuple[float, str]] = []
    t0 = time.monotonic()
    again = train(["--resume", "1", "--db", str(db_path)], resume_log)
    rc = again.wait(timeout=900)
    time.sleep(0.2)  # the pump thread drains the last lines
    out = {
        "trial": i,
        "phase": phase,
        "kill": f"{at:.2f} s after '{anchor}'",
        "killed": killed,
        "resume_rc": rc,
        "resume_s": round(time.monotonic() - t0, 1),
        "rows_before_kill": len(before["ids"]),
        **checks(db_path, before),
    }
    out["adapter_max_diff"] = adapter_diff(out.pop("final_adapter"), straight_final)
    sets = out.pop("eval_sets")
    out["evals_as_straight"] = sets == straight_evals
    if not out["evals_as_straight"]:
        out["eval_sets"] = sets
    if torn is not None:
        text = "\n".join(line for _, line in resume_log)
        out["torn_file"] = torn
        out["torn_named_on_resume"] = Path(torn).name in text
    return out


HOLD_LOCK = textwrap.dedent("""
    import sqlite3, sys, time
    conn = sqlite3.connect(sys.argv[1], timeout=60)
    conn.execute("BEGIN IMMEDIATE")
    print("locked", flush=True)
    time.sleep(float(sys.argv[2]))
    conn.execute("COMMIT")
""")


def disk_full(work: Path) -> dict[str, Any]:
    # The test's scenario: 50 rows, then a 3000-row batch past a file-size limit.
    from tests.store.test_store import DISK_FULL

    db_path = work / "full.db"
    out = subprocess.run(
        [sys.executable, "-c", DISK_FULL.format(root=str(ROOT)), str(db_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    db = store.open_db(db_path)
    n = db.execute("SELECT COUNT(*) FROM trajectories").fetchone()[0]
    ok = store.integrity_ok(db)
    db.conn.close()
    return {
        "error": (out.stdout + out.stderr).strip().splitlines()[-1]
        if (out.stdout + out.stderr).strip()
        else "",
        "rows_after": n,
        "rows_expected": 50,
        "integrity_ok": ok,
    }


def locked_db(cfg_path: Path, work: Path, hold_s: float) -> dict[str, Any]:
    db_path = work / "locked.db"
    log: list[tuple[float, str]] = []
    proc = train([str(cfg_path), "--db", str(db_path)], log)
    while not any(line.startswith("step 1:") for _, line in log):
        if proc.poll() is not None:
            return {"error": "the run ended before step 1", "log": [line for _, line in log][-5:]}
        time.sleep(0.1)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(db_path), str(hold_s)], stdout=subprocess.PIPE, text=True
    )
    holder.stdout.readline()  # type: ignore[union-attr]
    t_locked = time.monotonic()
    holder.wait()
    rc = proc.wait(timeout=900)
    raw = sqlite3.connect(db_path)
    status = raw.execute("SELECT status FROM runs WHERE id = 1").fetchone()[0]
    raw.close()
    return {"held_s": hold_s, "rc": rc, "status": status, "waited_s": round(time.monotonic() - t_locked, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="docs/faults.json")
    ap.add_argument("--hold-s", type=float, default=10.0)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="wb-faults-"))
    model = tiny_model_dir(work / "model")
    cfg_path = write_config(config(model, work / "runs"), work / "cfg.yaml")

    log: list[tuple[float, str]] = []
    t0 = time.monotonic()
    proc = train([str(cfg_path), "--db", str(work / "straight.db")], log)
    assert proc.wait(timeout=900) == 0, "\n".join(line for _, line in log[-20:])
    straight_s = time.monotonic() - t0
    time.sleep(0.2)
    phases = timeline(log, work / "straight.db")
    straight = checks(work / "straight.db", {"ids": []})
    print(
        f"straight run: {straight_s:.1f} s; phases: " + ", ".join(f"{k} x{len(v)}" for k, v in phases.items())
    )
    print(json.dumps(phases))

    rng = random.Random(args.seed)
    results = []
    for i in range(args.trials):
        phase = PHASES[i % len(PHASES)]
        anchor, lo, hi = rng.choice(phases[phase] or phases["rollout"])
        r = trial(
            i,
            phase,
            anchor,
            rng.uniform(lo, hi),
            cfg_path,
            work,
            straight["final_adapter"],
            straight["eval_sets"],
        )
        results.append(r)
        print(json.dumps(r))
    extra = {"disk_full": disk_full(work), "locked_db": locked_db(cfg_path, work, args.hold_s)}
    print(json.dumps(extra))
    summary = {
        "trials": len(results),
        "killed": sum(r["killed"] for r in results),
        "lost_rows": sum(r["lost"] for r in results),
        "dup_live_steps": sum(r["dup_live_steps"] for r in results),
        "dup_live_rows": sum(r["dup_live_rows"] for r in results),
        "integrity_ok": all(r["integrity"] == "ok" for r in results),
        "finished": sum(r["status"] == "finished" for r in results),
        "adapter_equal": sum(r["adapter_max_diff"] == 0.0 for r in results),
        "torn_named": [r.get("torn_named_on_resume") for r in results if "torn_file" in r],
        "evals_as_straight": sum(r["evals_as_straight"] for r in results),
        # A trial passes only when everything above holds for it, its evals included.
        "passed": sum(
            r["lost"] == 0
            and r["dup_live_steps"] == 0
            and r["dup_live_rows"] == 0
            and r["integrity"] == "ok"
            and r["status"] == "finished"
            and r["adapter_max_diff"] == 0.0
            and r["evals_as_straight"]
            for r in results
        ),
    }
    print(json.dumps(summary))
    Path(args.out).write_text(
        json.dumps(
            {
                "straight_s": round(straight_s, 1),
                "phases": phases,
                "summary": summary,
                "trials": results,
                **extra,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
