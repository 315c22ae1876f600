"""User verifier code in worker processes: a wall-clock timeout, a memory limit, and a crash costs one row.

Fault isolation, not a security sandbox: the worker runs as the same user, with the same files and network.
It keeps a hang, a segfault, `os._exit`, a runaway allocation or a NaN from costing more than the row
being scored, and keeps user code out of the trainer's (and the UI's) process.

What runs where
  The parent (the trainer, or the verifier editor's dry run in the UI) holds an `IsolatedVerifier`: a small
  pool of worker processes (`workers`, default 1), started when the verifier is loaded (the first use),
  reused for every score, closed by `close()`, when the verifier is garbage-collected (the trainer swaps it)
  or at interpreter exit. A worker is a fresh interpreter (`sys.executable -c ...`): spawn semantics, nothing
  of the parent (torch, threads, CUDA, locks) is inherited. Not multiprocessing's "spawn"/"forkserver":
  both re-import the parent's `__main__` in the child, which for `python -m workbench.worker` is the trainer
  and torch (measured: 1.2-1.9 s a start and 640 MB of address space before a memory limit could be set).
  The worker sets RLIMIT_AS (`memory_limit_bytes`, default 1 GiB) and RLIMIT_CORE 0, ignores SIGINT (the
  parent handles Ctrl-C), points its stdout at its stderr (a `print` cannot corrupt the pipe), dies with its
  parent (Linux: PR_SET_PDEATHSIG, a SIGKILL even while user code holds the GIL; elsewhere a watcher thread),
  and only then loads the code: the module body runs there too, under the limit and `load_timeout_s`.
  Its stderr is the `stderr` parameter: None (default) inherits the parent's (the trainer's run log);
  the UI's dry run passes `subprocess.DEVNULL`, so a verifier's print()s never reach the screen.

What crosses the boundary (length-prefixed pickles on two pipes)
  parent -> worker: ("load", code, name), then ("score", batch, [(row, pickle of (Output, Task)), ...]): each
  row pickled on its own, so an input that cannot cross fails alone.
  worker -> parent: ("loaded", pid) or ("load_error", kind, message, lineno); then ("row", batch, row, pid,
  result) for each row as soon as it is scored, result = ("ok", total, parts, explanation, error) or ("error",
  message), plain floats and strs only (the user's objects never come back). A result of another batch is
  ignored; and a batch interrupted in the parent (KeyboardInterrupt, MemoryError) kills every worker with
  rows in flight, so none is left answering an old batch. One answer per row, in order, from the worker's
  own pid: anything else (a forked copy answering, a row answered twice, an answer for another row) charges
  the row in progress with the reason and replaces the worker; no answer is ever moved to another row.

Processes the verifier starts
  The worker leads its own session (process group) and is, on Linux, a child subreaper. After each row it
  kills and reaps whatever the row left running, children and re-parented orphans alike (the row then gets
  "verifier left N processes running (killed)"); a forked copy of the worker that comes back from `reward`
  exits before it can answer. Killing or closing a worker kills its whole group. RLIMIT_NPROC caps what it
  may start at `MAX_VERIFIER_PROCESSES` above the user's tasks at its start (root is exempt from that
  limit). Not contained: a process that leaves the group (`setsid`) while its row is still running and the
  parent is SIGKILLed in that moment (the worker dies by PR_SET_PDEATHSIG without a last sweep).

Failures, recorded as `Score.error` on the row (its 0.0 total is a placeholder, never trained on)
  exception      "ZeroDivisionError: division by zero (line 3)"                    worker kept
  bad return     "verifier returned nan", "verifier returned str, expected float or Score"   worker kept
  out of memory  "verifier ran out of memory (limit 1 GiB): MemoryError (line 2)"   worker kept
  hang           "verifier timed out after 5.0 s"                 worker killed (SIGKILL) and replaced
  crash, exit    "verifier process died (exit code -11, SIGSEGV)"                   worker replaced
Batches (`score_many`): results stream back row by row, so a hang or a crash is charged to the row in
progress only; the rows answered before it keep their scores and the rows after it are sent again, to a
fresh worker (started on demand, it loads the code again).
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Sequence
from multiprocessing.connection import Connection, wait
from typing import Any

from workbench.types import Output, Score, Task
from workbench.verifiers.base import (
    BadReturn,
    Verifier,
    VerifierCompileError,
    VerifierError,
    coerce_score,
    load_in_process,
    short_error,
    timeout_error,
)

DEFAULT_MEMORY_LIMIT = 1 << 30  # bytes of address space per worker (RLIMIT_AS)
DEFAULT_WORKERS = 1
DEFAULT_LOAD_TIMEOUT_S = 10.0  # interpreter start + the module body (an `import numpy` fits)
_PARENT_POLL_S = 1.0
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_PR_SET_CHILD_SUBREAPER = 36
_REAP_ROUNDS = 8
MAX_VERIFIER_PROCESSES = 32  # processes a verifier may start at once (RLIMIT_NPROC, above those alive)
# One thread per native library: thread pools reserve address space, which counts against RLIMIT_AS.
_ONE_THREAD = {k: "1" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}


def fmt_bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20)):
        if n >= size:
            return f"{n / size:g} {unit}"
    return f"{n} B"


def exit_reason(rc: int | None) -> str:
    """ "exit code -11, SIGSEGV" (a signal), "exit code 3"."""
    if rc is not None and rc < 0:
        try:
            return f"exit code {rc}, {signal.Signals(-rc).name}"
        except ValueError:
            pass
    return f"exit code {rc}"


# ----- the parent's side -------------------------------------------------------------------------------


class _Worker:
    """One worker process and its two pipes (ours: `inbox` reads its results, `outbox` sends it work)."""

    def __init__(self, memory_limit_bytes: int | None, stderr: Any = None):
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        boot = (
            f"import sys; sys.path[:] = {list(sys.path)!r}; "
            "from workbench.verifiers.isolated import _child_main; "
            f"_child_main({memory_limit_bytes!r}, {os.getpid()})"
        )
        try:
            # Its own session, so its process group holds whatever the verifier starts: killed with it.
            self.proc = subprocess.Popen(
                [sys.executable, "-c", boot],
                stdin=to_child_r,
                stdout=from_child_w,
                stderr=stderr,
                env={**os.environ, **_ONE_THREAD},
                close_fds=True,
                start_new_session=hasattr(os, "killpg"),
            )
        except BaseException:
            for fd in (to_child_w, from_child_r):
                os.close(fd)
            raise
        finally:
            os.close(to_child_r)
            os.close(from_child_w)
        self.pid = self.proc.pid
        self.outbox = Connection(to_child_w, readable=False)
        self.inbox = Connection(from_child_r, writable=False)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _close_pipes(self) -> None:
        for conn in (self.outbox, self.inbox):
            with contextlib.suppress(OSError):
                conn.close()

    def _kill_group(self) -> None:
        """SIGKILL every process left in the worker's group (what a verifier started and left running)."""
        if hasattr(os, "killpg"):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)

    def kill(self) -> int:
        """SIGKILL it and its process group, reap, close the pipes; the exit code."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
        rc = self.proc.wait()
        self._kill_group()
        self._close_pipes()
        return rc

    def reap(self) -> int:
        """After EOF on its pipe: it is exiting (or has closed its end); wait a moment, then kill."""
        try:
            rc = self.proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            return self.kill()
        self._kill_group()
        self._close_pipes()
        return rc

    def close(self) -> None:
        """EOF on its input tells an idle worker to exit; one still busy is killed after a grace period."""
        self._close_pipes()
        try:
            self.proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            self.kill()
        self._kill_group()


def _close_all(slots: list[_Worker | None]) -> None:
    workers = [w for w in slots if w is not None]
    slots[:] = [None] * len(slots)
    for w in workers:
        w._close_pipes()  # all at once: they exit in parallel
    for w in workers:
        w.close()


def _answer_problem(row: Any, pid: Any, expected_row: int, worker_pid: int, *, answered: bool) -> str | None:
    """Why an answer cannot be the one the row in progress is waiting for (None: it is)."""
    if pid != worker_pid:
        return (
            f"verifier answered from process {pid}, not its worker {worker_pid} (did it fork and return in "
            "both copies?)"
        )
    if answered:
        return f"verifier answered row {row} twice"
    if row != expected_row:
        return f"verifier answered row {row} while row {expected_row} was in progress"
    return None


def _to_score(result: tuple[Any, ...]) -> Score:
    if result[0] == "ok":
        _, total, parts, explanation, error = result
        return Score(total=total, parts=parts, explanation=explanation, error=error)
    return Score(total=0.0, error=result[1])


class IsolatedVerifier:
    """A verifier whose code runs in worker processes. The same surface as `Verifier`: `name`, `code`,
    `sha256`, `score`, `score_many`, `close`; `score*` never raise (see the module docstring), except for
    an interrupt of this process (KeyboardInterrupt, MemoryError), which propagates. `stderr`: where the
    workers' stdout and stderr go, as `subprocess.Popen`'s (None: this process's stderr; `subprocess.DEVNULL`,
    a file)."""

    isolated = True

    def __init__(
        self,
        code: str,
        name: str = "user",
        *,
        memory_limit_bytes: int | None = DEFAULT_MEMORY_LIMIT,
        workers: int = DEFAULT_WORKERS,
        load_timeout_s: float = DEFAULT_LOAD_TIMEOUT_S,
        stderr: Any = None,
    ):
        if workers < 1:
            raise ValueError("workers must be >= 1")
        self.name = name
        self.code = code
        self.sha256 = hashlib.sha256(code.encode("utf-8")).hexdigest()
        self.memory_limit_bytes = memory_limit_bytes
        self.load_timeout_s = load_timeout_s
        self.stderr = stderr
        self.timeouts = 0  # rows killed for running past the timeout
        self.starts = 0  # worker processes started (the first, extra pool members, replacements)
        self._slots: list[_Worker | None] = [None] * workers
        self._batch = 0  # tags each score message and its results
        self._lock = threading.Lock()
        self._finalizer = weakref.finalize(self, _close_all, self._slots)
        # Load now, in a worker: compile errors are raised here, as by the in-process loader.
        self._slots[0] = self._start()

    def __repr__(self) -> str:
        return f"IsolatedVerifier({self.name!r}, sha256={self.sha256[:12]}, workers={len(self._slots)})"

    def __enter__(self) -> IsolatedVerifier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def pids(self) -> list[int]:
        """The live workers' process ids."""
        return [w.pid for w in self._slots if w is not None and w.alive()]

    def close(self) -> None:
        """Stop the workers now. A later score starts a fresh one (the code is loaded again)."""
        with self._lock:
            _close_all(self._slots)

    def _start(self) -> _Worker:
        """A new worker with the code loaded; raises VerifierCompileError / VerifierError as loading does."""
        w = _Worker(self.memory_limit_bytes, self.stderr)
        self.starts += 1
        try:
            w.outbox.send(("load", self.code, self.name))
            if not w.inbox.poll(self.load_timeout_s):
                w.kill()
                raise VerifierError(
                    f"loading the verifier timed out after {self.load_timeout_s:g} s "
                    "(its module body did not return)"
                )
            reply = w.inbox.recv()
        except (EOFError, OSError):
            rc = w.reap()
            raise VerifierError(f"verifier process died while loading the code ({exit_reason(rc)})") from None
        except BaseException:  # interrupted mid-load: the worker is in no slot, nothing else would end it
            w.kill()
            raise
        if reply[0] == "load_error":
            w.close()
            _, kind, message, lineno = reply
            raise VerifierCompileError(message, lineno) if kind == "compile" else VerifierError(message)
        return w

    def _ensure(self, j: int) -> _Worker:
        w = self._slots[j]
        if w is not None and not w.alive():  # died while idle (the OOM killer, a kill from outside)
            w.reap()
            w = self._slots[j] = None
        if w is None:
            w = self._slots[j] = self._start()
        return w

    def score(self, output: Output, task: Task, timeout_s: float | None = 5.0) -> Score:
        """`reward(output, task)` in a worker; never raises."""
        return self.score_many([(output, task)], timeout_s=timeout_s)[0]

    def score_many(self, items: Sequence[tuple[Output, Task]], timeout_s: float | None = 5.0) -> list[Score]:
        """Score a batch (one round trip per worker); `timeout_s` is per row. Never raises: a row that
        failed has `Score.error` set, and one row's hang or crash does not lose the others."""
        items = list(items)
        results: list[Score | None] = [None] * len(items)
        payloads: dict[int, bytes] = {}
        for i, pair in enumerate(items):
            try:
                payloads[i] = pickle.dumps(tuple(pair), protocol=pickle.HIGHEST_PROTOCOL)
            except Exception as e:
                results[i] = Score(
                    total=0.0,
                    error=f"could not send the inputs to the verifier process: {type(e).__name__}: {e}"[:300],
                )
        todo = [i for i in range(len(items)) if i in payloads]
        if todo:
            with self._lock:
                self._run(todo, payloads, results, timeout_s)
        return [
            r if r is not None else Score(total=0.0, error="verifier returned no result") for r in results
        ]

    def _run(
        self,
        todo: list[int],
        payloads: dict[int, bytes],
        results: list[Score | None],
        timeout_s: float | None,
    ) -> None:
        self._batch += 1
        inflight: dict[int, list[int]] = {}  # slot -> rows sent and not answered yet, in order
        try:
            self._run_batch(self._batch, todo, payloads, results, timeout_s, inflight)
        except BaseException:
            # Interrupted (KeyboardInterrupt, MemoryError, ...): a worker with rows in flight would answer
            # them into the next batch, maybe mid-message. Kill it; the next score starts a fresh one.
            for j in inflight:
                w, self._slots[j] = self._slots[j], None
                if w is not None:
                    w.kill()
            raise

    def _run_batch(
        self,
        batch: int,
        todo: list[int],
        payloads: dict[int, bytes],
        results: list[Score | None],
        timeout_s: float | None,
        inflight: dict[int, list[int]],
    ) -> None:
        k = min(len(self._slots), len(todo))
        batch_rows = set(todo)
        queues = [deque(todo[j * len(todo) // k : (j + 1) * len(todo) // k]) for j in range(k)]
        started: dict[int, float] = {}  # slot -> when its current row started
        send_retries = [1] * k

        def fail(j: int, message: str, kill: bool) -> None:
            """The slot's row in progress gets `message`; the worker goes; its other rows go back in the queue."""
            w = self._slots[j]
            rc = (w.kill() if kill else w.reap()) if w is not None else None
            self._slots[j] = None
            rows = inflight.pop(j, [])
            if rows:
                results[rows[0]] = Score(total=0.0, error=message.format(reason=exit_reason(rc)))
                queues[j].extendleft(reversed(rows[1:]))

        while any(queues) or inflight:
            for j, queue in enumerate(queues):
                if not queue or j in inflight:
                    continue
                try:
                    w = self._ensure(j)
                except (VerifierError, OSError) as e:
                    for i in queue:
                        results[i] = Score(total=0.0, error=f"verifier could not be restarted: {e}"[:300])
                    queue.clear()
                    continue
                rows = list(queue)
                queue.clear()
                inflight[j] = rows  # before the send: an interrupt mid-send leaves a half message
                try:
                    w.outbox.send(("score", batch, [(i, payloads[i]) for i in rows]))
                except OSError as e:  # it died between the check and the send: try a fresh one once
                    del inflight[j]
                    w.kill()
                    self._slots[j] = None
                    if send_retries[j] > 0:
                        send_retries[j] -= 1
                        queue.extend(rows)
                    else:
                        for i in rows:
                            results[i] = Score(total=0.0, error=f"could not reach the verifier process: {e}")
                    continue
                started[j] = time.monotonic()
            if not inflight:
                continue
            if timeout_s is None:
                wait_s = None
            else:
                wait_s = max(0.0, min(started[j] for j in inflight) + timeout_s - time.monotonic())
            by_conn = {self._slots[j].inbox: j for j in inflight}  # type: ignore[union-attr]
            for conn in wait(list(by_conn), wait_s):
                j = by_conn[conn]  # type: ignore[index]
                while j in inflight and conn.poll(0):  # every result already in the pipe
                    worker_pid = self._slots[j].pid  # type: ignore[union-attr]
                    try:
                        _, of_batch, i, pid, result = conn.recv()  # type: ignore[misc]
                    except (EOFError, OSError):
                        fail(j, "verifier process died ({reason})", kill=False)
                        break
                    except Exception as e:  # a result that does not unpickle here: charge the row in progress
                        of_batch, i, pid = batch, inflight[j][0], worker_pid
                        result = ("error", f"unreadable verifier result: {e}"[:300])
                    if of_batch != batch:  # an older batch's answer (cannot happen while interrupts kill)
                        continue
                    rows = inflight[j]  # answers come in the order sent, one each
                    problem = _answer_problem(
                        i, pid, rows[0], worker_pid, answered=i in batch_rows and results[i] is not None
                    )
                    if problem is not None:
                        # The worker broke the protocol (a forked copy answering, a stray write): no answer
                        # of it can be trusted to belong to its row. Charge the row in progress, never shift.
                        if i in batch_rows and results[i] is not None and i not in rows:
                            results[i] = Score(total=0.0, error=problem)
                        fail(j, problem + "; worker replaced", kill=True)
                        break
                    rows.pop(0)
                    results[i] = _to_score(result)
                    started[j] = time.monotonic()
                    if not rows:
                        del inflight[j]
            if timeout_s is not None:
                now = time.monotonic()
                for j in [j for j in inflight if now - started[j] >= timeout_s]:
                    self.timeouts += 1
                    fail(j, timeout_error(timeout_s), kill=True)


# ----- the worker's side -------------------------------------------------------------------------------


def _user_processes() -> int:
    """Tasks (threads included) of this real uid now: RLIMIT_NPROC counts them all, not only ours."""
    uid, n = os.getuid(), 0
    for name in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if name.isdigit():
            with contextlib.suppress(OSError):
                if os.stat(f"/proc/{name}").st_uid == uid:
                    n += len(os.listdir(f"/proc/{name}/task"))
    return n


def _exit_with_parent(parent_pid: int) -> None:
    while True:
        time.sleep(_PARENT_POLL_S)
        if os.getppid() != parent_pid:  # the trainer died (even SIGKILL): an orphan has nothing to do
            os._exit(0)


def _die_with_parent(parent_pid: int) -> None:
    """End this worker when its parent goes, even by SIGKILL.

    Linux: PR_SET_PDEATHSIG, SIGKILL from the kernel; a thread could not do it while user code holds the GIL
    (a catastrophic regex is C code that never lets go), and the orphan would spin at 100% CPU under init.
    Then the parent pid is checked once: a parent that died before the prctl left us reparented already.
    Caveat: the signal comes when the *thread* that started this process ends, not the process. Workers are
    started by the thread that first scores (or loads): the worker's or trainer's main thread, or in the UI a
    Textual thread worker that ends with the dry run, by when its pool is closed anyway. A worker killed that
    way while its pool lives reads as a crash of the row in progress, or is replaced on the next score.
    Elsewhere (or if prctl fails): a daemon thread polls the parent pid each second (not while the GIL is held).
    """
    if sys.platform.startswith("linux"):
        try:
            if ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0:
                if os.getppid() != parent_pid:
                    os._exit(0)
                return
        except (OSError, AttributeError):
            pass
    threading.Thread(
        target=_exit_with_parent, args=(parent_pid,), name="verifier-parent-watch", daemon=True
    ).start()


def _become_subreaper() -> None:
    """Linux: orphans of what the verifier starts (a double fork, a daemon) become our children, not init's,
    so `_kill_descendants` finds them."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _children() -> list[int]:
    pids: list[int] = []
    with contextlib.suppress(OSError):
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/children") as f:
                pids += [int(p) for p in f.read().split()]
    return pids


def _kill_descendants() -> int:
    """SIGKILL and reap every process the row left behind (children, and orphans re-parented to us); how
    many there were. Rounds, because a killed child's own children become ours only after it dies."""
    if not sys.platform.startswith("linux"):
        return 0
    killed: set[int] = set()
    for _ in range(_REAP_ROUNDS):
        pids = _children()
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, 0)
            killed.add(pid)
    return len(killed)


def _apply_limits(memory_limit_bytes: int | None) -> None:
    try:
        import resource
    except ImportError:  # not POSIX: no limits (the timeout and the crash handling still hold)
        return
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a segfault must not write a core file
    # A fork bomb stops at this many processes of this user beyond those alive now (not enforced for root,
    # which the kernel exempts: there the group kill after each row and at the worker's end is what holds).
    with contextlib.suppress(ValueError, OSError):
        _, hard = resource.getrlimit(resource.RLIMIT_NPROC)
        want = _user_processes() + MAX_VERIFIER_PROCESSES
        soft = want if hard == resource.RLIM_INFINITY else min(want, hard)
        resource.setrlimit(resource.RLIMIT_NPROC, (soft, hard))
    if memory_limit_bytes:
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = memory_limit_bytes if hard == resource.RLIM_INFINITY else min(memory_limit_bytes, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _score_row(verifier: Verifier, payload: bytes, memory_limit_bytes: int | None) -> tuple[Any, ...]:
    try:
        output, task = pickle.loads(payload)
    except BaseException as e:
        return (
            "error",
            f"could not unpickle the inputs in the verifier process: {type(e).__name__}: {e}"[:300],
        )
    try:
        value = verifier.fn(output, task)
    except MemoryError as e:
        limit = f" (limit {fmt_bytes(memory_limit_bytes)})" if memory_limit_bytes else ""
        return ("error", f"verifier ran out of memory{limit}: {short_error(e, verifier.filename)}")
    except BaseException as e:  # SystemExit too: sys.exit() in a verifier is its error, not the worker's end
        return ("error", short_error(e, verifier.filename))
    try:
        s = coerce_score(value, verifier.reward_range)
    except BadReturn as e:
        return ("error", str(e))
    except BaseException as e:  # a number type whose float() raises, say
        return (
            "error",
            f"verifier returned a value that could not be read: {short_error(e, verifier.filename)}",
        )
    # Plain types only on the way back: a str subclass from the user's module would not unpickle in the parent.
    parts = {f"{k}": float(v) for k, v in s.parts.items()}
    return ("ok", float(s.total), parts, f"{s.explanation}", None if s.error is None else f"{s.error}")


def _child_main(memory_limit_bytes: int | None, parent_pid: int) -> None:
    """The worker: fd 0 / fd 1 are the pipes from / to the parent (moved aside before any user code runs)."""
    inbox = Connection(os.dup(0), writable=False)
    outbox = Connection(os.dup(1), readable=False)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)  # print() in a verifier goes to our stderr (the pool's `stderr`), never into the pipe
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent(parent_pid)
    _become_subreaper()
    _apply_limits(memory_limit_bytes)
    me = os.getpid()
    verifier: Verifier | None = None
    while True:
        try:
            msg = inbox.recv()
        except (EOFError, OSError):
            break
        if msg[0] == "load":
            _, code, name = msg
            try:
                verifier = load_in_process(code, name)
                reply: tuple[Any, ...] = ("loaded", os.getpid())
            except VerifierCompileError as e:
                reply = ("load_error", "compile", f"{e.message}", e.lineno)
            except VerifierError as e:
                reply = ("load_error", "verifier", f"{e}", None)
            except BaseException as e:  # SystemExit, KeyboardInterrupt in a module body
                reply = ("load_error", "compile", short_error(e, f"<verifier {name}>"), None)
            outbox.send(reply)
        elif msg[0] == "score" and verifier is not None:
            _, batch, rows = msg
            for i, payload in rows:
                result = _score_row(verifier, payload, memory_limit_bytes)
                if os.getpid() != me:  # a copy the verifier forked came back here: it must not answer
                    os._exit(0)
                left = _kill_descendants()
                if left and result[0] == "ok":
                    result = (
                        "error",
                        f"verifier left {left} process{'es' if left > 1 else ''} running "
                        "(killed); a reward must not depend on processes it starts",
                    )
                outbox.send(("row", batch, i, me, result))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # not a normal exit: a verifier's atexit hooks or non-daemon threads must not keep it alive
