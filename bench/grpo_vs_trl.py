"""Our GRPO trainer vs TRL's GRPOTrainer: the same step on the same inputs, timed in one run, alternating.

    .venv/bin/python bench/grpo_vs_trl.py            # defaults = the real measurement (quiet machine)
    .venv/bin/python bench/grpo_vs_trl.py --steps 1 --rounds 1 --max-completion-length 8   # smoke run
    .venv/bin/python bench/grpo_vs_trl.py --model qwen2.5-coder-0.5b   # the 0.5B in its native tool format

What is compared (identical on both sides unless noted):
- model (`--model`, default smollm2-135m): `resolve_model(NAME)`, float32, CPU, LoRA r=16, alpha=32,
  dropout 0 on q,k,v,o; AdamW at the same constant learning rate, weight decay 0, grad-norm clip 1.0. The
  tool format is the one our Config picks for that model (`tool_format` unset): json for the embedded
  SmolLM2-135M-Instruct, native for the packaged Qwen2.5-Coder models (qwen2.5-coder-0.5b, -1.5b).
- prompts: the first prompts_per_step * steps tasks of `builtin_tasks("train")`, in that fixed order (step k
  trains on tasks [(k-1)*P, k*P)), as the environment our Trainer builds for that config
  (`env_for_config`) starts them, rendered as its rollout renders a first turn (`first_prompt`). json: our
  default Harness (system prompt with tool specs, one-shot example, assistant prefill '{"tool": "').
  native: the model's own chat template with the tasks' tools as OpenAI function specs (Qwen: in its
  system turn, Hermes `<tool_call>` instructions), the task as the user turn, no prefill. TRL gets each
  prompt as a plain string: chat template (with those tools, if any) and add_generation_prompt=True, then
  the prefill; a plain string, so TRL runs no tool loop of its own. The script checks that TRL's tokenisation
  of that string gives exactly our ids, and that the prompt ids TRL generated from (its
  `_generate_and_score_completions` output, unpadded) are those ids, and reports any prompt where not.
- reward: our tool_call_verifier on an episode of that same environment (episode.step(completion);
  verifier.score): the json harness's parser after the prefill, or for native the template's parser
  (`tool_parser` auto: hermes for Qwen) on the reply, both decoded with skip_special_tokens on both sides.
  It is wrapped as a TRL reward function that finds the task by a `task_id` dataset column. A verifier
  error is None for TRL (left out of the group statistics, advantage 0, but the row stays in the loss
  normaliser); our trainer drops such a row from the update altogether. The built-in verifier does not
  error in practice.
- GRPO: G completions per prompt, max_completion_length, temperature 1.0, top_p 1.0 (no top_k), beta 0,
  num_iterations 1, epsilon 0.2, loss_type "grpo", scale_rewards "group"; TRL with
  per_device_train_batch_size = G * prompts_per_step, gradient_accumulation_steps 1, no vLLM (it generates
  with transformers `generate`, its default on CPU), no shuffling, no logging/eval/saving, bf16 off.
  TRL's gradient_checkpointing defaults to True in GRPOConfig; it is off here (our trainer does not
  checkpoint either, and recomputing activations would only slow TRL down); `--trl-gradient-checkpointing`
  turns it on.
- not identical: the sampling RNG streams (so completions and their lengths differ; tokens/s normalises
  that), and where each side spends time (ours shares the prompt prefill across the G samples and the harness
  prefix in the update; TRL prefills and back-propagates every row's full prompt).

Timing. Each framework runs in its own fresh subprocess (`--phase ours|trl`, printing one JSON line), in the
order ours, trl, ours, trl, ... (`--rounds`), so peak RSS (ru_maxrss) is per framework. Ours: the
Trainer's own step metrics rollout_time_s (generation + scoring), update_time_s, step_time_s (also writes
the step to the store). TRL: the step is timed by a TrainerCallback (on_step_begin -> on_step_end), the
rollout by wrapping the instance's `_generate_and_score_completions` (generation + rewards + advantages);
update = step - rollout. Tokens/s = completion tokens generated (EOS included, TRL's completion_mask) /
rollout time. The parent prints a table and the ratio ours/TRL of the median step, rollout and update
times (goal: step <= 0.5x), and writes everything to --out (default docs/grpo_vs_trl.json; with another
--model, docs/grpo_vs_trl_<model>.json). It also checks that both sides scored with the same tool format and
parser (the Trainer's env, bound to its tokenizer, and the one the TRL reward function was built with).

Loss check (`--phase loss-check`, run first). The same peft model (LoRA B perturbed so gradients reach A),
2 prompts x --check-g (default 4) fixed completions (token ids from plausible replies in the run's tool
format, varied lengths, some ending in EOS) and fixed rewards. Advantages: ours (`grpo.group_advantages`)
vs TRL's formula (nanstd, +1e-4). Loss: TRL's own `GRPOTrainer._compute_loss(model, inputs)` with `inputs`
built as TRL 1.16's `_generate_and_score_completions` returns them (left-padded prompt_ids/prompt_mask,
right-padded completion_ids/completion_mask, advantages, num_items_in_batch, old_per_token_logps when given)
vs ours (`logprobs.sequence_logprobs` + `grpo.policy_loss`, as `Trainer._update` calls them), for loss_type
grpo, dapo, dr_grpo, bnpo, each with old = detached (ratio 1, num_iterations 1) and with a perturbed
old_per_token_logps (ratio != 1, clipping active). TRL's log-prob pass (its own
`_get_per_token_logps_and_entropies`) runs once and is reused across the 8 cases (it does not depend on
loss_type), to keep the check cheap. Reported: |loss_TRL - loss_ours| (PASS < 1e-5), max |d loss/d logp|
difference, per-token log-prob and entropy (a logged metric only) differences, a float64 reference for the
row where the two sides' log-probs differ most (which side is off), and for grpo at ratio 1 (the training
case, where the loss value itself is just -mean(A)) the LoRA parameter gradients of both through their own
forward passes.

Memory. TRL keeps every row's whole graph, prompt included, through its update, and the loss check holds
TRL's and ours at once: both grow with the model's size and the prompt length. qwen2.5-coder-0.5b's native
prompts (~740 tokens: the tool specs rendered as JSON) on its 24 x 896-wide layers need far more memory than
the 135M at the same --g and --check-g; on a small machine lower those, or take --trl-gradient-checkpointing
(which changes what TRL's step costs, so say so with the numbers).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere: the repo is not pip-installed
    sys.path.insert(0, str(ROOT))

DEFAULT_MODEL = "smollm2-135m"  # the embedded model: json harness
LORA = {"r": 16, "alpha": 32, "dropout": 0.0, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}
LOSS_TYPES = ("grpo", "dapo", "dr_grpo", "bnpo")
RESULT_KEY = "grpo_vs_trl"  # every child's JSON line carries it, so the parent finds it among library noise


# ----- shared inputs ---------------------------------------------------------------------------------------
def bench_tasks(n: int) -> list[Any]:
    from workbench.domains.calendar import builtin_tasks

    tasks = builtin_tasks("train")
    if n > len(tasks):
        raise SystemExit(f"need {n} training tasks, builtin_tasks('train') has {len(tasks)}")
    return tasks[:n]


def bench_config(a: argparse.Namespace, output_dir: str = "runs") -> Any:
    """Our run config for the bench: what the ours phase trains with, and (through `bench_env`) what both
    sides' prompts and rewards come from. `tool_format` is left unset: the Config picks the model's own (json
    for the embedded SmolLM2, native for the packaged Qwen models), as a user's run of that model would."""
    from workbench.config import config_from_dict

    return config_from_dict(
        {
            "model": a.model,
            "algorithm": "grpo",
            "loss_type": "grpo",
            "num_generations_per_prompt": a.g,
            "prompts_per_step": a.prompts_per_step,
            "max_completion_length": a.max_completion_length,
            "max_steps": a.steps,
            "learning_rate": a.lr,
            "temperature": 1.0,
            "top_p": 1.0,
            "beta": 0.0,
            "num_iterations": 1,
            "epsilon": 0.2,
            "scale_rewards": "group",
            "weight_decay": 0.0,
            "max_grad_norm": 1.0,
            "dtype": "float32",
            "lora": dict(LORA),
            "seed": a.seed,
            "sft_steps": 0,
            "rollout": "hf",
            "reward": "tool_call_verifier",
            "env": "single_turn",
            "output_dir": output_dir,
        }
    )


