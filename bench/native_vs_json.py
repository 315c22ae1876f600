"""Issue 13: the cost of `tool_format: native` against the JSON harness on the same tiny model.

    python bench/native_vs_json.py 5 2     # steps per run, repetitions (runs alternate json / native)

One tiny random model with the Qwen2.5-style template (workbench/testing.py), which renders both: the JSON
harness (system prompt listing the tools, one-shot example, prefill) and the native format (the tools as
OpenAI specs in the template's system prompt, no example, no prefill). Same tasks (builtin:calendar, the
same seed), G=4, 4 prompts a step, 32 new tokens at most; single-turn. Reported: first-turn prompt tokens
(mean over the step's rows) and step time (the first step of each run dropped: warm-up).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

import store
from workbench.config import config_from_dict
from workbench.testing import tiny_model_dir
from workbench.trainer import Trainer

VERIFIER = """
from workbench.types import Score

def reward(output, task):
    n = len(output)
    return Score(total=(n % 5) / 4.0, parts={"len": (n % 5) / 4.0}, explanation=f"{n} chars")
"""


def run(model: Path, tmp: Path, fmt: str, steps: int, rep: int) -> tuple[list[float], list[float]]:
    verifier = tmp / "v.py"
    verifier.write_text(VERIFIER)
    cfg = config_from_dict(
        dict(
            model=str(model),
            reward=str(verifier),
            tool_format=fmt,
            num_generations_per_prompt=4,
            prompts_per_step=4,
            max_completion_length=32,
            max_steps=steps,
            sft_steps=0,
            learning_rate=1e-3,
            lora={"r": 4, "alpha": 8},
            output_dir=str(tmp / "runs"),
            seed=rep,
        )
    )
    db = store.open_db(tmp / f"{fmt}-{rep}.db")
    t = Trainer(cfg, db)
    times = [t.train_step()["step_time_s"] for _ in range(steps)][1:]
    rows = store.trajectories.page_trajectories(
        db, store.trajectories.TrajectoryFilter(run_id=t.run_id), limit=10_000
    ).rows
    return times, [float(store.trajectories.get_trajectory(db, r["id"])["prompt_tokens"]) for r in rows]


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    tmp = Path(tempfile.mkdtemp())
    model = tiny_model_dir(tmp, hidden_size=64, num_heads=4, max_positions=2048, template="qwen2.5")
    results: dict[str, tuple[list[float], list[float]]] = {"json": ([], []), "native": ([], [])}
    for rep in range(reps):
        for fmt in ("json", "native") if rep % 2 == 0 else ("native", "json"):
            times, prompt = run(model, tmp, fmt, steps, rep)
            results[fmt][0].extend(times)
            results[fmt][1].extend(prompt)
    print("| format | prompt tokens (mean) | steps | step time mean | median |")
    print("|---|---|---|---|---|")
    for fmt, (times, prompt) in results.items():
        print(
            f"| {fmt} | {statistics.mean(prompt):.1f} | {len(times)} | {statistics.mean(times):.3f} s | "
            f"{statistics.median(times):.3f} s |"
        )


if __name__ == "__main__":
    main()
