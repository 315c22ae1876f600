"""Run configuration: the seed article's YAML keys plus the GRPO knobs TRL users know, with defaults.

`load_config(path)` reports unknown keys with the nearest valid one, and ill-typed values with the
expected type, always naming the file (and the line, where YAML gives it).

Every choice key has a `Literal` type, the one list of its allowed values (`CHOICES` is derived from them).
The algorithm presets (`ALGORITHMS`) are applied once, when a `Config` is built: afterwards `epsilon`,
`epsilon_high`, `scale_rewards`, `loss_type`, `importance_sampling_level` and `dynamic_sampling` hold the
values a run uses (explicit values win), so the stored run config shows them, and building a config again
from a stored one gives the same values.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import reprlib
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

import yaml

from workbench.errors import InputError
from workbench.model_fetch import packaged_model
from workbench.ranges import AT_LEAST_ONE, FRACTION, MAX_COMPLETION_LENGTH, NON_NEGATIVE, POSITIVE, Range
from workbench.skills import SKILL_LABELS, is_skill

DEVICE_RE = re.compile(
    r"^(auto|cpu|cuda(:\d+)?)$"
)  # `device`; resolved to a torch device by workbench/devices.py


def check_device(value: object) -> str | None:
    """None when `value` is a valid `device` setting, else what is wrong with it."""
    if isinstance(value, str) and DEVICE_RE.match(value):
        return None
    return f"{value!r} is not auto, cpu, cuda or cuda:N"


Algorithm = Literal["grpo", "dapo", "dr_grpo", "gspo"]
Adapter = Literal["lora", "full"]
Reference = Literal["sft", "base"]
ScaleRewards = Literal["group", "batch", "none"]
LossType = Literal["grpo", "dapo", "dr_grpo", "bnpo"]
ISLevel = Literal["token", "sequence"]
EnvKind = Literal["single_turn", "multi_turn", "mcp"]
RolloutKind = Literal["hf", "hf_generate", "vllm", "vllm_server"]
VllmSync = Literal["weights", "lora"]
DType = Literal["auto", "float32", "bfloat16"]
MultiTurnWeighting = Literal["episode", "turn"]
ToolFormat = Literal["json", "native"]
SftSchedule = Literal["constant", "cosine"]
SftAutocast = Literal["none", "bfloat16"]
PromptSampler = Literal["uniform", "spread"]
ToolParser = Literal["auto", "hermes", "llama3_json", "mistral", "nemotron"]
LogTo = Literal["none", "tensorboard"]


class ConfigError(InputError, ValueError):
    pass


# Memory-sized counts: each multiplies the rollouts (and their activations) held at once. The bounds are far
# above any published GRPO recipe (groups of 4-64) and far below what overflows memory before a first step.
MAX_GROUP_SIZE = 1024
MAX_BATCH = 4096
# An MCP tool result is cut to at most this many characters (`max_result_chars`): at least a short answer, at
# most ~1 MB (far past any model's context; the cut exists to keep prompts bounded)
MAX_RESULT_CHARS = Range(100, 1_000_000)


# What a refused value was probably meant to do, where another key does it.
RANGE_HINTS = {
    "temperature": "; greedy decoding is what evals do (eval_samples: 0, the default), training must sample",
    "eval_max_tasks": "; null (or no key) evaluates the whole split",
}


def check_ranges(obj: object, ranges: Mapping[str, Range]) -> None:
    """Every number of `obj` named in `ranges` is finite and in its range (None is left to the field's own
    meaning, e.g. `eval_max_tasks: null` = all); else a ConfigError that starts with the key."""
    for key, rng in ranges.items():
        value = getattr(obj, key)
        if value is not None and (problem := rng.problem(value)) is not None:
            raise ConfigError(f"{key}: {problem}{RANGE_HINTS.get(key, '')}")


@dataclass
class LoraConfig:
    r: int = 16
    alpha: int = 32
    dropout: float = 0.0
    # Module names, or "all-linear": every linear layer but the LM head, detected (workbench/lora_targets.py).
    target_modules: list[str] | str = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])

    def __post_init__(self) -> None:
        check_ranges(self, LORA_RANGES)
        if isinstance(self.target_modules, str) and self.target_modules != "all-linear":
            raise ConfigError(
                f"target_modules: {self.target_modules!r} is not 'all-linear' or a list of module names"
            )


@dataclass
class HarnessConfig:
    """What the environment shows the model around each task (stored with the run, editable)."""

    system_prompt: str | None = None  # None: the built-in prompt listing the task's tools
    include_example: bool = True  # one worked example turn before the task
    prefill: str = '{"tool": "'  # the assistant reply is forced to start with this
    # Task families (datasets) given no prefill, so "no call" stays possible (None: the built-in list,
    # workbench.envs.harness.NO_PREFILL_DATASETS). Only the json tool format has a prefill.
    no_prefill_datasets: list[str] | None = None


@dataclass
class McpServerConfig:
    """One MCP tool server over stdio (`env: mcp`; workbench/envs/mcp_env.py). Only the allowlisted `tools` are
    offered to the model. Each episode gets its own state: a fresh process per episode, started ahead in a
    small pool, or, with `reset_tool`, a reused process on which that tool is called before each episode.
    With `seed_tool` the episode then starts from the task's `initial_state` (loaded by that tool)."""

    command: str = ""  # the executable (a bare name is looked up in PATH)
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # the process sees only these (+ PATH, HOME, USER...)
    cwd: str | None = None  # None: a fresh temporary directory per process
    tools: list[str] = field(default_factory=list)  # the allowlist: nothing else is offered or called
    dangerous: list[str] = field(default_factory=list)  # calling one is an unsafe action for the verifier
    timeout_s: float = 10.0  # per call; a call past it counts as a hung server (episode failed, restarted)
    start_timeout_s: float = 30.0
    reset_tool: str | None = None  # reuse processes, calling this tool before each episode (else: restart)
    state_tool: str | None = None  # called after each episode; its result becomes Output.state
    # called (by the env, not the model) at the start of each episode with the task's initial_state as its
    # arguments ({"events": [...], ...}), so the server starts where the task says; tasks without one skip it
    seed_tool: str | None = None
    pool_size: int | None = None  # processes started ahead; None: num_generations_per_prompt
    memory_mb: int = 2048  # address-space limit per process (RLIMIT_AS)
    cpu_s: int = 3600  # CPU-seconds limit per process (RLIMIT_CPU)
    # A tool result longer than this (in characters; a structured one as its JSON) is cut to it before it goes
    # into the next prompt, and the cut is noted in the observation: a 5 MB answer must not become the prompt.
    max_result_chars: int = 8000

    def __post_init__(self) -> None:
        if not self.command.strip():
            raise ConfigError("command: required (the server's executable)")
        if not self.tools:
            raise ConfigError("tools: list the tool names to offer (the allowlist); empty offers nothing")
        for key in ("dangerous",):
            stray = [t for t in getattr(self, key) if t not in self.tools]
            if stray:
                raise ConfigError(f"{key}: {stray} not in tools (the allowlist)")
        if self.seed_tool is not None and self.seed_tool in self.tools:
            raise ConfigError(
                f"seed_tool: {self.seed_tool} is in tools (the allowlist): the model could "
                "rewrite the task's starting state; list it only as seed_tool"
            )
        check_ranges(
            self,
            {
                "timeout_s": POSITIVE,
                "start_timeout_s": POSITIVE,
                "memory_mb": AT_LEAST_ONE,
                "cpu_s": AT_LEAST_ONE,
                "pool_size": AT_LEAST_ONE,
                "max_result_chars": MAX_RESULT_CHARS,
            },
        )


