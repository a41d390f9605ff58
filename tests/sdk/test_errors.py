"""Redis failures as users meet them: the SDK raises the library's exceptions (with the
redis-py one as the cause), the CLI prints one line, `submit_many` says exactly what it
wrote, and `submit.lua` enforces the namespace's limits itself."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
import redis
from faults.harness import RedisServer

from scheduler import Client, JobSpec, RedisRefused, RedisUnavailable, SubmitError
from scheduler.core.errors import ValidationError
from scheduler.core.keys import shard_of
from scheduler.scripts import calls as scripts


@pytest.fixture(scope="module")
def silent() -> Iterator[str]:
    """A server that accepts connections and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    yield f"redis://127.0.0.1:{sock.getsockname()[1]}/0"
    sock.close()


@pytest.fixture(scope="module")
def http() -> Iterator[str]:
    """An HTTP server where a Redis should be."""
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"redis://127.0.0.1:{server.server_address[1]}/0"
    server.shutdown()
    server.server_close()


def refused_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"redis://127.0.0.1:{s.getsockname()[1]}/0"


CASES = {
    "nothing listens": (lambda f: refused_port(), RedisUnavailable, "cannot reach Redis"),
    "never answers": (lambda f: f["silent"], RedisUnavailable, "did not answer in time"),
    "an HTTP server": (lambda f: f["http"], RedisUnavailable, "does not speak the Redis"),
    "database 99": (lambda f: f["redis_url"].rsplit("/", 1)[0] + "/99", RedisRefused,
                    "no such database"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_sdk_raises_its_own_errors_with_the_cause_chained(
        case: str, silent: str, http: str, redis_url: str) -> None:
    url_of, kind, text = CASES[case]
    url = url_of({"silent": silent, "http": http, "redis_url": redis_url})
    # The server that never answers costs each call its whole timeout, twice (one retry);
    # the others answer, and a short timeout on a loaded box would read as no answer.
    with Client(url, "errs", timeout_s=0.1 if case == "never answers" else 0.3) as client:
        for call in (client.status, lambda: client.get_job("abc"),
                     lambda: client.submit("t", 1)):
            with pytest.raises(kind, match=text) as info:
                call()
            cause = info.value.__cause__
            assert isinstance(cause, redis.exceptions.RedisError)
            assert not isinstance(info.value, redis.exceptions.RedisError)
            if isinstance(info.value, SubmitError):
                assert info.value.written == []


def test_out_of_memory_is_refused_with_advice(private: RedisServer, ns: str) -> None:
    with Client(private.url, ns) as client:
        job = client.submit("t", 1)
        private.oom(True)
        try:
            with pytest.raises(SubmitError, match="out of memory") as info:
                client.submit_many([{"task": "t", "payload": i} for i in range(50)])
            assert info.value.written == [] and len(info.value.not_written) == 50
            with pytest.raises(RedisRefused, match="raise maxmemory"):  # SubmitRefused is one
                client.submit("t", 2)
            # Reads still work, and a write that frees memory first is let through by Redis.
            assert client.get_job(job).task == "t"
        finally:
            private.oom(False)


def test_submit_many_says_exactly_which_jobs_it_wrote(private: RedisServer, ns: str) -> None:
    """Redis runs out of memory part way through a batch: the error carries exactly the ids
    that are in Redis, and the indexes of the jobs that are not."""
    r = private.client()
    payload = "x" * 50_000
    with Client(private.url, ns, shards=16) as client:
        warm = client.submit("warm", 1)
        used = int(r.info("memory")["used_memory"])
        # The whole batch (3.2 MB) sits in Redis's query buffer while the pipeline runs; past
        # that, room for two or three of the 16 shard calls (200 KB each).
        r.config_set("maxmemory", used + 64 * 50_000 + 500_000)
        try:
            jobs = [JobSpec(task="t", payload=payload) for _ in range(64)]
            with pytest.raises(SubmitError) as info:
                client.submit_many(jobs)
        finally:
            r.config_set("maxmemory", 0)
        err = info.value
        present = {key.decode().rsplit("job:", 1)[1]
                   for key in r.scan_iter(match=f"{ns}:*job:*", count=10_000)} - {warm}
        print(f"wrote {len(err.written)} of 64 before Redis ran out of memory")
        assert 0 < len(err.written) < 64
        assert set(err.written) == present
        assert len(err.written) + len(err.not_written) == 64 and not err.unknown
    r.close()


def test_submit_lua_refuses_oversized_payloads_and_malformed_ids(
        private: RedisServer, ns: str) -> None:
    """What the SDK checks, the script checks again: a caller that sends the script a 5 MiB
    payload or a job id that would forge keys gets an error and nothing is written."""
    r = private.client()
    with Client(private.url, ns, max_payload_bytes=1000) as client:
        client.submit("t", "small")  # creates the namespace with a 1000-byte limit
        shards = client.shards
        prefix = client.keys.prefix(shard_of("ok1", shards))
    before = r.dbsize()
    too_big = scripts.submit(prefix, 1, 100, [("ok1", "t", "default", 1, ["payload", "x" * 5_000_000])])
    forged = scripts.submit(prefix, 1, 100, [("ok2", "t", "default", 1, []),
                                             ("x}{s05:evil\nid", "t", "default", 1, [])])
    bad_queue = scripts.submit(prefix, 1, 100, [("ok3", "t", "no such:queue", 1, [])])
    for call, text in ((too_big, "over the namespace limit of 1000 bytes"),
                       (forged, "malformed job id"), (bad_queue, "malformed queue name")):
        with pytest.raises(redis.exceptions.ResponseError, match=text):
            scripts.run_sync(r, [call])
    assert r.dbsize() == before
    # A client of the namespace follows its stored limit, whatever its own default.
    with Client(private.url, ns) as other:
        with pytest.raises(ValidationError, match="over the limit of 1000 bytes"):
            other.submit("t", "y" * 2000)
    r.close()


def cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "scheduler.cli", "--redis-url", url, *args],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_the_cli_prints_one_line(case: str, silent: str, http: str, redis_url: str) -> None:
    url_of, _, text = CASES[case]
    url = url_of({"silent": silent, "http": http, "redis_url": redis_url})
    # A server that never answers costs the SDK's timeout twice (one retry) per command: the
    # URL's own timeout (redis-py's query option, which wins over the CLI's 5 s) keeps it short.
    commands = [["status"]] if case == "never answers" else [["status"], ["submit", "t"],
                                                             ["dlq", "list"]]
    if case == "never answers":
        url += "?socket_timeout=1"
    for args in commands:
        done = cli(url, *args)
        assert done.returncode == 1, done
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and text in lines[0], lines


@pytest.mark.slow
def test_the_cli_under_oom_prints_one_line(private: RedisServer) -> None:
    private.oom(True)
    try:
        done = cli(private.url, "submit", "t")
    finally:
        private.oom(False)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1 and "out of memory" in lines[0], lines
