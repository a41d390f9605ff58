"""What anyone who can reach the console can send it, against real `sched web` processes on
the real Redis: a link puts no sentence of its own on a page (results are codes); a POST's
body is read only when it is a small URL-encoded form (415 / 413 before reading, and a
chunked body cut at the limit); and no route answers 500 to hostile path, query or form
values (huge numbers, NUL, unicode digits, negatives, `..`), every route of the app walked.
The tests against the `sched web` processes are in the slow set (real processes)."""

from __future__ import annotations

import dataclasses
import http.client
import re
import socket
from collections.abc import Iterator
from urllib.parse import quote, urlencode, urlsplit

import pytest
import redis
from starlette.routing import Route

from conftest import drop_namespace, new_namespace
from helpers import make_dead, running, serve_console
from scheduler import AsyncClient, Client
from scheduler.web import create_app
from scheduler.web.middleware import FORM_BYTES, FORM_FIELDS
from scheduler.web.results import RESULTS, message

TOKEN = "limits-test-token-0123456789"
SPOOF = "Your session expired: sign in at https://evil.example"


@dataclasses.dataclass
class Reply:
    status: int
    location: str
    body: str


def call(base: str, method: str, path: str, body: bytes | None = None, *,
         chunks: Iterator[bytes] | None = None, **headers: str) -> Reply:
    """One raw request from 127.0.0.1 with these headers (keyword form: Content_Type=...);
    `chunks`: a chunked body, sent as the server reads it."""
    port = urlsplit(base).port
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.putrequest(method, path, skip_accept_encoding=True)
        for name, value in {"Origin": base, **headers}.items():
            conn.putheader(name.replace("_", "-"), value.encode())
        if chunks is not None:
            conn.putheader("Transfer-Encoding", "chunked")
            conn.endheaders()
            try:
                for chunk in chunks:
                    conn.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                conn.send(b"0\r\n\r\n")
            except (BrokenPipeError, ConnectionResetError):
                pass  # the server answered and closed before the body's end: read its answer
        else:
            if body is not None:
                conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body)
        try:
            reply = conn.getresponse()
            with reply:
                return Reply(reply.status, reply.getheader("location") or "",
                             reply.read().decode("utf-8", "replace"))
        except ConnectionResetError:
            # A request past the HTTP server's own limits (a request line of ~70 KB) is
            # answered 400 and the connection closed, which may reset it before the answer
            # is read: refused before the app, never a 500.
            return Reply(0, "", "")
    finally:
        conn.close()


def form(base: str, path: str, fields: dict[str, str | list[str]], **headers: str) -> Reply:
    return call(base, "POST", path, urlencode(fields, doseq=True).encode(),
                Content_Type="application/x-www-form-urlencoded", **headers)


@dataclasses.dataclass
class Stack:
    client: Client
    open: str  # a console without a token (loopback)
    token: str  # one with TOKEN
    nightly: str
    waiting: str
    dead: list[str]

    def session(self) -> tuple[str, str]:
        """(Cookie, csrf field) of a new browser of the open console."""
        port = urlsplit(self.open).port
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            conn.request("GET", "/jobs")
            resp = conn.getresponse()
            body = resp.read().decode()
            cookies = "; ".join(h.split(";", 1)[0]
                                for h in resp.headers.get_all("set-cookie") or [])
        finally:
            conn.close()
        match = re.search(r'name="csrf" value="([^"]*)"', body)
        assert match, body[:300]
        return cookies, match.group(1)


@pytest.fixture(scope="module")
def stack(redis_url: str) -> Iterator[Stack]:
    ns = new_namespace()
    plain = redis.Redis.from_url(redis_url)
    with Client(redis_url, ns) as client:
        nightly = client.schedule("nightly", "t.ok", None, cron="0 3 * * *")
        waiting = client.submit("t.ok", delay=3600)
        dead = make_dead(client, redis_url, ns, 2)
        # (quiet: a refused action logs a line, and nothing reads the consoles' stderr)
        open_proc, open_base = serve_console(redis_url, ns, "--log-level", "error")
        token_proc, token_base = serve_console(redis_url, ns, "--token", TOKEN,
                                               "--log-level", "error")
        with running(open_proc, token_proc):
            yield Stack(client, open_base, token_base, nightly, waiting,
                        [client.slots(j)[0].slot_id for j in dead])
    drop_namespace(plain, ns)
    plain.close()