def bench_env(a: argparse.Namespace, tokenizer: Any) -> Any:
    """The environment our Trainer builds for the bench config (json: SingleTurnEnv with the default Harness;
    native: NativeEnv with the parser read from this tokenizer's chat template, as `bind_tokenizer` does)."""
    from workbench.envs import env_for_config

    return env_for_config(bench_config(a), tokenizer)


def prompt_ids(tokenizer: Any, episode: Any) -> list[int]:
    """Our prompt ids: what the rollout runner samples from on an episode's first turn."""
    from workbench.rollout.turn_tokens import first_prompt

    return first_prompt(tokenizer, episode)


def prompt_text(tokenizer: Any, episode: Any) -> str:
    """What TRL gets: the chat template (with the episode's tools, as `render_prompt` passes them: only when
    there are any) with the assistant turn opened, then the prefill, as one string."""
    tools = getattr(episode, "tools", None)
    kw = {"tools": tools} if tools else {}
    text = tokenizer.apply_chat_template(episode.messages, tokenize=False, add_generation_prompt=True, **kw)
    return text + episode.prefill


def check_prompt_tokens(tokenizer: Any, env: Any, tasks: list[Any]) -> dict[str, Any]:
    """TRL tokenises the plain string (`processing_class(text=prompts)`); ours is `render_prompt` (template and
    prefill tokenised separately). Report any prompt where BPE merges across the boundary make them differ."""
    mismatched = []
    lengths = []
    for t in tasks:
        episode = env.start(t)
        ours = prompt_ids(tokenizer, episode)
        theirs = list(tokenizer(text=[prompt_text(tokenizer, episode)])["input_ids"][0])
        lengths.append(len(ours))
        if ours != theirs:
            mismatched.append({"task": t.id, "ours_len": len(ours), "trl_len": len(theirs)})
    return {"prompts": len(tasks), "mismatched": mismatched, "prompt_tokens": lengths}


def load_hf(model_name: str) -> tuple[Any, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from workbench.models import resolve_model

    path = resolve_model(model_name)
    tok = AutoTokenizer.from_pretrained(path)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    return tok, model


def lora_config() -> Any:
    from peft import LoraConfig

    return LoraConfig(
        r=LORA["r"],
        lora_alpha=LORA["alpha"],
        lora_dropout=LORA["dropout"],
        target_modules=list(LORA["target_modules"]),
        bias="none",
        task_type="CAUSAL_LM",
    )


def trl_config(a: argparse.Namespace, out_dir: str, loss_type: str = "grpo") -> Any:
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=out_dir,
        per_device_train_batch_size=a.g * a.prompts_per_step,
        num_generations=a.g,
        gradient_accumulation_steps=1,
        max_completion_length=a.max_completion_length,
        max_steps=a.steps,
        learning_rate=a.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        beta=0.0,
        num_iterations=1,
        epsilon=0.2,
        loss_type=loss_type,
        scale_rewards="group",
        bf16=False,
        fp16=False,
        use_cpu=True,
        use_vllm=False,
        gradient_checkpointing=a.trl_gradient_checkpointing,
        shuffle_dataset=False,
        seed=a.seed,
        report_to=[],
        logging_strategy="no",
        save_strategy="no",
        eval_strategy="no",
        disable_tqdm=True,
        log_completions=False,
        dataloader_num_workers=0,
    )


