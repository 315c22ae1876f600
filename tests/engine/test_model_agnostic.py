"""A model that is not a Llama: LoRA targets detected, and rollouts for a cache that is not plain KV.

The hybrid model is a tiny random Nemotron-H (Mamba-2 + attention + MLP layers, the architecture of the
seed's `nvidia/Nemotron-Nano-9B-v2`), built in a fixture from transformers' own NemotronHConfig.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import store
from tests.trainer_helpers import LENGTH_VERIFIER, tiny_cfg
from workbench.config import Config, ConfigError, config_from_dict
from workbench.learn.logprobs import completion_logprobs, sequence_logprobs
from workbench.lora_targets import detect_target_modules, linear_layers
from workbench.models import load_policy
from workbench.rollout.cache_kind import cache_layer_kinds, has_plain_kv_cache
from workbench.rollout.hf import HFEngine
from workbench.rollout.hf_generate import HFGenerateEngine
from workbench.testing import build_tiny_tokenizer
from workbench.trainer import Trainer, make_engine

transformers = pytest.importorskip("transformers")
HAS_NEMOTRON_H = hasattr(transformers, "NemotronHConfig")
needs_nemotron_h = pytest.mark.skipif(not HAS_NEMOTRON_H, reason="this transformers has no Nemotron-H")


@pytest.fixture(scope="module")
def nemotron_h(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random NemotronHForCausalLM: Mamba-2, MLP, attention, MLP (Nano v2's `M-*-` pattern, shortened)."""
    if not HAS_NEMOTRON_H:
        pytest.skip("this transformers has no Nemotron-H")
    from transformers import GenerationConfig, NemotronHConfig, NemotronHForCausalLM

    out = tmp_path_factory.mktemp("nemotron_h") / "tiny-nemotron-h"
    tok = build_tiny_tokenizer()
    ids = {t: tok.convert_tokens_to_ids(t) for t in ("<|im_start|>", "<|im_end|>")}
    cfg = NemotronHConfig(
        vocab_size=len(tok),
        hidden_size=64,
        layers_block_type=["linear_attention", "mlp", "full_attention", "mlp"],
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        intermediate_size=128,
        mamba_num_heads=4,
        mamba_head_dim=16,
        ssm_state_size=16,
        n_groups=2,
        conv_kernel=4,
        chunk_size=32,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        initializer_range=0.2,
        bos_token_id=ids["<|im_start|>"],
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|im_end|>"],
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = NemotronHForCausalLM(cfg).eval()
    model.generation_config = GenerationConfig(
        bos_token_id=cfg.bos_token_id, eos_token_id=cfg.eos_token_id, pad_token_id=cfg.pad_token_id
    )
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


# ---- LoRA targets ------------------------------------------------------------------------------------


def test_all_linear_on_a_llama_is_every_projection_but_the_head(tiny_policy) -> None:
    assert detect_target_modules(tiny_policy.model) == [
        "down_proj",
        "gate_proj",
        "k_proj",
        "o_proj",
        "q_proj",
        "up_proj",
        "v_proj",
    ]
    _, skipped = linear_layers(tiny_policy.model)
    assert [n.rpartition(".")[2] for n in skipped] == ["lm_head"]


def test_unknown_target_names_the_layers_the_model_has(tiny_model) -> None:
    with pytest.raises(ConfigError, match=r"\['c_attn'\] match no linear layer.*'q_proj'.*all-linear"):
        load_policy(tiny_model, adapter="lora", lora_r=4, target_modules=["q_proj", "c_attn"])


def test_config_takes_all_linear_or_a_list() -> None:
    assert config_from_dict({"lora": {"target_modules": "all-linear"}}).lora.target_modules == "all-linear"
    assert config_from_dict({"lora": {"target_modules": ["q_proj"]}}).lora.target_modules == ["q_proj"]
    with pytest.raises(ConfigError, match="lora.target_modules: 'all_linear' is not 'all-linear'"):
        config_from_dict({"lora": {"target_modules": "all_linear"}})


@needs_nemotron_h
def test_all_linear_on_nemotron_h_leaves_the_mamba_out_proj_and_the_head(nemotron_h: Path) -> None:
    policy = load_policy(
        nemotron_h, adapter="lora", lora_r=4, lora_alpha=8, seed=0, target_modules="all-linear"
    )
    wrapped = sorted(
        {
            n.split(".lora_A")[0].split("base_model.model.")[1]
            for n, _ in policy.model.named_parameters()
            if ".lora_A" in n
        }
    )
    assert wrapped == [
        "model.layers.0.mixer.in_proj",
        "model.layers.1.mixer.down_proj",
        "model.layers.1.mixer.up_proj",
        "model.layers.2.mixer.k_proj",
        "model.layers.2.mixer.o_proj",
        "model.layers.2.mixer.q_proj",
        "model.layers.2.mixer.v_proj",
        "model.layers.3.mixer.down_proj",
        "model.layers.3.mixer.up_proj",
    ]
    saved = policy.save_adapter(nemotron_h.parent / "adapter")
    assert "out_proj" not in json.loads((saved / "adapter_config.json").read_text())["target_modules"]


# ---- which engine ------------------------------------------------------------------------------------


@needs_nemotron_h
def test_the_cache_kind_picks_the_engine(tiny_policy, nemotron_h: Path) -> None:
    hybrid = load_policy(nemotron_h, adapter="lora", lora_r=4, target_modules="all-linear")
    assert cache_layer_kinds(hybrid.model) == ["linear_attention", "dummy", "full_attention", "dummy"]
    assert not has_plain_kv_cache(hybrid.model) and has_plain_kv_cache(tiny_policy.model)
    assert isinstance(make_engine(Config(rollout="hf"), hybrid), HFGenerateEngine)
    assert isinstance(make_engine(Config(rollout="hf"), tiny_policy), HFEngine)
    assert isinstance(make_engine(Config(rollout="hf_generate"), tiny_policy), HFGenerateEngine)


# ---- the generate engine's contract (on the tiny Llama, where the trainer's pass is the reference) ----


def _prompts(tok) -> list[list[int]]:
    return [tok.encode("Schedule a meeting with Bob tomorrow"), tok.encode("What is the weather in Berlin?")]


def _sampled_vs_trainer(policy, groups, temperature: float) -> float:
    rows = [c for g in groups for c in g]
    with torch.no_grad():
        lp, mask = completion_logprobs(
            policy.model,
            [c.prompt_token_ids for c in rows],
            [c.token_ids for c in rows],
            temperature,
            pad_token_id=policy.tokenizer.pad_token_id,
        )
    mine = torch.zeros_like(lp)
    for i, c in enumerate(rows):
        assert len(c.logprobs) == len(c.token_ids)
        mine[i, : len(c.logprobs)] = torch.tensor(c.logprobs)
    return float(((lp - mine) * mask).abs().max())


@pytest.mark.parametrize(("temperature", "top_p"), [(0.7, 1.0), (1.0, 0.8), (0.0, 1.0)])
def test_generate_logprobs_are_the_trainers(tiny_policy, temperature: float, top_p: float) -> None:
    from workbench.testing import perturb_lora

    perturb_lora(tiny_policy, scale=0.3)
    engine = HFGenerateEngine(tiny_policy)
    groups = engine.generate(
        _prompts(tiny_policy.tokenizer), 3, max_new_tokens=10, temperature=temperature, top_p=top_p, seed=1
    )
    assert [len(g) for g in groups] == [3, 3]
    assert _sampled_vs_trainer(tiny_policy, groups, temperature) < 1e-4
    if temperature == 0:  # greedy: a group's members are one reply
        assert all(len({tuple(c.token_ids) for c in g}) == 1 for g in groups)


def test_generate_is_seeded_stops_and_flags_truncation(tiny_policy) -> None:
    engine = HFGenerateEngine(tiny_policy)
    ps = _prompts(tiny_policy.tokenizer)
    a = engine.generate(ps, 4, max_new_tokens=6, temperature=1.0, seed=5)
    b = engine.generate(ps, 4, max_new_tokens=6, temperature=1.0, seed=5)
    assert [c.token_ids for g in a for c in g] == [c.token_ids for g in b for c in g]
    assert all(
        c.truncated and len(c.token_ids) == 6 and c.prompt_token_ids == p
        for g, p in zip(a, ps, strict=True)
        for c in g
    )
    every = list(
        range(len(tiny_policy.tokenizer))
    )  # any first token is a stop token: kept, and the reply ends
    (group,) = engine.generate(ps[:1], 2, max_new_tokens=6, temperature=1.0, stop_token_ids=every, seed=0)
    assert all(c.finish_reason == "stop" and len(c.token_ids) == 1 and c.latency_s > 0 for c in group)


def test_generate_calls_the_decode_safe_point(tiny_policy) -> None:
    from workbench.safe_points import DECODE_EVERY

    seen: list[int] = []
    HFGenerateEngine(tiny_policy).generate(
        _prompts(tiny_policy.tokenizer)[:1],
        2,
        max_new_tokens=2 * DECODE_EVERY + 1,
        temperature=1.0,
        stop_token_ids=[],
        seed=0,
        on_tokens=seen.append,
    )
    assert seen == [DECODE_EVERY, 2 * DECODE_EVERY]


# ---- Nemotron-H end to end: LoRA, rollout, log-prob pass, one policy update ---------------------------


@needs_nemotron_h
def test_nemotron_h_rollouts_match_the_training_pass(nemotron_h: Path) -> None:
    policy = load_policy(
        nemotron_h, adapter="lora", lora_r=4, lora_alpha=8, seed=0, target_modules="all-linear"
    )
    from workbench.testing import perturb_lora

    perturb_lora(policy, scale=0.3)
    engine = make_engine(Config(rollout="hf"), policy)
    ps = _prompts(policy.tokenizer)  # different lengths: left padding through the Mamba layers
    groups = engine.generate(ps, 2, max_new_tokens=8, temperature=1.0, seed=0)
    assert _sampled_vs_trainer(policy, groups, 1.0) < 1e-4
    rows = [c for g in groups for c in g]
    with torch.no_grad():  # what the update calls: the packed pass (a Mamba state cannot be shared per row)
        lp, mask = sequence_logprobs(
            policy.model,
            [c.prompt_token_ids for c in rows],
            [c.token_ids for c in rows],
            1.0,
            pad_token_id=policy.tokenizer.pad_token_id,
        )
    for i, c in enumerate(rows):
        assert torch.allclose(lp[i, : len(c.logprobs)], torch.tensor(c.logprobs), atol=1e-4)


@needs_nemotron_h
def test_nemotron_h_trains_a_grpo_step(nemotron_h: Path, tmp_path: Path) -> None:
    verifier = tmp_path / "length_verifier.py"
    verifier.write_text(LENGTH_VERIFIER)
    cfg = tiny_cfg(
        nemotron_h,
        tmp_path,
        str(verifier),
        max_steps=1,
        prompts_per_step=1,
        num_generations_per_prompt=4,
        lora={"r": 4, "alpha": 8, "target_modules": "all-linear"},
        harness={"include_example": False},
    )
    db = store.open_db(tmp_path / "wb.db")
    t = Trainer(cfg, db)
    assert isinstance(t.engine, HFGenerateEngine) and not t.is_correction
    before = {n: p.detach().clone() for n, p in t.policy.model.named_parameters() if p.requires_grad}
    metrics = t.train_step()
    assert metrics is not None and torch.isfinite(torch.tensor(metrics["loss"]))
    after = dict(t.policy.model.named_parameters())
    changed = {
        n.split(".lora_")[0].rpartition(".")[2] for n, p in before.items() if not torch.equal(after[n], p)
    }
    assert {"in_proj", "q_proj", "up_proj"} <= changed  # the Mamba, attention and MLP layers all trained
    rows = store.trajectories.page_trajectories(
        db, store.trajectories.TrajectoryFilter(run_id=t.run_id), limit=10
    ).rows
    assert len(rows) == 4
