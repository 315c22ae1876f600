"""Data-parallel training over N ranks with torch.distributed (gloo on CPU, nccl on CUDA).

    torchrun --nproc_per_node N -m workbench.cli train cfg.yaml     (or several machines: torchrun's rendezvous)
    workbench train --nproc N cfg.yaml                              (this module's launcher, one machine)

How a step runs (DESIGN.md, "With N ranks"):
- Every rank draws the same step prompts (they derive from (seed, step)) and rolls out whole groups for its
  share, prompts i with i % N == rank; the groups are then gathered, so every rank holds the step's groups
  in the 1-process order and computes the same advantages, metrics and keep decisions (advantages are per
  group, so "computed on the owning rank" and "computed everywhere" give the same numbers; "batch" reward
  scaling needs the whole step's rewards, which this gets for free).
- The update trains each rank on its own groups' rows. Gradients are summed by hand (`RankSync`), not with
  DDP: the update is micro-batched, its normalisers span the whole step, and a rank may have fewer rows
  than another (or none when its groups all have zero advantage). DDP syncs inside every backward and
  hangs unless every rank runs the same number of them; summing the LoRA gradients once per optimizer step
  needs only that every rank reaches that point, which it does whatever its row count. The decisions that
  used to be per process (nothing to train; every advantage zero) are taken over the step's totals, so the
  N-rank optimizer step equals the 1-process one (tests/test_distributed.py checks to 1e-5).
- Rank 0 alone writes the store, claims commands and writes the run's folder (checkpoints, TensorBoard);
  the other ranks keep a private in-memory store for what the trainer writes as it goes, never open the
  run's database for writing and never write a file (they know rank 0's run folder, to read checkpoints).
- Commands are read by rank 0 at the meetings only: after the rollouts, before the update, after the step
  and after each SFT step. There rank 0 broadcasts the outcome (stop, learning rate, temperature, verifier),
  so every rank applies it at the same point. A pause or stop taken anywhere else (inside decoding, an eval
  or an update, as one process does) would hold or end rank 0 inside a phase while the others ran on into a
  collective it never joins; so with ranks a pause waits for the next meeting (the UI shows "pausing" till
  then). A paused rank 0 holds the meeting open: every PAUSE_BEAT_S it broadcasts "still paused", so the
  others wait in short meetings, not in one collective that would time out after TIMEOUT_S; a resume or a
  stop ends the meeting for every rank at once.
- The SFT warm-up is data-parallel: every rank draws the same batch, runs forward and backward on its share
  and the gradients are summed (`workbench.learn.sft.sft_step(sync=...)`), so N ranks take the 1-process steps.
  Evals too: each rank evaluates a contiguous share of the tasks (seeded by where it starts in the list),
  the results are gathered and rank 0 records them. An eval a command asks for (the UI's `e`) or a resume's
  catch-up eval runs on rank 0 alone, while the others wait at the meeting.
- A rank that dies makes the next collective fail on the others (`RankLost`); the launcher names the rank
  and its exit in the run's status. `workbench train --resume RUN --nproc N` continues from the last
  checkpoint (every rank loads the same one).
"""

from __future__ import annotations

import contextlib
import datetime
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

import store
from workbench import checkpoint as ckpt
from workbench.devices import resolve_device
from workbench.errors import RunLostError
from workbench.eval import EvalResult, summarize
from workbench.run.inputs import new_run
from workbench.safe_points import Throttle
from workbench.trainer import Hooks, Trainer, run_dir_for
from workbench.types import Task
from workbench.verifiers import load_verifier_code

# The longest one collective may wait: rank 0's work alone (an eval a command asks for, a checkpoint) keeps the
# others waiting at a meeting; a pause does not (PAUSE_BEAT_S).
TIMEOUT_S = float(os.environ.get("WORKBENCH_DIST_TIMEOUT_S", "3600"))
PAUSE_BEAT_S = 2.0  # a paused rank 0 tells the others this often that it still is
MEETINGS = ("after_rollouts", "before_update", "after_step", "sft_step")  # safe points every rank reaches together
GRACE_S = 10.0  # the launcher: a rank's peers get this long after SIGTERM before SIGKILL
STOP_WAIT_S = 300.0  # the launcher's SIGTERM: how long the ranks get to reach a meeting and stop there


