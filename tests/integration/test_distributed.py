"""Data-parallel training for real on this CPU: 2 ranks over gloo, the tiny fixture model.

- the 2-rank update equals the 1-process one on the same batch (loss, LoRA gradients, weights after the step);
- the 2-rank SFT step equals the 1-process one on the same global batch (each rank trains on its share);
- the meetings: a pause held longer than a collective's timeout, then resumed, lets every rank go on; a stop
  during a pause ends every rank;
- `workbench train --nproc 2` end to end, paused, re-tuned (set_lr) and resumed through the store's command
  table, as the TUI sends them; with an SFT warm-up its evals equal a 1-process run's, its SFT weights too,
  and only rank 0 writes a run folder;
- kill -9 of rank 1: the run's status names it; `--resume` completes the run.
"""

from __future__ import annotations

import contextlib
import datetime
import json
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
from workbench.distributed.collective import RankCollective, Ranks, shard
from workbench.distributed.launch import _free_port
from workbench.learn.sft import run_sft
from workbench.learn.update import policy_update
from workbench.models import load_policy
from workbench.testing import perturb_lora
from workbench.view import View

ROOT = Path(__file__).resolve().parents[2]
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
    out = policy_update(
        policy, opt, cfg, rows, len(rows), temperature=1.0, lr=1e-2, sync=sync, micro_batch=micro_batch
    )
    named = [(n, p) for n, p in policy.model.named_parameters() if p.requires_grad]
    return {
        "out": out,
        "grads": {n: p.grad.clone() for n, p in named},
        "params": {n: p.detach().clone() for n, p in named},
    }


def _rank_main(rank: int, world: int, port: int, model_dir: str, out_dir: str) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    sync = RankCollective(Ranks(rank, world, rank), torch.device("cpu"))
    try:
        for name, cfg in CASES.items():
            policy = load_policy(model_dir, adapter="lora", lora_r=4, lora_alpha=8, seed=0)
            mine = [row for gi, grp in enumerate(_batch(policy)) if gi % world == rank for row in grp]
            res = _run_update(Path(model_dir), cfg, mine, sync=sync, micro_batch=2)
            torch.save(res, Path(out_dir) / f"{name}-{rank}.pt")
    finally:
        dist.destroy_process_group()


def test_two_rank_update_equals_one_process(tiny_model: Path, tmp_path: Path) -> None:
    ctx = mp.get_context("spawn")
    port = _free_port()
    procs = [
        ctx.Process(target=_rank_main, args=(r, 2, port, str(tiny_model), str(tmp_path))) for r in range(2)
    ]
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
                torch.testing.assert_close(
                    two["grads"][n], g, atol=1e-5, rtol=1e-5, msg=f"{name} rank {rank} {n}"
                )
            for n, p in one["params"].items():
                torch.testing.assert_close(
                    two["params"][n], p, atol=1e-5, rtol=1e-5, msg=f"{name} rank {rank} {n}"
                )


def _spawn(target, *args, world: int = 2, timeout: float = 120.0) -> None:
    """Run `target(rank, world, port, *args)` in `world` fresh processes (gloo); each must exit 0 in time."""
    ctx = mp.get_context("spawn")
    port = _free_port()
    procs = [ctx.Process(target=target, args=(r, world, port, *args)) for r in range(world)]
    for p in procs:
        p.start()
    try:
        for p in procs:
            p.join(timeout=timeout)
            assert p.exitcode == 0, f"rank {procs.index(p)} exit code {p.exitcode}"
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()


# ----- the SFT step -----------------------------------------------------------------------------------------

SFT_CASES = {"uneven": 5, "rank_1_idle": 1}  # batch size: shares 3 + 2; and rank 1 with nothing to train


def _sft(model_dir: Path, batch_size: int, sync=None) -> dict:
    policy = load_policy(model_dir, adapter="lora", lora_r=4, lora_alpha=8, seed=0)
    examples = [
        (
            [{"role": "user", "content": f"Add event {i} on day {i % 7}, please."}],
            json.dumps({"tool": "calendar.create_event", "args": {"title": f"event {i}", "day": i % 7}}),
        )
        for i in range(6)
    ]
    losses = run_sft(policy, examples, 3, lr=1e-2, batch_size=batch_size, seed=3, sync=sync)
    named = [(n, p) for n, p in policy.model.named_parameters() if p.requires_grad]
    return {"losses": losses, "params": {n: p.detach().clone() for n, p in named}}


