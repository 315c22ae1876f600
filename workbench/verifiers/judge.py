"""LLM-as-judge verifier: a local model grades the reply against a rubric, 0-10, scaled to [0, 1].

`generate_fn(prompt) -> str` is injected (the engine passes its model's greedy generate), so this module
needs no torch and tests use a fake. Or the judge is another model behind an OpenAI-compatible server (a
larger model under `vllm serve`): `openai_generate(url, model, timeout_s)` is such a `generate_fn`, and
`JudgeVerifier.from_config(cfg)` builds one from the config's `judge_url`, `judge_model`, `judge_timeout_s`.
A request that times out, fails or returns no readable score is a verifier error with the reason. A judge
reply with no readable score is an error, not a zero: the
trainer leaves such trajectories out of the advantages, like any verifier error. Judges are slow and
noisy; use them where a rule cannot say what "right" means, and check them against human labels.
"""

from __future__ import annotations

import hashlib
import json
import re
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any

from workbench.errors import InternalError
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


class JudgeTimeout(InternalError, TimeoutError):
    pass


def openai_generate(
    url: str, model: str, *, timeout_s: float = 30.0, max_tokens: int = 16, api_key: str | None = None
) -> Callable[[str], str]:
    """A `generate_fn` that asks an OpenAI-compatible chat completions endpoint (`url` is the base, e.g.
    http://127.0.0.1:8000/v1), greedily, and returns the reply text. Raises JudgeTimeout past `timeout_s`, and
    RuntimeError with the reason for an HTTP error or a reply without a message."""
    endpoint = url.rstrip("/") + "/chat/completions"
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"

    def generate(prompt: str) -> str:
        body = json.dumps(
            {
                "model": model,
                "messages": [{"role": "user", "content": prompt}],
                "temperature": 0.0,
                "max_tokens": max_tokens,
            }
        ).encode()
        request = urllib.request.Request(endpoint, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                data = json.loads(response.read())
        except TimeoutError:
            raise JudgeTimeout(f"no answer from {endpoint} within {timeout_s:g} s") from None
        except urllib.error.HTTPError as e:
            raise RuntimeError(
                f"{endpoint} answered HTTP {e.code}: {e.read()[:200].decode(errors='replace')}"
            ) from None
        except urllib.error.URLError as e:
            if isinstance(e.reason, TimeoutError):
                raise JudgeTimeout(f"no answer from {endpoint} within {timeout_s:g} s") from None
            raise RuntimeError(f"cannot reach {endpoint}: {e.reason}") from None
        except ValueError:
            raise RuntimeError(f"{endpoint} did not answer JSON") from None
        try:
            return str(data["choices"][0]["message"]["content"] or "")
        except (KeyError, IndexError, TypeError):
            raise RuntimeError(f"{endpoint} answered without choices[0].message: {str(data)[:120]}") from None

    return generate


def parse_judge_score(text: str, max_score: float = 10.0) -> float | None:
    """The judge's score in [0, max_score], from "Score: 7", "score=7/10" or a reply starting with "7"."""
    m = _SCORE.search(text) or _LEADING.match(text)
    if not m:
        return None
    value = float(m.group(1))
    return value if 0.0 <= value <= max_score else None


class JudgeVerifier:
    """Same surface as Verifier (`name`, `code`, `sha256`, `score`): `code` is the rubric prompt it sends."""

    def __init__(
        self,
        generate_fn: Callable[[str], str],
        rubric: str = DEFAULT_RUBRIC,
        *,
        name: str = "judge",
        show_expected: bool = True,
        max_score: float = 10.0,
    ):
        self.generate_fn = generate_fn
        self.rubric = rubric
        self.name = name
        self.show_expected = show_expected
        self.max_score = max_score
        self.code = PROMPT_TEMPLATE.replace("{rubric}", rubric)
        self.sha256 = hashlib.sha256(f"{self.code}|{show_expected}|{max_score}".encode()).hexdigest()

    @classmethod
    def from_config(cls, cfg: Any, rubric: str = DEFAULT_RUBRIC, **kw: Any) -> JudgeVerifier:
        """A judge on the config's OpenAI-compatible endpoint (`judge_url`, `judge_model`, `judge_timeout_s`)."""
        if not cfg.judge_url:
            raise ValueError(
                "judge_url: set it to the judge's OpenAI-compatible base URL (e.g. http://127.0.0.1:8000/v1)"
            )
        generate = openai_generate(cfg.judge_url, cfg.judge_model, timeout_s=cfg.judge_timeout_s)
        return cls(generate, rubric, name=kw.pop("name", f"judge:{cfg.judge_model}"), **kw)

    def score_many(self, items: Sequence[tuple[Output, Task]], timeout_s: float = 5.0) -> list[Score]:
        """`score` of each (output, task), in order (the trainer's interface)."""
        return [self.score(output, task, timeout_s=timeout_s) for output, task in items]

    def prompt(self, output: Output, task: Task) -> str:
        expected = ""
        if self.show_expected:
            call = {"tool": task.expected_tool, "args": task.expected_args}
            expected = f"Expected call: {json.dumps(call)}\n"
        return (
            PROMPT_TEMPLATE.replace("{rubric}", self.rubric)
            .replace("{prompt}", task.prompt)
            .replace("{expected}", expected)
            .replace("{reply}", str(output))
        )

    def score(self, output: Output, task: Task, timeout_s: float = 5.0) -> Score:
        """Ask the judge; never raises. `timeout_s` is accepted for interface parity (generation is not
        interruptible from here; bound it with max_new_tokens in generate_fn)."""
        try:
            reply: Any = self.generate_fn(self.prompt(output, task))
        except JudgeTimeout as e:
            return Score(total=0.0, error=f"judge timed out: {e}"[:300])
        except Exception as e:
            return Score(total=0.0, error=f"judge failed: {type(e).__name__}: {e}"[:300])
        if not isinstance(reply, str):
            return Score(total=0.0, error=f"judge returned {type(reply).__name__}, not str")
        value = parse_judge_score(reply, self.max_score)
        if value is None:
            return Score(total=0.0, error=f"judge output unparseable: {reply[:80]!r}")
        total = value / self.max_score
        return Score(total=total, parts={"judge": total}, explanation=f"judge: {value:g}/{self.max_score:g}")
