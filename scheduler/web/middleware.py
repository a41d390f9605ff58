"""What every request to the console passes before its page, whatever its path (pages,
partials, the API, static files, a 404):

- behind a reverse proxy (`behind_proxy`), the client's scheme and address are the last
  `X-Forwarded-Proto` and `X-Forwarded-For` entries, the ones the proxy wrote (so the sign-in
  cookie is Secure over https, and sign-ins are limited per real client); otherwise those
  headers are ignored, as anyone could send them;
- without a token, a Host that is not a loopback name (guard.host_allowed) or one of
  `allow_hosts` is answered 421: a page of another site that rebinds its own name to
  127.0.0.1 reaches the console with that name as its Host;
- a POST from another site is answered 403 (guard.cross_site);
- a POST whose body is not a small URL-encoded form is refused before any of it is read:
  415 for another Content-Type (a multipart upload to `/login` would be spooled whole before
  the token is compared), 413 for a Content-Length over `FORM_BYTES` (app.read_form stops a
  chunked body there too);
- every response carries `SECURITY_HEADERS`: only the console's own scripts and styles run
  (no inline code), it is never framed, nothing is sniffed, no Referer leaves it.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

import scheduler.web.guard as guard
from scheduler.core.errors import ConfigError

CONTENT_SECURITY_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; "
                           "img-src 'self'; connect-src 'self'; form-action 'self'; "
                           "base-uri 'none'; frame-ancestors 'none'")
SECURITY_HEADERS = [(b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
                    (b"x-frame-options", b"DENY"),
                    (b"x-content-type-options", b"nosniff"),
                    (b"referrer-policy", b"same-origin")]
_NAMES = {name for name, _ in SECURITY_HEADERS}
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
FORM_TYPE = "application/x-www-form-urlencoded"
# The largest action is a selection of a page's items (the jobs page's 500 job ids); the
# sign-in form is a token.
FORM_BYTES = 64 * 1024
FORM_FIELDS = 1000


class SecurityMiddleware:
    def __init__(self, app: ASGIApp, *, loopback_only: bool, allow_hosts: Iterable[str] = (),
                 behind_proxy: bool = False) -> None:
        self.app = app
        self.loopback_only = loopback_only
        self.allow_hosts = frozenset(allowed_host(name) for name in allow_hosts)
        self.behind_proxy = behind_proxy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        if self.behind_proxy:
            scope = _forwarded(scope, headers)

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                kept = [(k, v) for k, v in message.get("headers", []) if k.lower() not in _NAMES]
                message = {**message, "headers": kept + SECURITY_HEADERS}
            await send(message)

        refusal = self._refusal(scope, headers)
        if refusal is not None:
            await PlainTextResponse(*refusal)(scope, receive, send_with_headers)
        else:
            await self.app(scope, receive, send_with_headers)

    def _refusal(self, scope: Scope, headers: Headers) -> tuple[str, int] | None:
        if self.loopback_only and not guard.host_allowed(headers.get("host"), self.allow_hosts):
            port = (scope.get("server") or ("", 8080))[1]
            return (f"this console has no token, so it answers only to loopback names "
                    f"({', '.join(guard.LOOPBACK_NAMES)}): open http://127.0.0.1:{port}/, or "
                    f"start it with --token (or --allow-host NAME for a name of your own)", 421)
        if scope["method"] not in SAFE_METHODS:
            reason = guard.cross_site(headers, scope.get("scheme", "http"))
            if reason is not None:
                return reason, 403
            return form_refusal(headers)
        return None


def form_refusal(headers: Headers) -> tuple[str, int] | None:
    """Why a POST's body is not read (one line and 415 or 413), or None: it says it is a
    URL-encoded form and no longer than FORM_BYTES (or sends no length: chunked)."""
    kind = headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if kind != FORM_TYPE:
        return (f"refused: the console takes only its own forms ({FORM_TYPE} bodies)", 415)
    length = headers.get("content-length")
    if length is not None and not (length.isascii() and length.isdigit()
                                   and len(length) <= 12 and int(length) <= FORM_BYTES):
        return f"refused: a console form is at most {FORM_BYTES:,} bytes", 413
    return None


def allowed_host(name: str) -> str:
    """An `--allow-host` value as the Host check compares it (its port, if any, dropped)."""
    host = guard.host_name(name)
    if host is None:
        raise ConfigError(f"--allow-host {name!r} is not a host name: give a name such as "
                          f"console.example.com")
    return host


def _forwarded(scope: Scope, headers: Headers) -> Scope:
    scope = dict(scope)
    proto = headers.get("x-forwarded-proto", "").rsplit(",", 1)[-1].strip().lower()
    if proto in ("http", "https"):
        scope["scheme"] = proto
    client = headers.get("x-forwarded-for", "").rsplit(",", 1)[-1].strip().strip("[]")
    try:
        scope["client"] = (str(ipaddress.ip_address(client)), 0)
    except ValueError:
        pass
    return scope