def _sft_rank_main(rank: int, world: int, port: int, model_dir: str, out_dir: str) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    sync = RankCollective(Ranks(rank, world, rank), torch.device("cpu"))
    try:
        for name, batch in SFT_CASES.items():
            torch.save(_sft(Path(model_dir), batch, sync=sync), Path(out_dir) / f"{name}-{rank}.pt")
    finally:
        dist.destroy_process_group()


def test_two_rank_sft_equals_one_process_on_the_same_batch(tiny_model: Path, tmp_path: Path) -> None:
    _spawn(_sft_rank_main, str(tiny_model), str(tmp_path))
    start = load_policy(tiny_model, adapter="lora", lora_r=4, lora_alpha=8, seed=0).model
    for name, batch in SFT_CASES.items():
        one = _sft(tiny_model, batch)
        moved = max(
            float((p - start.get_parameter(n).detach()).abs().max()) for n, p in one["params"].items()
        )
        assert moved > 1e-3, "SFT moved the adapter (so the comparison means something)"
        for rank in range(2):
            two = torch.load(tmp_path / f"{name}-{rank}.pt", weights_only=False)
            assert two["losses"] == pytest.approx(one["losses"], abs=1e-5), (name, rank)
            for n, p in one["params"].items():
                torch.testing.assert_close(
                    two["params"][n], p, atol=1e-5, rtol=1e-5, msg=f"{name} rank {rank} {n}"
                )


def test_shards_are_contiguous_balanced_and_cover_every_task() -> None:
    for n in range(0, 12):
        for world in (1, 2, 3, 4):
            spans = [shard(n, Ranks(r, world, r)) for r in range(world)]
            assert spans[0][0] == 0 and spans[-1][1] == n
            assert all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False))
            sizes = [b - a for a, b in spans]
            assert max(sizes) - min(sizes) <= 1


def test_dealt_groups_come_back_in_task_order_and_alone_a_rank_takes_everything() -> None:
    """`deal` / `undeal` (a step's rollout groups): every task is dealt to one rank, and the gathered deals
    are the tasks in order on every rank; inside `alone` (rank 0 obeying a command) the split is the whole."""
    from workbench.distributed.collective import OneProcess

    for n in range(0, 9):
        for world in (1, 2, 3):
            ranks = [RankCollective(Ranks(r, world, r), torch.device("cpu")) for r in range(world)]
            dealt = [[f"task {j}" for j in c.deal(n)] for c in ranks]
            assert sorted(t for d in dealt for t in d) == sorted(f"task {j}" for j in range(n))
            for c in ranks:
                c.gather = lambda local, what, parts=dealt: parts  # as all_gather_object: every rank's
                assert c.undeal(dealt[c.rank], n, "test") == [f"task {j}" for j in range(n)]
            with ranks[0].alone():
                assert list(ranks[0].deal(n)) == list(range(n)) and ranks[0].share(n) == (0, n)
                assert ranks[0].undeal(["mine"], n, "test") == ["mine"]
            assert list(OneProcess().deal(n)) == list(range(n)) and OneProcess().share(n) == (0, n)


# ----- the meetings: pause, resume and stop on rank 0 reach every rank -----------------------------------------

COLLECTIVE_TIMEOUT_S = 4.0  # the process group's: any single collective that waits longer fails


