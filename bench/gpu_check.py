"""GRPO steps on random-initialised models of real sizes, for a bare GPU machine (scripts/gpu_check.sh).

Needs only torch, transformers and peft (no store, UI, vLLM or network): the model is built from a config
(SmolLM2-135M's shape; a 1.5B-class shape like Qwen2.5-1.5B's, as a Llama), the tokenizer is the test
suite's tiny BPE (ids it does not know decode to nothing, so replies are short garbage: this measures speed,
not learning), and each step is the trainer's own path: HF engine rollouts of G samples for each prompt,
the built-in verifier, group advantages, `policy_update` with LoRA. Rewards get a little seeded noise
so that every group has a spread and the update runs on every row, as in a learning run. With trl and
datasets importable, each shape also runs the same steps through TRL's GRPOTrainer (same model, batch, LoRA
and verifier) for the comparison.

    python bench/gpu_check.py --models smollm2-135m,1.5b --steps 5 --out gpu_check/grpo.json
    python bench/gpu_check.py --smoke        (tiny model, CPU, 2 steps: what the test suite runs)
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

SHAPES = {  # LlamaConfig keywords
    "smoke": dict(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=512,
    ),
    "smollm2-135m": dict(
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=30,
        num_attention_heads=9,
        num_key_value_heads=3,
        vocab_size=49152,
    ),
    "1.5b": dict(
        hidden_size=1536,
        intermediate_size=8960,
        num_hidden_layers=28,
        num_attention_heads=12,
        num_key_value_heads=2,
        vocab_size=151936,
    ),
}
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj"]


def build_model(shape: str, device: torch.device, dtype: torch.dtype):
    """A random-initialised Llama of `shape` and the suite's tiny tokenizer (no hub, no network)."""
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    from workbench.testing import build_tiny_tokenizer

    tok = build_tiny_tokenizer()
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    cfg = LlamaConfig(
        **SHAPES[shape],
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        rope_theta=10000.0,
        bos_token_id=tok.convert_tokens_to_ids("<|im_start|>"),
        eos_token_id=eos,
        pad_token_id=eos,
    )
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(cfg).to(dtype)
    model.generation_config = GenerationConfig(eos_token_id=eos, pad_token_id=eos)
    return model, tok


def build_policy(shape: str, device: torch.device, dtype: torch.dtype, lora_r: int):
    from peft import LoraConfig, get_peft_model

    from workbench.models import Policy

    model, tok = build_model(shape, device, dtype)
    model = get_peft_model(model, LoraConfig(r=lora_r, lora_alpha=2 * lora_r, target_modules=LORA_TARGETS))
    model.to(device).eval()
    return Policy(model, tok, f"random-{shape}", "lora")


