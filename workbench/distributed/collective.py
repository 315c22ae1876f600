"""What the trainer asks of the other ranks, at the few points where a rank's work differs from one process's.

`OneProcess` is the trainer's default: every method the identity or a no-op, `is_main` True. `RankCollective`
is the same protocol over torch.distributed (gloo on CPU, nccl on CUDA). Reading `OneProcess` beside the
trainer shows every place where ranks differ; reading `RankCollective` shows what each costs in messages.

The work is split two ways: a step's rollout groups are dealt (task j to rank j % N, `deal` / `undeal`) and
an eval's tasks are shared out in contiguous slices (`share`, then `gather` in rank order). Gradients and
the update's totals are summed by hand, not with DDP (see `workbench.distributed`). Rank 0 decides what
only its store knows and the others receive it (`broadcast`, `from_main`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import torch
import torch.distributed as dist

from workbench.errors import RunLostError

T = TypeVar("T")

# The longest one collective may wait: rank 0's work alone (an eval a command asks for, a checkpoint) keeps
# the others waiting at a meeting; a pause does not (workbench.distributed.meetings.PAUSE_BEAT_S).
TIMEOUT_S = float(os.environ.get("WORKBENCH_DIST_TIMEOUT_S", "3600"))


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


def shard(n: int, ranks: Ranks) -> tuple[int, int]:
    """[first, stop) of this rank's contiguous share of n items (the first ranks take one more when N does
    not divide n): contiguous, so the gathered shares in rank order are the items in order."""
    base, extra = divmod(n, ranks.world)
    first = ranks.rank * base + min(ranks.rank, extra)
    return first, first + base + (1 if ranks.rank < extra else 0)


class Collective(Protocol):
    """What the trainer calls where ranks differ (`workbench.trainer.Trainer(collective=...)`); the learning
    code takes it as `sync` (`workbench.learn.update.policy_update`, `workbench.learn.sft.sft_step`)."""

    @property
    def rank(self) -> int: ...

    @property
    def world(self) -> int: ...

    @property
    def is_main(self) -> bool:
        """Rank 0: the one that writes the store, the run folder and the metric logs."""
        ...

    def deal(self, n: int) -> range:
        """Which of n dealt items (a step's rollout groups) this rank takes: j with j % N == rank."""
        ...

    def undeal(self, mine: list[T], n: int, what: str) -> list[T]:
        """Every rank's dealt results, back in the items' order, on every rank."""
        ...

    def share(self, n: int) -> tuple[int, int]:
        """[first, stop) of this rank's contiguous share of n items (an eval's tasks)."""
        ...

    def gather(self, local: T, what: str) -> list[T]:
        """Every rank's `local`, in rank order, on every rank."""
        ...

    def broadcast(self, obj: T, what: str) -> T:
        """Rank 0's `obj` on every rank (what the others pass is ignored)."""
        ...

    def from_main(self, compute: Callable[[], T], what: str) -> T:
        """Rank 0 computes it (from its store: the others' know nothing of the run), every rank gets it."""
        ...

    def broadcast_params(self, params: Iterable[torch.nn.Parameter]) -> None:
        """Rank 0's weights on every rank (after loading, after a replicated phase), so no rank drifts."""
        ...

    def sum_floats(self, values: Sequence[float]) -> list[float]: ...

    def sum_grads(self, params: Iterable[torch.nn.Parameter]) -> None: ...

    def sum_dict(self, sums: dict[str, float]) -> dict[str, float]: ...

    def alone(self) -> contextlib.AbstractContextManager[None]:
        """Rank 0 working while the others wait at a meeting (a command's eval, a resume's catch-up eval):
        inside, its shares and deals are the whole and its gathers its own part."""
        ...


class OneProcess:
    """A single process: the whole of every share, nothing to sum or send."""

    rank, world, is_main = 0, 1, True

    def deal(self, n: int) -> range:
        return range(n)

    def undeal(self, mine: list[T], n: int, what: str) -> list[T]:
        return mine

    def share(self, n: int) -> tuple[int, int]:
        return 0, n

    def gather(self, local: T, what: str) -> list[T]:
        return [local]

    def broadcast(self, obj: T, what: str) -> T:
        return obj

    def from_main(self, compute: Callable[[], T], what: str) -> T:
        return compute()

    def broadcast_params(self, params: Iterable[torch.nn.Parameter]) -> None:
        pass

    def sum_floats(self, values: Sequence[float]) -> list[float]:
        return [float(v) for v in values]

    def sum_grads(self, params: Iterable[torch.nn.Parameter]) -> None:
        pass

    def sum_dict(self, sums: dict[str, float]) -> dict[str, float]:
        return dict(sums)

    def alone(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()


@contextlib.contextmanager
def _collective(what: str) -> Iterator[None]:
    """A failed collective means a rank is gone: say so in the error the run's status shows."""
    try:
        yield
    except (RuntimeError, ConnectionError, OSError) as exc:  # gloo: "Connection closed by peer", timeouts...
        raise RankLost(
            f"another rank left the run during {what} ({type(exc).__name__}: {str(exc)[:160]})"
        ) from exc


class RankCollective:
    """This rank of a torch.distributed process group (joined before: `workbench.distributed.launch.init`).
    `device`: where the summed tensors live (the policy's: CUDA tensors go through nccl)."""

    def __init__(self, ranks: Ranks, device: torch.device) -> None:
        self.ranks, self.device = ranks, device
        self._alone = False

    @property
    def rank(self) -> int:
        return self.ranks.rank

    @property
    def world(self) -> int:
        return self.ranks.world

    @property
    def is_main(self) -> bool:
        return self.ranks.is_main

    @contextlib.contextmanager
    def alone(self) -> Iterator[None]:
        before, self._alone = self._alone, True
        try:
            yield
        finally:
            self._alone = before

    # ----- splitting the work ------------------------------------------------------------------------------

    def deal(self, n: int) -> range:
        return range(n) if self._alone else range(self.rank, n, self.world)

    def undeal(self, mine: list[T], n: int, what: str) -> list[T]:
        if self._alone:
            return mine
        parts = self.gather(mine, what)
        return [parts[j % self.world][j // self.world] for j in range(n)]

    def share(self, n: int) -> tuple[int, int]:
        return (0, n) if self._alone else shard(n, self.ranks)

    def gather(self, local: T, what: str) -> list[T]:
        if self._alone:
            return [local]
        parts: list[Any] = [None] * self.world
        with _collective(what):
            dist.all_gather_object(parts, local)
        return parts

    # ----- rank 0's word -----------------------------------------------------------------------------------

    def broadcast(self, obj: T, what: str) -> T:
        box = [obj]
        with _collective(what):
            dist.broadcast_object_list(box, src=0)
        return box[0]

    def from_main(self, compute: Callable[[], T], what: str) -> T:
        return self.broadcast(compute() if self.is_main else None, what)  # type: ignore[arg-type]

    def broadcast_params(self, params: Iterable[torch.nn.Parameter]) -> None:
        with _collective("the weights broadcast"), torch.no_grad():
            for p in params:
                dist.broadcast(p.data, src=0)

    # ----- sums (the update and the SFT step: workbench.learn) ---------------------------------------------

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
        out: dict[str, float] = {}
        for part in self.gather(sums, "the update's metrics"):
            for k, v in part.items():
                out[k] = out.get(k, 0.0) + v
        return out
