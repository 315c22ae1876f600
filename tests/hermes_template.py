"""A Qwen2.5-style chat template with Hermes tool calling, written here (nothing from a hub), and a tiny model
folder that uses it: what the export and serving tests render and serve.

The template follows Qwen2.5-Instruct's: tools as JSON lines inside <tools></tools> in the system turn,
assistant calls as `<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`, consecutive tool
results merged into one user turn of <tool_response> blocks, a default system text when none is given.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

QWEN25_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] }}"
    "{%- else %}{{- 'You are a helpful assistant.' }}{%- endif %}"
    '{{- "\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n'
    'You are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}'
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    '{{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within '
    '<tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": '
    '<args-json-object>}\\n</tool_call><|im_end|>\\n" }}'
    "{%- else %}"
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if (message.role == 'user') or (message.role == 'system' and not loop.first) or "
    "(message.role == 'assistant' and not message.tool_calls) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    "{%- elif message.role == 'assistant' %}"
    "{{- '<|im_start|>' + message.role }}"
    "{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}"
    "{%- for tool_call in message.tool_calls %}"
    "{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}"
    '{{- \'\\n<tool_call>\\n{"name": "\' }}{{- tool_call.name }}{{- \'", "arguments": \' }}'
    "{{- tool_call.arguments | tojson }}{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != 'tool') %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' }}{{- message.content }}{{- '\\n</tool_response>' }}"
    "{%- if loop.last or (messages[loop.index0 + 1].role != 'tool') %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def hermes_tokenizer():
    """The tiny test tokenizer (workbench.testing) with the Qwen2.5-style template."""
    from workbench.testing import build_tiny_tokenizer

    tok = build_tiny_tokenizer()
    tok.chat_template = QWEN25_TEMPLATE
    return tok


def hermes_model_dir(root: Path, *, hidden_size: int = 128, num_heads: int = 2, seed: int = 0) -> Path:
    """A tiny random Llama with the Hermes template (head size 64 by default: vLLM's CPU attention needs >= 32)."""
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    out = Path(root) / f"tiny-hermes-h{hidden_size}x{num_heads}-s{seed}"
    if (out / "config.json").is_file():
        return out
    tok = hermes_tokenizer()
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=2,
        num_attention_heads=num_heads,
        num_key_value_heads=max(1, num_heads // 2),
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        initializer_range=0.2,
        bos_token_id=tok.convert_tokens_to_ids("<|im_start|>"),
        eos_token_id=eos,
        pad_token_id=eos,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config).eval()
    model.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id, eos_token_id=eos, pad_token_id=eos
    )
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    (out / "workbench_source.json").write_text(
        json.dumps({"source": "tests.hermes_template.hermes_model_dir"})
    )
    return out
