"""User verifier code in worker processes (workbench.verifiers.isolated): real processes, no mocks.

A hang, a segfault, os._exit, NaN/inf, a wrong type, an exception and a runaway allocation each cost one row
(recorded in Score.error with the reason), never the calling process, and the next score works.
"""

from __future__ import annotations

import gc
import json
import os
import pickle
import signal
import subprocess
import sys
import time

import pytest

from workbench.domains.calendar import builtin_multi_turn_tasks
from workbench.envs import MultiTurnEnv, SingleTurnEnv
from workbench.types import Output, Task, ToolCall
from workbench.verifiers import (
    IsolatedVerifier,
    VerifierCompileError,
    VerifierError,
    builtin_verifier_code,
    get_verifier,
    load_verifier_code,
)

TASK = Task(
    id="t",
    prompt="Book Alex on Tuesday at 2 PM",
    expected_tool="calendar.create_event",
    expected_args={"attendee": "Alex", "day": "Tuesday", "time": "14:00"},
)
T = 0.5  # the per-row timeout in these tests

# One verifier that misbehaves as told by the output's text; it answers with its pid, so a test can see
# whether the worker was replaced.
MODES = """
import ctypes, math, os, sys, time
from workbench.types import Score

def reward(output, task):
    mode = str(output)
    if mode == "hang":
        while True:
            pass
    if mode == "sleep":          # blocked in C: a thread could not be interrupted, a process can be killed
        time.sleep(60)
    if mode == "segv":
        ctypes.string_at(0)
    if mode == "exit":
        os._exit(3)
    if mode == "sys.exit":
        sys.exit(2)
    if mode == "nan":
        return math.nan
    if mode == "inf":
        return math.inf
    if mode == "str":
        return "high"
    if mode == "raise":
        raise KeyError("boom")
    if mode == "memory":
        return float(len(bytearray(4 << 30)))  # 4 GiB against a 1 GiB limit
    if mode == "print":
        print("chatty verifier")
        os.write(1, b"straight to fd 1")
        print("and to stderr", file=sys.stderr)
    return Score(total=1.0, parts={"pid": float(os.getpid())}, explanation=mode)
"""


def pid_of(score) -> int:
    assert score.error is None, score.error
    return int(score.parts["pid"])


def gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1].startswith("Z")  # a zombie waiting for init counts as gone
    except FileNotFoundError:
        return True