# --- results are codes ----------------------------------------------------------------------

@pytest.mark.slow
def test_a_link_puts_no_sentence_of_its_own_on_any_page(stack: Stack) -> None:
    """`?failed=` and `?done=` put any text on every page, the sign-in page included."""
    spoof = quote(SPOOF)
    for base, path in [(stack.open, "/"), (stack.open, "/jobs"), (stack.token, "/login"),
                       (stack.token, "/jobs"), (stack.open, f"/jobs/{stack.nightly}")]:
        for query in [f"failed={spoof}", f"done={spoof}", f"done=cancel&cancelled={spoof}",
                      f"done=replay&replayed=1&of={spoof}", "done=replay&replayed=1",
                      f"done=replay&replayed={'9' * 10}&of=1", "done=replay&replayed=%C2%B2&of=1",
                      f"done={spoof}&replayed=1&of=1"]:
            reply = call(base, "GET", f"{path}?{query}")
            assert reply.status in (200, 401), (path, query, reply.status)
            # (the page's own address, percent-encoded, is in its forms' `next` field)
            assert "session expired" not in reply.body, (path, query)
            assert 'id="done"' not in reply.body and 'id="failed"' not in reply.body, \
                (path, query)
    reply = call(stack.open, "GET", "/jobs?done=replay&replayed=1&of=2")
    assert '<p class="done" id="done">replayed 1 of 2 slot(s)</p>' in reply.body


def test_every_result_code_says_a_fixed_sentence_with_its_counts() -> None:
    for code, (names, _) in RESULTS.items():
        params = {"done": code, **{name: "3" for name in names}}
        said = message(params)
        assert said and "3" in said, code
        for name in names:
            assert message({**params, name: "x"}) is None
            assert message({k: v for k, v in params.items() if k != name}) is None
    assert message({"done": "cancel", "cancelled": "1", "requested": "0", "finished": "2",
                    "missing": "0"}) == "cancel: 1 cancelled, 2 already finished"
    assert message({"done": "nope"}) is None and message({}) is None


@pytest.mark.slow
def test_an_action_redirects_with_its_code_and_a_refused_one_says_why_itself(
        stack: Stack) -> None:
    cookie, csrf = stack.session()
    before = len(stack.client.slots(stack.nightly))
    reply = form(stack.open, "/actions/trigger",
                 {"csrf": csrf, "jobs": stack.nightly, "next": "/schedules?x=1"}, Cookie=cookie)
    assert (reply.status, reply.location) == (303, "/schedules?done=trigger&triggered=1"), reply
    assert len(stack.client.slots(stack.nightly)) == before + 1
    page = call(stack.open, "GET", reply.location, Cookie=cookie)
    assert 'id="done">triggered 1 run(s)</p>' in page.body
    reply = form(stack.open, "/actions/trigger",
                 {"csrf": csrf, "jobs": "nosuchjob", "next": "/schedules"}, Cookie=cookie)
    assert reply.status == 404 and not reply.location, reply
    assert "nosuchjob" in reply.body and 'href="/schedules"' in reply.body
    reply = form(stack.open, "/actions/cancel",
                 {"csrf": csrf, "ids": [f"{stack.waiting}:{'9' * 5000}", "a:\u00b2"],
                  "next": "/"}, Cookie=cookie)
    assert reply.status == 400 and "not a slot id" in reply.body, reply.status


# --- bodies ---------------------------------------------------------------------------------

def _answer(sock: socket.socket) -> bytes:
    """An HTTP answer read whole from a raw socket: its head, then Content-Length bytes."""
    data = b""
    while b"\r\n\r\n" not in data:
        more = sock.recv(4096)
        if not more:
            return data
        data += more
    head, _, body = data.partition(b"\r\n\r\n")
    length = re.search(rb"(?im)^content-length: *(\d+)", head)
    while length and len(body) < int(length.group(1)):
        more = sock.recv(4096)
        if not more:
            break
        body += more
    return head + b"\r\n\r\n" + body


