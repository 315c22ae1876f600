"""Editing a verifier safely: compile, re-score stored trajectories (old vs new), and only then apply.

The dry run replays each stored episode through the run's own environment (the simulated world is
deterministic), so the new code sees the same `Output` the old one saw. It needs no model and is driven
from the UI process, but the user's code (its module body too) runs in a worker process with the run's
timeout and a memory limit (workbench.verifiers.isolated): a verifier that hangs, segfaults or allocates
without end costs rows of the dry run, never the UI. Applying goes through the worker (`set_verifier`
command) at a safe point.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from dataclasses import dataclass, field
from typing import Any

import sqlite_utils

import store
from workbench.config import config_from_dict
from workbench.envs import env_for_config
from workbench.envs.tool_parsers import NO_CALL
from workbench.errors import InternalError
from workbench.run.records import Run, Trajectory
from workbench.run.records import Task as TaskRow
from workbench.types import Output, Task, ToolCall
from workbench.verifiers import AnyVerifier, VerifierCompileError, VerifierError, load_verifier_code

GOOD_AT = 0.5  # a human "good" agrees with a reward >= this, "bad" with one below
# A dry run passes only when it re-scored at least this many episodes: "changed 0/0" then "ok" checked
# nothing, and Apply went through on it (a run paused in its first step has no training rows yet). The
# engine's floor is one row; the verifier editor asks for more (screens.verifier_editor.MIN_ROWS).
MIN_ROWS = 1
EVAL_SPLITS = ("held_out", "test")  # the evals' rows (validation, test): re-scored beside the training ones


def kind_of(split: str) -> str:
    """The two kinds a dry run reports: episodes the policy trained on, and the evals' episodes."""
    return "train" if split == "train" else "eval"


class DryRunControl:
    """Progress and cancel for a dry run running in another thread (the verifier editor's): `done` of `total`
    rows re-scored so far; `cancel()` ends it within about a row's round trip, a row in flight included."""

    def __init__(self) -> None:
        self.done = 0
        self.total: int | None = None  # known once the rows are read
        self._cancel = threading.Event()
        self._finished = threading.Event()
        self.verifier: AnyVerifier | None = None  # the loaded verifier whose worker processes a cancel kills

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def cancel(self) -> None:
        """No new row starts, and the rows in flight die with their worker processes: a looping verifier
        would otherwise hold the dry run for its timeout on each row (minutes for 150). The scoring thread
        holds the pool's lock while it waits, so the workers are killed from outside it, by process group
        (each leads its own), until the dry run says it has finished: a worker it restarts meanwhile dies too."""
        if self._cancel.is_set():
            return
        self._cancel.set()
        threading.Thread(target=self._kill_until_finished, name="dry-run-cancel", daemon=True).start()

    def _kill_until_finished(self) -> None:
        while not self._finished.wait(0.05):
            for pid in getattr(self.verifier, "pids", None) or []:  # an in-process verifier has none
                with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
                    os.killpg(pid, signal.SIGKILL)

    def finish(self) -> None:
        self._finished.set()


class DryRunCancelled(InternalError):
    """The dry run was cancelled (`DryRunControl.cancel`): nothing is stored. Control flow, like
    `Interrupted`: the editor catches it; it never reaches the command line."""


# Rows a chunk: one per worker process, so a cancel between chunks waits for at most one row a worker, and
# a killed row ends its chunk at once (no queued row behind it restarts the worker).
def _chunk_size(verifier: AnyVerifier) -> int:
    return max(1, len(getattr(verifier, "_slots", ())) or 1)


@dataclass
class DryRunResult:
    verifier_id: int | None
    ok: bool
    error: str | None = None
    summary: dict[str, Any] = field(default_factory=dict)
    rows: list[dict[str, Any]] = field(default_factory=list)


def _load(code: str, name: str) -> tuple[AnyVerifier | None, str | None]:
    """(the verifier, None) or (None, why it does not load: a message that starts with the line number).
    User code is loaded in a worker process, so a module body that hangs or crashes is an error here; its
    print()s go nowhere (they would land on the UI's screen)."""
    try:
        return load_verifier_code(code, name, stderr=subprocess.DEVNULL), None
    except VerifierCompileError as exc:
        line = getattr(exc, "lineno", None)
        return None, (
            f"line {line}: {exc}" if line and not str(exc).startswith(f"line {line}:") else str(exc)
        )
    except VerifierError as exc:
        return None, str(exc)


def compile_error(code: str) -> str | None:
    """None when the code loads as a verifier, else a message that starts with the line number."""
    verifier, err = _load(code, "check")
    if verifier is not None:
        verifier.close()
    return err