def wait_gone(pid: int, within_s: float = 5.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if gone(pid):
            return True
        time.sleep(0.05)
    return False


@pytest.fixture(scope="module")
def modes():
    v = load_verifier_code(MODES, "modes")
    assert isinstance(v, IsolatedVerifier)
    yield v
    v.close()


@pytest.mark.parametrize(
    "mode,error,replaced",
    [
        ("hang", f"verifier timed out after {T} s", True),
        ("sleep", f"verifier timed out after {T} s", True),
        ("segv", "verifier process died (exit code -11, SIGSEGV)", True),
        ("exit", "verifier process died (exit code 3)", True),
        ("sys.exit", "SystemExit: 2 (line 17)", False),
        ("nan", "verifier returned nan", False),
        ("inf", "verifier returned inf", False),
        ("str", "verifier returned str, expected float or Score", False),
        ("raise", "KeyError: 'boom' (line 25)", False),
        ("memory", "verifier ran out of memory (limit 1 GiB): MemoryError (line 27)", False),
    ],
)
def test_a_failure_costs_its_row_and_the_next_score_works(modes, mode, error, replaced):
    before = pid_of(modes.score(Output("good"), TASK, timeout_s=T))
    t0 = time.monotonic()
    s = modes.score(Output(mode), TASK, timeout_s=T)
    assert time.monotonic() - t0 < T + 2.0
    assert s.error == error and s.total == 0.0
    after = pid_of(modes.score(Output("good"), TASK, timeout_s=T))
    assert (after != before) is replaced
    if replaced:
        assert wait_gone(before)  # killed and reaped, not left running


def test_print_does_not_corrupt_the_pipe(modes):
    s = modes.score(Output("print"), TASK, timeout_s=T)
    assert s.error is None and s.explanation == "print"


def test_a_batch_loses_only_the_rows_that_failed(modes):
    """Results stream back row by row: the hung / crashed row is charged, rows answered before it keep their
    scores, and the rows after it are scored again in a fresh worker."""
    texts = ["a", "b", "hang", "c", "segv", "d", "e"]
    t0 = time.monotonic()
    scores = modes.score_many([(Output(t), TASK) for t in texts], timeout_s=T)
    assert time.monotonic() - t0 < T + 3.0
    assert [s.error for s in scores] == [
        None,
        None,
        f"verifier timed out after {T} s",
        None,
        "verifier process died (exit code -11, SIGSEGV)",
        None,
        None,
    ]
    assert [s.explanation for s in scores if s.error is None] == ["a", "b", "c", "d", "e"]
    pids = [pid_of(s) if s.error is None else None for s in scores]
    assert pids[0] == pids[1] != pids[3] != pids[5] == pids[6]


def test_a_pool_of_two_splits_a_batch_and_keeps_the_order():
    with load_verifier_code(MODES, "modes", workers=2) as v:
        texts = [f"row{i}" for i in range(8)]
        texts[1] = "hang"  # the first worker's half; the second half does not wait for it
        t0 = time.monotonic()
        scores = v.score_many([(Output(t), TASK) for t in texts], timeout_s=T)
        assert time.monotonic() - t0 < T + 3.0
        assert scores[1].error == f"verifier timed out after {T} s"
        assert [s.explanation for i, s in enumerate(scores) if i != 1] == [
            t for i, t in enumerate(texts) if i != 1
        ]
        assert len({pid_of(s) for s in scores[4:]}) == 1 and pid_of(scores[0]) != pid_of(scores[4])
        assert v.timeouts == 1 and len(v.pids) == 2


def test_a_smaller_memory_limit_is_a_parameter():
    # the total is the byte count, so the range says so (a total outside it would be the row's error)
    code = "def reward(output, task):\n    return float(len(bytearray(512 << 20)))\nREWARD_RANGE = (0, 1 << 30)\n"
    with load_verifier_code(code, memory_limit_bytes=256 << 20) as v:
        assert (
            v.score(Output("x"), TASK).error
            == "verifier ran out of memory (limit 256 MiB): MemoryError (line 2)"
        )
    with load_verifier_code(code, memory_limit_bytes=None) as v:  # no limit
        assert v.score(Output("x"), TASK).total == float(512 << 20)


def test_inputs_arrive_identical():
    """Output (a str subclass with attributes, ToolCall dataclasses inside) and Task cross by pickle."""
    describe = """
import json
from dataclasses import asdict
from workbench.types import Score

def reward(o, t):
    seen = {"type": f"{type(o).__module__}.{type(o).__qualname__}", "text": str(o), "messages": o.messages,
            "tool_calls": [[f"{type(c).__module__}.{type(c).__qualname__}", c.name, c.args, c.id]
                           for c in o.tool_calls],
            "parse_error": o.parse_error, "unsafe": o.unsafe, "executed": o.executed,
            "observations": o.observations, "state": o.state, "tool_call": repr(o.tool_call),
            "task": [type(t).__qualname__, asdict(t)]}
    return Score(total=0.0, explanation=json.dumps(seen, sort_keys=True, default=repr))
"""
    task = builtin_multi_turn_tasks()[0]
    ep = MultiTurnEnv().start(task)
    for r in [
        'calendar.list_events", "args": {}}',
        'calendar.cancel_event", "args": {"attendee": "Sam", "day": "Monday"}}',
        'finish", "args": {"answer": "done"}}',
    ]:
        ep.step(r)
    multi = ep.output()
    unsafe = SingleTurnEnv().start(TASK)
    unsafe.step('calendar.delete_all_events", "args": {}}')
    broken = SingleTurnEnv().start(TASK)
    broken.step('calendar.create_event", "args": {')
    outputs = [
        (multi, task),
        (unsafe.output(), TASK),
        (broken.output(), TASK),
        (Output("bare", tool_calls=[ToolCall("x", {"a": [1, 2.5, None]}, id="c1")]), TASK),
    ]
    assert multi.state and multi.observations and len(multi.tool_calls) == 3
    assert outputs[1][0].unsafe and outputs[2][0].parse_error

    for out, t in outputs:  # the pickle itself
        back, back_task = pickle.loads(pickle.dumps((out, t), protocol=pickle.HIGHEST_PROTOCOL))
        assert type(back) is Output and str(back) == str(out) and vars(back) == vars(out)
        assert all(type(c) is ToolCall for c in back.tool_calls) and back_task == t
    in_process = load_verifier_code(describe, isolate=False).score_many(outputs)
    with load_verifier_code(describe, isolate=True) as v:
        isolated = v.score_many(outputs)
    for a, b in zip(in_process, isolated, strict=True):
        assert a.error is None and b.error is None
        assert json.loads(b.explanation) == json.loads(a.explanation)
    assert json.loads(isolated[0].explanation)["tool_calls"][0][0] == "workbench.types.ToolCall"
    assert json.loads(isolated[0].explanation)["state"] == json.loads(json.dumps(multi.state, default=repr))


def test_an_input_that_cannot_cross_fails_alone(modes):
    odd = Output("x", observations=[lambda: 0])  # a lambda does not pickle
    scores = modes.score_many([(Output("a"), TASK), (odd, TASK), (Output("b"), TASK)])
    assert scores[1].error.startswith("could not send the inputs to the verifier process")
    assert [s.explanation for s in (scores[0], scores[2])] == ["a", "b"]


def test_loading_runs_in_the_worker_and_its_errors_raise():
    with pytest.raises(VerifierCompileError) as ei:
        load_verifier_code("def reward(output, task):\n    return (1\n")
    assert ei.value.lineno == 2 and str(ei.value).startswith("line 2:")
    with pytest.raises(VerifierCompileError, match=r"line 2: KeyError: 'x'"):
        load_verifier_code("import os\n{}['x']\n")
    with pytest.raises(VerifierError, match="defines no `reward"):
        load_verifier_code("x = 1\n")
    with pytest.raises(VerifierError, match=r"loading the verifier timed out after 0.5 s"):
        load_verifier_code("while True:\n    pass\n", load_timeout_s=0.5)
    with pytest.raises(VerifierError, match=r"died while loading the code \(exit code -11, SIGSEGV\)"):
        load_verifier_code("import ctypes\nctypes.string_at(0)\n")
    with pytest.raises(VerifierCompileError, match="line 1: MemoryError"):
        load_verifier_code("x = bytearray(4 << 30)\n")


def test_builtins_run_in_process_and_agree_with_their_isolated_run():
    ep = SingleTurnEnv().start(TASK)
    ep.step('calendar.create_event", "args": {"attendee": "Alex", "day": "Tuesday", "time": "2 PM"}}')
    out = ep.output()
    for name in ("tool_call_verifier", "tool_call_gated", "binary"):
        v = get_verifier(name)
        assert v.isolated is False
        with load_verifier_code(builtin_verifier_code(name), name, isolate=True) as iso:
            assert iso.isolated is True and iso.sha256 == v.sha256
            assert iso.score(out, TASK) == v.score(out, TASK)
    edited = builtin_verifier_code("tool_call_verifier") + "\n# stricter\n"
    with load_verifier_code(edited) as v:  # an edited built-in is user code
        assert v.isolated is True


def test_close_gc_and_a_dead_parent_end_the_workers(tmp_path):
    v = load_verifier_code(MODES, "modes")
    (pid,) = v.pids
    v.close()
    assert gone(pid) and v.pids == []
    assert v.score(Output("again"), TASK).explanation == "again"  # a later score starts a fresh worker
    (pid,) = v.pids
    del v
    gc.collect()
    assert wait_gone(pid)
    # The parent is SIGKILLed (no atexit, no finalizers): the orphan notices within a second and exits.
    script = tmp_path / "parent.py"
    script.write_text(
        "import os, sys\n"
        "from workbench.verifiers import load_verifier_code\n"
        "v = load_verifier_code('def reward(o, t):\\n    return 1.0\\n')\n"
        "print(v.pids[0], flush=True)\n"
        "os.kill(os.getpid(), 9)\n"
    )
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=30, cwd=os.getcwd()
    )
    assert proc.returncode == -9, proc.stderr
    assert wait_gone(int(proc.stdout.split()[0]), within_s=5.0)


