"""`workbench serve`: the workbench in a browser, through textual-serve, behind a per-start token.

Each browser connection gets its own `workbench tui` process (textual-serve starts one per websocket), all on
the same database, so several people can watch one run; the worker is untouched. Whatever drives the page can
run code (the verifier editor's dry run), so every request passes `screens.web_auth.Guard`: the token printed
at start (then a cookie), the Host and the Origin. Loopback by default; reach it from another machine through
an SSH tunnel (README), or bind another address with `--public-url` naming the address browsers use.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlencode

from screens.web_auth import Guard, is_loopback

SECURITY_HEADERS = {
    # The first URL holds the token: never send it on as a Referer.
    "Referrer-Policy": "no-referrer",
    # Another site framing the page could steer its keys (clickjacking).
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": "frame-ancestors 'none'",
}


def _server_class() -> type:
    try:
        from aiohttp import web
        from textual_serve.server import Server
    except ImportError:
        raise SystemExit("workbench serve needs textual-serve: pip install 'agent-workbench[web]'") from None

    class GuardedServer(Server):
        """textual-serve's server with `Guard` in front of every route (index, static, download, /ws)."""

        def __init__(self, command: str, guard: Guard, **kwargs: Any) -> None:
            super().__init__(command, **kwargs)
            self.guard = guard

        async def _make_app(self) -> web.Application:
            app = await super()._make_app()
            app.middlewares.append(self._guard_middleware)
            app.on_response_prepare.append(self._add_headers)
            return app

        @web.middleware
        async def _guard_middleware(
            self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
        ) -> web.StreamResponse:
            query_token = request.query.get("token")
            refusal = self.guard.check(
                host=request.headers.get("Host"),
                origin=request.headers.get("Origin"),
                query_token=query_token,
                cookie_token=request.cookies.get(self.guard.cookie_name),
            )
            if refusal is not None:
                return web.Response(status=refusal.status, text=f"workbench serve: {refusal.reason}\n")
            if query_token is not None and request.method == "GET" and request.path == "/":
                # Trade the token for a cookie and drop it from the address bar and the history.
                rest = {k: v for k, v in request.query.items() if k != "token"}
                response = web.HTTPFound("/" + (f"?{urlencode(rest)}" if rest else ""))
                response.set_cookie(
                    self.guard.cookie_name,
                    self.guard.token,
                    httponly=True,
                    samesite="Strict",
                    path="/",
                    secure=self.public_url.startswith("https"),
                )
                return response
            return await handler(request)

        async def _add_headers(self, request: web.Request, response: web.StreamResponse) -> None:
            response.headers.update(SECURITY_HEADERS)

    return GuardedServer


def serve(
    db: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    run: int | None = None,
    public_url: str | None = None,
    guard: Guard | None = None,
) -> None:
    """Serve `workbench tui --db DB` on HOST:PORT until interrupted; prints the URL with the access token."""
    server_class = _server_class()
    guard = guard or Guard(host, port, public_url)
    command = [sys.executable, "-m", "workbench.cli", "tui", "--db", db]
    if run is not None:
        command += ["--run", str(run)]
    # textual-serve writes `http://HOST:PORT` into the page as the WebSocket's address: an IPv6 literal needs
    # its brackets.
    page_url = public_url or guard.url().split("/?", 1)[0]
    print(f"open {guard.url()}", flush=True)
    server_class(
        shlex.join(command), guard, host=host, port=port, title="Workbench", public_url=page_url.rstrip("/")
    ).serve()


def run_serve(db: str, *, host: str, port: int, run: int | None = None, public_url: str | None = None) -> int:
    """`workbench serve`: refuse an address the guard cannot protect (2, the reason on stderr), warn when the
    token would cross the network in clear, then serve until interrupted (0)."""
    try:
        guard = Guard(host, port, public_url)
    except ValueError as e:
        print(f"workbench serve: {e}", file=sys.stderr)
        return 2
    if not is_loopback(host) and not (public_url or "").startswith("https:"):
        print(
            f"warning: listening on {host} over plain http: the token crosses the network in clear; "
            "an SSH tunnel to 127.0.0.1 (README) or an https proxy (--public-url https://...) is safer",
            file=sys.stderr,
        )
    print(f"serving {db} (Ctrl+C to stop); only this URL lets a browser in:", flush=True)
    serve(db, host=host, port=port, run=run, public_url=public_url, guard=guard)
    return 0
