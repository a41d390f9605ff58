"""The console's doors over plain HTTP, against real `sched web` processes on the real Redis:
requests forged as an attacker would send them (Host, Origin, Referer, Sec-Fetch-Site,
planted cookies, odd bytes), and what each refused request did not do checked in Redis
through the SDK. One console without a token and one with, for the module; the options that
change the doors (--behind-proxy, --allow-host) start their own. Each test that sends wrong
tokens connects from a loopback address of its own (127.0.0.N): the sign-in limit counts per
client address. The tests against a `sched web` process are in the slow set (real
processes); the limiter's and the cookie's own tests run in-process in the fast set."""

from __future__ import annotations

import contextlib
import dataclasses
import http.client
import re
import subprocess
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode, urlsplit

import pytest
import redis
from starlette.requests import Request
from starlette.responses import Response

from conftest import SCHED, drop_namespace, new_namespace
from helpers import running, serve_console
from scheduler import Client

TOKEN = "doors-test-token"
MARKER = "payload-only-the-operator-may-see"
ODD = ["é", "\u2603", "x" * 4000, "é" * 1500, "", " ", "123.é", "9999999999.\u2603"]


@dataclasses.dataclass
class Reply:
    status: int
    headers: http.client.HTTPMessage
    body: str

    def cookie(self, name: str) -> str | None:
        """The Set-Cookie header that sets `name`, whole (value and attributes)."""
        for header in self.headers.get_all("set-cookie") or []:
            if header.startswith(f"{name}="):
                return str(header)
        return None

    def cookies(self) -> str:
        """The Cookie header a browser would send back."""
        return "; ".join(h.split(";", 1)[0] for h in self.headers.get_all("set-cookie") or [])


def call(base: str, method: str, path: str, *, host: str | None = None,
         source: str = "127.0.0.1", form: dict[str, Any] | None = None,
         **headers: str) -> Reply:
    """One raw request, every header as given (UTF-8 bytes), from the loopback address
    `source`; header names in keyword form: `Sec_Fetch_Site="cross-site"`."""
    port = urlsplit(base).port
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10, source_address=(source, 0))
    try:
        conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        conn.putheader("Host", (f"127.0.0.1:{port}" if host is None else host).encode())
        body = None
        if form is not None:
            body = urlencode(form, doseq=True).encode()
            conn.putheader("Content-Type", "application/x-www-form-urlencoded")
            conn.putheader("Content-Length", str(len(body)))
        for name, value in headers.items():
            conn.putheader(name.replace("_", "-"), value.encode())
        conn.endheaders(body)
        response = conn.getresponse()
        return Reply(response.status, response.headers,
                     response.read().decode("utf-8", "replace"))
    finally:
        conn.close()


def form_of(reply: Reply) -> str:
    match = re.search(r'name="csrf" value="([^"]*)"', reply.body)
    assert match, reply.body[:500]
    return match.group(1)


@dataclasses.dataclass
class Console:
    base: str
    client: Client
    nightly: str  # a named schedule: the action forms trigger it
    secret_job: str  # a delayed job whose payload holds MARKER

    @property
    def origin(self) -> str:
        return self.base

    def runs(self) -> int:
        return len(self.client.slots(self.nightly))

    def session(self) -> tuple[str, str]:
        """(the Cookie header, the csrf field) a new browser gets from the job's page."""
        reply = call(self.base, "GET", f"/jobs/{self.nightly}")
        assert reply.status == 200, reply.body[:300]
        return reply.cookies(), form_of(reply)

    def sign_in(self, source: str, **headers: str) -> Reply:
        return call(self.base, "POST", "/login", source=source, Origin=self.origin,
                    form={"token": TOKEN, "next": "/"}, **headers)

    def trigger(self, cookie: str, csrf: str, source: str = "127.0.0.1", **headers: str) -> Reply:
        return call(self.base, "POST", "/actions/trigger", source=source,
                    form={"csrf": csrf, "jobs": self.nightly, "next": "/"}, Cookie=cookie,
                    **headers)


