import dataclasses
import json
import re
import typing

import pytest

from workbench import config as config_module
from workbench.config import (
    ALGORITHMS,
    CHOICES,
    PRESET_KEYS,
    AlgorithmPreset,
    Config,
    ConfigError,
    config_from_dict,
    load_config,
)


def write(tmp_path, text):
    p = tmp_path / "run.yaml"
    p.write_text(text)
    return p


def test_seed_keys_load(tmp_path):
    cfg = load_config(
        write(
            tmp_path,
            """
model: smollm2-135m
algorithm: dapo
adapter: lora
num_generations_per_prompt: 8
reward: tool_call_verifier
eval_interval: 10
held_out_eval: tool_call_eval
lora: {r: 8, alpha: 16}
harness: {prefill: ""}
learning_rate: 1
""",
        )
    )
    assert cfg.algorithm == "dapo" and cfg.lora.r == 8 and cfg.lora.alpha == 16 and cfg.harness.prefill == ""
    assert cfg.learning_rate == 1.0 and isinstance(cfg.learning_rate, float)
    assert cfg.checkpoint_every == 10


def clip(cfg: Config) -> tuple[float | None, float | None]:
    return cfg.epsilon, cfg.epsilon_high


def test_defaults_match_trl_where_named_alike():
    cfg = Config()
    assert (cfg.beta, cfg.num_generations_per_prompt, cfg.temperature, cfg.num_iterations) == (0.0, 8, 1.0, 1)
    assert clip(cfg) == (0.2, 0.2) and cfg.scale_rewards == "group"
    assert Config(algorithm="dr_grpo").scale_rewards == "none"  # the preset's, unless set
    assert Config(algorithm="dr_grpo", scale_rewards="group").scale_rewards == "group"
    assert clip(Config(algorithm="dapo")) == (0.2, 0.28)
    assert clip(Config(algorithm="gspo")) == (3e-4, 4e-4)
    assert clip(Config(algorithm="gspo", epsilon=0.01)) == (0.01, 0.01)


def test_algorithm_presets():
    assert set(ALGORITHMS) == set(CHOICES["algorithm"]) == {"grpo", "dapo", "dr_grpo", "gspo"}
    assert ALGORITHMS["grpo"].loss_type == "grpo" and ALGORITHMS["grpo"].importance_sampling_level == "token"
    dapo = ALGORITHMS["dapo"]
    assert (dapo.loss_type, dapo.epsilon, dapo.epsilon_high, dapo.dynamic_sampling) == (
        "dapo",
        0.2,
        0.28,
        True,
    )
    assert (ALGORITHMS["dr_grpo"].loss_type, ALGORITHMS["dr_grpo"].scale_rewards) == ("dr_grpo", "none")
    gspo = ALGORITHMS["gspo"]
    assert (gspo.loss_type, gspo.importance_sampling_level) == ("grpo", "sequence")
    assert (gspo.epsilon, gspo.epsilon_high) == (3e-4, 4e-4)
    assert all(name == p.name for name, p in ALGORITHMS.items())
    with pytest.raises(dataclasses.FrozenInstanceError):
        gspo.epsilon = 0.1  # type: ignore[misc]
    with pytest.raises(TypeError):
        ALGORITHMS["x"] = AlgorithmPreset(name="x", loss_type="grpo")  # type: ignore[index]


EXPECTED = {  # what each algorithm runs with when the config leaves the preset keys unset
    "grpo": dict(
        epsilon=0.2,
        epsilon_high=0.2,
        scale_rewards="group",
        loss_type="grpo",
        importance_sampling_level="token",
        dynamic_sampling=False,
    ),
    "dapo": dict(
        epsilon=0.2,
        epsilon_high=0.28,
        scale_rewards="group",
        loss_type="dapo",
        importance_sampling_level="token",
        dynamic_sampling=True,
    ),
    "dr_grpo": dict(
        epsilon=0.2,
        epsilon_high=0.2,
        scale_rewards="none",
        loss_type="dr_grpo",
        importance_sampling_level="token",
        dynamic_sampling=False,
    ),
    "gspo": dict(
        epsilon=3e-4,
        epsilon_high=4e-4,
        scale_rewards="group",
        loss_type="grpo",
        importance_sampling_level="sequence",
        dynamic_sampling=False,
    ),
}


