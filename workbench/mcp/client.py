"""MCP tool servers over stdio, driven from synchronous code (the trainer and the rollout loop stay synchronous).

One background thread runs an event loop (an anyio blocking portal) shared by every server of the process.
Each `ServerProcess` is one server subprocess with its `ClientSession`, held open by a task on that loop;
`call` blocks the caller until the result, a timeout or the server's death. `ServerPool` keeps a few
processes of one server started ahead, so G episodes of a group each get a process with its own state.

Failures are kept apart on purpose:
- a tool that fails (unknown tool, bad arguments, an exception in the tool, an `isError` result, a JSON-RPC
  error) is a `CallResult(ok=False)`: the model did something wrong, the trajectory shows a tool error;
- a server that dies, hangs past the call timeout or cannot start raises `ServerFailed`: not the model's
  doing, so the episode fails with that reason, the process is killed and a fresh one takes its place.

Servers run through `workbench/mcp/limits.py` (resource limits, dies with its parent) with a stripped
environment and a temporary working directory. That is hygiene, not a security sandbox (see there).
"""

from __future__ import annotations

import atexit
import collections
import concurrent.futures
import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench.config import McpServerConfig
from workbench.errors import RunLostError, UnavailableError

LIMITS_SCRIPT = Path(__file__).with_name("limits.py")
STDERR_TAIL = 400  # characters of a dead server's stderr kept in the reason


class McpUnavailable(UnavailableError, RuntimeError):
    """The `mcp` SDK is not installed."""


class ServerFailed(RunLostError, RuntimeError):
    """A server died, hung or could not start: the episode fails with this reason (not the model's fault)."""


@dataclass
class CallResult:
    """A tool's answer: `value` is the structured result where the server gave one, else its text (parsed as
    JSON when it is JSON). `ok` is False for tool errors (`isError`, unknown tool, bad arguments)."""

    ok: bool
    value: Any
    full_chars: int | None = None  # the whole result's length when `value` was cut (`cap_result`), else None


def cap_result(result: CallResult, limit: int) -> CallResult:
    """`result` when its text (a structured value: its JSON) is at most `limit` characters, else its first
    `limit` characters as text, with the whole length in `full_chars`: the result goes into the next prompt."""
    value = result.value
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    if len(text) <= limit:
        return result
    return CallResult(ok=result.ok, value=text[:limit], full_chars=len(text))


def require_mcp() -> None:
    try:
        import mcp  # noqa: F401
    except ImportError:
        raise McpUnavailable(
            "env: mcp needs the MCP Python SDK: pip install 'agent-workbench[mcp]'"
        ) from None


# ---- the background event loop ----------------------------------------------------------------------------

_portal_lock = threading.Lock()
_portal: Any = None
_portal_cm: Any = None


def portal() -> Any:
    """The process-wide blocking portal (an event loop in a daemon thread), started on first use."""
    global _portal, _portal_cm
    with _portal_lock:
        if _portal is None:
            require_mcp()
            from anyio.from_thread import start_blocking_portal

            _portal_cm = start_blocking_portal()
            _portal = _portal_cm.__enter__()
            atexit.register(_stop_portal)
        return _portal


def _stop_portal() -> None:
    global _portal, _portal_cm
    with _portal_lock:
        if _portal_cm is not None:
            with contextlib.suppress(Exception):
                _portal_cm.__exit__(None, None, None)
        _portal = _portal_cm = None


def resolve_command(command: str) -> str:
    """`python`/`python3` mean this interpreter (the venv that has `mcp`); other names are looked up in PATH."""
    if command in ("python", "python3"):
        return sys.executable
    return shutil.which(command) or command


def resolve_args(args: list[str]) -> list[str]:
    """An argument naming an existing file relative to where the workbench runs is made absolute: the server
    starts in a temporary directory, where the relative path would name nothing."""
    return [str(Path(a).resolve()) if not Path(a).is_absolute() and Path(a).is_file() else a for a in args]


def tool_spec(tool: Any) -> dict[str, Any]:
    """An MCP `Tool` as the flat function spec the engine uses (workbench.tasks.normalize_tool_spec's form)."""
    schema = dict(getattr(tool, "input_schema", None) or {"type": "object", "properties": {}})
    schema.setdefault("required", [])  # JSON schema: absent means none (the harness would read "all")
    return {"name": tool.name, "description": (tool.description or "").strip(), "parameters": schema}


def result_value(result: Any) -> CallResult:
    """A `CallToolResult` as (ok, value): structured content (unwrapped from MCPServer's {"result": x}), else
    the text blocks joined, as JSON where they parse."""
    value: Any = getattr(result, "structured_content", None)
    if isinstance(value, dict) and set(value) == {"result"}:
        value = value["result"]
    if value is None:
        texts = [
            getattr(b, "text", None) or f"[{getattr(b, 'type', 'content')}]" for b in result.content or []
        ]
        value = "\n".join(texts)
        with contextlib.suppress(ValueError, RecursionError):
            value = json.loads(value)
    return CallResult(ok=not result.is_error, value=value)


