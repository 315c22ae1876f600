"""Which layers a LoRA adapter wraps: the config's list of module names, or `all-linear` (detected).

`all-linear` is every linear layer except the output head (the LM head is tied to the embeddings in small
models, and a LoRA on it multiplies the adapter's size by the vocabulary). In a Mamba mixer (a hybrid
Mamba-2/attention model such as Nemotron-H) only `in_proj` is wrapped: in training the fused CUDA kernels
read `out_proj.weight` (and Mamba-1's `x_proj`/`dt_proj`) directly, so an adapter there would silently not
train on a GPU. Names are leaf names (what peft matches as a suffix), or the full path where a leaf name
is shared with a layer left out, so the list wraps exactly the detected layers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from workbench.config import ConfigError

ALL_LINEAR = "all-linear"
SSM_MIXER_TARGETS = (
    "in_proj",
)  # the only projection of a Mamba mixer that its fused kernels call as a module


def _is_linear(module: torch.nn.Module) -> bool:
    from transformers.pytorch_utils import Conv1D  # GPT-2's linear layers (peft wraps them too)

    # A layer peft already wrapped counts as the linear layer it wraps (its parts are skipped below).
    return isinstance(module, (torch.nn.Linear, Conv1D)) or hasattr(module, "base_layer")


def _inside_adapter(name: str) -> bool:
    """A part of a layer peft wrapped: its `base_layer` or its `lora_A`/`lora_B`/... modules."""
    return any(part == "base_layer" or part.startswith("lora_") for part in name.split("."))


def _is_ssm_mixer(module: torch.nn.Module) -> bool:
    """A Mamba(-2) mixer: it has the SSM's A (as A_log) and the depthwise conv."""
    return hasattr(module, "A_log") and hasattr(module, "conv1d")


def linear_layers(model: Any) -> tuple[list[str], list[str]]:
    """(wrapped, left out): full module paths of the linear layers `all-linear` wraps and of those it skips."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    head = base.get_output_embeddings() if hasattr(base, "get_output_embeddings") else None
    modules = dict(base.named_modules())
    wrapped, skipped = [], []
    for name, module in modules.items():
        if not _is_linear(module) or _inside_adapter(name):
            continue
        parent = modules.get(name.rpartition(".")[0])
        leaf = name.rpartition(".")[2]
        in_mixer = parent is not None and _is_ssm_mixer(parent) and leaf not in SSM_MIXER_TARGETS
        (skipped if module is head or in_mixer else wrapped).append(name)
    return wrapped, skipped


def detect_target_modules(model: Any) -> list[str]:
    """`all-linear` as explicit peft target names: leaf names, or full paths where a leaf name is shared
    with a layer left out (the head, a Mamba mixer's out_proj)."""
    wrapped, skipped = linear_layers(model)
    if not wrapped:
        raise ConfigError(
            f"lora.target_modules: {ALL_LINEAR}: {type(model).__name__} has no linear layer to adapt"
        )
    leaf = lambda n: n.rpartition(".")[2]  # noqa: E731
    clash = {leaf(n) for n in skipped}
    return sorted({n if leaf(n) in clash else leaf(n) for n in wrapped})


def resolve_target_modules(model: Any, spec: str | Sequence[str]) -> list[str]:
    """The peft target list for `spec` (`all-linear`, or module names); a name that matches no linear
    layer of the model is an error that lists the ones it has."""
    if isinstance(spec, str):
        if spec != ALL_LINEAR:
            raise ConfigError(
                f"lora.target_modules: {spec!r} is not {ALL_LINEAR!r} or a list of module names"
            )
        return detect_target_modules(model)
    names = list(spec)
    wrapped, skipped = linear_layers(model)
    every = wrapped + skipped
    missing = [t for t in names if not any(n == t or n.endswith("." + t) for n in every)]
    if missing or not names:
        have = sorted({n.rpartition(".")[2] for n in wrapped})
        raise ConfigError(
            f"lora.target_modules: {missing or names} match no linear layer of {type(model).__name__}; its linear "
            f"layers are {have} (or set `lora.target_modules: {ALL_LINEAR}`)"
        )
    return names