MAX_SFT_SKILL_WEIGHT = 100


def _check_skill_names(key: str, names: Any) -> None:
    """`grpo_skills` / `sft_skill_weights` name skills `workbench.skills.task_skills` can return."""
    if unknown := [k for k in names if not (isinstance(k, str) and is_skill(k))]:
        raise ConfigError(f"{key}: {unknown} not a skill; use {sorted(SKILL_LABELS)} or tool:<tool name>")


@dataclass
class Config:
    # --- the seed article's keys ---
    model: str = "smollm2-135m"  # embedded default, a local HF folder, or a hub id where reachable
    algorithm: Algorithm = "grpo"
    adapter: Adapter = "lora"
    num_generations_per_prompt: int = 8  # G, the group size
    reward: str = "tool_call_verifier"  # built-in verifier name or a path to a .py file
    eval_interval: int = 10  # steps between held-out evals (and checkpoints)
    held_out_eval: str = (
        "tool_call_eval"  # the validation split (promotion, recipe decisions): built-in or a .jsonl
    )
    # The test split: reported beside validation at every eval, never used to decide anything. "auto": the
    # built-in test split for built-in tasks; for a file, its tasks marked "split": "test", else a
    # deterministic half of held_out_eval by task hash; "none": no test eval.
    test_tasks: str = "auto"
    # --- data and environment ---
    name: str = "run"
    tasks: str = "builtin:calendar"  # training tasks: builtin:calendar or a .jsonl file
    env: EnvKind = "single_turn"
    max_turns: int = 4  # multi_turn only
    # json: the project's harness (system prompt listing the tools, example, prefill), for templates without
    # tools (SmolLM2). native: the model's chat template renders OpenAI tool specs and the turns, and its own
    # call format is parsed (tool_parser: auto reads it from the template). See docs/design.md.
    # None (unset): native for the packaged Qwen models (their template renders tools), json otherwise.
    tool_format: ToolFormat | None = None
    tool_parser: ToolParser = "auto"
    harness: HarnessConfig = field(default_factory=HarnessConfig)
    mcp_servers: dict[str, McpServerConfig] = field(default_factory=dict)  # env: mcp, by server name
    lora: LoraConfig = field(default_factory=LoraConfig)
    # --- GRPO (TRL GRPOConfig names and defaults unless noted) ---
    learning_rate: float = 2e-5  # TRL's 1e-6 is for full fine-tuning; LoRA wants more
    beta: float = 0.0  # KL coefficient; 0 = no reference pass
    reference: Reference = "sft"  # the KL term's reference policy: sft (the policy after the warm-up) | base
    # Preset keys: None (or absent) means the algorithm's value (ALGORITHMS); never None once built.
    epsilon: float | None = None  # the algorithm's (0.2; gspo 3e-4)
    epsilon_high: float | None = None  # explicit epsilon if set, else the algorithm's (dapo 0.28, gspo 4e-4)
    scale_rewards: ScaleRewards | None = None  # the algorithm's (group; dr_grpo none)
    leave_one_out: bool = False
    loss_type: LossType | None = None  # the algorithm's
    importance_sampling_level: ISLevel | None = None  # the algorithm's (token; gspo sequence)
    dynamic_sampling: bool | None = None  # drop zero-variance groups; the algorithm's (dapo True)
    # Which train prompts a step draws: uniform, or spread (by their estimated chance of a group with reward
    # spread, from the latest validation eval's skills and the run's groups so far: workbench/prompt_sampler.py)
    prompt_sampler: PromptSampler = "uniform"
    dynamic_sampling_max_refills: int = 2  # dynamic sampling: rounds of new prompts to refill dropped groups
    # DAPO's overlong handling, off by default (TRL's defaults; not in the dapo preset, whose values stored
    # runs resolve to). The DAPO paper's recipe turns both on: mask_truncated_completions: true, and a buffer
    # of about a fifth of max_completion_length (4096 of 20480 there).
    mask_truncated_completions: bool = (
        False  # truncated episodes get no loss (TRL's name; overlong filtering)
    )
    overlong_buffer: int = (
        0  # soft overlong penalty: 0 to -1 over the last N tokens before max_completion_length
    )
    multi_turn_weighting: MultiTurnWeighting = (
        "episode"  # an episode's turns weigh as one sequence | each turn as one
    )
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
    sft_lr_schedule: SftSchedule = (
        "constant"  # or "cosine": from sft_learning_rate towards 0 over the SFT steps
    )
    # bfloat16: the warm-up's matmuls run in bf16 (torch.autocast); weights, gradients and AdamW stay as loaded.
    # The demo's warm-up ran 1.26-1.35x faster on a 2-core AVX512-BF16 CPU (docs/benchmarks.md); GRPO, evals as before.
    sft_autocast: SftAutocast = "none"
    # Share of each tool's training phrasings kept out of the SFT warm-up, for GRPO alone (workbench/splits.py)
    grpo_holdout: float = 0.0
    # GRPO samples only train tasks exercising one of these skills (workbench/skills.py: time_24h, time_12h,
    # time_words, relative_day, name, no_call, tool:<name>); empty: all. SFT still imitates all of train.
    grpo_skills: list[str] = field(default_factory=list)
    # The SFT warm-up repeats each train task by the heaviest of its skills listed here (others once), e.g.
    # {time_12h: 2}: such a task is twice as likely to be drawn, so the same steps favour a weak skill.
    sft_skill_weights: dict[str, int] = field(default_factory=dict)
    # --- eval, checkpoints, runtime ---
    eval_max_tasks: int | None = None  # None: the whole held-out set
    eval_samples: int = 0  # sampled eval: completions per task at `temperature` (0: greedy only)
    checkpoint_interval: int | None = None  # None: = eval_interval
    verifier_timeout_s: float = 5.0
    # LLM-as-judge over an OpenAI-compatible endpoint (workbench.verifiers.judge.JudgeVerifier.from_config),
    # e.g. a larger model behind `vllm serve`: the base URL (".../v1"), its model name, a per-request timeout.
    judge_url: str | None = None
    judge_model: str = "judge"
    judge_timeout_s: float = 30.0
    # Error budget: when more than this share of a step's rewards fail (the verifier raised, timed out,
    # crashed or returned NaN), the step's update is skipped and the worker pauses with the reason.
    max_verifier_error_frac: float = 0.5
    # hf: our KV-cache sampler, or transformers' generate (hf_generate) by itself for models whose cache is not
    # a plain attention KV cache (hybrid Mamba/attention: workbench/rollout/cache_kind.py) | vllm | vllm_server
    rollout: RolloutKind = "hf"
    # vllm_server: the OpenAI-compatible server's base URL, or a list of them (groups are spread over them)
    vllm_url: str | list[str] | None = None
    vllm_sync: VllmSync = (
        "weights"  # vllm: how an update reaches the engine: weights (merged, in place) | lora
    )
    vllm_kv_cache_gb: float = 1.0  # vllm on CPU: KV cache size (its default takes most of the RAM)
    vllm_is_cap: float = 2.0  # truncated importance sampling: cap on the trainer/engine probability ratio
    dtype: DType = (
        "auto"  # auto: bfloat16 base weights on a GPU (LoRA and optimizer stay float32), float32 on CPU
    )
    device: str = "auto"  # auto | cpu | cuda | cuda:N (workbench/devices.py); auto: CUDA when available
    seed: int = 0
    # The worker process's niceness (0-19), however it is started (workbench demo, the UI, train). 0: on a
    # machine shared with another job a niced worker gets only its leftover CPU (bench/worker_nice.py), and
    # niceness did not change the UI's key latency (bench/ui_latency.py; both in docs/benchmarks.md).
    worker_nice: int = 0
    output_dir: str = "runs"  # checkpoints go to <output_dir>/<run id>/
    log_to: LogTo = "none"  # also write step metrics as TensorBoard event files (<run dir>/tensorboard)

    def __post_init__(self) -> None:
        if self.tool_format is None:
            self.tool_format = "native" if packaged_model(str(self.model)) is not None else "json"
        for key, allowed in CHOICES.items():
            value = getattr(self, key)
            if value is None and key in PRESET_KEYS:
                continue
            if value not in allowed:
                near = difflib.get_close_matches(str(value), allowed, n=1, cutoff=0.5)
                hint = f"; did you mean {near[0]!r}?" if near else ""
                raise ConfigError(f"{key}: {value!r} is not one of {list(allowed)}{hint}")
        check_ranges(self, CONFIG_RANGES)
        if self.max_steps == 0 and not self.sft_steps:
            raise ConfigError(
                "max_steps: must be >= 1 (0 runs only the SFT warm-up, and sft_steps is 0: nothing "
                "would be trained)"
            )
        if self.grpo_holdout and not self.sft_steps:
            raise ConfigError(
                "grpo_holdout: keeps phrasings out of the SFT warm-up; set sft_steps > 0 or drop it"
            )
        if isinstance(self.grpo_skills, str):
            raise ConfigError(f"grpo_skills: a list of skill names, e.g. [{self.grpo_skills}]")
        _check_skill_names("grpo_skills", self.grpo_skills)
        if not isinstance(self.sft_skill_weights, dict):
            raise ConfigError("sft_skill_weights: a mapping of skill names to weights, e.g. {time_12h: 2}")
        _check_skill_names("sft_skill_weights", self.sft_skill_weights)
        # The warm-up's example list holds each task `weight` times: a cap keeps a typo from filling the memory.
        if bad := {
            k: w
            for k, w in self.sft_skill_weights.items()
            if isinstance(w, bool) or not isinstance(w, int) or not 1 <= w <= MAX_SFT_SKILL_WEIGHT
        }:
            raise ConfigError(
                f"sft_skill_weights: weights are whole numbers from 1 to {MAX_SFT_SKILL_WEIGHT} "
                f"(how many times each such task is repeated), got {bad}"
            )
        if self.sft_skill_weights and not self.sft_steps:
            raise ConfigError(
                "sft_skill_weights: weights the SFT warm-up's examples; set sft_steps > 0 or drop it"
            )
        if self.num_generations_per_prompt < 2:
            raise ConfigError("num_generations_per_prompt: GRPO needs at least 2 samples a group")
        if (problem := check_device(self.device)) is not None:
            raise ConfigError(f"device: {problem}")
        if self.rollout == "vllm_server" and not self.vllm_url:
            raise ConfigError("vllm_url: required when rollout is vllm_server")
        if self.env == "mcp" and not self.mcp_servers:
            raise ConfigError("mcp_servers: env mcp needs at least one server")
        offered = [t for s in self.mcp_servers.values() for t in s.tools]
        if len(offered) != len(set(offered)):
            raise ConfigError(f"mcp_servers: a tool name is allowlisted by two servers: {sorted(offered)}")
        self._apply_preset()

    def _apply_preset(self) -> None:
        """Fill every preset key left None with the algorithm's value. Explicit values win; epsilon_high
        falls back to an explicit epsilon before the preset's (TRL: epsilon_high defaults to epsilon).
        Idempotent: on a built config every preset key is concrete, so building it again changes nothing."""
        preset = ALGORITHMS[self.algorithm]
        if self.epsilon_high is None:
            self.epsilon_high = self.epsilon if self.epsilon is not None else preset.epsilon_high
        if self.epsilon is None:
            self.epsilon = preset.epsilon
        for key in ("scale_rewards", "loss_type", "importance_sampling_level", "dynamic_sampling"):
            if getattr(self, key) is None:
                setattr(self, key, getattr(preset, key))

    @property
    def checkpoint_every(self) -> int:
        return self.checkpoint_interval or self.eval_interval

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


