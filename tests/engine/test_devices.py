"""The `device` and `dtype` settings (workbench/devices.py) and the rule that no tensor built on the CPU meets
the policy on another device. No GPU here: CUDA's answers are monkeypatched for the resolution rules, and
the update runs with torch's default device set to "meta", so any tensor the engine builds without an
explicit device lands on meta and fails or shows up in the spy on the loss."""

from __future__ import annotations

import random

import pytest
import torch

from workbench.config import Config, ConfigError
from workbench.devices import resolve_device, resolve_dtype
from workbench.learn import grpo
from workbench.learn import update as update_mod
from workbench.learn.update import policy_update
from workbench.models import load_policy


def test_resolution_without_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")
    assert resolve_dtype("auto", torch.device("cpu")) == torch.float32
    with pytest.raises(ValueError, match="no GPU"):
        resolve_device("cuda")
    with pytest.raises(ValueError, match="not auto, cpu, cuda or cuda:N"):
        resolve_device("gpu")


def test_resolution_with_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    monkeypatch.setenv("LOCAL_RANK", "2")  # under torchrun: each rank its own GPU
    assert resolve_device("auto") == torch.device("cuda", 2)
    assert resolve_device("cuda") == torch.device("cuda", 2)
    assert resolve_device("cuda:1") == torch.device("cuda", 1)
    assert resolve_dtype("auto", torch.device("cuda", 0)) == torch.bfloat16
    assert resolve_dtype("float32", torch.device("cuda", 0)) == torch.float32
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)
    assert resolve_dtype("auto", torch.device("cuda", 0)) == torch.float32


def test_config_keys() -> None:
    assert Config().dtype == "auto" and Config().device == "auto"
    assert Config(dtype="float32").dtype == "float32"  # older configs stay valid
    assert Config(device="cuda:3").device == "cuda:3"
    with pytest.raises(ConfigError, match="device: 'tpu' is not auto"):
        Config(device="tpu")


def _items(policy, n: int = 6, seed: int = 0) -> list:
    rng = random.Random(seed)
    vocab = len(policy.tokenizer)
    prompt = [1] + [rng.randrange(3, vocab) for _ in range(5)]
    out = []
    for i in range(n):
        comp = [rng.randrange(3, vocab) for _ in range(rng.randint(2, 6))]
        out.append(
            (prompt + [rng.randrange(3, vocab)], comp, [1.0, -0.5, 0.0][i % 3], [-1.0] * len(comp), 1.0)
        )
    return out


def _spy(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, torch.device, torch.dtype]]:
    seen: list[tuple[str, torch.device, torch.dtype]] = []
    real = grpo.policy_loss

    def spy(*args, **kwargs):
        named = [(f"arg{i}", a) for i, a in enumerate(args)] + list(kwargs.items())
        seen.extend((k, v.device, v.dtype) for k, v in named if isinstance(v, torch.Tensor))
        return real(*args, **kwargs)

    monkeypatch.setattr(update_mod.grpo, "policy_loss", spy)
    return seen


@pytest.mark.parametrize("beta,is_correction", [(0.0, False), (0.04, True)])
def test_every_tensor_handed_to_the_loss_is_on_the_policy_device(
    tiny_model, monkeypatch, beta, is_correction
) -> None:
    policy = load_policy(tiny_model, adapter="lora", lora_r=4, lora_alpha=8, seed=0, device="auto")
    assert policy.device == resolve_device("auto")
    seen = _spy(monkeypatch)
    cfg = Config(beta=beta, num_iterations=2, loss_type="grpo")
    opt = torch.optim.AdamW(policy.trainable_parameters(), lr=1e-3)
    items = _items(policy)
    with torch.device("meta"):  # a factory call without device= now makes a meta tensor
        out = policy_update(
            policy, opt, cfg, items, len(items), temperature=1.0, lr=1e-3, is_correction=is_correction
        )
    assert out.get("update_skipped") != 1.0 and seen
    assert {d for _, d, _ in seen} == {policy.device}, seen
    names = {k for k, _, _ in seen}
    assert {"arg0", "arg1", "arg2", "arg3"} <= names and ("ref_logps" in names) == (beta > 0)
    assert ("sampling_is_weights" in names) == is_correction


def test_bf16_base_keeps_float32_lora_optimizer_and_logps(tiny_model, monkeypatch) -> None:
    """What `dtype: auto` gives on a GPU, asked for explicitly on the CPU: bf16 base weights, float32 LoRA
    parameters, float32 AdamW state, and float32 log-probs into the loss."""
    policy = load_policy(
        tiny_model, adapter="lora", lora_r=4, lora_alpha=8, seed=0, dtype="bfloat16", device="cpu"
    )
    base = {p.dtype for n, p in policy.model.named_parameters() if "lora_" not in n}
    assert base == {torch.bfloat16}
    assert {p.dtype for p in policy.trainable_parameters()} == {torch.float32}
    seen = _spy(monkeypatch)
    opt = torch.optim.AdamW(policy.trainable_parameters(), lr=1e-3)
    items = _items(policy)
    out = policy_update(policy, opt, Config(), items, len(items), temperature=1.0, lr=1e-3)
    assert out.get("update_skipped") != 1.0
    assert {dt for k, _, dt in seen if k in ("arg0", "arg1", "arg2")} == {torch.float32}
    state = [t for s in opt.state.values() for k, t in s.items() if k in ("exp_avg", "exp_avg_sq")]
    assert state and {t.dtype for t in state} == {torch.float32}