def make_reward(env: Any, tasks: list[Any]) -> Any:
    """Our verifier on an episode of `env` (`bench_env`) as a TRL reward function (TRL passes dataset columns
    as kwargs)."""
    from workbench.verifiers import get_verifier

    by_id = {t.id: t for t in tasks}
    verifier = get_verifier("tool_call_verifier")
    seen: list[list[float]] = []

    def tool_call_verifier(prompts: list[str], completions: list[str], task_id: list[str], **_: Any) -> list:
        out: list[float | None] = []
        for text, tid in zip(completions, task_id, strict=True):
            task = by_id[tid]
            episode = env.start(task)
            episode.step(text)
            score = verifier.score(episode.output(), task)
            out.append(None if score.error else score.total)
        seen.append([r for r in out if r is not None])
        return out

    tool_call_verifier.seen = seen  # type: ignore[attr-defined]
    return tool_call_verifier


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def emit(result: dict[str, Any]) -> None:
    result[RESULT_KEY] = True
    print(json.dumps(result), flush=True)


# ----- phase: ours -----------------------------------------------------------------------------------------
def run_ours(a: argparse.Namespace) -> None:
    import torch

    import store
    from workbench.trainer import Trainer

    tasks = bench_tasks(a.prompts_per_step * a.steps)
    tmp = Path(tempfile.mkdtemp(prefix="bench-ours-"))
    cfg = bench_config(a, str(tmp / "runs"))
    t0 = time.perf_counter()
    trainer = Trainer(cfg, store.open_db(tmp / "bench.db"))
    load_s = time.perf_counter() - t0
    # Same tasks, same order as TRL's unshuffled RepeatSampler: step k trains on tasks [(k-1)P, kP).
    trainer.train_tasks = trainer.sft_tasks = trainer.rl_tasks = tasks
    pps = a.prompts_per_step
    trainer._step_tasks = lambda step: tasks[(step - 1) * pps : step * pps]  # type: ignore[method-assign]
    steps = []
    for i in range(a.steps):
        m = trainer.train_step()  # no baseline eval, no SFT, no checkpoint: the GRPO step only
        tokens = round(m["completions/mean_length"] * a.g * pps)
        steps.append(
            {
                "step": i + 1,
                "step_s": m["step_time_s"],
                "rollout_s": m["rollout_time_s"],
                "update_s": m["update_time_s"],
                "completion_tokens": tokens,
                "reward_mean": m["reward"],
                "loss": m.get("loss"),
                "tasks": [t.id for t in trainer._step_tasks(i + 1)],
            }
        )
        print(
            f"[ours] step {i + 1}: {m['step_time_s']:.2f} s (rollout {m['rollout_time_s']:.2f}, "
            f"update {m['update_time_s']:.2f}), {tokens} tokens",
            file=sys.stderr,
            flush=True,
        )
    emit(
        {
            "phase": "ours",
            "steps": steps,
            "peak_rss_mb": peak_rss_mb(),
            "load_s": load_s,
            "torch_threads": torch.get_num_threads(),
            "eos_token_ids": trainer.policy.eos_token_ids,
            # What the Trainer's own env scored with: the parent checks TRL's reward used the same
            "tool_format": cfg.tool_format,
            "tool_parser": getattr(trainer.env, "parser", None),
        }
    )


