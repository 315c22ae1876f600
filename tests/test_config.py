import pytest

from workbench.config import Config, ConfigError, config_from_dict, load_config


def write(tmp_path, text):
    p = tmp_path / "run.yaml"
    p.write_text(text)
    return p


def test_seed_keys_load(tmp_path):
    cfg = load_config(write(tmp_path, """
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
"""))
    assert cfg.algorithm == "dapo" and cfg.lora.r == 8 and cfg.lora.alpha == 16 and cfg.harness.prefill == ""
    assert cfg.learning_rate == 1.0 and isinstance(cfg.learning_rate, float)
    assert cfg.checkpoint_every == 10


def test_defaults_match_trl_where_named_alike():
    from workbench.trainer import clip_range, reward_scaling

    cfg = Config()
    assert (cfg.beta, cfg.num_generations_per_prompt, cfg.temperature, cfg.num_iterations) == (0.0, 8, 1.0, 1)
    assert clip_range(cfg) == (0.2, 0.2) and reward_scaling(cfg) == "group"
    assert reward_scaling(Config(algorithm="dr_grpo")) == "none"  # the preset's, unless set
    assert reward_scaling(Config(algorithm="dr_grpo", scale_rewards="group")) == "group"
    assert clip_range(Config(algorithm="dapo")) == (0.2, 0.28)
    assert clip_range(Config(algorithm="gspo")) == (3e-4, 4e-4)
    assert clip_range(Config(algorithm="gspo", epsilon=0.01)) == (0.01, 0.01)


def test_intervals_must_be_positive():
    with pytest.raises(ConfigError, match="eval_interval: must be >= 1"):
        config_from_dict({"eval_interval": 0})


def test_unknown_key_names_file_line_and_nearest(tmp_path):
    p = write(tmp_path, "model: smollm2-135m\nnum_generation_per_prompt: 8\n")
    with pytest.raises(ConfigError, match=r"run\.yaml:2: unknown key 'num_generation_per_prompt'; did you mean 'num_generations_per_prompt'"):
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
    with pytest.raises(ConfigError, match=r"run\.yaml: algorithm: 'ppo' is not one of"):
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