@pytest.mark.parametrize("algorithm", sorted(EXPECTED))
def test_stored_config_shows_every_value_used(algorithm):
    for cfg in (Config(algorithm=algorithm), config_from_dict({"algorithm": algorithm})):
        stored = cfg.to_dict()
        assert {k: stored[k] for k in PRESET_KEYS} == EXPECTED[algorithm]
        assert None not in (stored[k] for k in PRESET_KEYS)
    # stored configs from before the presets were resolved (None = the preset's) resolve the same way
    old = config_from_dict({"algorithm": algorithm, **dict.fromkeys(PRESET_KEYS)})
    assert {k: getattr(old, k) for k in PRESET_KEYS} == EXPECTED[algorithm]


@pytest.mark.parametrize("algorithm", sorted(EXPECTED))
def test_explicit_values_override_the_preset(algorithm):
    explicit = dict(
        epsilon=0.1,
        epsilon_high=0.3,
        scale_rewards="batch",
        loss_type="bnpo",
        importance_sampling_level="token",
        dynamic_sampling=True,
    )
    cfg = config_from_dict({"algorithm": algorithm, **explicit})
    assert {k: cfg.to_dict()[k] for k in PRESET_KEYS} == explicit
    # epsilon_high: explicit epsilon_high, else an explicit epsilon, else the preset's
    assert clip(config_from_dict({"algorithm": algorithm, "epsilon": 0.1})) == (0.1, 0.1)
    assert clip(config_from_dict({"algorithm": algorithm, "epsilon_high": 0.5})) == (
        EXPECTED[algorithm]["epsilon"],
        0.5,
    )
    assert config_from_dict({"algorithm": algorithm, "dynamic_sampling": False}).dynamic_sampling is False


@pytest.mark.parametrize(
    "data",
    [
        {"algorithm": "grpo"},
        {"algorithm": "dapo"},
        {"algorithm": "dr_grpo", "scale_rewards": "group"},
        {"algorithm": "gspo", "epsilon": 0.01},
        {"algorithm": "dapo", "epsilon_high": 0.5, "dynamic_sampling": False},
    ],
)
def test_resolving_a_stored_config_is_idempotent(data, tmp_path):
    cfg = config_from_dict(data)
    stored = json.loads(json.dumps(cfg.to_dict()))  # as runs.config keeps it
    again = config_from_dict(stored, "run 1 config")
    assert again == cfg and again.to_dict() == cfg.to_dict()
    assert config_from_dict(again.to_dict()) == cfg
    assert load_config(write(tmp_path, cfg.to_yaml())) == cfg


def test_choices_come_from_the_literal_types(tmp_path):
    hints = typing.get_type_hints(Config)
    assert CHOICES["loss_type"] == ("grpo", "dapo", "dr_grpo", "bnpo")
    assert CHOICES["scale_rewards"] == ("group", "batch", "none")
    assert set(CHOICES) >= {
        "algorithm",
        "adapter",
        "reference",
        "scale_rewards",
        "loss_type",
        "importance_sampling_level",
        "env",
        "rollout",
        "vllm_sync",
        "dtype",
    }
    for key, allowed in CHOICES.items():
        assert config_module._literal_values(hints[key]) == allowed
    with pytest.raises(ConfigError, match=r"loss_type: 'dr-grpo' is not one of .*; did you mean 'dr_grpo'"):
        config_from_dict({"loss_type": "dr-grpo"})
    with pytest.raises(ConfigError, match=r"run\.yaml:1: dtype must be str, got 16 \(int\)"):
        load_config(write(tmp_path, "dtype: 16\n"))
    assert CHOICES["sft_autocast"] == ("none", "bfloat16")
    with pytest.raises(ConfigError, match=r"run\.yaml:2: sft_autocast: 'float16' is not one of"):
        load_config(write(tmp_path, "sft_steps: 4\nsft_autocast: float16\n"))


def test_grpo_maths_accepts_the_same_choices():
    from workbench.learn import grpo

    assert typing.get_args(grpo.LossType) == CHOICES["loss_type"]
    assert typing.get_args(grpo.ISLevel) == CHOICES["importance_sampling_level"]
    assert typing.get_args(grpo.ScaleRewards) == CHOICES["scale_rewards"]


def test_intervals_must_be_positive():
    with pytest.raises(ConfigError, match="eval_interval: must be >= 1"):
        config_from_dict({"eval_interval": 0})


def test_unknown_key_names_file_line_and_nearest(tmp_path):
    p = write(tmp_path, "model: smollm2-135m\nnum_generation_per_prompt: 8\n")
    with pytest.raises(
        ConfigError,
        match=r"run\.yaml:2: unknown key 'num_generation_per_prompt'; did you mean 'num_generations_per_prompt'",
    ):
        load_config(p)