def run(
    shape: str,
    steps: int,
    device: torch.device,
    dtype: torch.dtype,
    prompts: int,
    group: int,
    max_tokens: int,
) -> dict:
    from workbench.config import Config
    from workbench.envs import env_for_config
    from workbench.learn import grpo
    from workbench.learn.update import policy_update, update_items
    from workbench.rollout.hf import HFEngine
    from workbench.rollout.runner import Sampling, run_rollouts
    from workbench.tasks import load_task_source
    from workbench.verifiers import get_verifier

    t0 = time.perf_counter()
    policy = build_policy(shape, device, dtype, lora_r=16)
    build_s = time.perf_counter() - t0
    cfg = Config(num_generations_per_prompt=group, prompts_per_step=prompts, max_completion_length=max_tokens)
    env, engine = env_for_config(cfg), HFEngine(policy)
    verifier = get_verifier(cfg.reward)
    tasks = load_task_source(cfg.tasks, "train")
    opt = torch.optim.AdamW(policy.trainable_parameters(), lr=1e-5)
    rng = random.Random(0)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    rows = []
    for step in range(1, steps + 1):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t1 = time.perf_counter()
        groups = run_rollouts(
            engine,
            policy.tokenizer,
            env,
            rng.sample(tasks, prompts),
            group,
            Sampling(max_tokens, 1.0, 1.0),
            stop_token_ids=policy.eos_token_ids,
            seed=step,
        )
        t2 = time.perf_counter()
        episodes = []
        for grp in groups:
            scores = verifier.score_many([(r.output, r.task) for r in grp], timeout_s=5.0)
            rewards = torch.tensor([s.total + rng.gauss(0, 0.1) for s in scores], dtype=torch.float64)
            adv = grpo.group_advantages(rewards, len(grp)).tolist()
            episodes += list(zip(grp, adv, strict=True))
        items, n_seqs = update_items(episodes, cfg)
        out = policy_update(policy, opt, cfg, items, n_seqs, temperature=1.0, lr=1e-5)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t3 = time.perf_counter()
        tokens = sum(r.completion_tokens for grp in groups for r in grp)
        rows.append(
            {
                "step": step,
                "step_s": t3 - t1,
                "rollout_s": t2 - t1,
                "update_s": t3 - t2,
                "completion_tokens": tokens,
                "rollout_tokens_per_s": tokens / (t2 - t1),
                "loss": out.get("loss"),
                "update_tokens": out.get("update_tokens"),
            }
        )
        print(
            f"{shape} step {step}: {t3 - t1:.2f} s (rollout {t2 - t1:.2f}, update {t3 - t2:.2f}), "
            f"{tokens} tokens, {tokens / (t2 - t1):.0f} tok/s",
            flush=True,
        )
    later = rows[1:] or rows  # the first step pays the warm-up (kernels, allocator)
    return {
        "model": shape,
        "params": sum(p.numel() for p in policy.model.parameters()),
        "trainable": policy.num_trainable,
        "device": str(device),
        "dtype": str(dtype).removeprefix("torch."),
        "prompts_per_step": prompts,
        "group": group,
        "max_completion_length": max_tokens,
        "build_s": build_s,
        "mean_step_s": sum(r["step_s"] for r in later) / len(later),
        "mean_rollout_tokens_per_s": sum(r["rollout_tokens_per_s"] for r in later) / len(later),
        "peak_cuda_mem_gib": torch.cuda.max_memory_allocated(device) / 2**30
        if device.type == "cuda"
        else None,
        "steps": rows,
    }


def run_trl(
    shape: str,
    steps: int,
    device: torch.device,
    dtype: torch.dtype,
    prompts: int,
    group: int,
    max_tokens: int,
) -> dict:
    """The same model, batch and LoRA through TRL's GRPOTrainer (its own generate rollouts and update), timed
    per step from on_step_begin to on_step_end. Needs trl and datasets (wheels carried to a bare machine)."""
    import tempfile

    from datasets import Dataset
    from peft import LoraConfig
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from workbench.envs import Harness, SingleTurnEnv
    from workbench.tasks import load_task_source
    from workbench.verifiers import get_verifier

    work = Path(tempfile.mkdtemp(prefix="gpu_check_trl_"))
    model, tok = build_model(
        shape, torch.device("cpu"), dtype
    )  # TRL loads it from the folder onto its device
    model.save_pretrained(work / "model")
    tok.save_pretrained(work / "model")
    del model
    harness, verifier = Harness(), get_verifier("tool_call_gated")
    env, tasks, rng = SingleTurnEnv(harness), load_task_source("builtin:calendar", "train"), random.Random(0)
    ds = Dataset.from_list(
        [
            {
                "prompt": tok.apply_chat_template(
                    harness.messages(t), add_generation_prompt=True, tokenize=False
                )
                + harness.prefill_for(t),
                "task_index": i,
            }
            for i, t in enumerate(tasks)
        ]
    )

    def reward(prompts, completions, task_index, **_):  # noqa: ANN001, ANN202 - TRL's reward signature
        pairs = []
        for completion, i in zip(completions, task_index, strict=True):
            episode = env.start(tasks[i])
            episode.step(completion)
            pairs.append((episode.output(), tasks[i]))
        return [s.total + rng.gauss(0, 0.1) for s in verifier.score_many(pairs, timeout_s=5.0)]  # as run()

    class StepTimer(TrainerCallback):
        def __init__(self) -> None:
            self.t0, self.rows, self.logs = 0.0, [], []

        def _sync(self) -> None:
            if device.type == "cuda":
                torch.cuda.synchronize(device)

        def on_step_begin(self, *_a, **_k) -> None:
            self._sync()
            self.t0 = time.perf_counter()

        def on_step_end(self, *_a, **_k) -> None:
            self._sync()
            self.rows.append({"step": len(self.rows) + 1, "step_s": time.perf_counter() - self.t0})

        def on_log(self, _args, _state, _control, logs=None, **_k) -> None:  # noqa: ANN001
            if logs and "completions/mean_length" in logs:
                self.logs.append(logs["completions/mean_length"])

    timer = StepTimer()
    args = GRPOConfig(
        output_dir=str(work / "out"),
        use_cpu=device.type == "cpu",
        bf16=dtype == torch.bfloat16,
        num_generations=group,
        per_device_train_batch_size=prompts * group,
        max_completion_length=max_tokens,
        max_steps=steps,
        learning_rate=1e-5,
        temperature=1.0,
        report_to=[],
        logging_steps=1,
        save_strategy="no",
        seed=0,
        disable_tqdm=True,
        model_init_kwargs={"dtype": dtype},
    )
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    t0 = time.perf_counter()
    trainer = GRPOTrainer(
        model=str(work / "model"),
        args=args,
        train_dataset=ds,
        processing_class=tok,
        reward_funcs=[reward],
        callbacks=[timer],
        peft_config=LoraConfig(r=16, lora_alpha=32, target_modules=LORA_TARGETS),
    )
    build_s = time.perf_counter() - t0
    trainer.train()
    for row, mean_len in zip(timer.rows, timer.logs, strict=False):
        row["completion_tokens"] = round(mean_len * prompts * group)
        row["tokens_per_s"] = row["completion_tokens"] / row["step_s"]
        print(
            f"trl {shape} step {row['step']}: {row['step_s']:.2f} s, {row['completion_tokens']} tokens",
            flush=True,
        )
    later = timer.rows[1:] or timer.rows
    return {
        "model": shape,
        "trainer": "trl",
        "device": str(device),
        "dtype": str(dtype).removeprefix("torch."),
        "prompts_per_step": prompts,
        "group": group,
        "max_completion_length": max_tokens,
        "build_s": build_s,
        "mean_step_s": sum(r["step_s"] for r in later) / len(later),
        "peak_cuda_mem_gib": torch.cuda.max_memory_allocated(device) / 2**30
        if device.type == "cuda"
        else None,
        "steps": timer.rows,
    }