def _unsent_body(base: str, path: str, length: int | str, content_type: str) -> Reply:
    """A POST that announces `length` bytes and sends none: the answer (a server that waits
    for the body times out instead)."""
    port = urlsplit(base).port
    with socket.create_connection(("127.0.0.1", port or 0), timeout=10) as sock:
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nOrigin: {base}\r\n"
                     f"Content-Type: {content_type}\r\nContent-Length: {length}\r\n\r\n"
                     .encode())
        data = _answer(sock)
    status = int(data.split(b" ", 2)[1]) if data else 0
    return Reply(status, "", data.decode("latin-1"))


@pytest.mark.slow
@pytest.mark.parametrize("path", ["/login", "/actions/cancel", "/logout"])
def test_a_body_that_is_not_a_small_form_is_refused_before_it_is_read(stack: Stack,
                                                                      path: str) -> None:
    """An unauthenticated POST /login read a multipart body of any size (spooled to disk)
    before comparing the token."""
    # First what a server that reads every body answers at once (a wrong one, not a wait).
    reply = call(stack.token, "POST", path, b"token=x")  # no Content-Type at all
    assert reply.status == 415, reply
    huge = 200 * 1024 * 1024
    for content_type, status in [("multipart/form-data; boundary=x", 415),
                                 ("application/json", 415), ("text/plain", 415),
                                 ("application/x-www-form-urlencoded", 413)]:
        reply = _unsent_body(stack.token, path, huge, content_type)
        assert reply.status == status, (content_type, reply.body[:300])
    for length in ("-1", "abc", "9" * 30, str(FORM_BYTES + 1)):
        reply = _unsent_body(stack.token, path, length, "application/x-www-form-urlencoded")
        assert reply.status in (400, 413), (length, reply.body[:300])  # 400: the HTTP parser's