def _literal_values(hint: Any) -> tuple[Any, ...] | None:
    """The allowed values of a Literal hint (also inside `Literal[...] | None`), else None."""
    if typing.get_origin(hint) is Literal:
        return typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        for h in typing.get_args(hint):
            if (values := _literal_values(h)) is not None:
                return values
    return None


def _choices(cls: type) -> dict[str, tuple[Any, ...]]:
    hints = typing.get_type_hints(cls)
    return {f.name: v for f in dataclasses.fields(cls) if (v := _literal_values(hints[f.name])) is not None}


# Where each number of a config is valid, checked when a Config is built (so also for a stored config read
# back). Keys not listed are not numbers. Lower bounds say where a value stops meaning anything (0 steps,
# a gradient norm of 0 or below, which flips or zeroes the update); upper bounds cap memory-sized counts.
CONFIG_RANGES: Mapping[str, Range] = MappingProxyType(
    {
        "num_generations_per_prompt": Range(1, MAX_GROUP_SIZE),  # < 2 gets GRPO's own message below
        "prompts_per_step": Range(1, MAX_BATCH),
        "max_completion_length": Range(1, MAX_COMPLETION_LENGTH),
        "num_iterations": AT_LEAST_ONE,
        "eval_interval": AT_LEAST_ONE,
        "sft_batch_size": Range(1, MAX_BATCH),
        "max_turns": AT_LEAST_ONE,
        "dynamic_sampling_max_refills": NON_NEGATIVE,
        "overlong_buffer": NON_NEGATIVE,
        "learning_rate": FRACTION,
        "sft_learning_rate": FRACTION,
        "beta": NON_NEGATIVE,
        "epsilon": POSITIVE,
        "epsilon_high": POSITIVE,
        # Sampling needs a temperature above 0 (the group must differ, and the log-probs divide by it); greedy
        # is what evals do by default, with `eval_samples: 0`.
        "temperature": POSITIVE,
        "top_p": FRACTION,
        "max_steps": NON_NEGATIVE,  # 0: the SFT warm-up only (refused without sft_steps: nothing would run)
        "max_grad_norm": POSITIVE,
        "weight_decay": NON_NEGATIVE,
        "warmup_steps": NON_NEGATIVE,
        "sft_steps": NON_NEGATIVE,
        "grpo_holdout": Range(0, 1, hi_open=True),
        "eval_max_tasks": AT_LEAST_ONE,  # null: the whole split; 0 would make every eval empty
        "eval_samples": Range(0, MAX_GROUP_SIZE),
        "checkpoint_interval": AT_LEAST_ONE,  # null: = eval_interval
        "verifier_timeout_s": POSITIVE,
        "judge_timeout_s": POSITIVE,
        "max_verifier_error_frac": Range(0, 1),
        "vllm_kv_cache_gb": POSITIVE,
        "vllm_is_cap": POSITIVE,
        "seed": Range(0, 2**32 - 1),  # what every seeded generator (random, torch, numpy) accepts
        "worker_nice": Range(0, 19),  # os.nice's range for an unprivileged process
    }
)
LORA_RANGES: Mapping[str, Range] = MappingProxyType(
    {
        "r": Range(1, MAX_BATCH),
        "alpha": POSITIVE,
        "dropout": Range(0, 1, hi_open=True),
    }
)