def test_unknown_nested_key(tmp_path):
    with pytest.raises(ConfigError, match=r":3: unknown key 'lora.alhpa'; did you mean 'lora.alpha'"):
        load_config(write(tmp_path, "model: x\nlora:\n  alhpa: 4\n"))


def test_ill_typed_value(tmp_path):
    with pytest.raises(ConfigError, match=r"run\.yaml:1: learning_rate must be float, got 'fast'"):
        load_config(write(tmp_path, "learning_rate: fast\n"))
    with pytest.raises(ConfigError, match="num_generations_per_prompt must be int"):
        load_config(write(tmp_path, "num_generations_per_prompt: 8.5\n"))


def test_bad_choice_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match=r"run\.yaml:1: algorithm: 'ppo' is not one of"):
        load_config(write(tmp_path, "algorithm: ppo\n"))
    with pytest.raises(ConfigError, match=r"run\.yaml:3: not valid YAML"):
        load_config(write(tmp_path, "a: 1\nb: [1, 2\n"))
    with pytest.raises(ConfigError, match="no such config file"):
        load_config(tmp_path / "missing.yaml")


def test_group_of_one_is_refused():
    with pytest.raises(ConfigError, match="at least 2"):
        config_from_dict({"num_generations_per_prompt": 1})


def test_yaml_roundtrip(tmp_path):
    cfg = Config(algorithm="gspo", seed=3)
    again = load_config(write(tmp_path, cfg.to_yaml()))
    assert again == cfg


# --- every number checked where it enters (issue 33) ------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("max_grad_norm: -1", "max_grad_norm: must be > 0, got -1"),  # flipped the gradient
        ("max_grad_norm: 0", "max_grad_norm: must be > 0, got 0"),
        (
            "eval_max_tasks: -1",
            r"eval_max_tasks: must be >= 1, got -1; null \(or no key\) evaluates the whole split",
        ),
        ("eval_max_tasks: 0", "eval_max_tasks: must be >= 1, got 0"),  # empty evals
        ("temperature: 0", "temperature: must be > 0, got 0; greedy decoding is what evals do"),
        ("temperature: -0.5", "temperature: must be > 0, got -0.5"),
        ("temperature: .nan", "temperature: must be a finite number > 0, got nan"),
        ("top_p: 0", r"top_p: must be in \(0, 1\], got 0"),
        ("top_p: 1.5", r"top_p: must be in \(0, 1\], got 1.5"),
        ("max_steps: -3", "max_steps: must be >= 0, got -3"),
        ("max_steps: 0", r"max_steps: must be >= 1 \(0 runs only the SFT warm-up, and sft_steps is 0"),
        (
            "num_generations_per_prompt: 1000000000",
            r"num_generations_per_prompt: must be in \[1, 1024\], got 1000000000",
        ),
        (
            "max_completion_length: 1000000000",
            r"max_completion_length: must be in \[1, 32768\], got 1000000000",
        ),
        ("learning_rate: .nan", r"learning_rate: must be a finite number in \(0, 1\], got nan"),
        ("learning_rate: .inf", r"learning_rate: must be a finite number in \(0, 1\], got inf"),
        ("learning_rate: 0", r"learning_rate: must be in \(0, 1\], got 0"),
        ("sft_learning_rate: -.inf", r"sft_learning_rate: must be a finite number in \(0, 1\], got -inf"),
        ("beta: -0.1", "beta: must be >= 0, got -0.1"),
        ("weight_decay: .nan", "weight_decay: must be a finite number >= 0, got nan"),
        ("verifier_timeout_s: 0", "verifier_timeout_s: must be > 0, got 0"),
        (
            "max_verifier_error_frac: .nan",
            r"max_verifier_error_frac: must be a finite number in \[0, 1\], got nan",
        ),
        ("seed: -1", r"seed: must be in \[0, 4294967295\], got -1"),
        ("prompts_per_step: 100000", r"prompts_per_step: must be in \[1, 4096\], got 100000"),
    ],
)
def test_a_number_out_of_range_names_its_line_and_the_range(tmp_path, line, message):
    with pytest.raises(ConfigError, match=rf"run\.yaml:2: {message}"):
        load_config(write(tmp_path, f"model: smollm2-135m\n{line}\n"))


