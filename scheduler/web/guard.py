"""Who may use the console, and that a form really came from it.

- **Token**: with one set, every request needs it, as `Authorization: Bearer TOKEN` or the
  sign-in cookie `/login` sets (`sched_token`: an expiry time signed with the token, never the
  token itself; `Max-Age` `SESSION_S`, HttpOnly, SameSite=Strict, Secure over https);
  `POST /logout` clears it. A request that presents a wrong token or cookie counts as a failed
  sign-in of its address (ratelimit.py). Without a token the console binds only loopback
  (`check_bind`) and answers only to loopback Host names (`host_allowed`, in middleware.py),
  so that a page of another site cannot reach it by DNS rebinding.
- **CSRF**: every action is a POST whose form carries `csrf`, an HMAC of the console's secret
  and the session (the sign-in cookie or bearer token; with no token the `sched_session`
  cookie): a cookie planted by a sibling site cannot come with a matching field. Every POST
  must also come from the console's own pages: an Origin (or, without one, a Referer) naming
  the request's Host, and no `Sec-Fetch-Site` but same-origin (`cross_site`, in
  middleware.py).
- **Read-only**: every action is refused (403).

Every secret is compared as bytes (`hmac.compare_digest`): whatever text a request carries
is a refusal, never an error.
"""

from __future__ import annotations

import base64
import enum
import hashlib
import hmac
import ipaddress
import re
import secrets
import time
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import Response

from scheduler.core.errors import ConfigError
from scheduler.web.ratelimit import SignInLimiter

