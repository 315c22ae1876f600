"""Data-parallel training over N ranks with torch.distributed (gloo on CPU, nccl on CUDA).

    torchrun --nproc_per_node N -m workbench.cli train cfg.yaml   (several machines: torchrun's rendezvous)
    workbench train --nproc N cfg.yaml                            (the launcher, one machine)

Every rank runs the one `workbench.trainer.Trainer`; what a rank does differently is what its collective
does at the trainer's few calls (`collective.py`: `OneProcess`, the default, is the identity everywhere):
- Every rank draws the same step prompts (they derive from (seed, step)) and rolls out whole groups for its
  deal, prompts i with i % N == rank; the groups are then gathered, so every rank holds the step's groups
  in the 1-process order and computes the same advantages, metrics and keep decisions (advantages are per
  group, so "computed on the owning rank" and "computed everywhere" give the same numbers; "batch" reward
  scaling needs the whole step's rewards, which this gets for free).
- The update trains each rank on its own groups' rows. Gradients are summed by hand (`sum_grads`), not with
  DDP: the update is micro-batched, its normalisers span the whole step, and a rank may have fewer rows
  than another (or none when its groups all have zero advantage). DDP syncs inside every backward and
  hangs unless every rank runs the same number of them; summing the LoRA gradients once per optimizer step
  needs only that every rank reaches that point, which it does whatever its row count. The decisions that
  used to be per process (nothing to train; every advantage zero) are taken over the step's totals, so the
  N-rank optimizer step equals the 1-process one (tests/integration/test_distributed.py checks to 1e-5).
- Rank 0 alone (`is_main`) writes the store, claims commands and writes the run's folder (checkpoints,
  TensorBoard); the other ranks keep a private in-memory store for what the trainer writes as it goes, never
  open the run's database for writing and never write a file (they get rank 0's run folder, to read
  checkpoints). What only rank 0's store knows (the verifier version, whether a baseline is due, the
  checkpoint to resume from, the prompt sampler's state) it broadcasts.
- Commands reach the ranks at their meetings (`meetings.py`: `RankHooks`).
- The SFT warm-up is data-parallel: every rank draws the same batch, runs forward and backward on its share
  and the gradients are summed (`workbench.learn.sft.sft_step(sync=...)`), so N ranks take the 1-process
  steps.
  Evals too: each rank evaluates a contiguous share of the tasks (seeded by where it starts in the list),
  the results are gathered and rank 0 records them. An eval a command asks for (the UI's `e`) or a resume's
  catch-up eval runs on rank 0 alone, while the others wait at the meeting.
- Starting the ranks, and a rank that dies: `launch.py`.
"""

from __future__ import annotations

from typing import Any


def cmd_train(args: Any) -> int | None:
    """`workbench train` with ranks (`launch.cmd_train`). Imported when called: the trainer imports this
    package's collective and must not load the launcher, which imports the trainer."""
    from workbench.distributed.launch import cmd_train as train_with_ranks

    return train_with_ranks(args)
