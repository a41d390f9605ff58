"""The metrics endpoints as real processes serve them: every service that opens a metrics
port listens on loopback unless `--metrics-host` (the exporter's `--host`) says otherwise,
and the exporter's scrape stays the same size however many queues and concurrency keys the
namespace holds (the busiest `--top-queues`, the rest summed as queue="(other)"), naming no
key unless `--key-labels` asks for it."""

from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

import click
import pytest
from faults.harness import free_port
from prometheus_client.parser import text_string_to_metric_families

from conftest import SCHED
from helpers import running
from scheduler import Client
from scheduler.cli.main import cli
from scheduler.observe.metrics import OTHER_QUEUES, TOP_QUEUES, key_label

APP = "scheduler.dev.examples.tasks:registry"
TENANT = "alice@example.com"


def listening(port: int) -> set[str]:
    """The IPv4 addresses a socket listens on at `port` (from /proc/net/tcp)."""
    found = set()
    with open("/proc/net/tcp") as table:
        for line in list(table)[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:
                found.add(socket.inet_ntoa(bytes.fromhex(address)[::-1]))
    return found


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as reply:
        return reply.read().decode()


@contextmanager
def serving(redis_url: str, ns: str, *args: str) -> Iterator[int]:
    """A `sched ARGS --...-port P` process (P appended by the caller's args as "{port}"),
    until its /metrics answers: P."""
    port = free_port()
    argv = [a.replace("{port}", str(port)) for a in args]
    proc = subprocess.Popen([*SCHED, "--redis-url", redis_url, "--namespace", ns, *argv,
                             "--log-level", "error"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env=dict(os.environ))
    with running(proc):
        deadline = time.monotonic() + 60
        while True:
            try:
                scrape(port)
                break
            except OSError:
                assert proc.poll() is None, proc.stderr and proc.stderr.read()
                assert time.monotonic() < deadline, f"{args[0]} never served /metrics"
                time.sleep(0.1)
        yield port


def commands(group: click.Group, path: str = "") -> Iterator[tuple[str, click.Command]]:
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from commands(command, f"{path}{name} ")
        else:
            yield f"{path}{name}", command


def test_every_command_that_opens_a_metrics_port_takes_a_host_loopback_by_default() -> None:
    """Only `sched exporter --host` existed, and it defaulted to 0.0.0.0; the worker, the
    scheduler, the snapshotter and the relay listened on every interface."""
    with_port = set()
    for name, command in commands(cli):
        options = {opt: p for p in command.params for opt in getattr(p, "opts", [])}
        if "--metrics-port" in options:
            with_port.add(name)
            assert "--metrics-host" in options, name
            assert options["--metrics-host"].default == "127.0.0.1", name
    assert {"worker", "scheduler", "snapshotter", "outbox relay", "dev"} <= with_port
    exporter = {opt: p for p in cli.commands["exporter"].params for opt in p.opts}
    assert exporter["--host"].default == "127.0.0.1"


@pytest.mark.parametrize("args", [
    ["worker", "--app", APP, "--metrics-port", "{port}"],
    ["worker", "--app", APP, "--processes", "2", "--metrics-port", "{port}"],
    ["scheduler", "--metrics-port", "{port}"],
    ["snapshotter", "--metrics-port", "{port}"],
    ["exporter", "--port", "{port}"],
    ["dev", "--no-web", "--no-history", "--metrics-port", "{port}"],
], ids=["worker", "supervisor", "scheduler", "snapshotter", "exporter", "dev"])
@pytest.mark.slow  # each starts the service twice as a process of its own
def test_each_service_serves_metrics_on_loopback_unless_told(redis_url: str, ns: str,
                                                             args: list[str]) -> None:
    with serving(redis_url, ns, *args) as port:
        assert listening(port) == {"127.0.0.1"}, args[0]
    flag = "--host" if args[0] == "exporter" else "--metrics-host"
    with serving(redis_url, ns, *args, flag, "0.0.0.0") as port:
        assert listening(port) == {"0.0.0.0"}, args[0]


def _series(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {tuple(sorted(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples
            if s.name == name}


@pytest.mark.slow  # a real exporter process over a namespace of many queues
def test_the_exporter_exports_the_busiest_queues_and_sums_the_rest(redis_url: str,
                                                                   ns: str) -> None:
    """Every queue was a set of series of its own, and every concurrency key's name (a
    tenant, an e-mail address) was a label."""
    with Client(redis_url, ns) as client:
        depths = {f"q{i:02d}": i + 1 for i in range(12)}
        client.submit_many([{"task": "demo.noop", "queue": q} for q, n in depths.items()
                            for _ in range(n)])
        client.submit_many([{"task": "demo.noop", "queue": "tenants",
                             "concurrency_key": TENANT} for _ in range(15)])
        depths["tenants"] = 15  # among the busiest: its keys would be named
    top = sorted(depths, key=lambda q: (-depths[q], q))[:4]
    assert "tenants" in top
    with serving(redis_url, ns, "exporter", "--port", "{port}", "--top-queues", "4") as port:
        text = scrape(port)
    depth: dict[str, float] = {}
    for labels, value in _series(text, "sched_queue_depth").items():
        queue = dict(labels)["queue"]
        depth[queue] = depth.get(queue, 0) + value
    assert set(depth) == {*top, OTHER_QUEUES}
    assert {q: depth[q] for q in top} == {q: depths[q] for q in top}
    assert depth[OTHER_QUEUES] == sum(n for q, n in depths.items() if q not in top)
    assert _series(text, "sched_queues") == {(): len(depths)}
    for name in ("sched_queue_pending", "sched_queue_oldest_ready_age_seconds"):
        assert {dict(k)["queue"] for k in _series(text, name)} == {*top, OTHER_QUEUES}, name
    assert _series(text, "sched_queue_keys") == {
        **{(("queue", q),): 1 if q == "tenants" else 0 for q in top},
        (("queue", OTHER_QUEUES),): 0}
    assert TENANT not in text and key_label(TENANT) not in text
    assert _series(text, "sched_key_waiting") == {}  # off unless asked for
    with serving(redis_url, ns, "exporter", "--port", "{port}", "--top-queues", "20",
                 "--key-labels", "hashed") as port:
        text = scrape(port)
    assert TENANT not in text
    assert _series(text, "sched_key_waiting") == {
        (("key", key_label(TENANT)), ("queue", "tenants")): 15}
    assert {dict(k)["queue"] for k in _series(text, "sched_queue_depth")} == set(depths)
    with serving(redis_url, ns, "exporter", "--port", "{port}", "--key-labels",
                 "plain") as port:
        assert _series(scrape(port), "sched_key_waiting") == {
            (("key", TENANT), ("queue", "tenants")): 15}


@pytest.mark.slow  # 5,000 queues to submit to and list
def test_five_thousand_queues_make_a_scrape_of_the_same_size(redis_url: str, ns: str) -> None:
    with Client(redis_url, ns) as client:
        client.submit_many([{"task": "demo.noop", "queue": f"q{i}"} for i in range(5000)])
    with serving(redis_url, ns, "exporter", "--port", "{port}") as port:
        text = scrape(port)
    series = [line for line in text.splitlines() if line and not line.startswith("#")]
    queues = {dict(k)["queue"] for k in _series(text, "sched_queue_depth")}
    assert len(queues) == TOP_QUEUES + 1 and OTHER_QUEUES in queues
    assert _series(text, "sched_queues") == {(): 5000}
    assert len(series) < 5 * (TOP_QUEUES + 1) + 200, len(series)


@pytest.mark.parametrize("options", [{"top_queues": 0}, {"top_queues": True},
                                     {"key_labels": "names"}])
def test_the_collector_refuses_a_bad_option_in_one_line(options: dict[str, object]) -> None:
    import redis

    from scheduler.core.errors import ConfigError
    from scheduler.observe.metrics import NamespaceCollector

    with pytest.raises(ConfigError) as refused:
        NamespaceCollector(redis.Redis(), "ns", **options)  # type: ignore[arg-type]
    assert "\n" not in str(refused.value)