TOKEN_COOKIE = "sched_token"  # nosec B105 # the cookie's name, not a secret
SESSION_COOKIE = "sched_session"
SESSION_S = 12 * 3600  # how long a sign-in lasts (the cookie's Max-Age)
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
_SESSION_ID = re.compile(r"[A-Za-z0-9_-]{32}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


MIN_TOKEN_CHARS = 16
# Tokens found in examples and defaults: the first ones anyone tries. Compared in lower case
# with everything but letters and digits left out ("Change_Me" is "changeme").
PLACEHOLDER_TOKENS = frozenset({
    "changeme", "changemenow", "changethis", "changeit", "pleasechangeme", "password",
    "passw0rd", "secret", "token", "admin", "administrator", "letmein", "default", "example",
    "test", "testing", "sched", "scheduler", "console", "webtoken", "schedwebtoken",
    "secrettoken", "mytoken", "yourtoken", "insertrandomstringhere", "replaceme", "xxxx",
    "123456", "1234567890", "qwerty"})
NEW_TOKEN = "python -c 'import secrets; print(secrets.token_urlsafe(32))'"


def check_bind(host: str, token: str | None) -> None:
    """Refuse to serve beyond loopback without a token, or with a weak one: shorter than
    MIN_TOKEN_CHARS, one of PLACEHOLDER_TOKENS, or one character repeated (ConfigError, one
    line, which never shows the token)."""
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if loopback:
        return
    if not token or not token.strip():
        raise ConfigError(f"refusing to serve the console on {host} without a token: anyone "
                          f"who can reach it could cancel and purge jobs; pass --token (or "
                          f"SCHED_WEB_TOKEN), or bind 127.0.0.1")
    weak = weak_token(token)
    if weak is not None:
        raise ConfigError(f"refusing to serve the console on {host} with a weak token ({weak}): "
                          f"anyone who guesses it could cancel and purge jobs; make one with "
                          f"{NEW_TOKEN}, or bind 127.0.0.1")


def weak_token(token: str) -> str | None:
    """Why a token is too easy to guess (a few words, never the token), or None."""
    folded = re.sub(r"[^a-z0-9]", "", token.lower())
    if folded in PLACEHOLDER_TOKENS or any(folded.startswith(p) and len(folded) - len(p) < 4
                                           for p in PLACEHOLDER_TOKENS):
        return "a placeholder from an example"
    if len(token.strip()) < MIN_TOKEN_CHARS:
        return f"{len(token.strip())} characters; at least {MIN_TOKEN_CHARS}"
    if len(set(token)) < 4:
        return "it repeats one or two characters"
    return None


def host_allowed(host: str | None, allowed: Iterable[str] = ()) -> bool:
    """Whether a Host header names this machine's loopback (`localhost`, or a loopback
    address, IPv6 in brackets), or one of `allowed`, with or without a port."""
    name = host_name(host)
    if name is None:
        return False
    if name == "localhost" or name in allowed:
        return True
    literal = name[1:-1] if name.startswith("[") and name.endswith("]") else name
    try:
        ip = ipaddress.ip_address(literal)
    except ValueError:
        return False
    return ip.is_loopback and (ip.version == 6) == (literal != name)  # [v6] only


def host_name(host: str | None) -> str | None:
    """The name in `name[:port]`, lower case (IPv6 with its brackets); None when `host` is
    not a host name with an optional port."""
    if not host or _CONTROL.search(host) or any(c in host for c in "@/\\?#"):
        return None
    try:
        port = urlsplit(f"//{host}").port
    except ValueError:
        return None
    return (host.rsplit(":", 1)[0] if port is not None or host.endswith(":") else host).lower()


def cross_site(headers: Any, scheme: str) -> str | None:
    """Why a POST with these headers did not come from the console's own pages (one line),
    or None when it did: `Sec-Fetch-Site` is same-origin or absent, and the Origin (or,
    without one, the Referer) names the request's Host (`scheme`: the request's)."""
    fetch_site = headers.get("sec-fetch-site")
    if fetch_site not in (None, "same-origin", "none"):
        return (f"refused: this form came from another site (Sec-Fetch-Site: {fetch_site}); "
                f"use the console's own pages")
    source = headers.get("origin") or headers.get("referer")
    if not source:
        return ("refused: a form needs an Origin or Referer header naming this console "
                "(browsers send one; a script must send Origin: http://HOST:PORT)")
    own = _site(f"//{headers.get('host', '')}", scheme)
    if own is None or _site(source, scheme) != own:
        return "refused: this form came from another site (its Origin is not this console)"
    return None


def _site(url: str, scheme: str) -> tuple[str, int | None] | None:
    """(host, port) of a URL, the port None when it is its scheme's default."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if not parts.hostname or _CONTROL.search(url):
        return None
    default = {"http": 80, "https": 443}.get(parts.scheme or scheme)
    return parts.hostname, None if port == default else port


def safe_next(target: str | None) -> str:
    """Where to go back to: a path of this console, never another site; "/" otherwise.
    Only one leading `/` (`//x` and `/\\x` name another host to a browser), no backslash,
    no control character (browsers drop a tab or a newline: `/`, TAB, `/x` is `//x`); a path
    so made has neither a scheme nor a host."""
    if (not target or not target.startswith("/") or target.startswith("//")
            or "\\" in target or _CONTROL.search(target)):
        return "/"
    return target


class Admission(enum.Enum):
    IN = "in"              # no token is needed, or the request carries the right one
    ANONYMOUS = "anonymous"  # it carries none: the sign-in page
    WRONG = "wrong"        # a wrong token or sign-in cookie: a failed sign-in
    LIMITED = "limited"    # too many failed sign-ins from its address: 429


class Gate:
    """The token, the sign-in cookie and the CSRF field of one console."""

    def __init__(self, token: str | None, secret: bytes | None = None,
                 session_s: float = SESSION_S, limiter: SignInLimiter | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.token = _bytes(token) if token else None
        self.secret = secret or secrets.token_bytes(32)
        self.session_s = session_s
        self.limiter = limiter or SignInLimiter()
        self.clock = clock

    @property
    def needs_token(self) -> bool:
        return self.token is not None

    def admit(self, request: Request) -> Admission:
        """What the request's bearer token (or else its sign-in cookie) lets it do; a wrong
        one counts against its address."""
        if self.token is None:
            return Admission.IN
        bearer = _bearer(request)
        cookie = request.cookies.get(TOKEN_COOKIE)
        if bearer is None and cookie is None:
            return Admission.ANONYMOUS
        if self.limiter.retry_after(_address(request)):
            return Admission.LIMITED
        if (hmac.compare_digest(self.token, bearer) if bearer is not None
                else self._cookie_ok(cookie or "")):
            return Admission.IN
        self.limiter.failed(_address(request))
        return Admission.WRONG

    def sign_in(self, request: Request, given: object) -> Admission:
        """The sign-in form's token: IN (then set the cookie), WRONG or LIMITED."""
        if self.token is None:
            return Admission.IN
        if self.limiter.retry_after(_address(request)):
            return Admission.LIMITED
        if isinstance(given, str) and hmac.compare_digest(self.token, _bytes(given)):
            # Only a sign-in forgives: a page view would let a guesser behind the same
            # address as a signed-in browser (its panel refreshes every 5 s) guess on.
            self.limiter.succeeded(_address(request))
            return Admission.IN
        self.limiter.failed(_address(request))
        return Admission.WRONG

    def retry_after(self, request: Request) -> int:
        return self.limiter.retry_after(_address(request))

    def set_sign_in(self, request: Request, response: Response) -> None:
        assert self.token is not None
        expires = int(self.clock() + self.session_s)
        response.set_cookie(TOKEN_COOKIE, f"{expires}.{self._mac(self.token, b'sign-in', expires)}",
                            max_age=int(self.session_s), **_cookie_flags(request))

    def sign_out(self, request: Request, response: Response) -> None:
        response.delete_cookie(TOKEN_COOKIE, **_cookie_flags(request))

    def _cookie_ok(self, cookie: str) -> bool:
        """A sign-in cookie is `EXPIRES.MAC`: unexpired, and signed with this token."""
        expires, _, mac = cookie.partition(".")
        if not (expires.isascii() and expires.isdigit() and len(expires) <= 12) \
                or int(expires) <= self.clock():
            return False
        assert self.token is not None
        return hmac.compare_digest(_bytes(self._mac(self.token, b"sign-in", int(expires))),
                                   _bytes(mac))

    def session(self, request: Request) -> tuple[str, str | None]:
        """(the session a CSRF field is bound to, a new `sched_session` cookie's value or
        None): with a token, what the request signed in with; without, the session cookie."""
        if self.token is not None:
            bearer = request.headers.get("authorization", "")
            return (bearer if _bearer(request) is not None
                    else request.cookies.get(TOKEN_COOKIE, "")), None
        current = request.cookies.get(SESSION_COOKIE, "")
        if _SESSION_ID.fullmatch(current):
            return current, None
        new = secrets.token_urlsafe(24)
        return new, new

    def set_session(self, request: Request, response: Response, value: str) -> None:
        response.set_cookie(SESSION_COOKIE, value, **_cookie_flags(request))

    def csrf(self, session: str) -> str:
        return self._mac(self.secret, b"csrf", session)

    def csrf_ok(self, request: Request, form: Any) -> bool:
        session, new = self.session(request)
        sent = form.get("csrf")
        return (new is None and bool(session) and isinstance(sent, str)
                and hmac.compare_digest(_bytes(self.csrf(session)), _bytes(sent)))

    @staticmethod
    def _mac(key: bytes, purpose: bytes, value: object) -> str:
        digest = hmac.new(key, purpose + b"\0" + _bytes(str(value)), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _bytes(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def _bearer(request: Request) -> bytes | None:
    """The bearer token as the client sent it (headers arrive as latin-1 text: its bytes)."""
    header = request.headers.get("authorization", "")
    if header[:7].lower() != "bearer ":
        return None
    return header[7:].strip().encode("latin-1")


def _address(request: Request) -> str | None:
    return request.client.host if request.client else None


def _cookie_flags(request: Request) -> dict[str, Any]:
    return {"httponly": True, "samesite": "strict", "secure": request.url.scheme == "https"}
