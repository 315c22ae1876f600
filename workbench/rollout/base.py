"""The rollout engine interface: what the trainer needs from anything that samples completions (HF, vLLM)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from workbench.types import Completion


def check_generate_args(prompts: Sequence[Sequence[int]], n: int) -> None:
    """The checks every engine's `generate` makes before it samples: a ValueError naming what is wrong."""
    if n < 1:
        raise ValueError("n must be >= 1")
    if any(not p for p in prompts):
        raise ValueError("every prompt needs at least one token")


@runtime_checkable
class RolloutEngine(Protocol):
    """Samples `n` completions per prompt. Prompts are token ids (rendered once by `render_prompt`), so the
    trainer, the engine and the log-prob pass all see the very same tokens."""

    def generate(
        self,
        prompts: list[list[int]],
        n: int,
        *,
        max_new_tokens: int,
        temperature: float,
        top_p: float = 1.0,
        stop_token_ids: list[int] | None = None,
        seed: int | None = None,
        on_tokens: Callable[[int], None] | None = None,
    ) -> list[list[Completion]]:
        """Return one list of `n` Completions per prompt, in prompt order.

        `on_tokens(decode_steps_so_far)`, when given, is a safe point the engine calls every few tokens
        (workbench.safe_points): it may block (a pause) or raise (a stop abandons the call). An engine
        that cannot call back mid-decode calls it once at the end.

        Each Completion has `token_ids` (the stop token included when it stopped), `logprobs` (the sampling
        log-probs: log_softmax(logits / temperature) at the chosen token), `finish_reason` ("stop" or
        "length"), and `latency_s` (from the call's start until that completion ended).
        """
        ...

    def update_weights(self, policy: Any) -> None:
        """Make the engine sample from the policy's current weights (a no-op when it shares the model)."""
        ...

    def close(self) -> None:
        """Free the engine's resources (processes, memory)."""
        ...