# ----- phase: trl ------------------------------------------------------------------------------------------
def run_trl(a: argparse.Namespace) -> None:
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOTrainer

    tasks = bench_tasks(a.prompts_per_step * a.steps)
    t0 = time.perf_counter()
    tok, model = load_hf(a.model)
    env = bench_env(a, tok)
    prompt_check = check_prompt_tokens(tok, env, tasks)
    dataset = Dataset.from_list([{"prompt": prompt_text(tok, env.start(t)), "task_id": t.id} for t in tasks])
    reward = make_reward(env, tasks)

    class StepTimer(TrainerCallback):
        def __init__(self) -> None:
            self.begin = 0.0
            self.times: list[float] = []

        def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.begin = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.times.append(time.perf_counter() - self.begin)
            print(f"[trl] step {len(self.times)}: {self.times[-1]:.2f} s", file=sys.stderr, flush=True)

    timer = StepTimer()
    out_dir = tempfile.mkdtemp(prefix="bench-trl-")
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward,
        args=trl_config(a, out_dir),
        train_dataset=dataset,
        processing_class=tok,
        peft_config=lora_config(),
        callbacks=[timer],
    )
    load_s = time.perf_counter() - t0
    if trainer.use_vllm or trainer.use_transformers_continuous_batching:
        raise SystemExit("TRL must generate with transformers generate here")
    gen_s: list[float] = []
    gen_tokens: list[int] = []
    gen_prompts: list[tuple[Any, Any]] = []  # (prompt_ids, prompt_mask) per step, compared after training
    original = trainer._generate_and_score_completions

    def timed_generate(inputs: Any) -> Any:
        t = time.perf_counter()
        out = original(inputs)
        gen_s.append(time.perf_counter() - t)
        gen_tokens.append(int(out["completion_mask"].sum()))
        gen_prompts.append((out["prompt_ids"], out["prompt_mask"]))  # references only: nothing timed is added
        return out

    trainer._generate_and_score_completions = timed_generate  # type: ignore[method-assign]
    trainer.train()
    if not (len(timer.times) == len(gen_s) == a.steps):
        raise SystemExit(
            f"expected {a.steps} steps, timed {len(timer.times)} steps and {len(gen_s)} generations"
        )
    # The ids TRL actually generated from (after its own tokenisation, unpadded) against ours for the step's
    # tasks: the string check above covers the tokeniser, this any processing inside TRL as well.
    pps = a.prompts_per_step
    used_mismatch = []
    for i, (ids, mask) in enumerate(gen_prompts):
        used = {tuple(row[mrow.bool()].tolist()) for row, mrow in zip(ids, mask, strict=True)}
        ours = {tuple(prompt_ids(tok, env.start(t))) for t in tasks[i * pps : (i + 1) * pps]}
        if used != ours:
            used_mismatch.append(i + 1)
    prompt_check["generated_from_mismatched_steps"] = used_mismatch
    steps = []
    for i, (st, gs, nt) in enumerate(zip(timer.times, gen_s, gen_tokens, strict=True)):
        rewards = reward.seen[i]
        steps.append(
            {
                "step": i + 1,
                "step_s": st,
                "rollout_s": gs,
                "update_s": st - gs,
                "completion_tokens": nt,
                "reward_mean": sum(rewards) / len(rewards) if rewards else float("nan"),
            }
        )
    gen = trainer.generation_config
    with warnings.catch_warnings():  # transformers 5.24 renamed it (activation checkpointing) and warns
        warnings.simplefilter("ignore")
        checkpointing = bool(
            getattr(trainer.accelerator.unwrap_model(trainer.model), "is_gradient_checkpointing", False)
        )
    emit(
        {
            "phase": "trl",
            "steps": steps,
            "peak_rss_mb": peak_rss_mb(),
            "load_s": load_s,
            "torch_threads": torch.get_num_threads(),
            "eos_token_ids": list(trainer.eos_token_ids),
            "tool_format": bench_config(a).tool_format,
            "tool_parser": getattr(env, "parser", None),
            "prompt_token_check": prompt_check,
            "generation": {
                "backend": "transformers.generate",
                "do_sample": gen.do_sample,
                "temperature": gen.temperature,
                "top_p": gen.top_p,
                "top_k": gen.top_k,
                "max_new_tokens": gen.max_new_tokens,
            },
            "gradient_checkpointing": checkpointing,
        }
    )


# ----- phase: loss check -----------------------------------------------------------------------------------
REPLIES = [
    'calendar.create_event", "args": {"attendee": "Sam", "day": "Monday", "time": "14:00"}}',
    'email.send", "args": {"to": "Priya", "subject": "Quarterly report"}}',
    'reminders.create", "args": {"text": "call the dentist", "day": "Friday", "time": "2 PM"}} Sure!',
    'weather.get", "args": {"city": "Paris", "day": "Tuesday"}}',
    'calendar.cancel_event", "args": {"attendee": "Dana", "day": "Wednesday"}}',
    "I cannot help with that.",
]
# The same calls as a native (Hermes) reply, what Qwen writes after its template's assistant header
NATIVE_REPLIES = [
    '<tool_call>\n{"name": "calendar.create_event", "arguments": {"attendee": "Sam", "day": "Monday", '
    '"time": "14:00"}}\n</tool_call>',
    '<tool_call>\n{"name": "email.send", "arguments": {"to": "Priya", "subject": "Quarterly report"}}\n</tool_call>',
    '<tool_call>\n{"name": "reminders.create", "arguments": {"text": "call the dentist", "day": "Friday", '
    '"time": "2 PM"}}\n</tool_call> Sure!',
    '<tool_call>\n{"name": "weather.get", "arguments": {"city": "Paris", "day": "Tuesday"}}\n</tool_call>',
    '<tool_call>\n{"name": "calendar.cancel_event", "arguments": {"attendee": "Dana", "day": "Wednesday"}}\n'
    "</tool_call>",
    "I cannot help with that.",
]


def fixed_batch(
    tok: Any, replies: list[str], n: int, max_len: int, seed: int
) -> tuple[list[list[int]], list[float]]:
    """n completions (token ids of `replies`, varied lengths 1..max_len, most ending in EOS) and n rewards."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    eos = tok.eos_token_id
    comps = []
    for i in range(n):
        ids = list(tok(replies[i % len(replies)], add_special_tokens=False)["input_ids"]) + [eos]
        length = int(torch.randint(1, max_len + 1, (1,), generator=gen))
        comps.append(ids[:length])
    choices = [-1.0, 0.0, 0.4, 0.6, 0.8, 1.0]  # the verifier's typical totals; every group gets a spread
    rewards = [choices[(3 * i + i // 2) % len(choices)] for i in range(n)]
    return comps, rewards


def fp64_logps(model_name: str, pmodel: Any, prompt: list[int], comp: list[int]) -> Any:
    """Log-probs of one unpadded row under a float64 copy of the peft model (a fresh, unpatched model with the
    same adapter weights: a deepcopy would keep TRL's fused-forward patch, which calls the float32 original)."""
    import torch
    from peft import get_peft_model, get_peft_model_state_dict, set_peft_model_state_dict

    _, base = load_hf(model_name)
    ref = get_peft_model(base.double(), lora_config())
    res = set_peft_model_state_dict(
        ref, {k: v.double() for k, v in get_peft_model_state_dict(pmodel).items()}
    )
    if res.unexpected_keys:
        raise SystemExit(f"fp64 reference: unexpected adapter keys {res.unexpected_keys[:3]}")
    ref.eval()
    with torch.no_grad():
        logits = ref(input_ids=torch.tensor([prompt + comp])).logits[
            0, len(prompt) - 1 : len(prompt) - 1 + len(comp)
        ]
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(comp)[:, None]).squeeze(-1)