@pytest.fixture(scope="module")
def namespace(redis_url: str) -> Iterator[Console]:
    """A namespace of this module's own with a named schedule and a delayed job (a Console
    with no base: `serving` gives it one)."""
    ns = new_namespace()
    plain = redis.Redis.from_url(redis_url)
    with Client(redis_url, ns) as client:
        nightly = client.schedule("nightly", "t.ok", {"kind": "daily"}, cron="0 3 * * *")
        secret = client.submit("t.ok", {"note": MARKER}, delay=3600)
        yield Console("", client, nightly, secret)
    drop_namespace(plain, ns)
    plain.close()


@contextlib.contextmanager
def serving(redis_url: str, namespace: Console, *args: str) -> Iterator[Console]:
    """`sched web ARGS` on the namespace, until the block ends."""
    proc, base = serve_console(redis_url, namespace.client.namespace, *args)
    with running(proc):
        yield dataclasses.replace(namespace, base=base)


@pytest.fixture(scope="module")
def open_console(redis_url: str, namespace: Console) -> Iterator[Console]:
    """`sched web` with no token (loopback only)."""
    with serving(redis_url, namespace) as console:
        yield console


@pytest.fixture(scope="module")
def token_console(redis_url: str, namespace: Console) -> Iterator[Console]:
    """`sched web --token TOKEN`."""
    with serving(redis_url, namespace, "--token", TOKEN) as console:
        yield console


# --- next: only a path of the console -------------------------------------------------------

BAD_NEXT = ["///evil.example", "//evil.example", "/\\evil.example", "\\\\evil.example",
            "/\t/evil.example", "/\n/evil.example", "http://evil.example/", "https:evil.example",
            "evil.example", " /jobs", "javascript:alert(1)", ""]


@pytest.mark.slow
def test_next_after_sign_in_is_a_path_of_the_console(token_console: Console) -> None:
    for target in BAD_NEXT:
        reply = call(token_console.base, "POST", "/login", source="127.0.0.11",
                     Origin=token_console.origin, form={"token": TOKEN, "next": target})
        assert (reply.status, reply.headers["location"]) == (303, "/"), target
    reply = call(token_console.base, "POST", "/login", source="127.0.0.11",
                 Origin=token_console.origin, form={"token": TOKEN, "next": "/jobs?kind=cron"})
    assert reply.headers["location"] == "/jobs?kind=cron"
    page = call(token_console.base, "GET", "/login?next=///evil.example", source="127.0.0.11")
    assert 'name="next" value="/"' in page.body


@pytest.mark.slow
def test_an_action_forms_next_is_a_path_of_the_console(open_console: Console) -> None:
    cookie, csrf = open_console.session()
    for target in BAD_NEXT:
        reply = call(open_console.base, "POST", "/actions/trigger", Cookie=cookie,
                     Origin=open_console.origin,
                     form={"csrf": csrf, "jobs": open_console.nightly, "next": target})
        assert reply.status == 303, (target, reply.body)
        assert reply.headers["location"].startswith("/?done="), (target, reply.headers)


# --- without a token: loopback Host names only ----------------------------------------------