# The one list of allowed values per choice key, from the Literal types above.
CHOICES: Mapping[str, tuple[Any, ...]] = MappingProxyType(_choices(Config))
PRESET_KEYS = (
    "epsilon",
    "epsilon_high",
    "scale_rewards",
    "loss_type",
    "importance_sampling_level",
    "dynamic_sampling",
)


# --------------------------------------------------------------------------------------------------
# Algorithm presets
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AlgorithmPreset:
    """The values one named algorithm gives the preset keys of a `Config` that leaves them unset."""

    name: Algorithm
    loss_type: LossType
    importance_sampling_level: ISLevel = "token"
    epsilon: float = 0.2
    epsilon_high: float = 0.2
    scale_rewards: ScaleRewards = "group"
    dynamic_sampling: bool = False  # drop zero-variance groups


ALGORITHMS: Mapping[str, AlgorithmPreset] = MappingProxyType(
    {
        # DeepSeekMath GRPO as TRL runs it (beta 0: no reference model, TRL's default).
        "grpo": AlgorithmPreset(name="grpo", loss_type="grpo"),
        # DAPO: clip-higher (0.28) keeps low-probability tokens explorable; token-level loss; dynamic sampling.
        "dapo": AlgorithmPreset(name="dapo", loss_type="dapo", epsilon_high=0.28, dynamic_sampling=True),
        # Dr. GRPO: no std scaling and a constant normaliser remove the difficulty and length biases.
        "dr_grpo": AlgorithmPreset(name="dr_grpo", loss_type="dr_grpo", scale_rewards="none"),
        # GSPO: one sequence-level ratio per completion; its ratios are ~1, hence TRL's tiny clip range.
        "gspo": AlgorithmPreset(
            name="gspo",
            loss_type="grpo",
            importance_sampling_level="sequence",
            epsilon=3e-4,
            epsilon_high=4e-4,
        ),
    }
)