def _meeting_rank_main(rank: int, world: int, port: int, db_path: str, out_dir: str) -> None:
    """Two meetings of a fake trainer: rank 0 obeys the store's commands (the worker's hooks), rank 1 follows."""
    from types import SimpleNamespace

    import torch.distributed as dist

    from workbench.distributed import meetings
    from workbench.worker import WorkerHooks

    meetings.PAUSE_BEAT_S = 0.5
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group(
        "gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S)
    )
    out = Path(out_dir)
    try:
        inner = None
        if rank == 0:
            db = store.open_db(db_path)
            inner = WorkerHooks(db, 1, store.runs.acquire_lock(db, 1, stale_after_s=30))
        hooks = meetings.RankHooks(inner, RankCollective(Ranks(rank, world, rank), torch.device("cpu")))
        trainer = SimpleNamespace(
            step=0, lr=1e-3, temperature=1.0, verifier_id=1, verifier=None, sft_done=True
        )
        seen = []
        for step in (1, 2):
            while not (out / f"go{step}").exists():
                time.sleep(0.05)
            trainer.step = step - 1
            hooks.safe_point(trainer, "after_step")
            seen.append({"stop": hooks.should_stop(trainer), "lr": trainer.lr})
            (out / f"met{step}-{rank}.json").write_text(json.dumps(seen))
            if hooks.should_stop(trainer):
                break
    finally:
        dist.destroy_process_group()


def test_a_long_pause_holds_every_rank_and_resume_or_stop_reaches_all(tmp_path: Path) -> None:
    db_path = tmp_path / "wb.db"
    db = store.open_db(db_path)
    run_id = store.runs.create_run(db, name="meetings", model="none", config={})
    db.close()
    ctx = mp.get_context("spawn")
    port = _free_port()
    procs = [
        ctx.Process(target=_meeting_rank_main, args=(r, 2, port, str(db_path), str(tmp_path)))
        for r in range(2)
    ]

    def send(kind: str, payload: dict | None = None) -> None:
        with View.open(db_path) as view:
            view.enqueue(run_id, kind, payload)

    def wait_for(cond, what: str) -> None:
        end = time.monotonic() + 60
        while not cond():
            assert all(p.is_alive() for p in procs), (
                f"a rank died waiting for {what}: {[p.exitcode for p in procs]}"
            )
            assert time.monotonic() < end, f"timed out waiting for {what}"
            time.sleep(0.1)

    def paused_at(step: int) -> bool:
        row = _run_row(db_path, run_id)
        return row["status"] == "paused" and f"of step {step}" in (row["status_reason"] or "")

    for p in procs:
        p.start()
    try:
        send("pause")
        send("set_lr", {"lr": 0.02})
        (tmp_path / "go1").touch()
        wait_for(lambda: paused_at(1), "the pause at step 1")
        time.sleep(2 * COLLECTIVE_TIMEOUT_S)  # held longer than any one collective may wait
        assert all(p.is_alive() for p in procs), "a long pause must not time out a rank"
        send("resume")
        wait_for(
            lambda: all((tmp_path / f"met1-{r}.json").exists() for r in range(2)), "both ranks past meeting 1"
        )
        for r in range(2):  # both go on, with what rank 0 obeyed while paused
            assert json.loads((tmp_path / f"met1-{r}.json").read_text()) == [{"stop": False, "lr": 0.02}]
        send("pause")
        (tmp_path / "go2").touch()
        wait_for(lambda: paused_at(2), "the pause at step 2")
        send("stop")
        for p in procs:
            p.join(timeout=60)
        assert [p.exitcode for p in procs] == [0, 0]
        for r in range(2):
            assert json.loads((tmp_path / f"met2-{r}.json").read_text())[-1] == {"stop": True, "lr": 0.02}
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()


# ----- end to end: `workbench train --nproc 2` --------------------------------------------------------------


def _config(tmp_path: Path, model: Path, **extra) -> Path:
    keys = {
        "name": "ranks",
        "model": str(model),
        "lora": {"r": 4, "alpha": 8},
        "num_generations_per_prompt": 2,
        "prompts_per_step": 3,
        "max_completion_length": 8,
        "max_steps": 3,
        "eval_interval": 3,
        "eval_max_tasks": 2,
        "learning_rate": 1e-3,
        "output_dir": str(tmp_path / "runs"),
        **extra,
    }
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
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "workbench.cli",
                    "train",
                    "--db",
                    str(tmp_path / "wb.db"),
                    "--nproc",
                    "2",
                    *args,
                ],
                stdout=f,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=tmp_path,
            )
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