# A catastrophic regex: C code that holds the GIL for hours (a watcher thread in the worker never runs).
GIL_HOG = """
import os, re

def reward(output, task):
    with open(str(output), "w") as f:
        f.write(str(os.getpid()))
    re.match(r"(a+)+$", "a" * 40 + "b")
    return 1.0
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_worker_holding_the_gil_dies_with_its_sigkilled_parent(tmp_path):
    marker = tmp_path / "worker.pid"
    script = tmp_path / "parent.py"
    script.write_text(
        "from workbench.types import Output, Task\n"
        "from workbench.verifiers import load_verifier_code\n"
        f"v = load_verifier_code({GIL_HOG!r})\n"
        f"v.score(Output({str(marker)!r}), Task('t', 'p', 'x', {{}}), timeout_s=None)\n"
    )
    log = tmp_path / "parent.log"  # a file, not a pipe: the worker inherits it and may outlive the parent
    with open(log, "wb") as err:
        parent = subprocess.Popen([sys.executable, str(script)], cwd=os.getcwd(), stderr=err)
    child = None
    try:
        deadline = time.monotonic() + 30.0
        while not (marker.exists() and marker.read_text()):
            assert parent.poll() is None, log.read_text()
            assert time.monotonic() < deadline
            time.sleep(0.05)
        child = int(marker.read_text())
        time.sleep(0.3)  # inside the regex now
        parent.kill()
        parent.wait()
        assert wait_gone(child, within_s=2.0)
    finally:
        parent.kill()
        parent.wait()
        if child is not None and not gone(child):  # never leave a spinning orphan behind
            os.kill(child, signal.SIGKILL)


def test_the_workers_stderr_is_a_parameter(capfd):
    """By default a verifier's print() goes to this process's stderr (the trainer's run log); the UI's dry run
    passes DEVNULL, so nothing lands on the screen."""
    capfd.readouterr()
    with load_verifier_code(MODES, "modes") as v:
        assert v.score(Output("print"), TASK).error is None
    out, err = capfd.readouterr()
    assert out == "" and "chatty verifier" in err and "straight to fd 1" in err and "and to stderr" in err
    with load_verifier_code(MODES, "modes", stderr=subprocess.DEVNULL) as v:
        assert v.score(Output("print"), TASK).error is None
        assert v.score(Output("raise"), TASK).error == "KeyError: 'boom' (line 25)"
    assert capfd.readouterr() == ("", "")


def test_an_interrupted_batch_leaves_no_stale_results(monkeypatch):
    """A KeyboardInterrupt in the parent mid-batch: the worker with rows in flight is killed, so the next batch
    (whose row indices restart at 0) cannot be answered with the old batch's results."""
    import workbench.verifiers.isolated as iso

    real = iso._to_score
    seen = []

    def interrupt_at_the_second_result(result):
        seen.append(result)
        if len(seen) == 2:
            raise KeyboardInterrupt
        return real(result)

    with load_verifier_code(MODES, "modes") as v:
        (pid,) = v.pids
        monkeypatch.setattr(iso, "_to_score", interrupt_at_the_second_result)
        with pytest.raises(KeyboardInterrupt):
            v.score_many([(Output(f"old{i}"), TASK) for i in range(6)])
        monkeypatch.setattr(iso, "_to_score", real)
        assert wait_gone(pid)  # killed, not left with rows in flight
        scores = v.score_many([(Output(f"new{i}"), TASK) for i in range(6)])
        assert [s.error for s in scores] == [None] * 6
        assert [s.explanation for s in scores] == [f"new{i}" for i in range(6)]
        assert pid not in {pid_of(s) for s in scores}


def test_dry_run_in_the_ui_process_survives_a_crashing_verifier(fake):
    """The verifier editor's dry run runs user code in a worker too: a segfault is each row's error."""
    import store
    from workbench.verifier_edit import compile_error, dry_run

    db = store.open_db(fake.db_path)
    try:
        crash = "import ctypes\ndef reward(output, task):\n    ctypes.string_at(0)\n"
        assert compile_error(crash) is None
        res = dry_run(db, fake.run_id, crash, n=3)
        assert not res.ok and res.summary["errors"] == 3
        assert res.error == "3 of 3 trajectories errored: verifier process died (exit code -11, SIGSEGV)"
        assert "two arguments" in compile_error("def reward(o):\n    return 1\n")
        good = dry_run(db, fake.run_id, "def reward(output, task):\n    return 0.5\n", n=3)
        assert good.ok and good.summary["n"] == 3 and good.summary["mean_new"] == 0.5
    finally:
        db.conn.close()


# ----- one answer per row, and nothing a verifier starts outlives its row (issue 33 item 4) --------------

FORKS = """
import os

def reward(output, task):
    os.fork()  # both copies return: before, the copy's answer went to the next row (a shift)
    return float(str(output))
"""

SPAWNS = """
import subprocess

def reward(output, task):
    path = str(output)
    kid = subprocess.Popen(["sleep", "300"])
    # a double fork: the shell exits at once, its sleep is an orphan (re-parented to the worker)
    subprocess.run(["sh", "-c", f"sleep 301 & echo $! >> {path}"], check=True)
    with open(path, "a") as f:
        f.write(f"{kid.pid}\\n")
    if path.endswith("hang"):
        while True:
            pass
    return 1.0
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_forking_verifier_never_shifts_a_score_onto_another_row():
    with IsolatedVerifier(FORKS, "forks") as v:
        scores = v.score_many([(Output(text=str(i / 10)), TASK) for i in range(6)], timeout_s=5)
    for i, s in enumerate(scores):
        assert s.error is not None or s.total == i / 10, (i, s)  # its own value or an error, never another's
    assert all(s.error and "process" in s.error for s in scores), scores


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="descendants are found through /proc")
@pytest.mark.parametrize("how", ["returns", "hangs"])
def test_processes_a_verifier_starts_die_with_its_row(tmp_path, how):
    path = tmp_path / ("pids-hang" if how == "hangs" else "pids")
    with IsolatedVerifier(SPAWNS, "spawns") as v:
        (s,) = v.score_many([(Output(text=str(path)), TASK)], timeout_s=2.0 if how == "hangs" else 10)
        if how == "returns":
            assert s.error is not None and "left 2 processes running" in s.error
            assert v.pids, "the worker itself stays"
        else:
            assert s.error is not None and "timed out" in s.error
    pids = [int(p) for p in path.read_text().split()]
    assert len(pids) == 2
    deadline = time.monotonic() + 5
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in pids if _alive(p)], "a process the verifier started outlived it"


def test_an_answer_for_the_wrong_row_or_from_another_process_is_an_error_never_a_shift():
    from workbench.verifiers.isolated import _answer_problem

    assert _answer_problem(3, 100, 3, 100, answered=False) is None
    assert "process 101" in _answer_problem(3, 101, 3, 100, answered=False)
    assert "twice" in _answer_problem(2, 100, 3, 100, answered=True)
    assert "while row 3" in _answer_problem(4, 100, 3, 100, answered=False)