@pytest.mark.slow
def test_without_a_token_only_loopback_names_are_served(open_console: Console,
                                                        token_console: Console) -> None:
    port = urlsplit(open_console.base).port
    for name in ("127.0.0.1", "localhost", "[::1]", "LOCALHOST"):
        for host in (name, f"{name}:{port}"):
            assert call(open_console.base, "GET", "/jobs", host=host).status == 200, host
    for host in ("attacker.example", f"attacker.example:{port}", f"127.0.0.1.nip.io:{port}",
                 f"localhost.attacker.example:{port}", f"10.1.2.3:{port}", f"0.0.0.0:{port}",
                 f"::1:{port}", f"[127.0.0.1]:{port}", "[::1", "", "é", "a" * 2000,
                 f"user@127.0.0.1:{port}"):
        reply = call(open_console.base, "GET", "/jobs", host=host)
        assert reply.status in (400, 421), host
        assert MARKER not in reply.body

    # A page of attacker.example rebinds its name to 127.0.0.1: the browser sends its own
    # name as the Host and as the Origin, and the console's cookies are the attacker's own.
    evil = f"attacker.example:{port}"
    page = call(open_console.base, "GET", f"/jobs/{open_console.secret_job}", host=evil,
                Origin=f"http://{evil}")
    assert page.status == 421 and MARKER not in page.body
    assert "loopback" in page.body and "--token" in page.body and page.body.count("\n") == 0
    before = open_console.runs()
    csrf = re.search(r'name="csrf" value="([^"]*)"', page.body)
    reply = call(open_console.base, "POST", "/actions/trigger", host=evil,
                 Origin=f"http://{evil}", Cookie=page.cookies(),
                 form={"csrf": csrf.group(1) if csrf else "", "jobs": open_console.nightly})
    assert reply.status == 421
    assert open_console.runs() == before
    # the same page through loopback has the payload: the refusal is the Host's
    assert MARKER in call(open_console.base, "GET", f"/jobs/{open_console.secret_job}").body
    # with a token the Host is not checked: the browser sends the cookie to no other name
    assert call(token_console.base, "GET", "/jobs", host=evil).status == 401


@pytest.mark.slow
def test_allow_host_names_one_more_host(redis_url: str, namespace: Console) -> None:
    with serving(redis_url, namespace, "--allow-host", "Console.Example") as console:
        port = urlsplit(console.base).port
        assert call(console.base, "GET", "/jobs", host=f"console.example:{port}").status == 200
        assert call(console.base, "GET", "/jobs", host="console.example").status == 200
        assert call(console.base, "GET", "/jobs", host=f"evil.example:{port}").status == 421
    refused = subprocess.run([*SCHED, "--redis-url", redis_url, "--namespace",
                              namespace.client.namespace,
                              "web", "--port", "0", "--allow-host", "http://x/"],
                             capture_output=True, text=True, timeout=30)
    assert refused.returncode != 0 and refused.stderr.count("\n") == 1, refused.stderr
    assert "--allow-host" in refused.stderr


# --- CSRF: a field only the console can make, from the console's own pages ------------------

@pytest.mark.slow
def test_a_planted_cookie_pair_does_not_pass(open_console: Console) -> None:
    """A sibling site can plant cookies for the console's host, and send a form field equal
    to them: the field must be the console's HMAC of the session, which it cannot make."""
    before = open_console.runs()
    planted = "A" * 32
    for cookie in (f"sched_csrf={planted}; sched_session={planted}",
                   f"sched_session={planted}", f"sched_csrf={planted}"):
        reply = open_console.trigger(cookie, planted, Origin=open_console.origin)
        assert reply.status == 403 and reply.body.count("\n") == 0, (cookie, reply.body)
    # the field of one session does not pass with another session's cookie
    _, csrf_one = open_console.session()
    other, _ = open_console.session()
    assert open_console.trigger(other, csrf_one, Origin=open_console.origin).status == 403
    assert open_console.runs() == before
    # a session's own field, from its own page: the action runs
    cookie, csrf = open_console.session()
    assert open_console.trigger(cookie, csrf, Origin=open_console.origin).status == 303
    assert open_console.runs() == before + 1