def test_two_ranks_pause_set_lr_resume_through_the_command_path(
    tiny_model: Path, tmp_path: Path, launched
) -> None:
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
    n = db.execute(
        "SELECT COUNT(*) FROM trajectories WHERE run_id = ? AND split = 'train'", [run_id]
    ).fetchone()[0]
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


def test_stopping_the_launcher_stops_every_rank_cleanly_with_a_checkpoint(
    tiny_model: Path, tmp_path: Path, launched
) -> None:
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


def _evals(db_path: Path, run_id: int) -> dict[tuple, dict]:
    """(step, baseline, split) -> the eval's metrics, less its wall-clock latency."""
    db = store.open_db(db_path)
    try:
        rows = store.metrics.list_evals(db, run_id)
        out = {}
        for e in rows:
            n = db.execute("SELECT COUNT(*) FROM trajectories WHERE eval_id = ?", [e["id"]]).fetchone()[0]
            metrics = {k: v for k, v in e["metrics"].items() if k != "mean_latency_s"}
            out[(e["step"], bool(e["is_baseline"]), e["tasks"].get("split", "held_out"))] = {
                **metrics,
                "rows": n,
            }
        return out
    finally:
        db.close()


def _sft_adapter(db_path: Path, run_id: int) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    db = store.open_db(db_path)
    try:
        (sft,) = [c for c in store.metrics.list_checkpoints(db, run_id) if c["kind"] == "sft"]
    finally:
        db.close()
    return load_file(Path(sft["path"]) / "adapter" / "adapter_model.safetensors")


def test_two_rank_sft_and_evals_equal_one_process_and_only_rank_0_writes_files(
    tiny_model: Path, tmp_path: Path, launched
) -> None:
    """SFT and evals data-parallel: the 2-rank run's baseline and post-SFT evals (validation and test, greedy)
    and its SFT adapter equal a 1-process run's of the same config; every eval row is recorded once, by rank 0;
    rank 0's run folder is the only one, with one TensorBoard writer."""
    import dataclasses

    from workbench.config import load_config
    from workbench.trainer import Trainer

    cfg_path = _config(
        tmp_path,
        tiny_model,
        sft_steps=2,
        sft_batch_size=4,
        sft_learning_rate=1e-2,
        max_steps=1,
        eval_interval=1,
        eval_max_tasks=4,
        log_to="tensorboard",
    )
    proc, log = launched(tmp_path, str(cfg_path))
    assert proc.wait(timeout=300) == 0, log.read_text()[-3000:]
    db_path, run_id = tmp_path / "wb.db", 1
    row = _run_row(db_path, run_id)
    assert row["status"] == "finished", row["status_reason"]
    folders = sorted((tmp_path / "runs").iterdir())
    assert [f.name for f in folders] == [f"run-{run_id}-{int(row['created'])}"], (
        "the followers wrote no folder"
    )
    assert len(list((folders[0] / "tensorboard").glob("events.out.tfevents.*"))) == 1, (
        "one TensorBoard writer"
    )

    cfg = dataclasses.replace(load_config(cfg_path), output_dir=str(tmp_path / "one"), log_to="none")
    one_db = store.open_db(tmp_path / "one.db")
    one = Trainer(cfg, one_db)
    one.run_eval(is_baseline=True)
    one.run_sft_phase()
    one_db.close()
    two_evals, one_evals = _evals(db_path, run_id), _evals(tmp_path / "one.db", one.run_id)
    for key in [(0, True, "held_out"), (0, True, "test"), (0, False, "held_out"), (0, False, "test")]:
        assert two_evals[key]["n"] == two_evals[key]["rows"] == 4, key  # both ranks' shares, recorded once
        assert two_evals[key] == one_evals[key], key
    two_sft, one_sft = _sft_adapter(db_path, run_id), _sft_adapter(tmp_path / "one.db", one.run_id)
    assert two_sft.keys() == one_sft.keys()
    for name, w in one_sft.items():
        torch.testing.assert_close(two_sft[name], w, atol=1e-5, rtol=1e-5, msg=name)