def run_loss_check(a: argparse.Namespace) -> None:
    import torch
    from datasets import Dataset
    from trl import GRPOTrainer
    from trl.trainer.utils import nanstd, pad

    from workbench.learn import grpo
    from workbench.learn.logprobs import sequence_logprobs

    g, max_len = a.check_g, a.max_completion_length
    tasks = bench_tasks(2)
    tok, model = load_hf(a.model)
    env = bench_env(a, tok)
    dataset = Dataset.from_list([{"prompt": prompt_text(tok, env.start(t)), "task_id": t.id} for t in tasks])
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=make_reward(env, tasks),
        args=trl_config(a, tempfile.mkdtemp()),
        train_dataset=dataset,
        processing_class=tok,
        peft_config=lora_config(),
    )
    pmodel = trainer.model
    gen = torch.Generator().manual_seed(a.seed + 1)
    with torch.no_grad():  # LoRA B starts at 0: perturb it so the adapter changes logps and A gets gradients
        for name, p in pmodel.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.02)
    pmodel.train()  # as in training: TRL's "train" normalisers (dropout is 0 everywhere)
    trainer.current_gradient_accumulation_steps = 1  # set by HF's training loop; 1 here as in the bench

    prompts = [prompt_ids(tok, env.start(t)) for t in tasks]
    prompt_rows = [p for p in prompts for _ in range(g)]  # TRL's RepeatSampler order: a group's rows together
    replies = NATIVE_REPLIES if bench_config(a).tool_format == "native" else REPLIES
    comps, rewards_list = fixed_batch(tok, replies, 2 * g, max_len, a.seed)
    pad_id = tok.pad_token_id

    # Advantages: ours vs TRL's formula (sum_then_normalize, scale_rewards="group"), float32 as TRL.
    rewards = torch.tensor(rewards_list, dtype=torch.float32)
    grouped = rewards.view(-1, g)
    adv_trl = (
        (grouped - torch.nanmean(grouped, dim=1, keepdim=True)) / (nanstd(grouped, dim=1).unsqueeze(1) + 1e-4)
    ).view(-1)
    adv_ours = grpo.group_advantages(rewards.double(), g, scale_rewards="group").float()
    adv_diff = float((adv_trl - adv_ours).abs().max())

    # TRL's inputs, exactly as _generate_and_score_completions builds them (pad_to_multiple_of is None on CPU).
    p_t = [torch.tensor(p) for p in prompt_rows]
    c_t = [torch.tensor(c) for c in comps]
    completion_mask = pad([torch.ones_like(c) for c in c_t], padding_value=0, padding_side="right")
    inputs = {
        "prompt_ids": pad(p_t, padding_value=pad_id, padding_side="left"),
        "prompt_mask": pad([torch.ones_like(p) for p in p_t], padding_value=0, padding_side="left"),
        "completion_ids": pad(c_t, padding_value=pad_id, padding_side="right"),
        "completion_mask": completion_mask,
        "advantages": adv_trl,
        "num_items_in_batch": completion_mask.sum(),
    }
    mask = completion_mask.float()
    total_tokens = int(completion_mask.sum())

    real_logps = trainer._get_per_token_logps_and_entropies
    cached: dict[str, Any] = {}

    def logps_once(*args: Any, **kw: Any) -> Any:  # TRL's own pass, run once, reused across the 8 cases
        if "out" not in cached:
            cached["out"] = real_logps(*args, **kw)
        return cached["out"]

    trainer._get_per_token_logps_and_entropies = logps_once  # type: ignore[method-assign]

    t0 = time.perf_counter()
    logps_o, mask_o, ent_o = sequence_logprobs(
        pmodel, prompt_rows, comps, 1.0, pad_token_id=pad_id, return_entropy=True
    )
    ours_fwd_s = time.perf_counter() - t0
    if tuple(logps_o.shape) != tuple(completion_mask.shape):
        raise SystemExit(f"shape mismatch: ours {tuple(logps_o.shape)} vs TRL {tuple(completion_mask.shape)}")

    cases = []
    old_perturbed = None
    trl_fwd_s = 0.0
    for old_mode in ("detached", "perturbed"):
        for lt in LOSS_TYPES:
            trainer.loss_type = lt
            case_inputs = dict(inputs)
            if old_mode == "perturbed":
                case_inputs["old_per_token_logps"] = old_perturbed
            t0 = time.perf_counter()
            loss_trl = trainer._compute_loss(pmodel, case_inputs)
            trl_fwd_s = max(trl_fwd_s, time.perf_counter() - t0)  # the first call holds TRL's forward
            logps_t, ent_t, _ = cached["out"]
            if old_perturbed is None:  # shift old logps by N(0, 0.2): ratios spread around 1, clipping active
                noise = torch.randn(logps_t.shape, generator=gen) * 0.2
                old_perturbed = (logps_t.detach() + noise) * mask
            old_o = logps_o.detach() if old_mode == "detached" else old_perturbed
            loss_ours, _ = grpo.policy_loss(
                logps_o,
                old_o,
                adv_trl,
                mask_o.float(),
                loss_type=lt,
                importance_sampling_level="token",
                epsilon_low=0.2,
                epsilon_high=0.2,
                beta=0.0,
                max_completion_length=max_len,
                num_items_in_batch=total_tokens if lt == "dapo" else None,
            )
            (g_t,) = torch.autograd.grad(loss_trl, logps_t, retain_graph=True)
            (g_o,) = torch.autograd.grad(loss_ours, logps_o, retain_graph=True)
            loss_trl_v, loss_ours_v = float(loss_trl.detach()), float(loss_ours.detach())
            diff = abs(loss_trl_v - loss_ours_v)
            ratio = torch.exp(
                logps_t.detach() - (logps_t.detach() if old_mode == "detached" else old_perturbed)
            )
            clipped = float((((ratio < 0.8) | (ratio > 1.2)).float() * mask).sum() / mask.sum())
            cases.append(
                {
                    "loss_type": lt,
                    "old": old_mode,
                    "loss_trl": loss_trl_v,
                    "loss_ours": loss_ours_v,
                    "abs_diff": diff,
                    "dloss_dlogp_max_diff": float(((g_t - g_o) * mask).abs().max()),
                    "frac_tokens_outside_clip": clipped,
                    "pass": diff < a.tol,
                }
            )
    logps_t, ent_t, _ = cached["out"]
    m = completion_mask.bool()
    gap = ((logps_t.detach() - logps_o.detach()) * mask).abs()
    logp_diff = float(gap.max())
    ent_diff = float((ent_t.detach() - ent_o.detach())[m].abs().max())
    # Who is closer to exact on the row where the two differ most: a float64 reference.
    w = int(gap.max(dim=1).values.argmax())
    n_w = len(comps[w])
    ref64 = fp64_logps(a.model, pmodel, prompt_rows[w], comps[w])
    worst_row = {
        "row": w,
        "left_padded_by_trl": int(inputs["prompt_ids"].shape[1] - len(prompt_rows[w])),
        "max_abs_err_trl_vs_fp64": float((logps_t.detach()[w, :n_w].double() - ref64).abs().max()),
        "max_abs_err_ours_vs_fp64": float((logps_o.detach()[w, :n_w].double() - ref64).abs().max()),
    }

    # Parameter gradients for the training case (grpo, ratio 1): each side backward through its own forward.
    params = [(n, p) for n, p in pmodel.named_parameters() if p.requires_grad]
    trainer.loss_type = "grpo"
    loss_trl = trainer._compute_loss(pmodel, dict(inputs))
    loss_ours, _ = grpo.policy_loss(
        logps_o,
        logps_o.detach(),
        adv_trl,
        mask_o.float(),
        loss_type="grpo",
        epsilon_low=0.2,
        epsilon_high=0.2,
        max_completion_length=max_len,
    )
    grads_t = torch.autograd.grad(loss_trl, [p for _, p in params])
    grads_o = torch.autograd.grad(loss_ours, [p for _, p in params])
    gmax = max(float(x.abs().max()) for x in grads_t)
    gdiff = max(float((x - y).abs().max()) for x, y in zip(grads_t, grads_o, strict=True))
    worst = max(zip(grads_t, grads_o, params, strict=True), key=lambda z: float((z[0] - z[1]).abs().max()))

    for c in cases:
        print(
            f"[loss-check] {c['loss_type']:>8} old={c['old']:<9} TRL {c['loss_trl']:+.8f} ours "
            f"{c['loss_ours']:+.8f} |diff| {c['abs_diff']:.2e} {'PASS' if c['pass'] else 'FAIL'}",
            file=sys.stderr,
            flush=True,
        )
    emit(
        {
            "phase": "loss-check",
            "g": g,
            "prompts": 2,
            "completion_lengths": [len(c) for c in comps],
            "prompt_lengths": [len(p) for p in prompts],
            "rewards": rewards_list,
            "tol": a.tol,
            "advantages_max_diff": adv_diff,
            "logp_max_diff": logp_diff,
            "logp_worst_row_vs_fp64": worst_row,
            "entropy_max_diff": ent_diff,
            "cases": cases,
            "all_pass": all(c["pass"] for c in cases),
            "param_grad": {
                "case": "grpo, old detached",
                "max_abs_grad": gmax,
                "max_abs_diff": gdiff,
                "rel_diff": gdiff / gmax if gmax > 0 else 0.0,
                "worst_param": worst[2][0],
            },
            "trl_logprob_pass_s": trl_fwd_s,
            "ours_logprob_pass_s": ours_fwd_s,
            "peak_rss_mb": peak_rss_mb(),
        }
    )


