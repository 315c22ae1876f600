"""An MCP server that misbehaves on request, for tests/integration/test_mcp.py: it echoes, hangs, fails, or dies."""

from __future__ import annotations

import os
import time

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("faulty")


@server.tool()
def echo(text: str) -> str:
    """Return the text, and this process's id (so a test can tell processes apart)."""
    return f"{text} from {os.getpid()}"


@server.tool()
def hang(seconds: float) -> str:
    """Sleep past any sensible timeout."""
    time.sleep(seconds)
    return "woke up"


@server.tool()
def fail(reason: str) -> str:
    """An isError result with the reason."""
    raise ToolError(reason)


@server.tool()
def die() -> str:
    """Exit the process without answering."""
    os._exit(3)


if __name__ == "__main__":
    server.run()