def _connection_closed(e: BaseException) -> bool:
    """The SDK's error for a session whose server went away (its stdout closed)."""
    from mcp_types import CONNECTION_CLOSED

    error = getattr(e, "error", None)
    return getattr(error, "code", getattr(e, "code", None)) == CONNECTION_CLOSED


# ---- one server process -------------------------------------------------------------------------------------


class ServerProcess:
    """One running server and its session. `start()` returns at once; `wait_ready()` blocks until it answers."""

    def __init__(self, name: str, cfg: McpServerConfig):
        self.name = name
        self.cfg = cfg
        self._tmp = Path(tempfile.mkdtemp(prefix=f"wb-mcp-{name}-"))
        self._pidfile = self._tmp / ".pid"
        self._stderr = open(self._tmp / ".stderr", "w+", encoding="utf-8", errors="replace")  # noqa: SIM115
        self._ready: concurrent.futures.Future[list[Any]] = concurrent.futures.Future()
        self._finished = threading.Event()
        self._scope: Any = None
        self._stop_requested = False
        self._session: Any = None
        self.failure: str | None = None  # why it is dead, once it is

    # -- lifecycle
    def start(self) -> ServerProcess:
        portal().start_task_soon(self._run)
        return self

    def _params(self) -> Any:
        from mcp import StdioServerParameters

        work = self.cfg.cwd or str(self._tmp / "work")
        Path(work).mkdir(parents=True, exist_ok=True)
        args = [
            str(LIMITS_SCRIPT),
            str(self.cfg.memory_mb),
            str(self.cfg.cpu_s),
            str(self._pidfile),
            "--",
            resolve_command(self.cfg.command),
            *resolve_args(self.cfg.args),
        ]
        # The SDK adds only HOME, LOGNAME, PATH, SHELL, TERM, USER to these: nothing else of ours leaks.
        return StdioServerParameters(command=sys.executable, args=args, env=dict(self.cfg.env), cwd=work)

    async def _run(self) -> None:
        import anyio
        from mcp import ClientSession, stdio_client

        try:
            with anyio.CancelScope() as scope:
                self._scope = scope
                if self._stop_requested:
                    scope.cancel()
                try:
                    async with (
                        stdio_client(self._params(), errlog=self._stderr) as (read, write),
                        ClientSession(read, write) as session,
                    ):
                        with anyio.fail_after(self.cfg.start_timeout_s):
                            await session.initialize()
                            tools = (await session.list_tools()).tools
                        self._session = session
                        self._ready.set_result(list(tools))
                        await anyio.sleep_forever()
                except Exception as e:  # start failures and deaths: recorded, never raised into the loop
                    self._fail(self._describe(e))
        finally:
            self._session = None
            if not self._ready.done():
                self._ready.set_exception(
                    ServerFailed(self.failure or f"MCP server {self.name!r} stopped before it started")
                )
            self._finished.set()
            self._cleanup()

    def _describe(self, e: BaseException) -> str:
        if isinstance(e, TimeoutError):
            what = f"did not start within {self.cfg.start_timeout_s:g} s"
        else:
            inner = e
            while getattr(inner, "exceptions", None):  # an exception group from the SDK's task groups
                inner = inner.exceptions[0]
            what = f"stopped: {type(inner).__name__}: {inner}"
        return f"MCP server {self.name!r} {what}{self._stderr_tail()}"

    def _stderr_tail(self) -> str:
        try:
            text = (self._tmp / ".stderr").read_text(encoding="utf-8", errors="replace").strip()
        except OSError:
            return ""
        return f" (stderr: …{text[-STDERR_TAIL:]})" if text else ""

    def _fail(self, reason: str) -> None:
        if self.failure is None:
            self.failure = reason

    def wait_ready(self) -> list[Any]:
        """The server's tools once it has answered `initialize`; raises ServerFailed if it cannot start."""
        try:
            return self._ready.result(timeout=self.cfg.start_timeout_s + 5)
        except concurrent.futures.TimeoutError:
            self.close(kill=True)
            raise ServerFailed(
                f"MCP server {self.name!r} did not start within {self.cfg.start_timeout_s:g} s"
            ) from None

    @property
    def pid(self) -> int | None:
        try:
            return int(self._pidfile.read_text())
        except (OSError, ValueError):
            return None

    @property
    def alive(self) -> bool:
        """Started, not stopped, and its process still running (not a zombie)."""
        if self.failure is not None or self._finished.is_set() or not self._ready.done():
            return False
        pid = self.pid
        if pid is None:
            return False
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii") as f:
                return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
        except OSError:
            with contextlib.suppress(OSError):
                os.kill(pid, 0)
                return True
            return False

    def close(self, *, kill: bool = False, wait: bool = False) -> None:
        """Stop it: the SDK closes stdin and waits for the exit; `kill` first kills the process group at once
        (a hung server). `wait` blocks until it is down (a few seconds at most)."""
        if kill and (pid := self.pid) is not None:
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)  # its own session (start_new_session): pgid == pid
        if not self._finished.is_set():
            with contextlib.suppress(Exception):
                portal().call(self._request_stop)
        if wait:
            self._finished.wait(10)

    def _request_stop(self) -> None:  # runs on the loop thread
        self._stop_requested = True
        if self._scope is not None:
            self._scope.cancel()

    def _cleanup(self) -> None:
        with contextlib.suppress(OSError):
            self._stderr.close()
        shutil.rmtree(self._tmp, ignore_errors=True)

    # -- calls
    def call(self, tool: str, args: dict[str, Any], timeout_s: float | None = None) -> CallResult:
        """Call one tool. Tool errors come back as `ok=False`; a dead or hung server raises ServerFailed (and
        a hung one is killed)."""
        timeout = self.cfg.timeout_s if timeout_s is None else timeout_s
        if not self.alive:
            raise ServerFailed(
                self.failure or f"MCP server {self.name!r} is not running{self._stderr_tail()}"
            )
        try:
            return cap_result(
                result_value(portal().call(self._call, tool, args, timeout)), self.cfg.max_result_chars
            )
        except TimeoutError:
            reason = f"MCP server {self.name!r} hung: {tool} did not answer within {timeout:g} s"
            self._fail(reason)
            self.close(kill=True)
            raise ServerFailed(reason) from None
        except Exception as e:
            if _connection_closed(e) or not self.alive:  # closed: the pipe ends before the process is reaped
                self._fail(f"MCP server {self.name!r} died during {tool}{self._stderr_tail()}")
                self.close(kill=True)
                raise ServerFailed(self.failure or "") from None
            # a JSON-RPC error answer
            return cap_result(
                CallResult(ok=False, value=f"{type(e).__name__}: {e}"), self.cfg.max_result_chars
            )

    async def _call(self, tool: str, args: dict[str, Any], timeout: float) -> Any:
        import anyio

        session = self._session
        if session is None:
            raise ServerFailed(self.failure or f"MCP server {self.name!r} is not running")
        with anyio.fail_after(timeout):
            return await session.call_tool(tool, args)