# ----- parent ----------------------------------------------------------------------------------------------
def default_out(model: str) -> str:
    """docs/grpo_vs_trl.json for the default model (as before --model existed), else a file named after it."""
    if model == DEFAULT_MODEL:
        return "docs/grpo_vs_trl.json"
    slug = re.sub(r"[^a-z0-9.]+", "-", Path(model).name.lower()).strip("-.") or "model"
    return f"docs/grpo_vs_trl_{slug}.json"


def child(a: argparse.Namespace, phase: str, timeout_s: float | None = None) -> dict[str, Any]:
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--phase",
        phase,
        "--model",
        a.model,
        "--steps",
        str(a.steps),
        "--g",
        str(a.g),
        "--prompts-per-step",
        str(a.prompts_per_step),
        "--max-completion-length",
        str(a.max_completion_length),
        "--lr",
        repr(a.lr),
        "--seed",
        str(a.seed),
        "--tol",
        repr(a.tol),
        "--check-g",
        str(a.check_g),
    ]
    if a.trl_gradient_checkpointing:
        cmd.append("--trl-gradient-checkpointing")
    env = {
        **os.environ,
        "TOKENIZERS_PARALLELISM": "false",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    print(f"== {phase}: {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT, timeout=timeout_s)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{") and RESULT_KEY in line:
            result = json.loads(line)
            result.pop(RESULT_KEY, None)
            result["wall_s"] = time.perf_counter() - t0
            return result
    raise SystemExit(f"phase {phase} exited {proc.returncode} without a result line:\n{proc.stdout[-2000:]}")


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for fw in ("ours", "trl"):
        steps = [s for r in runs if r["phase"] == fw for s in r["steps"]]
        warm = [
            s for r in runs if r["phase"] == fw for s in r["steps"][1:]
        ]  # first step of each run left out
        tokens = sum(s["completion_tokens"] for s in steps)
        rollout = sum(s["rollout_s"] for s in steps)
        out[fw] = {
            "n_steps": len(steps),
            **{
                f"median_{k}": statistics.median(s[k] for s in steps)
                for k in ("step_s", "rollout_s", "update_s")
            },
            "median_step_s_warm": statistics.median(s["step_s"] for s in warm) if warm else None,
            "tokens_per_s": tokens / rollout if rollout > 0 else 0.0,
            "completion_tokens_per_step": tokens / len(steps),
            "peak_rss_mb": max(r["peak_rss_mb"] for r in runs if r["phase"] == fw),
            "reward_mean": statistics.fmean(s["reward_mean"] for s in steps),
        }
    o, t = out["ours"], out["trl"]
    out["ratio_ours_over_trl"] = {
        k: o[f"median_{k}"] / t[f"median_{k}"] for k in ("step_s", "rollout_s", "update_s")
    }
    if o["median_step_s_warm"] and t["median_step_s_warm"]:
        out["ratio_ours_over_trl"]["step_s_warm"] = o["median_step_s_warm"] / t["median_step_s_warm"]
    out["ratio_ours_over_trl"]["tokens_per_s"] = o["tokens_per_s"] / t["tokens_per_s"]  # higher is better
    out["ratio_ours_over_trl"]["peak_rss"] = o["peak_rss_mb"] / t["peak_rss_mb"]
    out["goal_step_ratio_le_0_5"] = out["ratio_ours_over_trl"]["step_s"] <= 0.5
    return out


def print_report(loss: dict[str, Any] | None, runs: list[dict[str, Any]], summary: dict[str, Any]) -> None:
    if loss is not None:
        print(
            f"\nLoss check: 2 prompts x G={loss['g']}, completion lengths {loss['completion_lengths']}, "
            f"tol {loss['tol']:g}"
        )
        print(
            f"  advantages max |ours - TRL| {loss['advantages_max_diff']:.2e}; per-token logp max diff "
            f"{loss['logp_max_diff']:.2e}; entropy (a logged metric, not in the loss) max diff "
            f"{loss['entropy_max_diff']:.2e}"
        )
        print(
            f"  {'loss_type':<9} {'old':<10} {'TRL':>14} {'ours':>14} {'|diff|':>9} {'dL/dlogp':>9} "
            f"{'clipped':>8}"
        )
        for c in loss["cases"]:
            print(
                f"  {c['loss_type']:<9} {c['old']:<10} {c['loss_trl']:>+14.8f} {c['loss_ours']:>+14.8f} "
                f"{c['abs_diff']:>9.2e} {c['dloss_dlogp_max_diff']:>9.2e} {c['frac_tokens_outside_clip']:>8.2f}"
                f"  {'PASS' if c['pass'] else 'FAIL'}"
            )
        wr = loss["logp_worst_row_vs_fp64"]
        print(
            f"  worst logp row {wr['row']} (TRL left-pads it by {wr['left_padded_by_trl']}): max |err| vs float64 "
            f"TRL {wr['max_abs_err_trl_vs_fp64']:.2e}, ours {wr['max_abs_err_ours_vs_fp64']:.2e}"
        )
        pg = loss["param_grad"]
        print(
            f"  LoRA grads ({pg['case']}): max |g| {pg['max_abs_grad']:.3e}, max |diff| {pg['max_abs_diff']:.2e} "
            f"(rel {pg['rel_diff']:.2e}, worst {pg['worst_param']})"
        )
    print(
        f"\n{'fw':<5} {'round':>5} {'step':>4} {'step_s':>8} {'rollout_s':>9} {'update_s':>8} {'other_s':>7} "
        f"{'tokens':>6} {'tok/s':>6} {'reward':>7} {'rss_MB':>7}"
    )
    for r in runs:
        for s in r["steps"]:
            other = s["step_s"] - s["rollout_s"] - s["update_s"]
            print(
                f"{r['phase']:<5} {r['round']:>5} {s['step']:>4} {s['step_s']:>8.2f} {s['rollout_s']:>9.2f} "
                f"{s['update_s']:>8.2f} {other:>7.2f} {s['completion_tokens']:>6} "
                f"{s['completion_tokens'] / s['rollout_s']:>6.1f} {s['reward_mean']:>7.3f} {r['peak_rss_mb']:>7.0f}"
            )
    print(
        f"\n{'median':<8} {'step_s':>8} {'rollout_s':>9} {'update_s':>8} {'tok/s':>7} {'peak_MB':>8} {'reward':>7}"
    )
    for fw in ("ours", "trl"):
        s = summary[fw]
        print(
            f"{fw:<8} {s['median_step_s']:>8.2f} {s['median_rollout_s']:>9.2f} {s['median_update_s']:>8.2f} "
            f"{s['tokens_per_s']:>7.1f} {s['peak_rss_mb']:>8.0f} {s['reward_mean']:>7.3f}"
        )
    rr = summary["ratio_ours_over_trl"]
    print(
        f"{'ours/TRL':<8} {rr['step_s']:>8.3f} {rr['rollout_s']:>9.3f} {rr['update_s']:>8.3f} "
        f"{rr['tokens_per_s']:>7.2f} {rr['peak_rss']:>8.2f}"
    )
    if "step_s_warm" in rr:
        print(f"step ratio without each run's first step: {rr['step_s_warm']:.3f}")
    verdict = "MET" if summary["goal_step_ratio_le_0_5"] else "NOT MET"
    print(f"goal ours <= 0.5x TRL median step time: {verdict} ({rr['step_s']:.3f}x)")


def run_all(a: argparse.Namespace) -> int:
    import torch
    import transformers
    import trl

    started = time.strftime("%Y-%m-%dT%H:%M:%S")
    load_before = os.getloadavg()
    loss = None if a.skip_loss_check else child(a, "loss-check")
    runs = []
    for rnd in range(1, a.rounds + 1):
        for fw in ("ours", "trl"):
            r = child(a, fw)
            r["round"] = rnd
            runs.append(r)
    summary = summarise(runs)
    print_report(loss, runs, summary)
    check = next((r["prompt_token_check"] for r in runs if r["phase"] == "trl"), None)
    if check and check["mismatched"]:
        print(
            f"WARNING: TRL's prompt tokens differ from ours on {len(check['mismatched'])} prompts: "
            f"{check['mismatched'][:3]}"
        )
    elif check:
        print(f"prompt token ids: TRL's tokenisation equals render_prompt on all {check['prompts']} prompts")
    if check and check.get("generated_from_mismatched_steps"):
        print(
            "WARNING: the prompt ids TRL generated from differ from ours at steps "
            f"{check['generated_from_mismatched_steps']}"
        )
    elif check:
        print("prompt token ids: the ids TRL generated from equal ours at every step")
    # Both sides must score with the same environment: the Trainer's (bound to its tokenizer) and the one the
    # TRL reward function was built with (bench_env).
    formats = {(r["tool_format"], r["tool_parser"]) for r in runs}
    if len(formats) > 1:
        print(f"WARNING: the two sides' tool format / parser differ: {sorted(formats, key=str)}")
    tool_format, tool_parser = next(iter(formats))
    report = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "started": started,
        "settings": {
            "model": a.model,
            "tool_format": tool_format,
            "tool_parser": tool_parser,
            "lora": LORA,
            "g": a.g,
            "prompts_per_step": a.prompts_per_step,
            "completions_per_step": a.g * a.prompts_per_step,
            "steps": a.steps,
            "rounds": a.rounds,
            "max_completion_length": a.max_completion_length,
            "learning_rate": a.lr,
            "seed": a.seed,
            "loss_type": "grpo",
            "scale_rewards": "group",
            "beta": 0.0,
            "num_iterations": 1,
            "temperature": 1.0,
            "top_p": 1.0,
            "dtype": "float32",
            "trl_gradient_checkpointing": bool(a.trl_gradient_checkpointing),
        },
        "machine": {
            "cpus": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "platform": platform.platform(),
            "loadavg_before": load_before,
            "loadavg_after": os.getloadavg(),
        },
        "versions": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "trl": trl.__version__,
        },
        "loss_check": loss,
        "runs": runs,
        "summary": summary,
    }
    out = Path(a.out)
    if not out.is_absolute():
        out = ROOT / out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {out}")
    if loss is not None and not loss["all_pass"]:
        print("loss check FAILED")
        return 1
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--model",
        default=DEFAULT_MODEL,
        help="a model name resolve_model knows (e.g. qwen2.5-coder-0.5b), run in the tool format our Config "
        f"picks for it (default {DEFAULT_MODEL}: json harness; the packaged Qwen models: native)",
    )
    p.add_argument("--steps", type=int, default=3, help="GRPO steps per framework run")
    p.add_argument("--rounds", type=int, default=2, help="runs per framework, alternating ours, trl, ...")
    p.add_argument("--g", type=int, default=8, help="completions per prompt (num_generations)")
    p.add_argument("--prompts-per-step", type=int, default=1)
    p.add_argument("--max-completion-length", type=int, default=48)
    p.add_argument("--lr", type=float, default=2e-5, help="learning rate, both sides (our Config default)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tol", type=float, default=1e-5, help="loss check: max |loss_TRL - loss_ours|")
    p.add_argument(
        "--check-g",
        type=int,
        default=4,
        help="loss check: completions per prompt (2 prompts x this; TRL's retained graph takes ~1.5 GB "
        "a row with smollm2-135m's ~400-token prompts, more with a larger model and longer prompts)",
    )
    p.add_argument(
        "--trl-gradient-checkpointing",
        action="store_true",
        help="TRL with gradient checkpointing (GRPOConfig's default; off by default here)",
    )
    p.add_argument("--skip-loss-check", action="store_true")
    p.add_argument(
        "--out",
        default=None,
        help="the JSON report (default docs/grpo_vs_trl.json for the default model, "
        "docs/grpo_vs_trl_<model>.json for another, so one model's run does not overwrite the other's)",
    )
    p.add_argument(
        "--phase",
        choices=("all", "ours", "trl", "loss-check"),
        default="all",
        help="internal: the parent runs each phase in a fresh subprocess",
    )
    a = p.parse_args()
    if (
        a.g < 2
        or a.check_g < 2
        or a.steps < 1
        or a.rounds < 1
        or a.prompts_per_step < 1
        or a.max_completion_length < 1
    ):
        p.error(
            "need --g, --check-g >= 2 and --steps, --rounds, --prompts-per-step, --max-completion-length >= 1"
        )
    if a.out is None:
        a.out = default_out(a.model)
    if a.phase == "ours":
        run_ours(a)
    elif a.phase == "trl":
        run_trl(a)
    elif a.phase == "loss-check":
        run_loss_check(a)
    else:
        return run_all(a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
