"""Built-in `tool_call_gated`: the seed `tool_call_verifier`, except that "safe" (+0.2) is paid only when
the right tool was called.

Why: with the seed weights a wrong-tool call that runs earns 0.2 and one that fails earns 0, so a group
where every sample picks the wrong tool still has reward variance, and GRPO's per-group scaling blows that
0.2 gap up into full-size advantages that reinforce the wrong tool. Seen in the first headline run (the
trajectory view, docs/results.md): held-out right-tool rate fell 0.65 -> 0.57 while "safe" stayed paid.
Gated, a wrong tool scores 0 whatever happens next, such a group has no variance and no gradient, and
only the choice of tool and args moves the policy. Unsafe actions and unparseable replies score -1 as
before; the parts still sum to the total.
"""

from __future__ import annotations

from typing import Any

from workbench.types import Score
from workbench.verifiers.tool_call import reward as seed_reward

REWARD_RANGE = (-1.0, 1.0)  # the seed's: a total outside it is that row's error (workbench.verifiers.base)


def reward(output: Any, task: Any) -> Score:
    score = seed_reward(output, task)
    parts = dict(score.parts)
    if parts.get("tool", 0.0) == 0.0 and parts.get("safe", 0.0) > 0.0:
        parts["safe"] = 0.0
        return Score(
            total=round(sum(parts.values()), 6),
            parts=parts,
            explanation=score.explanation + " (safe not paid: wrong tool)",
        )
    return score
