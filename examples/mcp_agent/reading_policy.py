"""builtin:calendar_agent through this example's MCP server, beside the built-in env: the reading policy of
bench/agent_fixed_sequences.py (it lists the calendar, asks the forecast and acts on what comes back) plays
every task of a split in both, and the agent_state verifier scores each episode. Printed per kind: the mean
reward and success through the server, the built-in env's mean, and how many episodes differ (score, success
or final state). Run from the repository root:

    .venv/bin/python examples/mcp_agent/reading_policy.py [--split held_out]
                                                          [--config examples/mcp_agent/config.yaml]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import agent_fixed_sequences as fixed  # noqa: E402

from workbench.config import load_config  # noqa: E402
from workbench.domains.calendar.agent_tasks import KINDS, generate  # noqa: E402
from workbench.envs import McpEnv, MultiTurnEnv  # noqa: E402
from workbench.types import Output, Task, ToolCall  # noqa: E402
from workbench.verifiers.agent_state import reward  # noqa: E402
from workbench.verifiers.metrics import classify  # noqa: E402

MAX_TURNS = 8  # the policy's longest path is 4 calls and a finish


def play(env: Any, task: Task, next_call: Callable[[list[Any]], ToolCall | None]) -> Output:
    """One episode of `env` (built-in or MCP: the same JSON harness) driven by `next_call(observations)`, a
    ToolCall or None to finish."""
    ep = env.start(task)
    while not ep.done:
        call = next_call(ep.observations) or ToolCall("finish", {"answer": "done"})
        text = json.dumps({"tool": call.name, "args": call.args})
        ep.step(text[len(ep.prefill) :] if text.startswith(ep.prefill) else text)
    return ep.output()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--split", default="held_out", choices=["train", "held_out", "test"])
    ap.add_argument("--config", default="examples/mcp_agent/config.yaml")
    args = ap.parse_args()
    tasks = generate(args.split)
    builtin = MultiTurnEnv(max_turns=MAX_TURNS)
    rows: dict[str, list[tuple[float, bool, float, bool]]] = {k: [] for k in KINDS}
    seconds = 0.0
    with McpEnv(None, load_config(args.config).mcp_servers, max_turns=MAX_TURNS, pool_size=1) as mcp:
        for task, slots in tasks:
            policy = lambda seen, task=task, slots=slots: fixed.reading_calls(task, slots, seen)  # noqa: E731
            start = time.perf_counter()
            got = play(mcp, task, policy)
            seconds += time.perf_counter() - start
            want = play(builtin, task, policy)
            if got.error is not None:
                raise SystemExit(f"{task.id}: {got.error}")
            same = (
                reward(got, task) == reward(want, task)
                and classify(got, task) == classify(want, task)
                and got.state == want.state
            )
            rows[slots["kind"]].append(
                (reward(got, task).total, classify(got, task)["success"], reward(want, task).total, same)
            )
    print(
        f"{args.split}: {len(tasks)} tasks through the MCP server in {seconds:.1f} s "
        f"({1000 * seconds / len(tasks):.0f} ms an episode)"
    )
    print(
        f"{'kind':<12} {'n':>3} {'MCP reward':>10} {'MCP success':>11} {'built-in reward':>15} {'differ':>6}"
    )
    for kind, eps in [*rows.items(), ("all", [x for r in rows.values() for x in r])]:
        n = len(eps)
        print(
            f"{kind:<12} {n:>3} {sum(x[0] for x in eps) / n:>10.3f} {sum(x[1] for x in eps) / n:>11.3f} "
            f"{sum(x[2] for x in eps) / n:>15.3f} {sum(not x[3] for x in eps):>6}"
        )


if __name__ == "__main__":
    main()
