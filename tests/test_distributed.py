"""Data-parallel training for real on this CPU: 2 ranks over gloo, the tiny fixture model.

- the 2-rank update equals the 1-process one on the same batch (loss, LoRA gradients, weights after the step);
- `workbench train --nproc 2` end to end, paused, re-tuned (set_lr) and resumed through the store's command
  table, as the TUI sends them;
- kill -9 of rank 1: the run's status names it; `--resume` completes the run.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import store
from workbench.config import Config
from workbench.distributed import _free_port
from workbench.models import load_policy
from workbench.testing import perturb_lora
from workbench.update import policy_update
from workbench.view import View

ROOT = Path(__file__).resolve().parents[1]
CASES = {  # name -> config: normalisers of every kind, and old log-probs (num_iterations 2)
    "grpo": Config(loss_type="grpo", max_grad_norm=0.5),
    "dapo": Config(algorithm="dapo", num_iterations=2),
    "dr_grpo": Config(algorithm="dr_grpo", max_completion_length=8),
}


def _batch(policy) -> list[list[tuple]]:
    """4 groups of 3 rows sharing the harness prefix; groups 1 and 3 (rank 1's) have zero advantage, so
    rank 1 trains nothing and still must join the gradient sum."""
    g = torch.Generator().manual_seed(0)
    vocab = len(policy.tokenizer)
    rand = lambda n: torch.randint(3, vocab, (n,), generator=g).tolist()  # noqa: E731
    prefix = [1] + rand(6)
    groups = []
    for gi in range(4):
        prompt = prefix + rand(2)
        advs = [0.0, 0.0, 0.0] if gi % 2 else [1.2, -0.4, -0.8]
        groups.append([(prompt, rand(2 + (3 * gi + i) % 5), a, [-1.0] * 8, 1.0) for i, a in enumerate(advs)])
    return groups


def _run_update(model_dir: Path, cfg: Config, rows: list[tuple], sync=None, micro_batch: int = 16) -> dict:
    policy = load_policy(model_dir, adapter="lora", lora_r=4, lora_alpha=8, seed=0)
    perturb_lora(policy, scale=0.3, seed=1)
    opt = torch.optim.AdamW(policy.trainable_parameters(), lr=1e-2)
    out = policy_update(policy, opt, cfg, rows, len(rows), temperature=1.0, lr=1e-2, sync=sync,
                        micro_batch=micro_batch)
    named = [(n, p) for n, p in policy.model.named_parameters() if p.requires_grad]
    return {"out": out, "grads": {n: p.grad.clone() for n, p in named}, "params": {n: p.detach().clone() for n, p in named}}


def _rank_main(rank: int, world: int, port: int, model_dir: str, out_dir: str) -> None:
    import torch.distributed as dist

    from workbench.distributed import RankSync

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        for name, cfg in CASES.items():
            policy = load_policy(model_dir, adapter="lora", lora_r=4, lora_alpha=8, seed=0)
            mine = [row for gi, grp in enumerate(_batch(policy)) if gi % world == rank for row in grp]
            res = _run_update(Path(model_dir), cfg, mine, sync=RankSync(torch.device("cpu")), micro_batch=2)
            torch.save(res, Path(out_dir) / f"{name}-{rank}.pt")
    finally:
        dist.destroy_process_group()


def test_two_rank_update_equals_one_process(tiny_model: Path, tmp_path: Path) -> None:
    ctx = mp.get_context("spawn")
    port = _free_port()
    procs = [ctx.Process(target=_rank_main, args=(r, 2, port, str(tiny_model), str(tmp_path))) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    policy = load_policy(tiny_model, adapter="lora", lora_r=4, lora_alpha=8, seed=0)
    rows = [row for grp in _batch(policy) for row in grp]
    for name, cfg in CASES.items():
        one = _run_update(tiny_model, cfg, rows, micro_batch=4)
        for rank in range(2):
            two = torch.load(tmp_path / f"{name}-{rank}.pt", weights_only=False)
            for key in ("loss", "grad_norm", "num_tokens", "update_tokens"):
                assert two["out"][key] == pytest.approx(one["out"][key], abs=1e-5), (name, rank, key)
            assert one["grads"].keys() == two["grads"].keys()
            for n, g in one["grads"].items():
                torch.testing.assert_close(two["grads"][n], g, atol=1e-5, rtol=1e-5, msg=f"{name} rank {rank} {n}")
            for n, p in one["params"].items():
                torch.testing.assert_close(two["params"][n], p, atol=1e-5, rtol=1e-5, msg=f"{name} rank {rank} {n}")


# ----- end to end: `workbench train --nproc 2` --------------------------------------------------------------


def _config(tmp_path: Path, model: Path, **extra) -> Path:
    keys = {"name": "ranks", "model": str(model), "lora": {"r": 4, "alpha": 8}, "num_generations_per_prompt": 2,
            "prompts_per_step": 3, "max_completion_length": 8, "max_steps": 3, "eval_interval": 3,
            "eval_max_tasks": 2, "learning_rate": 1e-3, "output_dir": str(tmp_path / "runs"), **extra}
    import yaml

    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(keys))
    return path


@pytest.fixture
def launched():
    """Start `workbench train --nproc 2 ...`; whatever a test leaves running is stopped (SIGTERM to the
    launcher stops its ranks; then SIGKILL to any rank the log names)."""
    started: list[tuple[subprocess.Popen, Path]] = []

    def launch(tmp_path: Path, *args: str) -> tuple[subprocess.Popen, Path]:
        log = tmp_path / f"launch-{len(started)}.log"
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
        with log.open("wb") as f:
            proc = subprocess.Popen([sys.executable, "-m", "workbench.cli", "train", "--db", str(tmp_path / "wb.db"),
                                     "--nproc", "2", *args], stdout=f, stderr=subprocess.STDOUT, env=env, cwd=tmp_path)
        started.append((proc, log))
        return proc, log

    yield launch
    for proc, log in started:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
        for line in log.read_text().splitlines():
            if line.startswith("rank ") and " pid " in line:
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(line.split()[-1]), signal.SIGKILL)


def _wait(cond, what: str, proc: subprocess.Popen, log: Path, timeout: float = 90.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            pytest.fail(f"timed out waiting for {what}; log:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)


def _run_row(db_path: Path, run_id: int) -> dict:
    db = store.open_db(db_path)
    try:
        return store.runs.get_run(db, run_id)
    finally:
        db.close()


def _steps(db_path: Path, run_id: int) -> list[dict]:
    db = store.open_db(db_path)
    try:
        return store.metrics.steps_since(db, run_id)
    finally:
        db.close()


def test_two_ranks_pause_set_lr_resume_through_the_command_path(tiny_model: Path, tmp_path: Path, launched) -> None:
    from workbench.config import load_config

    cfg = load_config(_config(tmp_path, tiny_model))
    db_path = tmp_path / "wb.db"
    db = store.open_db(db_path)
    run_id = store.runs.create_run(db, name=cfg.name, model=cfg.model, config=cfg.to_dict())
    db.close()
    with View.open(db_path) as view:  # what the TUI's keys send
        view.enqueue(run_id, "pause")
        view.enqueue(run_id, "set_lr", {"lr": 0.005})
    proc, log = launched(tmp_path, "--resume", str(run_id))
    _wait(lambda: _run_row(db_path, run_id)["status"] == "paused", "the pause", proc, log)
    held = len(_steps(db_path, run_id))
    time.sleep(1.0)  # paused means paused: nothing moves while it is
    assert _run_row(db_path, run_id)["status"] == "paused" and len(_steps(db_path, run_id)) == held
    assert proc.poll() is None
    with View.open(db_path) as view:
        view.enqueue(run_id, "resume")
    assert proc.wait(timeout=120) == 0, log.read_text()[-3000:]
    text = log.read_text()
    assert _run_row(db_path, run_id)["status"] == "finished", text[-2000:]
    steps = _steps(db_path, run_id)
    assert [s["step"] for s in steps] == [1, 2, 3]
    assert steps[-1]["metrics"]["learning_rate"] == pytest.approx(0.005)  # set_lr reached the step
    assert "[rank 1] lr 0.005" in text  # ...and rank 1 at the same safe point
    # Rank 0 alone wrote: every group of every step once (3 prompts x 2 samples), from both ranks' rollouts.
    db = store.open_db(db_path)
    n = db.execute("SELECT COUNT(*) FROM trajectories WHERE run_id = ? AND split = 'train'", [run_id]).fetchone()[0]
    db.close()
    assert n == 3 * 3 * 2


def test_kill_rank_1_status_says_so_and_resume_completes(tiny_model: Path, tmp_path: Path, launched) -> None:
    cfg = _config(tmp_path, tiny_model, max_steps=4, eval_interval=4, checkpoint_interval=1)
    db_path = tmp_path / "wb.db"
    proc, log = launched(tmp_path, str(cfg))
    _wait(lambda: "rank 1 pid" in log.read_text() and db_path.exists(), "the ranks", proc, log)
    run_id = 1
    _wait(lambda: len(_steps(db_path, run_id)) >= 1, "a step", proc, log)
    with View.open(db_path) as view:
        view.enqueue(run_id, "pause")  # holds the run still, so the kill lands mid-run
    _wait(lambda: _run_row(db_path, run_id)["status"] == "paused", "the pause", proc, log)
    pid = int(next(ln for ln in log.read_text().splitlines() if ln.startswith("rank 1 pid")).split()[-1])
    os.kill(pid, signal.SIGKILL)
    assert proc.wait(timeout=60) == 1
    row = _run_row(db_path, run_id)
    assert row["status"] == "crashed"
    assert "rank 1 of 2 was killed by SIGKILL" in row["status_reason"], row["status_reason"]
    done = len(_steps(db_path, run_id))
    assert done < 4
    proc, log = launched(tmp_path, "--resume", str(run_id))
    assert proc.wait(timeout=120) == 0, log.read_text()[-3000:]
    assert _run_row(db_path, run_id)["status"] == "finished"
    assert [s["step"] for s in _steps(db_path, run_id)][-1] == 4


def test_stopping_the_launcher_stops_every_rank_cleanly_with_a_checkpoint(tiny_model: Path, tmp_path: Path,
                                                                         launched) -> None:
    """SIGTERM to `workbench train --nproc 2` (what `kill`, systemd or a scheduler sends) is a stop, not a crash."""
    from workbench.config import load_config

    cfg = load_config(_config(tmp_path, tiny_model))
    db_path = tmp_path / "wb.db"
    db = store.open_db(db_path)
    run_id = store.runs.create_run(db, name=cfg.name, model=cfg.model, config=cfg.to_dict())
    db.close()
    with View.open(db_path) as view:
        view.enqueue(run_id, "pause")  # hold it mid-run, with both ranks alive
    proc, log = launched(tmp_path, "--resume", str(run_id))
    _wait(lambda: _run_row(db_path, run_id)["status"] == "paused", "the pause", proc, log)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 0, log.read_text()[-3000:]
    row = _run_row(db_path, run_id)
    assert row["status"] == "stopped", (row["status"], row["status_reason"], log.read_text()[-2000:])
    db = store.open_db(db_path)
    kinds = [c["kind"] for c in store.metrics.list_checkpoints(db, run_id)]
    db.close()
    assert kinds, "rank 0 checkpoints on its way out"