@pytest.mark.slow
def test_a_chunked_form_is_read_to_the_limit_and_no_further(stack: Stack) -> None:
    """A chunked body names no length: the console answers 413 once it has read past the
    limit, while the body is still coming (a server that read it all would still wait)."""
    # Ended past the limit: a server that read it all answers at once, and not 413.
    reply = call(stack.token, "POST", "/login", chunks=iter([b"x" * 8192] * (
        2 * FORM_BYTES // 8192)), Content_Type="application/x-www-form-urlencoded")
    assert reply.status == 413, reply
    port = urlsplit(stack.token).port
    with socket.create_connection(("127.0.0.1", port or 0), timeout=10) as sock:
        sock.sendall(f"POST /login HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                     f"Origin: {stack.token}\r\nTransfer-Encoding: chunked\r\n"
                     f"Content-Type: application/x-www-form-urlencoded\r\n\r\n".encode())
        chunk = b"x" * 8192
        for _ in range(4 * FORM_BYTES // len(chunk)):  # four times the limit, never ended
            sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        answer = _answer(sock)  # blocks (to the socket's timeout) if the server waits on
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:200]
    assert f"{FORM_BYTES:,} bytes".encode() in answer
    reply = call(stack.token, "POST", "/login",
                 chunks=iter([b"&".join(b"a=1" for _ in range(FORM_FIELDS + 1))]),
                 Content_Type="application/x-www-form-urlencoded")
    assert reply.status == 413, reply
    reply = form(stack.token, "/login", {"token": TOKEN, "next": "/jobs"})
    assert (reply.status, reply.location) == (303, "/jobs"), reply


# --- no 500 ---------------------------------------------------------------------------------

HOSTILE = ["9" * 5000, "a:" + "9" * 5000, "x:" + "9" * 20, "-1", "a:-1", "%00", "a%00b",
           "%C2%B2", "a:%C2%B2", "a:%D9%A1%D9%A2", "%E2%82%AC%F0%9F%98%80", "%FF", "..",
           "%2E%2E", "..%2F..%2Fetc%2Fpasswd", "a" * 5000, "%0D%0Ax", "%25", "%20", "0",
           "18446744073709551616", "1e309", "nan", "a:1:2"]
PARAMS = ["after", "kind", "task", "state", "job", "status", "id", "next", "done", "failed",
          "cancelled", "replayed", "of", "zzz"]


def routes(redis_url: str) -> list[tuple[str, set[str]]]:
    """Every route of the console app: (path, methods)."""
    app = create_app(AsyncClient(redis_url, "routes"))
    starlette = app.app  # type: ignore[attr-defined]
    return [(r.path, set(r.methods or ())) for r in starlette.routes if isinstance(r, Route)]


@pytest.mark.slow
def test_no_route_answers_500_to_hostile_values(stack: Stack, redis_url: str) -> None:
    """`GET /slots/a:<5000 digits>` and the cancel / replay actions with such ids answered
    500."""
    cookie, csrf = stack.session()
    seen: dict[int, int] = {}

    def check(reply: Reply, what: str) -> None:
        seen[reply.status] = seen.get(reply.status, 0) + 1
        assert reply.status < 500 or reply.status == 503, (what[:200], reply.status,
                                                           reply.body[:500])
        assert "Traceback" not in reply.body, what[:200]

    # The routes that take a value in their path first: most of what breaks is found there,
    # early in the walk.
    walked = sorted(routes(redis_url), key=lambda route: "{" not in route[0])
    assert {"/slots/{slot_id}", "/actions/{name}", "/login"} <= {p for p, _ in walked}
    for path, methods in walked:
        names = re.findall(r"{(\w+)}", path)
        for value in HOSTILE:
            target = path
            for name in names:
                target = target.replace(f"{{{name}}}", value)
            if "GET" in methods:
                check(call(stack.open, "GET", target, Cookie=cookie), target)
                query = "&".join(f"{p}={value}" for p in PARAMS)
                check(call(stack.open, "GET", f"{target}?{query}", Cookie=cookie), target)
            if "POST" in methods:
                for field in ("ids", "slots", "jobs", "next", "csrf"):
                    fields: dict[str, str | list[str]] = {"csrf": csrf, "next": "/"}
                    fields[field] = [value.replace("%", ""), value]
                    check(form(stack.open, target, fields, Cookie=cookie), f"{target} {field}")
    for name in ("cancel", "replay", "purge", "delete", "trigger"):
        for value in HOSTILE:
            for field in ("ids", "slots", "jobs"):
                reply = form(stack.open, f"/actions/{name}",
                             {"csrf": csrf, field: [stack.dead[0] + value, value],
                              "next": "/"}, Cookie=cookie)
                check(reply, f"{name} {value}")
    assert seen.get(400, 0) > 100 and seen.get(200, 0) > 100, seen


# --- the token a public console needs -------------------------------------------------------

WEAK = ["", "   ", "x", "change-me", "CHANGE_ME", "changeme", "Change-Me-2", "password",
        "secret", "token", "admin", "sched-web-token", "s3cr3t-short", "a" * 40,
        "abababababababababab", "0123456789abcde", "please-change-me",
        "Insert-Random-String-Here", "change-me-2024"]
STRONG = ["kX9v2Qm7Lr4Tz8Wb", "correct horse battery staple", "Zk3p_5mT9qWv-2Lr8Yx4Nc"]


@pytest.mark.parametrize("token", WEAK)
def test_a_public_console_refuses_a_weak_token_in_one_line(token: str) -> None:
    from scheduler.core.errors import ConfigError
    from scheduler.web import check_bind

    for host in ("0.0.0.0", "::", "192.0.2.10", "console.example.com"):
        with pytest.raises(ConfigError) as refused:
            check_bind(host, token)
        said = str(refused.value)
        assert "\n" not in said and "127.0.0.1" in said, said
        assert len(token) < 8 or token not in said, said  # (shorter ones are words of it)
    for host in ("127.0.0.1", "::1", "localhost"):
        check_bind(host, token)  # loopback: a token is the operator's own choice


@pytest.mark.parametrize("token", STRONG)
def test_a_public_console_takes_a_strong_token(token: str) -> None:
    from scheduler.web import check_bind

    check_bind("0.0.0.0", token)


@pytest.mark.parametrize("how", ["option", "environment"])
def test_sched_web_refuses_a_placeholder_token_on_every_interface(redis_url: str,
                                                                  how: str) -> None:
    import os
    import subprocess

    from conftest import SCHED

    args = ["--token", "change-me"] if how == "option" else []
    env = {**os.environ, "SCHED_WEB_TOKEN": "change-me"} if how == "environment" \
        else dict(os.environ)
    done = subprocess.run([*SCHED, "--redis-url", redis_url, "web", "--host", "0.0.0.0",
                           "--port", "0", *args], capture_output=True, text=True, timeout=60,
                          env=env)
    assert done.returncode != 0 and done.stderr.count("\n") == 1, done.stderr
    assert "weak token (a placeholder" in done.stderr and "change-me" not in done.stderr
