"""Throughput of HFEngine (shared prefill + own decode loop) vs `model.generate(num_return_sequences=n)`.

Real SmolLM2-135M, fp32, one ~100-token prompt, n samples x `new` tokens, stops disabled so both produce
exactly n x new tokens. Usage: python bench/bench_rollout_hf.py [n] [new] [repeats]
"""

from __future__ import annotations

import sys
import time

import torch

from workbench.models import load_policy
from workbench.rollout.hf import HFEngine
from workbench.rollout.prompt import render_prompt

SYSTEM = (
    "You can call these tools. Reply with one JSON object: the tool and its args. Tools: "
    'calendar.create_event(title: str, date: "YYYY-MM-DD", time: "HH:MM"), calendar.list_events(date), '
    'calendar.delete_event(event_id). Example: {"tool": "calendar.list_events", "args": {"date": "2025-03-15"}}'
)


def main() -> None:
    n, new, repeats = (int(a) for a in (sys.argv[1:] + ["8", "64", "2"][len(sys.argv) - 1 :])[:3])
    t = time.perf_counter()
    policy = load_policy("smollm2-135m", seed=0)
    print(f"load_policy: {time.perf_counter() - t:.2f}s, threads={torch.get_num_threads()}")
    messages = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Book lunch with Ana Friday at 1 PM."},
    ]
    prompt = render_prompt(policy.tokenizer, messages, prefill='{"tool": "')
    print(f"prompt tokens: {len(prompt)}")
    engine = HFEngine(policy)
    engine.generate([prompt], 2, max_new_tokens=4, temperature=1.0, seed=0)  # warm-up
    ids = torch.tensor([prompt])
    for rep in range(repeats):
        t = time.perf_counter()
        [group] = engine.generate(
            [prompt], n, max_new_tokens=new, temperature=1.0, seed=rep, stop_token_ids=[]
        )
        dt = time.perf_counter() - t
        assert sum(len(c.token_ids) for c in group) == n * new
        print(f"HFEngine        n={n} x {new}: {dt:.2f}s = {n * new / dt:.1f} tok/s")
        t = time.perf_counter()
        with torch.inference_mode():
            out = policy.model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                do_sample=True,
                temperature=1.0,
                top_p=1.0,
                max_new_tokens=new,
                min_new_tokens=new,
                num_return_sequences=n,
                eos_token_id=None,
            )
        dt = time.perf_counter() - t
        assert out.shape == (n, len(prompt) + new)
        print(f"model.generate  n={n} x {new}: {dt:.2f}s = {n * new / dt:.1f} tok/s")
    [group] = engine.generate([prompt], n, max_new_tokens=new, temperature=1.0, seed=0)
    print("with EOS stops:", [(c.finish_reason, len(c.token_ids)) for c in group])
    print("sample:", repr(group[0].text[:120]))


if __name__ == "__main__":
    main()