def test_nested_numbers_are_checked_at_their_line(tmp_path):
    with pytest.raises(ConfigError, match=r"run\.yaml:3: lora\.dropout: must be in \[0, 1\), got 1"):
        load_config(write(tmp_path, "model: x\nlora:\n  dropout: 1.0\n"))
    with pytest.raises(ConfigError, match=r"run\.yaml:3: lora\.r: must be in \[1, 4096\], got 0"):
        load_config(write(tmp_path, "model: x\nlora:\n  r: 0\n"))
    server = "mcp_servers:\n  cal:\n    command: python\n    tools: [a]\n    timeout_s: .nan\n"
    with pytest.raises(
        ConfigError, match=r"mcp_servers\.cal\.timeout_s: must be a finite number > 0, got nan"
    ):
        load_config(write(tmp_path, f"env: mcp\n{server}"))


def test_boundaries_and_null_keep_their_meaning():
    cfg = config_from_dict(
        {
            "top_p": 1.0,
            "eval_max_tasks": None,
            "checkpoint_interval": None,
            "temperature": 1e-3,
            "max_completion_length": 32768,
            "num_generations_per_prompt": 1024,
        }
    )
    assert cfg.eval_max_tasks is None and cfg.checkpoint_every == cfg.eval_interval
    assert config_from_dict({"max_steps": 0, "sft_steps": 5}).max_steps == 0  # the SFT warm-up only
    assert config_from_dict({"eval_max_tasks": 1}).eval_max_tasks == 1


def test_every_numeric_key_has_a_range():
    hints = typing.get_type_hints(Config)
    numeric = {
        f.name
        for f in dataclasses.fields(Config)
        if hints[f.name] in (int, float, int | None, float | None) and f.name not in CHOICES
    }
    assert numeric == set(config_module.CONFIG_RANGES)


# --- numbers from the command line: the same ranges, refused by argparse with the flag named ------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["train", "c.yaml", "--resume", "0"], "argument --resume: must be >= 1, got 0"),
        (["train", "c.yaml", "--nproc", "-2"], "argument --nproc: must be >= 1, got -2"),
        (["eval", "--temperature", "nan"], "argument --temperature: must be a finite number > 0, got nan"),
        (["eval", "--temperature", "0"], "argument --temperature: must be > 0, got 0"),
        (["eval", "--samples", "-1"], "argument --samples: must be >= 0, got -1"),
        (
            ["eval", "--max-new-tokens", "1000000000"],
            r"argument --max-new-tokens: must be in \[1, 32768\], got 1000000000",
        ),
        (["eval", "--limit", "1e9"], "argument --limit: '1e9' is not a whole number"),
        (
            ["export", "--run", "1", "--min-reward", "inf"],
            "argument --min-reward: must be a finite number, got inf",
        ),
        (["report", "--run", "-1"], "argument --run: must be >= 1, got -1"),
        (["serve", "--port", "70000"], r"argument --port: must be in \[1, 65535\], got 70000"),
    ],
)
def test_numeric_flags_are_refused_with_the_flag_and_range_named(capsys, argv, message):
    from workbench.cli import build_parser

    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(argv)
    assert exit_info.value.code == 2
    assert re.search(message, capsys.readouterr().err)


def test_numeric_flags_in_range_parse_to_numbers():
    from workbench.cli import build_parser

    args = build_parser().parse_args(
        ["eval", "--temperature", "0.7", "--samples", "0", "--max-new-tokens", "32768"]
    )
    assert (args.temperature, args.samples, args.max_new_tokens) == (0.7, 0, 32768)
    assert build_parser().parse_args(["serve", "--port", "1"]).port == 1


def test_worker_nice_is_a_checked_config_option_the_worker_applies(tmp_path):
    import subprocess
    import sys

    from workbench.config import ConfigError, config_from_dict

    assert config_from_dict({}).worker_nice == 0
    assert config_from_dict({"worker_nice": 7}).worker_nice == 7
    for bad in (-1, 20, 1.5):
        with pytest.raises(ConfigError, match="worker_nice"):
            config_from_dict({"worker_nice": bad})
    # Applied in a process of its own (niceness cannot be undone): lowered to the option, never raised.
    code = (
        "import os; from workbench.worker import apply_niceness; base = os.nice(0); want = min(base + 3, 19); "
        "apply_niceness(want); a = os.nice(0); apply_niceness(base); print(want, a, os.nice(0))"
    )
    want, got, after = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert got == want and after == want
