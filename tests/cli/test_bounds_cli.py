"""Every number a command or a component's config takes has a range (scheduler/core/bounds.py
and the options of each command): a value past it is one line naming the option and the
range, exit 2 as click's usage errors, nothing started or written; the config Structs refuse
the same values with a ConfigError. A lease at its maximum is renewed as any other. A Redis
URL no client could be built from is one line, its password masked."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path
from typing import Any

import click
import msgspec
import pytest
import redis

from conftest import ns_keys
from helpers import W, make, run_until, sched
from scheduler import Client, Registry, SlotStatus
from scheduler.cli.main import cli as root
from scheduler.core import bounds
from scheduler.core.errors import ConfigError, ValidationError
from scheduler.core.finite import shown
from scheduler.core.models import MAX_LEASE_S
from scheduler.history.intake import SnapshotterConfig
from scheduler.history.retention import RetentionConfig
from scheduler.node.node import NodeConfig
from scheduler.observe.capacity import ScalingTarget
from scheduler.outbox.relay import RelayConfig
from scheduler.redis.clock import ManualClock
from scheduler.scripts import calls as scripts
from scheduler.scripts import replies
from scheduler.worker.autoscale import AutoscaleConfig
from scheduler.worker.config import WorkerConfig


def _numeric(cmd: click.Command, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...],
                                                                            click.Parameter]]:
    """(command path, parameter) of every number any command takes."""
    out = []
    if isinstance(cmd, click.Group):
        for name, sub in sorted(cmd.commands.items()):
            out += _numeric(sub, (*path, name))
    for p in cmd.params:
        if isinstance(p.type, click.types.IntParamType | click.types.FloatParamType):
            out.append((path, p))
    return out


NUMERIC = _numeric(root)


def test_the_walk_finds_the_options_it_should() -> None:
    found = {(" ".join(path), p.opts[0]) for path, p in NUMERIC}
    assert {("worker", "--lease"), ("worker", "--replica-timeout"), ("scheduler", "--lookahead"),
            ("scheduler", "--queue-idle"), ("history", "--limit"), ("submit", "--max-attempts"),
            ("snapshotter", "--retention"), ("queues weight", "weight")} <= found
    assert len(found) > 50


@pytest.mark.parametrize(("path", "param"), NUMERIC,
                         ids=[" ".join((*p, o.opts[0])) for p, o in NUMERIC])
def test_every_number_option_has_a_range_and_refuses_past_it(
        capsys: pytest.CaptureFixture[str], r: redis.Redis, redis_url: str, ns: str,
        path: tuple[str, ...], param: click.Parameter) -> None:
    kind = param.type
    assert isinstance(kind, click.IntRange | click.FloatRange), f"{param.opts[0]} has no range"
    assert kind.min is not None and kind.max is not None, f"{param.opts[0]}: {kind}"
    past = "9" * 23 if isinstance(kind, click.IntRange) else "1e308"
    if isinstance(param, click.Argument):  # `queues weight QUEUE KEY WEIGHT`
        args = [*path, "q", "k", past]
    else:
        args = [*path, param.opts[0], past]
    code, out, err = sched(capsys, redis_url, ns, *args)
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1, err
    name = param.opts[0] if isinstance(param, click.Option) else "[WEIGHT]"
    assert lines[0].startswith(f"error: Invalid value for '{name}': "), lines[0]
    assert f"is not in the range {kind._describe_range()}." in lines[0], lines[0]
    assert ns_keys(r, ns) == []


def test_the_options_of_a_config_take_its_range() -> None:
    """An option bounded from a config's table has that table's maximum."""
    options = {(" ".join(path), p.opts[0]): p.type for path, p in NUMERIC}
    for (command, option), (table, field) in {
        ("worker", "--lease"): (bounds.WORKER_BOUNDS, "lease_s"),
        ("dev", "--lease"): (bounds.WORKER_BOUNDS, "lease_s"),
        ("scheduler", "--lease"): (bounds.NODE_BOUNDS, "lease_s"),
        ("scheduler", "--lookahead"): (bounds.NODE_BOUNDS, "lookahead_s"),
        ("scheduler", "--queue-idle"): (bounds.NODE_BOUNDS, "queue_idle_s"),
        ("worker", "--replica-timeout"): (bounds.WORKER_BOUNDS, "replica_timeout_s"),
        ("snapshotter", "--retention"): (bounds.RETENTION_BOUNDS, "retention_s"),
        ("snapshotter", "--claim-idle"): (bounds.SNAPSHOTTER_BOUNDS, "claim_idle_s"),
        ("outbox relay", "--poll"): (bounds.RELAY_BOUNDS, "poll_s"),
    }.items():
        assert options[command, option].max == table[field][1], (command, option)  # type: ignore[attr-defined]


CONFIGS: list[tuple[Any, dict[str, tuple[float, float]], dict[str, Any]]] = [
    (WorkerConfig, bounds.WORKER_BOUNDS, {}), (NodeConfig, bounds.NODE_BOUNDS, {}),
    (SnapshotterConfig, bounds.SNAPSHOTTER_BOUNDS, {}),
    (RetentionConfig, bounds.RETENTION_BOUNDS, {}), (RelayConfig, bounds.RELAY_BOUNDS, {}),
    (AutoscaleConfig, bounds.AUTOSCALE_BOUNDS, {"min_concurrency": 1, "max_concurrency": 2}),
    (ScalingTarget, bounds.SCALING_BOUNDS, {}),
]
FIELDS = [(cls, table, base, field) for cls, table, base in CONFIGS for field in table]


@pytest.mark.parametrize(("cls", "table", "base", "field"), FIELDS,
                         ids=[f"{c.__name__}.{f}" for c, _, _, f in FIELDS])
def test_every_config_refuses_a_number_past_its_range(
        cls: Any, table: dict[str, tuple[float, float]], base: dict[str, Any],
        field: str) -> None:
    low, high = table[field]
    annotation = msgspec.structs.fields(cls)
    integer = next(f for f in annotation if f.name == field).type in (int, int | None)
    for past in (high * 10 + 1, 1e308) if not integer else (int(high) * 10 + 1, 10 ** 23):
        with pytest.raises(ConfigError) as caught:
            cls(**{**base, field: past, **({"max_concurrency": past}
                                           if field == "min_concurrency" else {})})
        assert field in str(caught.value) and "\n" not in str(caught.value)
    at_max = {**base, field: int(high) if integer else high}
    if cls is AutoscaleConfig and field == "min_concurrency":
        at_max["max_concurrency"] = int(high)
    cls(**at_max)  # the maximum itself is allowed


@pytest.mark.parametrize(("option", "value"), [
    ("replica_timeout_s", 1e308), ("timeout_s", 1e308), ("timeout_s", 366 * 86400),
    ("events_maxlen", 10**30), ("events_maxlen", 0),
])
def test_the_client_refuses_a_number_past_its_range(redis_url: str, ns: str, option: str,
                                                     value: float) -> None:
    """`Client(timeout_s=1e308)` was made, and failed its first call with an OverflowError;
    an events_maxlen past what XADD takes failed every submit."""
    with pytest.raises(ValidationError) as caught:
        Client(redis_url, ns, **{option: value})
    assert str(caught.value).startswith(f"{option}: ") and "\n" not in str(caught.value)


# --- leases ---------------------------------------------------------------------------------


def test_a_heartbeat_at_the_longest_lease_renews_it(r: redis.Redis, client: Client,
                                                    clock: ManualClock) -> None:
    s = make(r, client, clock)
    s.claim(s.read())
    clock.advance(5_000)
    now = clock.now_ms()
    [code] = s.run(scripts.heartbeat(s.prefix, now, MAX_LEASE_S * 1000, W, [(s.slot_id, 1)]))
    assert code == replies.Code.OK
    assert r.hget(s.prefix + "slot:" + s.slot_id, "lease_until") == \
        str(now + MAX_LEASE_S * 1000).encode()


def test_a_worker_with_the_longest_lease_runs_its_jobs(redis_url: str, ns: str) -> None:
    registry = Registry()

    @registry.task("t.ok")
    async def ok(ctx: Any, payload: Any) -> int:
        return 1

    with Client(redis_url, ns) as c:
        ids = c.submit_many([{"task": "t.ok"}] * 3)
        started = time.monotonic()
        asyncio.run(run_until(redis_url, ns, registry, lambda: all(
            c.slots(j)[0].status is SlotStatus.SUCCEEDED for j in ids), lease_s=MAX_LEASE_S))
        assert time.monotonic() - started < 30


# --- Redis URLs -----------------------------------------------------------------------------


@pytest.mark.parametrize(("url", "says"), [
    ("redis://:hunter2@127.0.0.1:1/0?foo=bar", "unknown option(s) foo"),
    ("redis://:hunter2@[::1x]:1/0", "'::1x' does not appear to be an IPv4 or IPv6 address"),
    ("redis+sentinel://:hunter2@[::1x]:1/svc", "does not appear to be"),
    ("redis+cluster://:hunter2@[::1x]:1", "does not appear to be"),
    ("rediss://:hunter2@127.0.0.1:1/0?ssl_cert_reqz=none", "unknown option(s) ssl_cert_reqz"),
])
def test_a_bad_redis_url_is_one_line_without_its_password(
        capsys: pytest.CaptureFixture[str], ns: str, url: str, says: str) -> None:
    code, out, err = sched(capsys, url, ns, "status")
    lines = err.strip().splitlines()
    assert code == 1 and len(lines) == 1 and says in lines[0], err
    assert "hunter2" not in err and "Traceback" not in err
    with pytest.raises(ConfigError) as caught:
        Client(url, ns)
    assert "hunter2" not in str(caught.value)


def test_the_cli_page_lists_every_range() -> None:
    """docs/operating/cli.md's table: every number option, with the range it has."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "operating" / "cli.md").read_text()
    rows = set(re.findall(r"^\| `(sched[^`]*)` \| `([^`]+)` \| ([^|]+) \|$", page, re.M))
    wanted = set()
    for path, p in NUMERIC:
        kind: Any = p.type
        low = ("above " if kind.min_open else "") + shown(kind.min)
        wanted.add((" ".join(("sched", *path)), p.opts[0] if isinstance(p, click.Option)
                    else "WEIGHT", f"{low} to {shown(kind.max)}"))
    assert rows == wanted
