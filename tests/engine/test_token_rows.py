"""Template tokens a checkpoint never trained (workbench.token_rows): found, trained with the adapter, saved,
loaded and merged with it. The model is a tiny random Llama whose `<tool_call>` / `</tool_call>` rows are set to
an unused row, as in the packaged Qwen2.5-Coder-0.5B (docs/results.md, session 23)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.hermes_template import hermes_tokenizer
from workbench import models, token_rows
from workbench.models import load_policy

TAGS = ["<tool_call>", "</tool_call>"]
UNUSED = 8  # rows past the tokenizer's last id


def _model_dir(root: Path, *, untrained: bool) -> Path:
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    tok = hermes_tokenizer()
    tok.add_tokens(TAGS)  # tokens of their own, as in Qwen's vocabulary (not special: decoding keeps them)
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    config = LlamaConfig(
        vocab_size=len(tok) + UNUSED,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=False,
        initializer_range=0.2,
        eos_token_id=eos,
        pad_token_id=eos,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = LlamaForCausalLM(config).eval()
        if untrained:  # the released weights never learnt the tags: their rows are an unused row, rounded
            with torch.no_grad():
                for weight in (model.get_input_embeddings().weight, model.get_output_embeddings().weight):
                    for i in tok.convert_tokens_to_ids(TAGS):
                        weight[i] = weight[-1] + 1e-5 * torch.randn_like(weight[-1])
    model.generation_config = GenerationConfig(eos_token_id=eos, pad_token_id=eos)
    out = root / ("untrained" if untrained else "trained")
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def untrained_dir(tmp_path_factory) -> Path:
    return _model_dir(tmp_path_factory.mktemp("tags"), untrained=True)


@pytest.fixture(scope="module")
def trained_dir(tmp_path_factory) -> Path:
    return _model_dir(tmp_path_factory.mktemp("tags"), untrained=False)


def _prompt(policy) -> torch.Tensor:
    tok = policy.tokenizer
    text = tok.apply_chat_template(
        [{"role": "user", "content": "book Ana"}], add_generation_prompt=True, tokenize=False
    )
    return torch.tensor([tok.encode(text, add_special_tokens=False)])


def _tag_logprobs(policy, prompt: torch.Tensor) -> torch.Tensor:
    ids = policy.tokenizer.convert_tokens_to_ids(TAGS)
    return policy.model(input_ids=prompt).logits[0, -1].log_softmax(-1)[ids]


def _train_to_write_the_tag(policy, prompt: torch.Tensor, steps: int = 60) -> None:
    opt = torch.optim.AdamW(policy.trainable_parameters(), lr=3e-2)
    policy.model.train()
    for _ in range(steps):
        opt.zero_grad()
        (-_tag_logprobs(policy, prompt)[0]).backward()
        opt.step()
    policy.model.eval()


def test_only_the_template_tokens_with_an_unused_row_are_found(untrained_dir, trained_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(untrained_dir)
    tags = tok.convert_tokens_to_ids(TAGS)
    assert set(tags) <= set(token_rows.template_token_ids(tok))  # the template writes them
    assert tok.convert_tokens_to_ids("<|im_start|>") in token_rows.template_token_ids(tok)
    untrained = AutoModelForCausalLM.from_pretrained(untrained_dir)
    assert token_rows.untrained_template_tokens(untrained, tok) == sorted(
        tags
    )  # not <|im_start|>, <|im_end|>
    trained = AutoModelForCausalLM.from_pretrained(trained_dir)
    assert token_rows.untrained_template_tokens(trained, AutoTokenizer.from_pretrained(trained_dir)) == []


def test_with_lora_alone_the_tags_keep_one_logit_and_with_their_rows_trained_the_model_writes_one(
    untrained_dir, monkeypatch
):
    trained_rows = load_policy(untrained_dir, target_modules="all-linear", seed=0)
    assert trained_rows.trained_tokens == TAGS
    prompt = _prompt(trained_rows)
    with torch.no_grad(), trained_rows.model.disable_adapter():
        base = trained_rows.model(input_ids=prompt).logits
    with torch.no_grad():  # a fresh adapter is the base model, token rows included
        assert torch.equal(trained_rows.model(input_ids=prompt).logits, base)
    _train_to_write_the_tag(trained_rows, prompt)
    with torch.no_grad():
        assert _tag_logprobs(trained_rows, prompt)[0].exp() > 0.9

    # The same training without the rows: <tool_call> and </tool_call> share one output row, so one logit,
    # and the probability is split with every unused row too.
    monkeypatch.setattr(token_rows, "untrained_template_tokens", lambda model, tok: [])
    lora_only = load_policy(untrained_dir, target_modules="all-linear", seed=0)
    assert lora_only.trained_tokens == []
    _train_to_write_the_tag(lora_only, prompt)
    with torch.no_grad():
        open_tag, close_tag = _tag_logprobs(lora_only, prompt)
    assert abs(open_tag - close_tag) < 1e-3 and open_tag.exp() < 1 / (2 + UNUSED) + 1e-3


def test_the_rows_are_saved_loaded_and_merged_with_the_adapter(untrained_dir, tmp_path):
    policy = load_policy(untrained_dir, target_modules="all-linear", seed=0)
    prompt = _prompt(policy)
    _train_to_write_the_tag(policy, prompt, steps=5)
    with torch.no_grad():
        trained = policy.model(input_ids=prompt).logits
    policy.save_adapter(tmp_path / "adapter")

    loaded = load_policy(untrained_dir, adapter_path=tmp_path / "adapter")  # the shape from the saved config
    assert loaded.trained_tokens == TAGS
    with torch.no_grad():
        assert torch.allclose(loaded.model(input_ids=prompt).logits, trained, atol=1e-5)
        merged = loaded.model.merge_and_unload()  # what `workbench export-model` serves
        assert torch.allclose(merged(input_ids=prompt).logits, trained, atol=1e-4)


def test_an_adapter_saved_without_token_rows_loads_without_them(untrained_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(token_rows, "untrained_template_tokens", lambda model, tok: [])
    load_policy(untrained_dir, seed=0).save_adapter(tmp_path / "old")
    monkeypatch.undo()
    assert models._saved_lora_shape(tmp_path / "old", 16, 32, "all-linear")[3] == []
    assert load_policy(untrained_dir, adapter_path=tmp_path / "old").trained_tokens == []


def test_the_engine_samples_the_trained_rows_through_the_packed_head(untrained_dir):
    from workbench.rollout.hf import HFEngine

    policy = load_policy(untrained_dir, target_modules="all-linear", seed=0)
    prompt = _prompt(policy)
    _train_to_write_the_tag(policy, prompt, steps=30)
    wrapper = policy.model.get_base_model().lm_head
    linear = wrapper.token_adapter.base_layer
    seen: list[str] = []
    hook = linear.register_forward_hook(lambda *a: seen.append("plain"))
    fast = HFEngine(policy).generate([prompt[0].tolist()], 2, max_new_tokens=4, temperature=1.0, seed=3)
    assert seen == [] and wrapper.token_adapter.base_layer is linear  # the packed copy sampled, then put back
    plain = HFEngine(policy, onednn_head=False).generate(
        [prompt[0].tolist()], 2, max_new_tokens=4, temperature=1.0, seed=3
    )
    hook.remove()
    assert seen and [c.token_ids for c in fast[0]] == [c.token_ids for c in plain[0]]
    tag = policy.tokenizer.convert_tokens_to_ids(TAGS[0])
    assert all(c.token_ids[0] == tag for c in fast[0])  # the trained row, through the packed head
    for a, b in zip(fast[0], plain[0], strict=True):
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4)


def test_vllm_gets_the_trained_rows_merged_under_the_base_names(untrained_dir):
    from workbench.rollout.vllm import merged_weights

    policy = load_policy(untrained_dir, target_modules="all-linear", seed=0)
    _train_to_write_the_tag(policy, _prompt(policy), steps=3)
    merged = policy.model.merge_and_unload()
    want = merged.state_dict()
    policy = load_policy(untrained_dir, target_modules="all-linear", seed=0)
    _train_to_write_the_tag(policy, _prompt(policy), steps=3)  # the same steps again: the same weights
    got = dict(merged_weights(policy))
    assert set(got) == set(want)  # base names only: no wrapper, delta or LoRA tensor
    tag = policy.tokenizer.convert_tokens_to_ids(TAGS[0])
    for name in ("model.embed_tokens.weight", "lm_head.weight"):
        assert torch.allclose(got[name], want[name], atol=1e-6)
        assert not torch.allclose(
            got[name][tag], got[name][-1]
        )  # the tag's row trained apart from unused ones
    assert {"model.embed_tokens.weight", "lm_head.weight"} <= set(
        dict(merged_weights(policy, only_adapted=True))
    )


def test_a_run_says_which_rows_train_and_its_checkpoints_keep_them(untrained_dir, tmp_path, verifier_path):
    import json

    import store
    from tests.trainer_helpers import tiny_cfg
    from workbench.trainer import Trainer

    db = store.open_db(tmp_path / "wb.db")
    cfg = tiny_cfg(untrained_dir, tmp_path, verifier_path, tool_format="native", sft_steps=2, max_steps=2)
    t = Trainer(cfg, db)
    t.run()
    warning = store.runs.latest_event(db, t.run_id, "warning")
    assert (
        warning
        and "<tool_call>, </tool_call>" in warning["message"]
        and "train with the adapter" in warning["message"]
    )
    checkpoint = next(iter(sorted((tmp_path / "runs").glob("run-*/step-*"))))
    saved = json.loads((checkpoint / "adapter" / "adapter_config.json").read_text())
    tags = t.policy.tokenizer.convert_tokens_to_ids(TAGS)
    assert all(ids == sorted(tags) for ids in saved["trainable_token_indices"].values())
    assert load_policy(untrained_dir, adapter_path=checkpoint / "adapter").trained_tokens == TAGS


def test_peft_own_forward_still_samples_under_the_packed_head(untrained_dir):
    """fast_rows' forward is what runs, but a layer left to peft's (which reads `base_layer.weight` and checks its
    type) gets no packed head swapped in under it, and samples the same."""
    from peft.tuners.trainable_tokens.layer import TrainableTokensLayer

    from workbench.rollout.hf import HFEngine

    policy = load_policy(untrained_dir, target_modules="all-linear", seed=0)
    prompt = _prompt(policy)[0].tolist()
    _train_to_write_the_tag(policy, _prompt(policy), steps=30)
    ours = HFEngine(policy).generate([prompt], 2, max_new_tokens=4, temperature=1.0, seed=3)
    for layer in policy.model.modules():
        if isinstance(layer, TrainableTokensLayer):
            del layer.forward  # peft's own forward again
    theirs = HFEngine(policy).generate([prompt], 2, max_new_tokens=4, temperature=1.0, seed=3)
    assert [c.token_ids for c in ours[0]] == [c.token_ids for c in theirs[0]]
