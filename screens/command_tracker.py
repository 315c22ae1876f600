"""Commands sent to the worker and the answers it writes back: poll each pending command by id and turn
its result into a toast. A command nobody answers (no live worker) gets one warning, not a hang."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from screens.format import clip, compact_json
from workbench.view import View

UNANSWERED_WARN_S = 10.0


@dataclass
class Sent:
    command_id: int
    kind: str
    payload: dict[str, Any] | None
    sent_at: float
    warned: bool = False


@dataclass
class Answer:
    command_id: int
    kind: str
    ok: bool
    message: str


@dataclass
class CommandTracker:
    pending: dict[int, Sent] = field(default_factory=dict)
    answers: list[Answer] = field(default_factory=list)  # newest last; what toasts were shown for

    def add(self, command_id: int, kind: str, payload: dict[str, Any] | None, now: float) -> None:
        self.pending[command_id] = Sent(command_id, kind, payload, now)

    def poll(self, view: View, now: float, worker_alive: bool) -> tuple[list[Answer], list[Sent]]:
        """(answered since last poll, newly overdue without a live worker)."""
        answered, overdue = [], []
        for cid, sent in list(self.pending.items()):
            command = view.command(cid)
            if command is None:
                del self.pending[cid]
                continue
            if command.answered:
                del self.pending[cid]
                answer = Answer(cid, sent.kind, command.status == "done", describe_result(command.result))
                self.answers.append(answer)
                answered.append(answer)
            elif not sent.warned and not worker_alive and now - sent.sent_at > UNANSWERED_WARN_S:
                sent.warned = True
                overdue.append(sent)
        return answered, overdue


def describe_result(result: Any) -> str:
    if result is None:
        return "done"
    if isinstance(result, dict):
        for key in ("message", "error", "detail"):
            if result.get(key):
                return clip(str(result[key]), 200)
        return clip(compact_json(result), 200)
    return clip(str(result), 200)