def replay(
    env: Any,
    task: Task,
    messages: list[dict[str, Any]],
    *,
    completion: str | None = None,
    parse_error: str | None = None,
) -> Output:
    """Feed a stored episode's agent turns back through a fresh episode of `env` (its tools run again).

    A JSON-harness turn is its stored text, parsed again by the harness's own parser (deterministic). A
    native-format turn (`tool_format: native`, MCP included) is its stored parsed calls (`tool_calls`), given
    to the episode as they are (`episode.take`): no chat template, parser or tokenizer is needed, and the
    verifier sees the calls the old one saw. `completion` (the row's last reply as sampled) and
    `parse_error` (why it was not a call) restore what a native turn's stored message leaves out."""
    episode = env.start(task)
    native = bool(getattr(episode, "native", False))
    start = len(episode.messages)
    turns = [m for m in messages[start:] if m.get("role") == "assistant"]
    try:
        for i, m in enumerate(turns):
            if episode.done:
                break
            text = m.get("content") or ""
            if native:
                calls = [ToolCall.from_dict(c) for c in m.get("tool_calls") or []]
                last = i == len(turns) - 1
                error = parse_error if last and parse_error is not None else (None if calls else NO_CALL)
                episode.take(
                    completion if last and completion is not None else text, calls, error, content=text
                )
                continue
            prefill = episode.prefill
            episode.step(text[len(prefill) :] if prefill and text.startswith(prefill) else text)
        if not episode.done:
            if native:
                episode.take("", [], NO_CALL)
            else:
                episode.step("")
        return episode.output()
    finally:
        close = getattr(episode, "close", None)  # an MCP episode gives its server processes back (idempotent)
        if close is not None:
            close()


def applicable_version(db: sqlite_utils.Database, run_id: int, verifier_id: int) -> dict[str, Any]:
    """The stored version a `set_verifier` command names, when it may become the run's verifier: a version of
    this run with a successful dry run. Raises ValueError (the command's answer) otherwise."""
    row = store.verifiers.get_verifier(db, verifier_id)
    if row is None or row["run_id"] != run_id:
        raise ValueError(f"verifier {verifier_id} is not a version of run {run_id}")
    if not (row.get("dry_run") or {}).get("ok"):
        raise ValueError(f"verifier {verifier_id} has no successful dry run; dry-run it before applying")
    return row


def _agrees(reward: float | None, verdict: str) -> bool:
    return reward is not None and ((reward >= GOOD_AT) == (verdict == "good"))


def rows_to_rescore(db: sqlite_utils.Database, run_id: int, n: int, n_eval: int) -> list[Trajectory]:
    """The run's newest `n` live training episodes and newest `n_eval` eval episodes, newest first."""
    rows = [Trajectory.from_row(r) for r in store.trajectories.last_trajectories(db, run_id, n)]
    evals = [
        Trajectory.from_row(r)
        for split in EVAL_SPLITS
        for r in store.trajectories.last_trajectories(db, run_id, n_eval, split=split)
    ]
    evals.sort(key=lambda r: r.id, reverse=True)
    return sorted(rows + evals[:n_eval], key=lambda r: r.id, reverse=True)


def dry_run(
    db: sqlite_utils.Database,
    run_id: int,
    code: str,
    *,
    n: int = 100,
    n_eval: int = 0,
    min_rows: int = MIN_ROWS,
    name: str | None = None,
    note: str = "",
    control: DryRunControl | None = None,
) -> DryRunResult:
    """Compile `code`, score the run's last `n` training and last `n_eval` eval trajectories with it, store
    version + results. It is ok only when none errored and at least `min_rows` were re-scored;
    the summary says how many of each kind (`by_kind`: train, eval) and split (`by_split`).
    `control`: progress (rows re-scored so far) and cancel; a cancelled dry run stores nothing and is not ok."""
    control = control or DryRunControl()
    try:
        active = store.verifiers.active_verifier(db, run_id)
        name = name or (active["name"] if active else "custom")
        verifier, err = _load(code, name)
        if verifier is None:
            return DryRunResult(None, False, err)
        control.verifier = verifier
        try:
            return _dry_run(
                db,
                run_id,
                code,
                verifier,
                n=n,
                n_eval=n_eval,
                min_rows=min_rows,
                name=name,
                note=note,
                control=control,
            )
        except DryRunCancelled:
            return DryRunResult(
                None,
                False,
                f"dry run cancelled after {control.done} of {control.total or 0} rows: nothing stored",
                {"cancelled": True, "done": control.done, "total": control.total},
            )
        finally:
            verifier.close()  # its worker process, if isolated
    finally:
        control.finish()