def _trl_installed() -> bool:
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in ("trl", "datasets"))


def main(argv: list[str] | None = None) -> int:
    from workbench.devices import resolve_device, resolve_dtype

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="smollm2-135m,1.5b", help=f"comma-separated, of {sorted(SHAPES)}")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument(
        "--trl",
        choices=["auto", "on", "off"],
        default="auto",
        help="also time TRL's GRPOTrainer on each shape (auto: when trl and datasets import)",
    )
    ap.add_argument(
        "--smoke", action="store_true", help="tiny model on the CPU, 2 steps (the test suite's check)"
    )
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    if args.smoke:
        args.models, args.steps, args.device, args.prompts, args.group, args.max_tokens = (
            "smoke",
            2,
            "cpu",
            2,
            2,
            8,
        )
    device = resolve_device(args.device)
    dtype = resolve_dtype(args.dtype, device)
    with_trl = args.trl == "on" or (args.trl == "auto" and _trl_installed())
    results: list[dict] = []
    trl_results: list[dict] = []

    def write() -> (
        None
    ):  # after every model: a run cut off by the machine's time limit keeps what it measured
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else None
            args.out.write_text(
                json.dumps(
                    {
                        "torch": torch.__version__,
                        "gpu": gpu,
                        "results": results,
                        "trl": trl_results if with_trl else "not installed",
                    },
                    indent=1,
                )
            )

    for shape in args.models.split(","):
        results.append(run(shape, args.steps, device, dtype, args.prompts, args.group, args.max_tokens))
        write()
        if device.type == "cuda":
            torch.cuda.empty_cache()
        if with_trl:
            trl_results.append(
                run_trl(shape, args.steps, device, dtype, args.prompts, args.group, args.max_tokens)
            )
            write()
            if device.type == "cuda":
                torch.cuda.empty_cache()

    def mem(r: dict) -> str:
        return f", peak CUDA {r['peak_cuda_mem_gib']:.2f} GiB" if r["peak_cuda_mem_gib"] is not None else ""

    for r in results:
        print(
            f"{r['model']}: {r['params'] / 1e6:.0f}M params on {r['device']} ({r['dtype']}): "
            f"{r['mean_step_s']:.2f} s/step, {r['mean_rollout_tokens_per_s']:.0f} rollout tok/s{mem(r)}"
        )
    for r in trl_results:
        print(f"{r['model']} with TRL's GRPOTrainer: {r['mean_step_s']:.2f} s/step{mem(r)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
