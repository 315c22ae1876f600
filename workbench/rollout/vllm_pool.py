"""Several OpenAI-compatible vLLM servers as one rollout engine (`rollout: vllm_server` with a list in
`vllm_url`, or URLs separated by commas).

Prompts are dealt over the servers, prompt i to server i % k, so each group (one prompt, n samples)
stays whole on one server and its prefix cache shares the prompt; the servers are asked concurrently and
the results come back in the prompts' order. After each update every server loads the new adapter
before the next step samples. Rollout throughput grows with the servers; a step waits for its slowest one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from workbench.types import Completion


def server_urls(value: str | Sequence[str] | None) -> list[str]:
    """`vllm_url` as a list: one URL, a list of them, or one string of comma-separated URLs."""
    if value is None:
        return []
    items = value.split(",") if isinstance(value, str) else list(value)
    return [u.strip() for u in items if u.strip()]


def deal(n_prompts: int, n_servers: int) -> list[list[int]]:
    """Prompt indices per server: i goes to server i % n_servers."""
    return [list(range(s, n_prompts, n_servers)) for s in range(n_servers)]


class VLLMServerPool:
    """`RolloutEngine` over several `VLLMServerEngine`s (or anything with their `generate`/`update_weights`)."""

    def __init__(
        self, urls: Sequence[str], policy: Any, *, adapter_dir: Path | None = None, engine: Callable[..., Any]
    ) -> None:
        self.engines = [
            engine(u, policy, adapter_dir=(Path(adapter_dir) / f"server-{i}") if adapter_dir else None)
            for i, u in enumerate(urls)
        ]
        self._pool = ThreadPoolExecutor(max_workers=len(self.engines), thread_name_prefix="vllm-server")
        self.last_sync_s = 0.0

    def update_weights(self, policy: Any) -> None:
        """Every server loads the policy's adapter (concurrently); the slowest sets `last_sync_s`."""
        list(self._pool.map(lambda e: e.update_weights(policy), self.engines))
        self.last_sync_s = max(getattr(e, "last_sync_s", 0.0) for e in self.engines)

    def generate(
        self, prompts: list[list[int]], n: int, *, on_tokens: Any = None, **kw: Any
    ) -> list[list[Completion]]:
        """See `RolloutEngine.generate`: the prompts dealt over the servers, the groups back in order."""
        shares = deal(len(prompts), len(self.engines))
        jobs = [(e, idx) for e, idx in zip(self.engines, shares, strict=True) if idx]
        futures = [self._pool.submit(e.generate, [prompts[i] for i in idx], n, **kw) for e, idx in jobs]
        out: list[list[Completion] | None] = [None] * len(prompts)
        for (_, idx), fut in zip(jobs, futures, strict=True):
            for i, group in zip(idx, fut.result(), strict=True):
                out[i] = group
        if on_tokens is not None:  # the servers answer whole requests: one safe point after them
            on_tokens(kw.get("max_new_tokens", 0))
        return [g for g in out if g is not None]

    def close(self) -> None:
        for e in self.engines:
            e.close()
        self._pool.shutdown(wait=False)
