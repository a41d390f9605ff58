"""Fixtures of the fault suite: every test gets a private Redis under test (`sut`) and keeps its
ground truth in the shared test Redis, which no fault touches; a test that runs a snapshotter
gets a fresh Postgres database for its history (`history_dsn`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .harness import Processes, RedisServer, history_database, processes, redis_server
from .scenario import Scenario


@pytest.fixture
def sut() -> Iterator[RedisServer]:
    with redis_server() as server:
        yield server


@pytest.fixture
def scenario(sut: RedisServer, redis_url: str, ns: str) -> Iterator[Scenario]:
    sc = Scenario(sut.url, redis_url, ns)
    try:
        yield sc
    finally:
        sc.close()


@pytest.fixture
def procs(request: pytest.FixtureRequest, sut: RedisServer, redis_url: str, ns: str,
          scenario: Scenario) -> Iterator[Processes]:
    """`@pytest.mark.lease(S)`: the processes' leases last S seconds (harness.LEASE_S else)."""
    lease = request.node.get_closest_marker("lease")
    with processes(sut.url, ns, redis_url, scenario.truth,
                   **({"lease_s": float(lease.args[0])} if lease else {})) as p:
        yield p


@pytest.fixture
def history_dsn() -> Iterator[str]:
    with history_database() as dsn:
        yield dsn
