"""Where the policy lives and in which precision: the `device` and `dtype` config keys, resolved once.

    device: auto | cpu | cuda | cuda:N    auto = CUDA when available; under torchrun `cuda` means the
                                          rank's own GPU (cuda:LOCAL_RANK)
    dtype:  auto | float32 | bfloat16     auto = bfloat16 base weights on a GPU that supports it, else
                                          float32 (CPUs: float32, as before)

Whatever the base weights' dtype, what trains stays float32: peft upcasts LoRA weights over a bf16 base
(`autocast_adapter_dtype`), so AdamW's moments are float32 too, and the log-probs the loss sees are
computed from float32-cast logits (`workbench.learn.logprobs.token_logprobs`). A full fine-tune trains the
weights in the dtype they were loaded in: ask for float32 explicitly if bf16 updates are too coarse.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

from workbench.config import check_device

DTYPE_NAMES = ("float32", "bfloat16", "float16")


def resolve_device(pref: str | torch.device = "auto") -> torch.device:
    """The torch device for a `device` setting. `auto` and a bare `cuda` pick the rank's own GPU
    (LOCAL_RANK, set by torchrun and `workbench train --nproc`); `cuda` without CUDA is an error, not a
    silent CPU run."""
    import torch

    if isinstance(pref, torch.device):
        return pref
    problem = check_device(pref)
    if problem:
        raise ValueError(f"device: {problem}")
    if pref == "cpu" or (pref == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ValueError(
            f"device: {pref!r} asked for CUDA, but torch sees no GPU (torch {torch.__version__})"
        )
    if pref in ("auto", "cuda"):
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
    return torch.device(pref)


def resolve_dtype(pref: str | torch.dtype, device: torch.device) -> torch.dtype:
    """The base weights' dtype: `auto` is bfloat16 on a CUDA device that supports it, float32 elsewhere."""
    import torch

    if isinstance(pref, torch.dtype):
        return pref
    if pref == "auto":
        if device.type == "cuda" and torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float32
    if pref not in DTYPE_NAMES:
        raise ValueError(f"dtype must be auto or one of {list(DTYPE_NAMES)}, got {pref!r}")
    return getattr(torch, pref)


def dtype_name(dtype: torch.dtype) -> str:
    """The config spelling of a torch dtype (what vLLM's `dtype=` takes too)."""
    return str(dtype).removeprefix("torch.")
