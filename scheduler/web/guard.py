"""Who may use the console, and that a form really came from it.

- **Token**: with one set, every request needs it, as `Authorization: Bearer TOKEN` or the
  `sched_token` cookie that `/login` sets; without it a page answers 401 with the login form.
  Binding a non-loopback address without a token is refused before the server starts
  (`check_bind`).
- **CSRF**: every action is a POST whose form carries `csrf`, equal to the `sched_csrf` cookie
  the console set (double submit), and whose Origin, when the browser sends one, is the
  console's own host. A page of another site can neither read the cookie nor fake the Origin.
- **Read-only**: every POST but /login is refused (403).
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from typing import Any
from urllib.parse import urlsplit

from starlette.requests import Request

from ..errors import ConfigError

TOKEN_COOKIE = "sched_token"
CSRF_COOKIE = "sched_csrf"
OPEN_PATHS = ("/login", "/static/", "/healthz")


def check_bind(host: str, token: str | None) -> None:
    """Refuse to serve beyond loopback without a token (ConfigError, one line)."""
    if token:
        return
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback:
        raise ConfigError(f"refusing to serve the console on {host} without a token: anyone "
                          f"who can reach it could cancel and purge jobs; pass --token (or "
                          f"SCHED_WEB_TOKEN), or bind 127.0.0.1")


def given_token(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    if header.lower().startswith("bearer "):
        return header[7:].strip()
    return request.cookies.get(TOKEN_COOKIE)


def token_ok(expected: str | None, given: str | None) -> bool:
    return expected is None or (given is not None and hmac.compare_digest(expected, given))


def new_csrf() -> str:
    return secrets.token_urlsafe(24)


def csrf_ok(request: Request, form: Any) -> bool:
    cookie = request.cookies.get(CSRF_COOKIE)
    sent = form.get("csrf")
    if not cookie or not isinstance(sent, str) or not hmac.compare_digest(cookie, sent):
        return False
    origin = request.headers.get("origin")
    if origin is None:  # not every browser sends it on a same-origin form
        return True
    return urlsplit(origin).netloc == request.headers.get("host", "")