# ---- a pool of one server's processes -----------------------------------------------------------------------


class ServerPool:
    """Processes of one server, `size` of them started ahead. Each episode `acquire`s its own and `release`s
    it when done: with a `reset_tool` the process is reset and reused, otherwise it is stopped and a fresh one
    (started ahead at acquire) takes its place, so no episode sees another's state. Under more concurrent
    episodes than `size` (an eval of many tasks) the pool grows; idle processes past `size` are stopped."""

    def __init__(self, name: str, cfg: McpServerConfig, size: int):
        self.name = name
        self.cfg = cfg
        self.size = max(1, size)
        self._idle: collections.deque[ServerProcess] = collections.deque()
        self._busy: set[ServerProcess] = set()
        self._lock = threading.Lock()
        self.started = 0  # processes started, for tests and the log
        self.restarts = 0  # processes replaced after a death or a hang
        for _ in range(self.size):
            self._spawn()

    def _spawn(self) -> None:
        self._idle.append(ServerProcess(self.name, self.cfg).start())
        self.started += 1

    def tools(self) -> list[dict[str, Any]]:
        """Every tool the server offers (allowlisted or not), as flat specs, from a pooled process."""
        with self._lock:
            if not self._idle:
                self._spawn()
            proc = self._idle[0]
        return [tool_spec(t) for t in proc.wait_ready()]

    def acquire(self) -> ServerProcess:
        """A ready process for one episode; raises ServerFailed when a fresh one cannot start either."""
        with self._lock:
            if not self._idle:
                self._spawn()
            proc = self._idle.popleft()
            if self.cfg.reset_tool is None and len(self._idle) < self.size:
                self._spawn()  # the next episode's process starts while this one runs
        try:
            proc.wait_ready()
        except ServerFailed:
            proc.close(kill=True)
            with self._lock:  # one more try with a fresh process; a second failure is the episode's
                self.restarts += 1
                self._spawn()
                proc = self._idle.pop()
            proc.wait_ready()
        with self._lock:
            self._busy.add(proc)
        return proc

    def release(self, proc: ServerProcess) -> None:
        """Give a process back after its episode. A dead or failed one is replaced (counted in `restarts`)."""
        with self._lock:
            self._busy.discard(proc)
        if not proc.alive:
            proc.close(kill=True)
            with self._lock:
                self.restarts += 1
                if len(self._idle) < self.size:
                    self._spawn()
            return
        if self.cfg.reset_tool is None:
            proc.close()
            return
        try:
            ok = proc.call(self.cfg.reset_tool, {}).ok
        except ServerFailed:
            ok = False
        with self._lock:
            keep = ok and len(self._idle) < self.size
            if keep:
                self._idle.append(proc)
            elif not ok:
                self.restarts += 1
                self._spawn()
        if not keep:
            proc.close(kill=not ok)

    def close(self) -> None:
        """Stop every process of the pool and wait for them."""
        with self._lock:
            procs = list(self._idle) + list(self._busy)
            self._idle.clear()
            self._busy.clear()
        for p in procs:
            p.close()
        for p in procs:
            p.close(wait=True)