@pytest.mark.slow
def test_a_post_from_another_site_is_refused(open_console: Console,
                                             token_console: Console) -> None:
    cookie, csrf = open_console.session()
    port = urlsplit(open_console.base).port
    before = open_console.runs()
    forged: list[dict[str, str]] = [
        {},  # neither Origin nor Referer
        {"Sec_Fetch_Site": "cross-site", "Origin": open_console.origin},
        {"Sec_Fetch_Site": "same-site", "Origin": open_console.origin},
        {"Origin": "http://evil.example"},
        {"Origin": f"http://evil.example:{port}"},
        {"Origin": "http://127.0.0.1:1"},
        {"Origin": "null"},
        {"Referer": "http://evil.example/page"},
        {"Origin": "http://evil.example", "Referer": f"{open_console.base}/jobs"},
    ]
    for headers in forged:
        reply = open_console.trigger(cookie, csrf, **headers)
        assert reply.status == 403, (headers, reply.body)
        assert reply.body.count("\n") == 0 and "refused" in reply.body, reply.body
    assert open_console.runs() == before
    # the console's own pages: a Referer alone, or Sec-Fetch-Site same-origin with the Origin
    assert open_console.trigger(cookie, csrf, Referer=f"{open_console.base}/jobs").status == 303
    assert open_console.trigger(cookie, csrf, Origin=open_console.origin,
                                Sec_Fetch_Site="same-origin").status == 303
    assert open_console.runs() == before + 2
    # the sign-in form too: no cookie for a form posted by another site
    reply = call(token_console.base, "POST", "/login", source="127.0.0.12",
                 Origin="http://evil.example", form={"token": TOKEN})
    assert reply.status == 403 and reply.cookie("sched_token") is None


# --- odd bytes: refusals, never errors ------------------------------------------------------

@pytest.mark.slow
def test_odd_tokens_and_fields_are_refused_never_an_error(open_console: Console,
                                                          token_console: Console) -> None:
    source = "127.0.0.13"  # a wrong token counts: this address is limited (429) midway
    for value in ODD:
        for reply in (
                call(token_console.base, "GET", "/jobs", source=source,
                     Authorization=f"Bearer {value}"),
                call(token_console.base, "GET", "/jobs", source=source,
                     Cookie=f"sched_token={value}"),
                call(token_console.base, "POST", "/login", source=source,
                     Origin=token_console.origin, form={"token": value, "next": value})):
            assert reply.status in (401, 429), (value[:20], reply.status, reply.body[:300])
    cookie, csrf = open_console.session()
    before = open_console.runs()
    for value in [*ODD, csrf + "é", csrf[:-1]]:
        reply = open_console.trigger(cookie, value, Origin=open_console.origin)
        assert reply.status == 403, (value[:20], reply.status, reply.body[:300])
        reply = open_console.trigger(f"sched_session={value}", value,
                                     Origin=open_console.origin)
        assert reply.status == 403, (value[:20], reply.status, reply.body[:300])
        reply = call(open_console.base, "GET", "/jobs", Cookie=f"sched_session={value}")
        assert reply.status == 200, (value[:20], reply.status)
        reply = open_console.trigger(cookie, csrf, Origin=f"http://{value}")
        assert reply.status == 403, (value[:20], reply.status)
    assert open_console.runs() == before


# --- cookies and sign-out -------------------------------------------------------------------

@pytest.mark.slow
def test_the_sign_in_cookie_and_sign_out(token_console: Console,
                                         open_console: Console) -> None:
    reply = token_console.sign_in("127.0.0.14", X_Forwarded_Proto="https")
    assert reply.status == 303
    cookie = reply.cookie("sched_token")
    assert cookie is not None
    flags = {f.strip().lower() for f in cookie.split(";")[1:]}
    assert {"httponly", "samesite=strict", "path=/", "max-age=43200"} <= flags, flags
    assert "secure" not in flags  # plain http, and X-Forwarded-Proto is not trusted here
    assert TOKEN not in cookie  # a signed expiry time, not the token itself
    signed_in = reply.cookies()

    page = call(token_console.base, "GET", "/jobs", source="127.0.0.14", Cookie=signed_in)
    assert page.status == 200 and 'data-action="sign out"' in page.body
    assert 'data-action="sign out"' not in call(open_console.base, "GET", "/jobs").body
    # sign-out is a form like the others: refused without its field
    refused = call(token_console.base, "POST", "/logout", source="127.0.0.14",
                   Cookie=signed_in, Origin=token_console.origin, form={})
    assert refused.status == 403 and refused.cookie("sched_token") is None
    out = call(token_console.base, "POST", "/logout", source="127.0.0.14", Cookie=signed_in,
               Origin=token_console.origin, form={"csrf": form_of(page)})
    assert (out.status, out.headers["location"]) == (303, "/login")
    cleared = out.cookie("sched_token") or ""
    assert cleared.startswith('sched_token="";') and "Max-Age=0" in cleared, cleared


