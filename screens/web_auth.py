"""Who may reach `workbench serve`: a per-start token, and Host/Origin checks (as Jupyter does).

Whatever drives the served UI can run code (the verifier editor's dry run runs what is typed), so every HTTP
and WebSocket request must prove it came from someone who saw the URL printed at start:
- a random token (`secrets.token_urlsafe(32)`) in that URL's query; the first visit with it sets an HttpOnly,
  SameSite=Strict cookie and redirects to the same page without it (so the token leaves the address bar);
  later requests (static files, the WebSocket) carry the cookie; compared in constant time;
- `Host` must name the bound address (or the public URL's host): a DNS name rebound to 127.0.0.1 is refused;
- `Origin`, when a browser sends one (always on a WebSocket upgrade), must be this server's own origin: a page
  on another site cannot open the socket even from the user's own browser.
This module knows no aiohttp; `screens.serve` wraps `Guard.check` in a middleware.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from dataclasses import dataclass, field
from urllib.parse import urlsplit

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
WILDCARD_HOSTS = ("0.0.0.0", "::", "")


def is_loopback(host: str) -> bool:
    if host in ("localhost",):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _host_port(host: str, port: int) -> str:
    """`Host` header form: IPv6 literals in brackets, the port always written (browsers omit :80/:443)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _url_host_port(url: str) -> tuple[str, str, int]:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"--public-url {url!r}: expected http(s)://HOST[:PORT]")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return parts.scheme, parts.hostname, port


@dataclass(frozen=True)
class Refusal:
    """Why a request was refused: `status` is the HTTP status to answer with."""

    status: int
    reason: str


@dataclass
class Guard:
    """The checks for one server start: its token, and the hosts and origins it answers to."""

    host: str
    port: int
    public_url: str | None = None
    token: str = field(default_factory=lambda: secrets.token_urlsafe(32))

    def __post_init__(self) -> None:
        if self.host in WILDCARD_HOSTS and not self.public_url:
            # The page embeds the WebSocket URL; with a wildcard bind there is no name the browser can use, and
            # no Host to check against.
            raise ValueError(
                f"--host {self.host or '(all)'} needs --public-url http://NAME:PORT, the address "
                "browsers use to reach this server"
            )
        if len(self.token) < 16:
            raise ValueError("the access token must be at least 16 characters")
        hosts: set[str] = set()
        origins: set[str] = set()
        names = LOOPBACK_NAMES if is_loopback(self.host) else (self.host,)
        for name in names if self.host not in WILDCARD_HOSTS else ():
            hosts.add(_host_port(name, self.port))
            origins.add(f"http://{_host_port(name, self.port)}")
        if self.public_url:
            scheme, name, port = _url_host_port(self.public_url)
            hosts.add(_host_port(name, port))
            default = (scheme == "http" and port == 80) or (scheme == "https" and port == 443)
            if default:
                hosts.add(f"[{name}]" if ":" in name else name)
            origins.add(f"{scheme}://{_host_port(name, port) if not default else name}")
        self.allowed_hosts = frozenset(h.lower() for h in hosts)
        self.allowed_origins = frozenset(o.lower() for o in origins)

    @property
    def cookie_name(self) -> str:
        # Cookies are shared by every port of a host: a name per port keeps two servers from overwriting each
        # other's token.
        return f"workbench_token_{self.port}"

    def url(self) -> str:
        """The address to print: the only way in for a browser that has no cookie yet."""
        base = (
            self.public_url.rstrip("/") if self.public_url else f"http://{_host_port(self.host, self.port)}"
        )
        return f"{base}/?token={self.token}"

    def token_ok(self, candidate: str | None) -> bool:
        return bool(candidate) and hmac.compare_digest(candidate.encode(), self.token.encode())

    def check(
        self, *, host: str | None, origin: str | None, query_token: str | None, cookie_token: str | None
    ) -> Refusal | None:
        """None when the request may go on; else why not. Host and Origin first: they need no secret."""
        if not host or host.lower() not in self.allowed_hosts:
            return Refusal(403, f"Host {host!r} is not this server's address")
        if origin is not None and origin.lower() not in self.allowed_origins:
            return Refusal(403, f"Origin {origin!r} is not this server's own page")
        if query_token is not None:
            return None if self.token_ok(query_token) else Refusal(403, "wrong access token")
        if self.token_ok(cookie_token):
            return None
        return Refusal(403, "no access token: open the URL `workbench serve` printed (it ends in ?token=...)")
