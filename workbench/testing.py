"""Test helpers: a tiny random Llama with a real (tiny) byte-level BPE tokenizer and SmolLM2's chat template.

Built offline in well under a second, deterministic for a given seed, so every test suite (trainer, worker,
TUI) can exercise the real code paths without the 100 MB embedded model or any download.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

# SmolLM2-135M-Instruct's template, verbatim: tests then render prompts exactly like the real model does.
CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
# Same ids as SmolLM2: 0 <|endoftext|> (unk), 1 <|im_start|> (bos), 2 <|im_end|> (eos, and pad, as there).
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

_CORPUS = [
    '{"tool": "calendar.create_event", "args": {"title": "Standup", "date": "2025-03-14", "time": "09:30"}}',
    '{"tool": "calendar.list_events", "args": {"date": "2025-03-15"}}',
    '{"tool": "calendar.delete_event", "args": {"event_id": "evt_42"}}',
    '{"tool": "email.send", "args": {"to": "ana@example.com", "subject": "Lunch", "body": "See you at 12:00"}}',
    '{"tool": "weather.get", "args": {"city": "Paris", "unit": "celsius"}}',
    '{"tool": "files.search", "args": {"query": "invoice 2024", "limit": 5}}',
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face",
    "You can call these tools. Reply with one JSON object: the tool and its args.",
    "Schedule a meeting with Bob tomorrow at 2 PM about the budget review.",
    "What is the weather in Berlin? Send an email to the team. Delete my 3 o'clock event.",
    "system user assistant tool true false null 0123456789 [] {} : , . ? ! - _ @",
]


def build_tiny_tokenizer(vocab_size: int = 512):
    """A byte-level BPE (like SmolLM2's) trained on a small built-in tool-call corpus, wrapped for HF."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|im_end|>",
        unk_token="<|endoftext|>",
        padding_side="left",
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def tiny_model_dir(
    tmp_path: str | os.PathLike[str], vocab: int = 512, seed: int = 0, initializer_range: float = 0.2,
    hidden_size: int = 32, num_heads: int = 4, max_positions: int = 512,
) -> Path:
    """Write a tiny random LlamaForCausalLM (hidden 32, 2 layers, 4 heads, GQA 2 kv heads) + tokenizer.

    Returns the folder, loadable by `load_policy`/`from_pretrained`. `initializer_range` is larger than
    Llama's 0.02 so next-token distributions are not near-uniform (greedy ties would make tests flaky).
    vLLM's attention kernels need a head size of 32 or more: hidden_size=128, num_heads=2 for those tests.
    """
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    shape = "" if (hidden_size, num_heads, max_positions) == (32, 4, 512) else f"-h{hidden_size}x{num_heads}p{max_positions}"
    out = Path(tmp_path) / f"tiny-llama-v{vocab}-s{seed}{shape}"
    if (out / "config.json").is_file():
        return out
    tokenizer = build_tiny_tokenizer(vocab)
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=2,
        num_attention_heads=num_heads,
        num_key_value_heads=max(1, num_heads // 2),
        max_position_embeddings=max_positions,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        initializer_range=initializer_range,
        bos_token_id=ids["<|im_start|>"],
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|im_end|>"],
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config).eval()
    model.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id
    )
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / "workbench_source.json").write_text(json.dumps({"source": "workbench.testing.tiny_model_dir"}))
    return out


def perturb_lora(policy, scale: float = 0.5, seed: int = 0) -> None:
    """Give a fresh LoRA adapter non-zero B matrices (B starts at zero, so a new adapter changes nothing)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * scale)