class RankLost(RunLostError, RuntimeError):
    """A collective failed: another rank died or left. The run stops; `--resume` continues it."""


@dataclass(frozen=True)
class Ranks:
    rank: int
    world: int
    local_rank: int

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def env_ranks() -> Ranks | None:
    """The ranks torchrun (or `launch`) describes in the environment; None for a single process."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return None
    return Ranks(int(os.environ["RANK"]), world, int(os.environ.get("LOCAL_RANK", "0")))


def init(ranks: Ranks, device: str = "auto") -> torch.device:
    """Join the process group: gloo for CPU tensors, nccl for CUDA ones; returns this rank's device."""
    target = resolve_device(device)
    if target.type == "cuda":
        torch.cuda.set_device(target)
    backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
    if not dist.is_initialized():
        dist.init_process_group(backend, rank=ranks.rank, world_size=ranks.world,
                                timeout=datetime.timedelta(seconds=TIMEOUT_S))
    return target


def shutdown() -> None:
    if dist.is_initialized():
        with contextlib.suppress(Exception):
            dist.destroy_process_group()


@contextlib.contextmanager
def _collective(what: str):
    """A failed collective means a rank is gone: say so in the error the run's status shows."""
    try:
        yield
    except (RuntimeError, ConnectionError, OSError) as exc:  # gloo: "Connection closed by peer", timeouts, ...
        raise RankLost(f"another rank left the run during {what} ({type(exc).__name__}: {str(exc)[:160]})") from exc


class RankSync:
    """The update's collectives (`workbench.learn.update.policy_update(sync=...)`): sums over ranks."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.rank, self.world = dist.get_rank(), dist.get_world_size()  # the SFT step's share (workbench.learn.sft)

    def sum_floats(self, values: Sequence[float]) -> list[float]:
        t = torch.tensor([float(v) for v in values], dtype=torch.float64, device=self.device)
        with _collective("the update's totals"):
            dist.all_reduce(t)
        return t.tolist()

    def sum_grads(self, params: Iterable[torch.nn.Parameter]) -> None:
        """Sum the gradients over ranks in one flat buffer per dtype. A parameter no rank has a gradient for
        keeps None (as in one process, where AdamW then skips it); a rank without rows contributes zeros."""
        params = list(params)
        has = torch.tensor([p.grad is not None for p in params], dtype=torch.float32, device=self.device)
        with _collective("the gradient sum"):
            dist.all_reduce(has)
        by_dtype: dict[torch.dtype, list[torch.nn.Parameter]] = {}
        for p, h in zip(params, has.tolist(), strict=True):
            if h > 0:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
                by_dtype.setdefault(p.grad.dtype, []).append(p)
        for group in by_dtype.values():
            flat = torch.cat([p.grad.reshape(-1) for p in group])
            with _collective("the gradient sum"):
                dist.all_reduce(flat)
            offset = 0
            for p in group:
                n = p.grad.numel()
                p.grad.copy_(flat[offset : offset + n].view_as(p.grad))
                offset += n

    def sum_dict(self, sums: dict[str, float]) -> dict[str, float]:
        parts: list[Any] = [None] * dist.get_world_size()
        with _collective("the update's metrics"):
            dist.all_gather_object(parts, sums)
        out: dict[str, float] = {}
        for part in parts:
            for k, v in part.items():
                out[k] = out.get(k, 0.0) + v
        return out


def shard(n: int, ranks: Ranks) -> tuple[int, int]:
    """[first, stop) of this rank's contiguous share of n items (the first ranks take one more when N does
    not divide n): contiguous, so the gathered shares in rank order are the items in order."""
    base, extra = divmod(n, ranks.world)
    first = ranks.rank * base + min(ranks.rank, extra)
    return first, first + base + (1 if ranks.rank < extra else 0)


def broadcast_object(obj: Any, what: str) -> Any:
    box = [obj]
    with _collective(what):
        dist.broadcast_object_list(box, src=0)
    return box[0]


def broadcast_params(params: Iterable[torch.nn.Parameter]) -> None:
    """Rank 0's trainable weights everywhere (after a replicated phase, so no rank drifts by a rounding)."""
    with _collective("the weights broadcast"), torch.no_grad():
        for p in params:
            dist.broadcast(p.data, src=0)