@pytest.mark.slow
def test_behind_a_proxy(redis_url: str, namespace: Console) -> None:
    """--behind-proxy: the proxy's X-Forwarded-Proto makes the cookie Secure, and its
    X-Forwarded-For (the last entry, the one the proxy wrote) is the address limited."""
    with serving(redis_url, namespace, "--token", TOKEN, "--behind-proxy",
                 "--session-hours", "2") as console:
        secure = console.sign_in("127.0.0.1", X_Forwarded_Proto="https")
        flags = {f.strip().lower() for f in (secure.cookie("sched_token") or "").split(";")}
        assert {"secure", "httponly", "samesite=strict", "max-age=7200"} <= flags, flags
        plain = console.sign_in("127.0.0.1", X_Forwarded_Proto="http")
        assert "secure" not in (plain.cookie("sched_token") or "").lower()
        for _ in range(5):
            wrong = call(console.base, "POST", "/login", Origin=console.origin,
                         X_Forwarded_For="203.0.113.9, 198.51.100.7", form={"token": "guess"})
            assert wrong.status == 401
        limited = console.sign_in("127.0.0.1", X_Forwarded_For="198.51.100.7")
        assert limited.status == 429 and limited.cookie("sched_token") is None
        assert console.sign_in("127.0.0.1", X_Forwarded_For="198.51.100.8").status == 303


# --- headers on every response --------------------------------------------------------------

@pytest.mark.slow
def test_security_headers_on_every_response(open_console: Console,
                                            token_console: Console) -> None:
    o, t = open_console, token_console
    port = urlsplit(o.base).port
    replies = {
        "overview": call(o.base, "GET", "/"), "jobs": call(o.base, "GET", "/jobs"),
        "job": call(o.base, "GET", f"/jobs/{o.nightly}"),
        "partial": call(o.base, "GET", "/partials/health"),
        "api": call(o.base, "GET", "/api/series"),
        "static": call(o.base, "GET", "/static/console.js"),
        "404": call(o.base, "GET", "/no-such-page"),
        "405": call(o.base, "GET", "/actions/trigger"),
        "421": call(o.base, "GET", "/", host=f"evil.example:{port}"),
        "403": call(o.base, "POST", "/actions/trigger", form={}),
        "healthz": call(o.base, "GET", "/healthz"),
        "sign-in page": call(t.base, "GET", "/", source="127.0.0.15"),
        "401": call(t.base, "GET", "/api/series", source="127.0.0.15"),
        "redirect": t.sign_in("127.0.0.15"),
    }
    for name, reply in replies.items():
        assert reply.status < 500, name
        csp = reply.headers.get("content-security-policy", "")
        assert "script-src 'self'" in csp and "style-src 'self'" in csp, (name, csp)
        assert "frame-ancestors 'none'" in csp and "default-src 'none'" in csp, (name, csp)
        assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
        assert reply.headers.get("x-frame-options") == "DENY", name
        assert reply.headers.get("x-content-type-options") == "nosniff", name
        assert reply.headers.get("referrer-policy") == "same-origin", name
    # and no page needs what the policy forbids: no inline script, handler or style
    for name in ("overview", "jobs", "job", "sign-in page"):
        body = replies[name].body
        assert not re.search(r"<script(?![^>]*\ssrc=)", body), name
        assert not re.search(r"\son[a-z]+\s*=", body), name
        assert "style=" not in body and "<style" not in body, name
        assert '"includeIndicatorStyles": false' in body, name
    assert "data-confirm=" in replies["job"].body  # the delete's question, asked by console.js


# --- sign-in rate limit ---------------------------------------------------------------------

