"""Run configuration: the seed article's YAML keys plus the GRPO knobs TRL users know, with defaults.

`load_config(path)` reports unknown keys with the nearest valid one, and ill-typed values with the
expected type, always naming the file (and the line, where YAML gives it).
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml


class ConfigError(ValueError):
    pass


@dataclass
class LoraConfig:
    r: int = 16
    alpha: int = 32
    dropout: float = 0.0
    target_modules: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])


@dataclass
class HarnessConfig:
    """What the environment shows the model around each task (stored with the run, editable)."""

    system_prompt: str | None = None  # None: the built-in prompt listing the task's tools
    include_example: bool = True  # one worked example turn before the task
    prefill: str = '{"tool": "'  # the assistant reply is forced to start with this


@dataclass
class Config:
    # --- the seed article's keys ---
    model: str = "smollm2-135m"  # embedded default, a local HF folder, or a hub id where reachable
    algorithm: str = "grpo"  # grpo | dapo | dr_grpo | gspo
    adapter: str = "lora"  # lora | full
    num_generations_per_prompt: int = 8  # G, the group size
    reward: str = "tool_call_verifier"  # built-in verifier name or a path to a .py file
    eval_interval: int = 10  # steps between held-out evals (and checkpoints)
    held_out_eval: str = "tool_call_eval"  # built-in held-out split or a tasks .jsonl file
    # --- data and environment ---
    name: str = "run"
    tasks: str = "builtin:calendar"  # training tasks: builtin:calendar or a .jsonl file
    env: str = "single_turn"  # single_turn | multi_turn
    max_turns: int = 4  # multi_turn only
    harness: HarnessConfig = field(default_factory=HarnessConfig)
    lora: LoraConfig = field(default_factory=LoraConfig)
    # --- GRPO (TRL GRPOConfig names and defaults unless noted) ---
    learning_rate: float = 2e-5  # TRL's 1e-6 is for full fine-tuning; LoRA wants more
    beta: float = 0.0  # KL coefficient; 0 = no reference pass
    reference: str = "sft"  # the KL term's reference policy: sft (the policy after the warm-up) | base
    epsilon: float | None = None  # None: the algorithm's (0.2; gspo 3e-4)
    epsilon_high: float | None = None  # None: = epsilon, or the algorithm's (dapo 0.28, gspo 4e-4)
    scale_rewards: str | None = None  # group | batch | none; None: the algorithm's (group; dr_grpo none)
    leave_one_out: bool = False
    loss_type: str | None = None  # grpo | dapo | dr_grpo | bnpo; None: the algorithm's
    importance_sampling_level: str | None = None  # token | sequence; None: the algorithm's
    dynamic_sampling: bool | None = None  # drop zero-variance groups; None: the algorithm's
    num_iterations: int = 1  # updates per batch of rollouts (mu)
    max_completion_length: int = 64
    temperature: float = 1.0
    top_p: float = 1.0
    prompts_per_step: int = 4
    max_steps: int = 60
    max_grad_norm: float = 1.0
    weight_decay: float = 0.0
    warmup_steps: int = 0
    # --- SFT warm-up (for a base model that rarely gets the format right) ---
    sft_steps: int = 0
    sft_learning_rate: float = 2e-4
    sft_batch_size: int = 8
    # --- eval, checkpoints, runtime ---
    eval_max_tasks: int | None = None  # None: the whole held-out set
    eval_samples: int = 0  # sampled eval: completions per task at `temperature` (0: greedy only)
    checkpoint_interval: int | None = None  # None: = eval_interval
    verifier_timeout_s: float = 5.0
    rollout: str = "hf"  # hf | vllm | vllm_server
    vllm_url: str | None = None  # vllm_server: the OpenAI-compatible server's base URL
    vllm_sync: str = "weights"  # vllm: how an update reaches the engine: weights (merged, in place) | lora
    vllm_kv_cache_gb: float = 1.0  # vllm on CPU: KV cache size (its default takes most of the RAM)
    vllm_is_cap: float = 2.0  # truncated importance sampling: cap on the trainer/engine probability ratio
    dtype: str = "float32"  # float32 | bfloat16
    seed: int = 0
    output_dir: str = "runs"  # checkpoints go to <output_dir>/<run id>/

    def __post_init__(self) -> None:
        choices = {
            "algorithm": ("grpo", "dapo", "dr_grpo", "gspo"),
            "adapter": ("lora", "full"),
            "reference": ("sft", "base"),
            "scale_rewards": (None, "group", "batch", "none"),
            "loss_type": (None, "grpo", "dapo", "dr_grpo", "bnpo"),
            "importance_sampling_level": (None, "token", "sequence"),
            "env": ("single_turn", "multi_turn"),
            "rollout": ("hf", "vllm", "vllm_server"),
            "vllm_sync": ("weights", "lora"),
            "dtype": ("float32", "bfloat16"),
        }
        for key, allowed in choices.items():
            value = getattr(self, key)
            if value not in allowed:
                shown = [a for a in allowed if a is not None]
                raise ConfigError(f"{key}: {value!r} is not one of {shown}")
        for key in ("num_generations_per_prompt", "prompts_per_step", "max_completion_length", "num_iterations",
                    "eval_interval", "sft_batch_size", "max_turns"):
            if getattr(self, key) < 1:
                raise ConfigError(f"{key}: must be >= 1, got {getattr(self, key)}")
        if self.num_generations_per_prompt < 2:
            raise ConfigError("num_generations_per_prompt: GRPO needs at least 2 samples a group")
        if self.rollout == "vllm_server" and not self.vllm_url:
            raise ConfigError("vllm_url: required when rollout is vllm_server")

    @property
    def checkpoint_every(self) -> int:
        return self.checkpoint_interval or self.eval_interval

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


def _type_ok(value: Any, hint: Any) -> bool:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_type_ok(value, h) for h in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if origin is list:
        (inner,) = typing.get_args(hint) or (Any,)
        return isinstance(value, list) and all(_type_ok(v, inner) for v in value)
    if hint is Any:
        return True
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)


def _type_name(hint: Any) -> str:
    return str(hint).replace("typing.", "") if not isinstance(hint, type) else hint.__name__


def _key_lines(text: str) -> dict[str, int]:
    """Line number (1-based) of every key, by dotted path, so errors can point at the line."""
    lines: dict[str, int] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                path = f"{prefix}{k.value}"
                lines[path] = k.start_mark.line + 1
                walk(v, f"{path}.")

    walk(yaml.compose(text), "")
    return lines


def _build(cls: type, data: dict[str, Any], where: str, prefix: str = "", lines: dict[str, int] | None = None) -> Any:
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    kwargs: dict[str, Any] = {}
    lines = lines or {}
    for key, value in data.items():
        full = f"{prefix}{key}"
        at = f"{where}:{lines[full]}" if full in lines else where
        if key not in names:
            near = difflib.get_close_matches(str(key), names, n=1, cutoff=0.5)
            hint = f"; did you mean '{prefix}{near[0]}'?" if near else f"; valid keys: {', '.join(names)}"
            raise ConfigError(f"{at}: unknown key {full!r}{hint}")
        hint = hints[key]
        if dataclasses.is_dataclass(hint):
            if not isinstance(value, dict):
                raise ConfigError(f"{at}: {full} must be a mapping, got {type(value).__name__}")
            kwargs[key] = _build(hint, value, where, f"{full}.", lines)
            continue
        if not _type_ok(value, hint):
            raise ConfigError(f"{at}: {full} must be {_type_name(hint)}, got {value!r} ({type(value).__name__})")
        kwargs[key] = float(value) if hint is float else value
    try:
        return cls(**kwargs)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {prefix}{exc}") from None


def config_from_dict(data: dict[str, Any], where: str = "<config>", lines: dict[str, int] | None = None) -> Config:
    return _build(Config, data or {}, where, "", lines)


def load_config(path: str | Path) -> Config:
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}{line}: not valid YAML ({getattr(exc, 'problem', exc)})") from None
    if data is not None and not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of keys, got {type(data).__name__}")
    return config_from_dict(data or {}, str(path), _key_lines(path.read_text()))