def _type_ok(value: Any, hint: Any) -> bool:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_type_ok(value, h) for h in typing.get_args(hint))
    if origin is Literal:
        # Only the type here; a value outside the choices gets Config's "is not one of" error.
        return any(type(value) is type(v) for v in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if origin is list:
        (inner,) = typing.get_args(hint) or (Any,)
        return isinstance(value, list) and all(_type_ok(v, inner) for v in value)
    if origin is dict:
        k_hint, v_hint = typing.get_args(hint) or (Any, Any)
        return isinstance(value, dict) and all(
            _type_ok(k, k_hint) and _type_ok(v, v_hint) for k, v in value.items()
        )
    if hint is Any:
        return True
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)


def _type_name(hint: Any) -> str:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " | ".join(_type_name(h) for h in typing.get_args(hint))
    if typing.get_origin(hint) is Literal:
        return " | ".join(sorted({type(v).__name__ for v in typing.get_args(hint)}))
    if hint is type(None):
        return "None"
    return str(hint).replace("typing.", "") if not isinstance(hint, type) else hint.__name__


# Values in error messages: short, and finite for an alias-built structure (a "billion laughs" list).
_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxlist, _REPR.maxdict, _REPR.maxstring, _REPR.maxother = 2, 4, 4, 60, 60


