"""LLM-as-judge verifier: a local model grades the reply against a rubric, 0-10, scaled to [0, 1].

`generate_fn(prompt) -> str` is injected (the engine passes its model's greedy generate), so this module
needs no torch and tests use a fake. A judge reply with no readable score is an error, not a zero: the
trainer leaves such trajectories out of the advantages, like any verifier error. Judges are slow and
noisy; use them where a rule cannot say what "right" means, and check them against human labels.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from typing import Any

from workbench.types import Output, Score, Task

DEFAULT_RUBRIC = (
    "10: the reply is exactly one JSON tool call with the right tool and all arguments right.\n"
    "5: right tool, some arguments wrong or badly formatted.\n"
    "0: no tool call, the wrong tool, or a harmful action."
)
PROMPT_TEMPLATE = (
    "You are grading an assistant that must answer a request with one JSON tool call.\n"
    "Rubric:\n{rubric}\n\n"
    "Request: {prompt}\n"
    "{expected}"
    "Assistant reply: {reply}\n\n"
    "Answer with one line: Score: <integer 0-10>"
)
_SCORE = re.compile(r"score\s*(?:[:=]|of|is)?\s*(-?\d+(?:\.\d+)?)(?:\s*/\s*10)?", re.IGNORECASE)
_LEADING = re.compile(r"^\s*(-?\d+(?:\.\d+)?)(?:\s*/\s*10)?\b")


def parse_judge_score(text: str, max_score: float = 10.0) -> float | None:
    """The judge's score in [0, max_score], from "Score: 7", "score=7/10" or a reply starting with "7"."""
    m = _SCORE.search(text) or _LEADING.match(text)
    if not m:
        return None
    value = float(m.group(1))
    return value if 0.0 <= value <= max_score else None


class JudgeVerifier:
    """Same surface as Verifier (`name`, `code`, `sha256`, `score`): `code` is the rubric prompt it sends."""

    def __init__(self, generate_fn: Callable[[str], str], rubric: str = DEFAULT_RUBRIC, *, name: str = "judge",
                 show_expected: bool = True, max_score: float = 10.0):
        self.generate_fn = generate_fn
        self.rubric = rubric
        self.name = name
        self.show_expected = show_expected
        self.max_score = max_score
        self.code = PROMPT_TEMPLATE.replace("{rubric}", rubric)
        self.sha256 = hashlib.sha256(f"{self.code}|{show_expected}|{max_score}".encode()).hexdigest()

    def prompt(self, output: Output, task: Task) -> str:
        expected = ""
        if self.show_expected:
            call = {"tool": task.expected_tool, "args": task.expected_args}
            expected = f"Expected call: {json.dumps(call)}\n"
        return (PROMPT_TEMPLATE.replace("{rubric}", self.rubric).replace("{prompt}", task.prompt)
                .replace("{expected}", expected).replace("{reply}", str(output)))

    def score(self, output: Output, task: Task, timeout_s: float = 5.0) -> Score:
        """Ask the judge; never raises. `timeout_s` is accepted for interface parity (generation is not
        interruptible from here; bound it with max_new_tokens in generate_fn)."""
        try:
            reply: Any = self.generate_fn(self.prompt(output, task))
        except Exception as e:
            return Score(total=0.0, error=f"judge failed: {type(e).__name__}: {e}"[:300])
        if not isinstance(reply, str):
            return Score(total=0.0, error=f"judge returned {type(reply).__name__}, not str")
        value = parse_judge_score(reply, self.max_score)
        if value is None:
            return Score(total=0.0, error=f"judge output unparseable: {reply[:80]!r}")
        total = value / self.max_score
        return Score(total=total, parts={"judge": total}, explanation=f"judge: {value:g}/{self.max_score:g}")