# ----- hooks: commands on rank 0, their outcome broadcast at the meetings ------------------------------------


@contextlib.contextmanager
def _alone(trainer: Any) -> Any:
    """Rank 0 obeying a command (an eval, a probe): what it runs there is its own, with no collective (the
    others are waiting at the meeting)."""
    before = getattr(trainer, "alone", False)
    trainer.alone = True
    try:
        yield
    finally:
        trainer.alone = before


class RankHooks(Hooks):
    """Wraps rank 0's driver (the worker's hooks); on the other ranks there is none (`inner` None) and the
    meetings deliver what rank 0 decided. Every rank's `should_stop` is the stop agreed at the last meeting,
    so all leave at the same point."""

    def __init__(self, inner: Hooks | None, ranks: Ranks, log: Callable[[str], None] = lambda m: None) -> None:
        self.inner, self.ranks, self.log = inner, ranks, log
        self.stop = False
        self._beat = Throttle(PAUSE_BEAT_S)
        if inner is not None and hasattr(inner, "while_paused"):  # the worker's hooks: its pause loop beats
            inner.while_paused = self._still_paused

    def inner_safe_point(self, trainer: Trainer, phase: str) -> None:
        """Nothing with ranks: commands wait for the next meeting (see the module's docstring)."""

    def safe_point(self, trainer: Trainer, where: str) -> None:
        if where not in MEETINGS:
            return
        state = None
        if self.ranks.is_main:
            if self.inner is not None:
                self._beat.reset()
                with _alone(trainer):  # claims the commands; holds here while paused, beating
                    self.inner.safe_point(trainer, where)
            v = trainer.verifier
            state = {"held": False, "stop": bool(self.inner and self.inner.should_stop(trainer)), "lr": trainer.lr,
                     "temperature": trainer.temperature, "verifier_id": trainer.verifier_id,
                     "verifier": (getattr(v, "code", None), getattr(v, "name", None))}
        state = broadcast_object(state, f"the safe point {where!r}")
        if not self.ranks.is_main:
            if state["held"]:
                self.log(f"paused by rank 0 at {where} of step {trainer.step + 1}")
            while state["held"]:  # one short meeting per beat until rank 0 resumes or stops
                state = broadcast_object(None, f"the pause at {where!r}")
            self._apply(trainer, state, where)
        self.stop = state["stop"]

    def _still_paused(self, trainer: Trainer, where: str) -> None:
        """Rank 0, paused at a meeting (called every few hundred ms by the worker's pause loop)."""
        if self._beat.ready():
            broadcast_object({"held": True}, f"the pause at {where!r}")

    def _apply(self, trainer: Trainer, state: dict[str, Any], where: str) -> None:
        for key in ("lr", "temperature"):
            if getattr(trainer, key) != state[key]:
                setattr(trainer, key, state[key])
                self.log(f"[rank {self.ranks.rank}] {key} {state[key]} at {where} of step {trainer.step + 1}")
        if state["verifier_id"] != trainer.verifier_id:
            code, name = state["verifier"]
            trainer.verifier, trainer.verifier_id = load_verifier_code(code, name), state["verifier_id"]
            self.log(f"[rank {self.ranks.rank}] verifier {state['verifier_id']} at {where}")

    def should_stop(self, trainer: Trainer) -> bool:
        return self.stop

    def pause(self, trainer: Trainer, reason: str) -> bool:
        # The error budget (every rank sees the same step): rank 0's driver pauses at the next meeting, after
        # the step, and the others wait for it there.
        return self.inner.pause(trainer, reason) if self.inner is not None else True


# ----- the trainer of one rank -------------------------------------------------------------------------------


