"""A GRPO step too big for the machine is refused when the model loads, naming the keys to lower."""

from __future__ import annotations

import types

import pytest

import store
from tests.trainer_helpers import tiny_cfg
from workbench.config import ConfigError
from workbench.memory_fit import step_memory_bytes
from workbench.trainer import Trainer


def test_the_estimate_counts_kv_heads_layers_tokens_and_the_vocabulary():
    cfg = types.SimpleNamespace(
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=64, vocab_size=1000
    )
    need = step_memory_bytes(cfg, sequences=8, tokens=100, dtype_bytes=4, micro_batch=16)
    assert need["kv_cache"] == 2 * 2 * 2 * 16 * 4 * 8 * 100  # K and V, layers, kv heads, head dim, bytes
    assert need["update_logits"] == 2 * 4 * 8 * 100 * 1000  # the 8 sequences fit one micro-batch
    # the update's LM head sees the completion positions only
    need = step_memory_bytes(
        cfg, sequences=8, tokens=100, dtype_bytes=4, micro_batch=16, completion_tokens=20
    )
    assert need["update_logits"] == 2 * 4 * 8 * 20 * 1000


def test_a_step_that_cannot_fit_is_refused_before_the_run_trains(
    tiny_model,
    tmp_path,
    verifier_path,  # noqa: F811
    monkeypatch,
):
    db = store.open_db(tmp_path / "wb.db")
    monkeypatch.setattr("workbench.memory_fit.available_bytes", lambda device: 64 << 20)  # 64 MiB free
    with pytest.raises(ConfigError, match=r"num_generations_per_prompt \(1024\), prompts_per_step \(64\)"):
        Trainer(
            tiny_cfg(
                tiny_model, tmp_path, verifier_path, num_generations_per_prompt=1024, prompts_per_step=64
            ),
            db,
        )
    Trainer(tiny_cfg(tiny_model, tmp_path, verifier_path), db)  # the tests' own small step fits in 64 MiB