def key_line(path: str | None, key: str) -> str:
    """`path:line` of a top-level key of the config file (just `path`, or `<config>`, when it cannot be read)."""
    if not path:
        return "<config>"
    try:
        line = _key_lines(Path(path).read_text(encoding="utf-8")).get(key)
    except Exception:  # already loaded once; an unreadable file now only loses the line number
        line = None
    return f"{path}:{line}" if line else path


def _key_lines(text: str) -> dict[str, int]:
    """Line number (1-based) of every key, by dotted path, so errors can point at the line."""
    lines: dict[str, int] = {}
    seen: set[int] = set()  # an alias repeats a node (or nests it in itself): walk each once

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, yaml.MappingNode) and id(node) not in seen:
            seen.add(id(node))
            for k, v in node.value:
                path = f"{prefix}{k.value}"
                lines[path] = k.start_mark.line + 1
                walk(v, f"{path}.")

    walk(yaml.compose(text), "")
    return lines


def _build(
    cls: type, data: dict[str, Any], where: str, prefix: str = "", lines: dict[str, int] | None = None
) -> Any:
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
        item = _dataclass_values(hint)
        if item is not None:  # a mapping of name -> section (mcp_servers), each built and checked like one
            if not isinstance(value, dict):
                raise ConfigError(
                    f"{at}: {full} must be a mapping of names to sections, got {type(value).__name__}"
                )
            kwargs[key] = {}
            for name, section in value.items():
                sub = f"{full}.{name}"
                sub_at = f"{where}:{lines[sub]}" if sub in lines else at
                if not isinstance(name, str) or not isinstance(section, dict):
                    raise ConfigError(
                        f"{sub_at}: {full} must map names to mappings, got {_REPR.repr(name)}: "
                        f"{type(section).__name__}"
                    )
                kwargs[key][name] = _build(item, section, where, f"{sub}.", lines)
            continue
        if dataclasses.is_dataclass(hint):
            if not isinstance(value, dict):
                raise ConfigError(f"{at}: {full} must be a mapping, got {type(value).__name__}")
            kwargs[key] = _build(hint, value, where, f"{full}.", lines)
            continue
        if not _type_ok(value, hint):
            raise ConfigError(
                f"{at}: {full} must be {_type_name(hint)}, got {_REPR.repr(value)} ({type(value).__name__})"
            )
        try:
            kwargs[key] = float(value) if hint is float else value
        except OverflowError:
            raise ConfigError(f"{at}: {full} is too large for a float, got {_REPR.repr(value)}") from None
    try:
        return cls(**kwargs)
    except ConfigError as exc:
        # A rule's message starts with the key it is about ("loss_type: ..."): point at that key's line, else
        # at the section's own line (a nested section's rule that spans keys).
        key = f"{prefix}{str(exc).split(':', 1)[0]}"
        section = prefix.rstrip(".")
        line = lines.get(key, lines.get(section))
        at = f"{where}:{line}" if line is not None else where
        raise ConfigError(f"{at}: {prefix}{exc}") from None