class RankTrainer(Trainer):
    """A `Trainer` that rolls out its share of each step's groups and trains on them with summed gradients."""

    def __init__(self, cfg: Any, db: Any, run_id: int | None, *, ranks: Ranks, hooks: RankHooks,
                 run_dir: Path | None = None, **kw: Any) -> None:
        """`run_dir`: on the ranks other than 0, rank 0's run folder (their own store's run is a scratch one)."""
        self.ranks = ranks
        self.alone = False  # rank 0 obeying a command: no collective (`_alone`)
        self._rank0_dir = run_dir
        self._owner: list[int] = []  # the rank that rolled out each of the step's groups, in step order
        self._loaded: list[dict[str, Any] | None] = []  # rank 0: the checkpoints resume() picked
        super().__init__(cfg, db, run_id, hooks=hooks, **kw)
        self.grad_sync = RankSync(self.policy.device)
        broadcast_params(self.policy.trainable_parameters())

    @property
    def writes_run_dir(self) -> bool:
        return self.ranks.is_main

    def _run_dir(self) -> Path:
        return super()._run_dir() if self._rank0_dir is None else self._rank0_dir

    def _engine_dir(self) -> Path:
        # A vLLM server engine saves each adapter it pushes: every rank its own folder (inside rank 0's).
        return super()._engine_dir() if self.ranks.is_main else self.run_dir / f"engine-rank{self.ranks.rank}"

    def _needs_baseline(self) -> bool:
        return broadcast_object(super()._needs_baseline() if self.ranks.is_main else None, "the baseline decision")

    # The other ranks get rank 0's verifier (the run's active version), not the config's.
    def _load_verifier(self) -> tuple[Any, int]:
        if self.ranks.is_main:
            v, vid = super()._load_verifier()
            broadcast_object((v.code, v.name, vid), "the verifier")
            return v, vid
        code, name, vid = broadcast_object(None, "the verifier")
        return load_verifier_code(code, name), vid

    def _roll_out(self, step: int, tasks: list[Any], sampling: Any, groups: list[Any]) -> bool:
        if not groups:
            self._owner = []
        mine = tasks[self.ranks.rank :: self.ranks.world]
        local: list[Any] = []
        # Its own seed per rank and per refill round: rank r must not draw rank 0's random numbers.
        ok = super()._roll_out(step, mine, sampling, local, seed_index=len(groups) + 100_003 * self.ranks.rank)
        self.hooks.safe_point(self, "after_rollouts")  # every rank: rank 0's stop reaches all
        if not ok or self.hooks.should_stop(self):
            return False
        parts: list[Any] = [None] * self.ranks.world
        with _collective("the rollout gather"):
            dist.all_gather_object(parts, local)
        for j in range(len(tasks)):
            groups.append(parts[j % self.ranks.world][j // self.ranks.world])
            self._owner.append(j % self.ranks.world)
        return True

    def _update(self, groups: list[Any], advantages: list[Any], keep: list[bool], **kw: Any) -> dict[str, float]:
        own = [i for i, r in enumerate(self._owner) if r == self.ranks.rank]
        return super()._update([groups[i] for i in own], [advantages[i] for i in own], [keep[i] for i in own], **kw)

    def run_sft_phase(self) -> None:
        super().run_sft_phase()
        broadcast_params(self.policy.trainable_parameters())

    def _evaluate(self, samples: int, label: str = "", tasks: list[Task] | None = None) -> EvalResult:
        """Every rank evaluates its share of the tasks; every rank gets the whole result (rank 0 records it;
        the others' run_eval goes on in step, writing only to their scratch store)."""
        if self.alone:
            return super()._evaluate(samples, label, tasks)
        label += " sampled" if samples else ""
        tasks = self.eval_tasks if tasks is None else tasks
        first, stop = shard(len(tasks), self.ranks)

        def progress(done: int, total: int) -> None:  # rank 0's share, as a guess at the whole (ranks run alike)
            whole = min(len(tasks), done * self.ranks.world) if done < total else len(tasks)
            self.progress.report("eval", whole, len(tasks), label=label, step=self.step)

        local = self._evaluate_tasks(tasks[first:stop], samples, label, first=first, progress=progress)
        parts: list[Any] = [None] * self.ranks.world
        with _collective("the eval gather"):
            dist.all_gather_object(parts, (local.rollouts, local.flags))
        rollouts = [r for part in parts for r in part[0]]  # rank order is task order: the shards are contiguous
        flags = [f for part in parts for f in part[1]]
        return EvalResult(summarize(rollouts, flags), rollouts, flags)

    def save_checkpoint(self, kind: str) -> int:
        """Rank 0 writes it; the others only note it in their scratch store (the evals they record point at it)."""
        if self.ranks.is_main:
            return super().save_checkpoint(kind)
        return store.metrics.record_checkpoint(self.db, self.run_id, step=self.step, kind=kind,
                                               path=str(self.run_dir / f"step-{self.step:05d}-{kind}"))

    def _newest_whole(self, checkpoints: list[dict[str, Any]]) -> dict[str, Any] | None:
        found = super()._newest_whole(checkpoints)
        self._loaded.append(found)
        return found

    def resume(self) -> int | None:
        """Rank 0 picks the checkpoint (and writes what resuming writes); every other rank loads the same."""
        if self.ranks.is_main:
            self._loaded = []
            with _alone(self):  # its catch-up eval, if any, runs here while the others wait for the broadcast
                step = super().resume()
            last = self._loaded[0] if self._loaded else None
            sft = None
            if last is not None and self._kl_to_sft:
                sft = last if last["kind"] == "sft" else self._loaded[1]
            # The prompt sampler's state too: it is read from rank 0's store, and every rank must draw alike.
            broadcast_object((last and last["path"], sft and sft["path"], self.groups_seen, self.eval_skills),
                             "the resume")
            return step
        last, sft, self.groups_seen, self.eval_skills = broadcast_object(None, "the resume")
        if last is None:
            return None
        if sft is not None:
            self.policy.load_adapter(Path(sft) / "adapter")
            self._pin_sft_reference()
        state = ckpt.load(Path(last), policy=self.policy, optimizer=self.optimizer, scheduler=None, check=False)
        self.step, self.lr, self.temperature = state["step"], state["lr"], state["temperature"]
        self.sft_done = state["sft_done"]
        self.engine.update_weights(self.policy)
        return self.step


def rank_trainer(cfg: Any, db: Any, run_id: int, ranks: Ranks, hooks: Hooks | None, **kw: Any) -> RankTrainer:
    """Rank 0's trainer around the worker's hooks (`workbench.worker.run_worker(ranks=...)`)."""
    log = kw.get("log") or (lambda m: None)
    return RankTrainer(cfg, db, run_id, ranks=ranks, hooks=RankHooks(hooks, ranks, log), **kw)


def run_follower(db_path: str, run_id: int, ranks: Ranks, *, log: Callable[[str], None]) -> str:
    """A rank other than 0: read the run's config, train in step with rank 0, write nothing to the store."""
    from workbench.config import config_from_dict

    with contextlib.closing(store.open_db(db_path, create=False, readonly=True)) as real:
        row = store.runs.get_run(real, run_id)
    cfg = config_from_dict(row["config"], f"run {run_id} config")
    scratch = store.open_db(":memory:")  # what the trainer writes as it goes, never read by anyone
    own = new_run(scratch, cfg)
    hooks = RankHooks(None, ranks, log)
    trainer = RankTrainer(cfg, scratch, own, ranks=ranks, hooks=hooks, log=log,
                          run_dir=run_dir_for(cfg, run_id, row["created"]))
    trainer.resume()
    trainer.run()
    return "stopped" if hooks.stop else "finished"


# ----- `workbench train` with ranks ------------------------------------------------------------------------


def train_rank(args: Any, ranks: Ranks) -> int:
    """`workbench train` inside one rank (torchrun or `launch`): rank 0 makes the run, all train it."""
    from workbench.preflight import load_checked
    from workbench.worker import run_worker

    device = "auto"
    run_id = args.resume
    if run_id is None and ranks.is_main:
        if not args.config:
            print("error: give a CONFIG file, or --resume RUN", file=sys.stderr)
            return 2
        cfg, _ = load_checked(args.config, max_steps=getattr(args, "max_steps", None))
        device = cfg.device
    init(ranks, device)
    try:
        if ranks.is_main and run_id is None:
            db = store.open_db(args.db)
            run_id = new_run(db, cfg)
            db.close()
        run_id = broadcast_object(run_id, "the run id")
        log = (lambda m: print(m, flush=True)) if ranks.is_main else (lambda m: print(f"[rank {ranks.rank}] {m}", flush=True))
        if ranks.is_main:
            print(f"run {run_id} in {args.db} on {ranks.world} ranks (watch it: workbench tui --db {args.db} --run {run_id})",
                  flush=True)
            status = run_worker(args.db, run_id, log=log, ranks=ranks, make_trainer=rank_trainer)
            print(f"run {run_id}: {status}", flush=True)
        else:
            status = run_follower(args.db, run_id, ranks, log=log)
    finally:
        shutdown()
    return 0 if status in ("finished", "stopped") else 1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _exit_text(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-code).name} (signal {-code})"
        return f"was killed by signal {-code}"
    return f"exited with code {code}"


def launch(args: Any, nproc: int) -> int:
    """`workbench train --nproc N`: make (or take) the run, start N ranks on this machine as torchrun would
    (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT; OMP threads split), watch them. When a rank dies the
    others are stopped and the run's status names the rank and how it ended."""
    from workbench.preflight import run_for_args

    run_id = run_for_args(args.db, args.resume, args.config, max_steps=getattr(args, "max_steps", None))
    if run_id is None:
        return 2
    port = _free_port()
    threads = str(max(1, (os.cpu_count() or 1) // nproc))
    procs: list[subprocess.Popen] = []
    for r in range(nproc):
        env = {**os.environ, "RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": str(nproc),
               "LOCAL_WORLD_SIZE": str(nproc), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
        env.setdefault("OMP_NUM_THREADS", threads)
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "workbench.cli", "train", "--db", str(args.db), "--resume", str(run_id)], env=env))
        print(f"rank {r} pid {procs[-1].pid}", flush=True)
    failed: tuple[int, int] | None = None
    stop_asked: list[float] = []

    def on_term(signum: int, frame: Any) -> None:
        """Stopping the launcher stops the run the way the UI does: a `stop` command, which rank 0 claims and
        broadcasts at the ranks' next meeting, so every rank leaves together and rank 0 checkpoints. Signalling
        the ranks instead killed the followers at once and left the run "crashed". A second SIGTERM, or ranks
        that do not stop within STOP_WAIT_S, fall back to signals."""
        if stop_asked:
            _stop(procs)
            return
        stop_asked.append(time.monotonic())
        with contextlib.closing(store.open_db(args.db)) as sdb:
            store.commands.enqueue(sdb, run_id, "stop", {"by": "launcher SIGTERM"})

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        while [p.poll() for p in procs].count(None):  # poll every rank (any() would stop at the first live one)
            bad = [(r, p.returncode) for r, p in enumerate(procs) if p.returncode not in (None, 0)]
            if bad and failed is None:
                failed = bad[0]
                _stop(procs)
            if stop_asked and time.monotonic() - stop_asked[0] > STOP_WAIT_S:
                _stop(procs)
            time.sleep(0.2)
    except KeyboardInterrupt:
        _stop(procs)
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
    codes = [p.returncode for p in procs]
    if failed is None:
        failed = next(((r, c) for r, c in enumerate(codes) if c != 0), None)
    if failed is None:
        return 0
    rank, code = failed
    reason = (f"rank {rank} of {nproc} {_exit_text(code)}; the run stopped. Continue from the last checkpoint: "
              f"workbench train --db {args.db} --resume {run_id} --nproc {nproc}")
    print(f"run {run_id}: crashed: {reason}", file=sys.stderr, flush=True)
    with contextlib.closing(store.open_db(args.db)) as db:
        if store.runs.get_run(db, run_id)["status"] not in ("stopped", "finished"):
            store.runs.set_status(db, run_id, "crashed", reason)
    return 1


def _stop(procs: list[subprocess.Popen]) -> None:
    """SIGTERM the live ranks (rank 0 checkpoints if it can), SIGKILL what is left after GRACE_S."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        if p.poll() is None:
            p.kill()
            p.wait()


def cmd_train(args: Any) -> int | None:
    """`workbench train` with ranks: the launcher (`--nproc N`), or one rank under torchrun. None: neither
    (a plain single-process run)."""
    nproc = getattr(args, "nproc", None) or 1
    ranks = env_ranks()
    if ranks is not None:
        return train_rank(args, ranks)
    if nproc > 1:
        return launch(args, nproc)
    return None
