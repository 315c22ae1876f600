"""Test helpers: a tiny random Llama with a real (tiny) byte-level BPE tokenizer and SmolLM2's chat template.

`template="qwen2.5"` or `"llama3.1"` gives it instead a chat template with native tool calling, written here
after the real ones' structure: Qwen2.5's (Hermes: tools as JSON in the system prompt, `<tool_call>` blocks,
tool results as `<tool_response>` in a user turn) and Llama 3.1's (tools in the first user message,
`{"name", "parameters"}` replies, results under the `ipython` header), each with its own special tokens.

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

# Qwen2.5-style (Hermes) tool calling, after Qwen2.5-Instruct's template (trimmed: no multi-modal parts).
QWEN25_TEMPLATE = (
    "{%- if tools %}{{- '<|im_start|>system\n' }}"
    "{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] }}"
    "{%- else %}{{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}{%- endif %}"
    "{{- '\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided "
    "with function signatures within <tools></tools> XML tags:\n<tools>' }}"
    "{%- for tool in tools %}{{- '\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": '
    "<args-json-object>}\n</tool_call><|im_end|>\n' }}"
    "{%- else %}{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}"
    "{%- else %}{{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant."
    "<|im_end|>\n' }}{%- endif %}{%- endif %}"
    "{%- for message in messages %}"
    "{%- if (message.role == 'user') or (message.role == 'system' and not loop.first) or "
    "(message.role == 'assistant' and not message.tool_calls) %}"
    "{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}"
    "{%- elif message.role == 'assistant' %}{{- '<|im_start|>' + message.role }}"
    "{%- if message.content %}{{- '\n' + message.content }}{%- endif %}"
    "{%- for tool_call in message.tool_calls %}"
    "{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}"
    '{{- \'\n<tool_call>\n{"name": "\' }}{{- tool_call.name }}{{- \'", "arguments": \' }}'
    "{{- tool_call.arguments | tojson }}{{- '}\n</tool_call>' }}{%- endfor %}{{- '<|im_end|>\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != 'tool') %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\n<tool_response>\n' }}{{- message.content }}{{- '\n</tool_response>' }}"
    "{%- if loop.last or (messages[loop.index0 + 1].role != 'tool') %}{{- '<|im_end|>\n' }}{%- endif %}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}"
)
# Llama-3.1-style JSON tool calling, after Llama-3.1-Instruct's template (trimmed: no built-in tools, a fixed date).
LLAMA31_TEMPLATE = (
    "{{- bos_token }}"
    "{%- if not tools is defined %}{%- set tools = none %}{%- endif %}"
    "{%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]['content'] | trim %}"
    "{%- set messages = messages[1:] %}{%- else %}{%- set system_message = '' %}{%- endif %}"
    "{{- '<|start_header_id|>system<|end_header_id|>\n\n' }}"
    "{%- if tools is not none %}{{- 'Environment: ipython\n' }}{%- endif %}"
    "{{- 'Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n' }}"
    "{{- system_message }}{{- '<|eot_id|>' }}"
    "{%- if tools is not none %}{%- set first_user_message = messages[0]['content'] | trim %}"
    "{%- set messages = messages[1:] %}"
    "{{- '<|start_header_id|>user<|end_header_id|>\n\n' }}"
    "{{- 'Given the following functions, please respond with a JSON for a function call with its proper arguments '"
    " 'that best answers the given prompt.\n\n' }}"
    '{{- \'Respond in the format {"name": function name, "parameters": dictionary of argument name and its '
    "value}. Do not use variables.\n\n' }}"
    "{%- for t in tools %}{{- t | tojson(indent=4) }}{{- '\n\n' }}{%- endfor %}"
    "{{- first_user_message + '<|eot_id|>' }}{%- endif %}"
    "{%- for message in messages %}"
    "{%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + "
    "'<|eot_id|>' }}"
    "{%- elif 'tool_calls' in message %}"
    "{%- if not message.tool_calls | length == 1 %}"
    "{{- raise_exception('This model only supports single tool-calls at once!') }}{%- endif %}"
    "{%- set tool_call = message.tool_calls[0].function %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
    "{{- '{\"name\": \"' + tool_call.name + '\", ' }}{{- '\"parameters\": ' }}"
    "{{- tool_call.arguments | tojson }}{{- '}' }}{{- '<|eot_id|>' }}"
    "{%- elif message.role == 'tool' or message.role == 'ipython' %}"
    "{{- '<|start_header_id|>ipython<|end_header_id|>\n\n' }}"
    "{%- if message.content is mapping or message.content is iterable %}{{- message.content | tojson }}"
    "{%- else %}{{- message.content }}{%- endif %}{{- '<|eot_id|>' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{%- endif %}"
)
# name -> (chat template, special tokens, bos, eos = pad)
TEMPLATES: dict[str, tuple[str, list[str], str, str]] = {
    "smollm2": ("", SPECIAL_TOKENS, "<|im_start|>", "<|im_end|>"),  # CHAT_TEMPLATE, filled in below
    "qwen2.5": (
        QWEN25_TEMPLATE,
        ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        "<|im_start|>",
        "<|im_end|>",
    ),
    "llama3.1": (
        LLAMA31_TEMPLATE,
        ["<|end_of_text|>", "<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
        "<|begin_of_text|>",
        "<|eot_id|>",
    ),
}
_TOOL_CORPUS = [
    '<tool_call>\n{"name": "calendar.create_event", "arguments": {"attendee": "Alex", "day": "Tuesday"}}\n</tool_call>',
    '{"name": "weather.get", "parameters": {"city": "Paris", "day": "Monday"}}',
    '<tool_response>\n{"ok": true, "result": "done"}\n</tool_response> ipython function tools',
]

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


def build_tiny_tokenizer(vocab_size: int = 512, template: str = "smollm2"):
    """A byte-level BPE (like SmolLM2's) trained on a small built-in tool-call corpus, wrapped for HF, with
    the chat template and special tokens of `template` (see TEMPLATES)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    if template not in TEMPLATES:
        raise ValueError(f"unknown template {template!r}; choose one of {sorted(TEMPLATES)}")
    chat, specials, bos, eos = TEMPLATES[template]
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    corpus = _CORPUS if template == "smollm2" else _CORPUS + _TOOL_CORPUS  # the default stays as it was
    tok.train_from_iterator(corpus * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=bos,
        eos_token=eos,
        pad_token=eos,
        unk_token=specials[0],
        padding_side="left",
    )
    fast.chat_template = chat or CHAT_TEMPLATE
    return fast


def tiny_model_dir(
    tmp_path: str | os.PathLike[str],
    vocab: int = 512,
    seed: int = 0,
    initializer_range: float = 0.2,
    hidden_size: int = 32,
    num_heads: int = 4,
    max_positions: int = 4096,
    template: str = "smollm2",
) -> Path:
    """Write a tiny random LlamaForCausalLM (hidden 32, 2 layers, 4 heads, GQA 2 kv heads) + tokenizer.

    Returns the folder, loadable by `load_policy`/`from_pretrained`. `initializer_range` is larger than
    Llama's 0.02 so next-token distributions are not near-uniform (greedy ties would make tests flaky).
    vLLM's attention kernels need a head size of 32 or more: hidden_size=128, num_heads=2 for those tests.
    `template`: the chat template and special tokens (TEMPLATES; "qwen2.5" and "llama3.1" call tools natively).
    `max_positions`: 4096 by default, since the built-in prompts are ~750 tokens on this near character-level
    tokenizer and a run refuses a prompt past the model's context (workbench.prompt_fit); RoPE has no weights,
    so the value changes no output.
    """
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    shape = (
        ""
        if (hidden_size, num_heads, max_positions) == (32, 4, 4096)
        else f"-h{hidden_size}x{num_heads}p{max_positions}"
    )
    shape += "" if template == "smollm2" else f"-{template}"
    out = Path(tmp_path) / f"tiny-llama-v{vocab}-s{seed}{shape}"
    if (out / "config.json").is_file():
        return out
    tokenizer = build_tiny_tokenizer(vocab, template)
    _, _, bos, eos = TEMPLATES[template]
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
        bos_token_id=tokenizer.convert_tokens_to_ids(bos),
        eos_token_id=tokenizer.convert_tokens_to_ids(eos),
        pad_token_id=tokenizer.convert_tokens_to_ids(eos),
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