@pytest.mark.slow
def test_failed_sign_ins_are_limited_per_address(token_console: Console) -> None:
    t = token_console
    for _ in range(5):
        wrong = call(t.base, "POST", "/login", source="127.0.0.16", Origin=t.origin,
                     form={"token": "guess"})
        assert wrong.status == 401
    limited = call(t.base, "POST", "/login", source="127.0.0.16", Origin=t.origin,
                   form={"token": "guess"})
    assert limited.status == 429 and 1 <= int(limited.headers["retry-after"]) <= 60
    assert limited.body.count("\n") == 0 and "try again" in limited.body
    # limited means every token from there, the right one too: a guess learns nothing
    assert t.sign_in("127.0.0.16").status == 429
    assert call(t.base, "GET", "/jobs", source="127.0.0.16",
                Authorization=f"Bearer {TOKEN}").status == 429
    # another address is not
    assert t.sign_in("127.0.0.17").status == 303
    # a wrong bearer token is a failed sign-in too
    for _ in range(5):
        assert call(t.base, "GET", "/jobs", source="127.0.0.18",
                    Authorization="Bearer guess").status == 401
    assert call(t.base, "GET", "/jobs", source="127.0.0.18",
                Authorization="Bearer guess").status == 429
    # a signed-in view from the same address forgives nothing (only a sign-in does)
    statuses = [call(t.base, "GET", "/jobs", source="127.0.0.20",
                     Authorization=f"Bearer {token}").status
                for token in ["guess"] * 4 + [TOKEN, "guess", TOKEN]]
    assert statuses == [401] * 4 + [200, 401, 429]
    # without --behind-proxy a forged X-Forwarded-For changes nothing
    replies = [call(t.base, "POST", "/login", source="127.0.0.19", Origin=t.origin,
                    X_Forwarded_For=f"198.51.100.{i}", form={"token": "guess"}).status
               for i in range(6)]
    assert replies == [401] * 5 + [429]


def test_the_limiters_table_is_bounded_and_forgets() -> None:
    from scheduler.web.ratelimit import SignInLimiter

    now = [1000.0]
    limiter = SignInLimiter(limit=5, window_s=60, max_addresses=100, clock=lambda: now[0])
    for i in range(1000):
        for _ in range(5):
            limiter.failed(f"10.0.{i // 250}.{i % 250}")
    assert len(limiter) == 100
    assert limiter.retry_after("10.0.3.249") == 60  # the most recent stay
    assert limiter.retry_after("10.0.0.0") == 0  # the oldest went first
    now[0] += 30
    assert limiter.retry_after("10.0.3.249") == 30
    now[0] += 30
    assert limiter.retry_after("10.0.3.249") == 0
    # one host's IPv6 block counts as one address
    for i in range(5):
        limiter.failed(f"2001:db8:1:2::{i + 1}")
    assert limiter.retry_after("2001:db8:1:2::ffff") == 60
    assert limiter.retry_after("2001:db8:1:3::1") == 0


def test_a_sign_in_cookie_expires() -> None:
    from scheduler.web.guard import Admission, Gate

    now = [1_000_000.0]
    gate = Gate(TOKEN, session_s=3600, clock=lambda: now[0])
    response = Response()
    gate.set_sign_in(_request(), response)
    cookie = response.headers["set-cookie"].split(";", 1)[0]
    assert gate.admit(_request(cookie)) is Admission.IN
    now[0] += 3599
    assert gate.admit(_request(cookie)) is Admission.IN
    now[0] += 1
    assert gate.admit(_request(cookie)) is Admission.WRONG
    # signed with the token: another console's token makes another cookie
    assert Gate("another-token").admit(_request(cookie)) is Admission.WRONG


def _request(cookie: str = "") -> Request:
    headers = [(b"host", b"127.0.0.1")] + ([(b"cookie", cookie.encode())] if cookie else [])
    return Request({"type": "http", "method": "GET", "scheme": "http", "path": "/",
                    "query_string": b"", "headers": headers, "client": ("127.0.0.1", 1),
                    "server": ("127.0.0.1", 80)})