def _score(
    verifier: AnyVerifier, pairs: list[tuple[Output, Task]], timeout_s: float, control: DryRunControl
) -> list[Any]:
    """`verifier.score_many` a chunk at a time, counting progress and stopping at a cancel."""
    scores: list[Any] = []
    size = _chunk_size(verifier)
    for start in range(0, len(pairs), size):
        if control.cancelled:
            raise DryRunCancelled
        chunk = verifier.score_many(pairs[start : start + size], timeout_s=timeout_s)
        if control.cancelled:  # the chunk's rows may have been killed by the cancel: not scores
            raise DryRunCancelled
        scores += chunk
        control.done = len(scores)
    return scores


def _dry_run(
    db: sqlite_utils.Database,
    run_id: int,
    code: str,
    verifier: AnyVerifier,
    *,
    n: int,
    n_eval: int,
    min_rows: int,
    name: str,
    note: str,
    control: DryRunControl,
) -> DryRunResult:
    run = Run.from_row(store.runs.get_run(db, run_id))
    cfg = config_from_dict(run.config, f"run {run_id} config")
    rows = rows_to_rescore(db, run_id, n, n_eval)
    control.total = len(rows)
    verdicts = store.labels.verdicts(db, [r.id for r in rows])
    tasks: dict[int, Task] = {}
    pairs = []
    # No tokenizer here: a native run's turns are replayed as their stored calls. An MCP env starts its
    # servers in this (the UI's) process: stopped again when the replay is done.
    env = env_for_config(cfg)
    try:
        for r in rows:
            if control.cancelled:
                raise DryRunCancelled
            if r.task_id not in tasks:
                tasks[r.task_id] = TaskRow.from_row(store.tasks.get_task(db, r.task_id)).as_task()
            task = tasks[r.task_id]
            pairs.append(
                (
                    replay(
                        env, task, list(r.messages or ()), completion=r.completion, parse_error=r.parse_error
                    ),
                    task,
                )
            )
    finally:
        close = getattr(env, "close", None)
        if close is not None:
            close()
    results = []
    for r, score in zip(rows, _score(verifier, pairs, cfg.verifier_timeout_s, control), strict=True):
        # The trainer adds DAPO's overlong penalty to the verifier's score (its own part): so does the dry
        # run, or every penalised row would read as changed by the new code.
        overlong = float(r.reward_parts.get("overlong", 0.0))
        parts = {**score.parts, "overlong": overlong} if overlong else score.parts
        results.append(
            {
                "trajectory_id": r.id,
                "old_reward": r.reward,
                "new_reward": None if score.error else score.total + overlong,
                "new_parts": parts,
                "explanation": score.explanation,
                "error": score.error,
            }
        )
    errors = sum(1 for x in results if x["error"])
    labelled = [(x, verdicts[x["trajectory_id"]]) for x in results if x["trajectory_id"] in verdicts]
    changed = sum(
        1
        for x in results
        if x["error"] or x["old_reward"] is None or abs(x["new_reward"] - x["old_reward"]) > 1e-9
    )
    mean = lambda vals: sum(vals) / len(vals) if vals else None  # noqa: E731
    by_split: dict[str, int] = {}
    for r in rows:
        by_split[r.split] = by_split.get(r.split, 0) + 1
    by_kind = {
        "train": by_split.get("train", 0),
        "eval": sum(v for k, v in by_split.items() if kind_of(k) == "eval"),
    }
    summary = {
        "ok": errors == 0 and len(results) >= min_rows,
        "n": len(results),
        "changed": changed,
        "errors": errors,
        "by_kind": by_kind,
        "by_split": by_split,
        "min_rows": min_rows,
        "mean_old": mean([x["old_reward"] for x in results if x["old_reward"] is not None]),
        "mean_new": mean([x["new_reward"] for x in results if x["new_reward"] is not None]),
        "labelled": len(labelled),
        "label_agreement_old": mean([1.0 * _agrees(x["old_reward"], v) for x, v in labelled]),
        "label_agreement_new": mean([1.0 * _agrees(x["new_reward"], v) for x, v in labelled]),
        "first_error": next((x["error"] for x in results if x["error"]), None),
    }
    vid = store.verifiers.add_verifier_version(db, run_id, name, code, note=note)
    store.verifiers.record_dry_run(db, vid, results, summary)
    if errors:
        error = f"{errors} of {len(results)} trajectories errored: {summary['first_error']}"
    elif not summary["ok"]:
        error = (
            f"re-scored only {len(results)} trajectories (train {by_kind['train']}, eval {by_kind['eval']}); "
            f"a dry run needs at least {min_rows} to check anything: let the run write some first"
        )
    else:
        error = None
    return DryRunResult(vid, summary["ok"], error, summary, store.verifiers.dry_run_rows(db, vid))
