"""`workbench serve` lets in only the holder of its per-start token, from its own Host and Origin.

The server runs for real (a subprocess, as a user starts it) and is probed over real HTTP and WebSocket
connections: the refusals (no token, wrong token, foreign Origin, foreign Host) and the way in (the printed
URL -> a cookie -> the page -> a WebSocket that streams the app's screen). `Guard`'s rules are also checked
directly for what a live server on the loopback cannot show (wildcard binds, proxies, IPv6).
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from screens.web_auth import Guard

ROOT = Path(__file__).resolve().parents[2]
needs_serve = pytest.mark.skipif(
    importlib.util.find_spec("textual_serve") is None or importlib.util.find_spec("aiohttp") is None,
    reason="textual-serve (the web extra) is not installed",
)


# --- the rules --------------------------------------------------------------------------------------------


def test_a_loopback_guard_answers_to_its_loopback_names_only():
    g = Guard("127.0.0.1", 8123)
    ok = dict(origin=None, query_token=None, cookie_token=g.token)
    for host in ("127.0.0.1:8123", "localhost:8123", "[::1]:8123"):
        assert g.check(host=host, **ok) is None, host
    for host in ("evil.example:8123", "127.0.0.1:8124", "127.0.0.1", None):
        refusal = g.check(host=host, **ok)
        assert refusal is not None and refusal.status == 403 and "Host" in refusal.reason, host


def test_the_token_is_checked_in_the_query_or_the_cookie():
    g = Guard("127.0.0.1", 8123)
    host = "127.0.0.1:8123"
    assert g.check(host=host, origin=None, query_token=g.token, cookie_token=None) is None
    assert g.check(host=host, origin=None, query_token=None, cookie_token=g.token) is None
    assert "no access token" in g.check(host=host, origin=None, query_token=None, cookie_token=None).reason
    assert "wrong" in g.check(host=host, origin=None, query_token="x" * 43, cookie_token=None).reason
    # A wrong token in the query is refused even beside a right cookie: never "either will do" half-checked.
    assert g.check(host=host, origin=None, query_token="nope", cookie_token=g.token) is not None
    assert g.check(host=host, origin=None, query_token=None, cookie_token=g.token[:-1]) is not None
    assert len(g.token) >= 40 and g.token != Guard("127.0.0.1", 8123).token  # random per start


def test_origin_must_be_the_servers_own_page():
    g = Guard("127.0.0.1", 8123)
    base = dict(host="127.0.0.1:8123", query_token=None, cookie_token=g.token)
    assert g.check(origin="http://127.0.0.1:8123", **base) is None
    assert g.check(origin="http://localhost:8123", **base) is None
    for origin in ("http://evil.example", "http://127.0.0.1:8124", "https://127.0.0.1:8123", "null"):
        refusal = g.check(origin=origin, **base)
        assert refusal is not None and "Origin" in refusal.reason, origin


def test_a_wildcard_bind_needs_the_public_url_and_answers_only_to_it():
    with pytest.raises(ValueError, match="--public-url"):
        Guard("0.0.0.0", 8000)
    g = Guard("0.0.0.0", 8000, public_url="https://wb.example.org/")
    assert g.url() == f"https://wb.example.org/?token={g.token}"
    base = dict(query_token=None, cookie_token=g.token)
    assert g.check(host="wb.example.org", origin="https://wb.example.org", **base) is None
    assert g.check(host="wb.example.org:443", origin=None, **base) is None
    assert g.check(host="10.0.0.5:8000", origin=None, **base) is not None
    assert g.check(host="wb.example.org", origin="http://wb.example.org", **base) is not None
    with pytest.raises(ValueError, match="http"):
        Guard("0.0.0.0", 8000, public_url="ftp://x")


def test_an_ipv6_loopback_url_keeps_its_brackets():
    g = Guard("::1", 8123)
    assert g.url().startswith("http://[::1]:8123/?token=")
    assert (
        g.check(host="[::1]:8123", origin="http://[::1]:8123", query_token=None, cookie_token=g.token) is None
    )


# --- a live server ----------------------------------------------------------------------------------------


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def served(fake):
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "workbench.cli", "serve", "--port", str(port), "--db", str(fake.db_path)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    found: dict[str, str] = {}
    seen: list[str] = []
    ready = threading.Event()

    def read() -> None:  # the URL line, then keep the pipe drained so the server never blocks on it
        for line in proc.stdout:
            seen.append(line)
            m = re.search(r"open (http://\S+)", line)
            if m:
                found["url"] = m.group(1)
            if "Serving" in line or "Press Ctrl+C" in line:
                ready.set()
        ready.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        assert ready.wait(60), "the server did not start"
        assert proc.poll() is None and "url" in found, "".join(seen)
        yield port, found["url"]
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


async def _probe(port: int, url: str) -> dict[str, object]:
    import aiohttp

    base = f"http://127.0.0.1:{port}"
    own = {"Origin": base}
    token = url.split("token=", 1)[1]
    out: dict[str, object] = {}
    async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as bare:
        out["index, no token"] = (await bare.get(f"{base}/")).status
        out["index, wrong token"] = (await bare.get(f"{base}/?token={'A' * len(token)}")).status
        out["static, no token"] = (await bare.get(f"{base}/static/js/textual.js")).status
        out["index, right token, foreign Host"] = (
            await bare.get(f"{base}/?token={token}", headers={"Host": "evil.example"})
        ).status
        for name, headers, query in [
            ("ws, no token", own, ""),
            ("ws, wrong token", own, f"?token={'A' * len(token)}"),
            ("ws, right token, foreign Origin", {"Origin": "http://evil.example"}, f"?token={token}"),
            ("ws, right token, foreign Host", {**own, "Host": f"evil.example:{port}"}, f"?token={token}"),
        ]:
            try:
                async with bare.ws_connect(f"{base}/ws{query}", headers=headers):
                    out[name] = 101
            except aiohttp.WSServerHandshakeError as e:
                out[name] = e.status
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as user:
        first = await user.get(url, allow_redirects=False)
        out["first visit"] = first.status
        out["redirect"] = first.headers.get("Location")
        out["set-cookie"] = first.headers.get("Set-Cookie", "")
        page = await user.get(f"{base}/")
        out["page"] = page.status
        out["page text"] = await page.text()
        out["page headers"] = dict(page.headers)
        out["static, cookie"] = (await user.get(f"{base}/static/js/textual.js")).status
        async with user.ws_connect(f"{base}/ws?width=80&height=24", headers=own) as ws:
            received = b""
            while len(received) < 200:  # the app's first screen, streamed as terminal bytes
                msg = await asyncio.wait_for(ws.receive(), 60)
                if msg.type == aiohttp.WSMsgType.BINARY:
                    received += msg.data
                elif msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR):
                    break
            out["app bytes"] = len(received)
    return out


@needs_serve
def test_serve_refuses_everyone_but_the_token_holder_and_lets_the_holder_in(served):
    port, url = served
    assert re.fullmatch(rf"http://127\.0\.0\.1:{port}/\?token=[A-Za-z0-9_-]{{40,}}", url)
    got = asyncio.run(_probe(port, url))
    for name in (
        "index, no token",
        "index, wrong token",
        "static, no token",
        "index, right token, foreign Host",
        "ws, no token",
        "ws, wrong token",
        "ws, right token, foreign Origin",
        "ws, right token, foreign Host",
    ):
        assert got[name] == 403, (name, got[name])
    assert got["first visit"] == 302 and got["redirect"] == "/"  # the token leaves the address bar
    cookie = str(got["set-cookie"])
    assert f"workbench_token_{port}=" in cookie and "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert got["page"] == 200 and "/static/js/textual.js" in str(got["page text"])
    assert got["page headers"].get("X-Frame-Options") == "DENY"
    assert got["page headers"].get("Referrer-Policy") == "no-referrer"
    assert got["static, cookie"] == 200
    assert int(got["app bytes"]) >= 200  # a `workbench tui` process answered through the socket


def test_cli_refuses_a_wildcard_bind_without_a_public_url(tmp_path, capsys):
    from workbench.cli import main

    assert main(["serve", "--host", "0.0.0.0", "--db", str(tmp_path / "wb.db")]) == 2
    assert "--public-url" in capsys.readouterr().err