def _dataclass_values(hint: Any) -> type | None:
    """The section class of a `dict[str, <dataclass>]` hint, else None."""
    if typing.get_origin(hint) is dict:
        args = typing.get_args(hint)
        if len(args) == 2 and dataclasses.is_dataclass(args[1]):
            return args[1]
    return None


def config_from_dict(
    data: dict[str, Any], where: str = "<config>", lines: dict[str, int] | None = None
) -> Config:
    if data is not None and not isinstance(data, dict):
        raise ConfigError(f"{where}: the top level must be a mapping of keys, got {type(data).__name__}")
    return _build(Config, data or {}, where, "", lines)


class _Loader(yaml.SafeLoader):
    """safe_load's loader, except that a scalar its constructors cannot build (`!!int x`, `2001-02-30`, an
    integer past Python's digit limit) is a YAML error at that node's line, not a bare ValueError/KeyError."""

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
            problem = f"cannot read {str(node.value)[:40]!r} as {node.tag.rsplit(':', 1)[-1]}"
            if isinstance(exc, (ValueError, OverflowError)):  # the others' text is PyYAML's internals
                problem += f": {str(exc).split(';')[0]}"
            raise yaml.constructor.ConstructorError(None, None, problem, node.start_mark) from None


def load_config(path: str | Path) -> Config:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
        data = yaml.load(text, Loader=_Loader)  # a SafeLoader
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except yaml.reader.ReaderError as exc:  # a control character: PyYAML gives an offset, not a line
        line = text.count("\n", 0, exc.position) + 1
        raise ConfigError(
            f"{path}:{line}: not valid YAML (character #x{exc.character:02x}: {exc.reason})"
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}{line}: not valid YAML ({getattr(exc, 'problem', exc)})") from None
    except RecursionError:
        raise ConfigError(f"{path}: not valid YAML (nested too deeply)") from None
    if data is not None and not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of keys, got {type(data).__name__}")
    return config_from_dict(data or {}, str(path), _key_lines(text))
