"""Shared fixtures: the real Redis on 127.0.0.1:6379 (SCHED_TEST_REDIS_URL to change), a fresh
namespace per test, and its keys removed afterwards."""

from __future__ import annotations

import logging
import os
import re
import signal
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.cluster

from scheduler import Client
from scheduler.redis.clock import ManualClock

REDIS_URL = os.environ.get("SCHED_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
# Commands the tests run keep their embedded history out of the user's home directory.
os.environ.setdefault("SCHED_HISTORY_FILE",
                      os.path.join(tempfile.mkdtemp(prefix="sched-tests-"), "history.sqlite3"))
TESTS = Path(__file__).parent
# The venv running the suite: scripts/services.sh's ensure_venv, run by a test (the README's
# demo), never rebuilds it under the suite's other processes.
os.environ["SCHED_TEST_VENV"] = sys.prefix
# A suite started in the background of a shell without job control (`cmd &` in a script)
# inherits SIGINT ignored, and so would every `sched` process it starts, which then never
# sees the Ctrl-C a test sends it. A handler here becomes the default in those children.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


# Modules whose tests run twice: on the single Redis and on a Redis Cluster (3 masters, 3
# replicas) the session starts (tests/faults/cluster.py): the core transitions, time, the
# worker's reliability and history. The cluster runs are marked slow (the fast set stays one
# Redis).
ON_CLUSTER_TOO = {"test_transitions", "test_materializer", "test_worker", "test_snapshotter",
                  "test_priorities", "test_queue_limits", "test_early_dispatch",
                  "test_committer", "test_client", "test_schedules", "test_named_schedules",
                  "test_submit_stream", "test_hash_read", "test_browse", "test_queue_cleaner",
                  "test_dedupe_windows", "test_tenants", "test_take", "test_key_status",
                  "test_limits_apply_at_once", "test_limits_in_scripts"}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "redis_url" in metafunc.fixturenames and metafunc.module.__name__.rpartition(".")[2] \
            in ON_CLUSTER_TOO:
        metafunc.parametrize("redis_url", ["single", pytest.param("cluster", marks=pytest.mark.slow)],
                             indirect=True, scope="session")


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[Any]:
    """A Redis Cluster on loopback (faults.cluster.ClusterSet), started once per session;
    its `url` names one node, as a user would: the client finds the rest."""
    sys.path.insert(0, str(TESTS))
    from faults.cluster import cluster_set

    with cluster_set() as c:
        yield c


@pytest.fixture(scope="session")
def redis_url(request: pytest.FixtureRequest) -> str:
    if getattr(request, "param", "single") == "cluster":
        return str(request.getfixturevalue("redis_cluster").url)
    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.ping()
    except redis.exceptions.ConnectionError:
        pytest.fail(f"tests need a Redis at {REDIS_URL} (start one, or set SCHED_TEST_REDIS_URL)")
    finally:
        client.close()
    return REDIS_URL


def is_cluster_url(url: str) -> bool:
    return url != REDIS_URL and not url.startswith("redis+sentinel")  # redis_cluster's


@pytest.fixture
def r(redis_url: str) -> Iterator[Any]:
    """A plain client of the Redis under test (a cluster client on the cluster)."""
    client: Any = (redis.cluster.RedisCluster.from_url(redis_url) if is_cluster_url(redis_url)
                   else redis.Redis.from_url(redis_url))
    yield client
    close_plain(client)


def close_plain(client: Any) -> None:
    """Close a plain client; a cluster client's close() leaves its nodes' pooled connections
    to the garbage collector (a ResourceWarning, which fails the run at its end)."""
    if isinstance(client, redis.cluster.RedisCluster):
        client.disconnect_connection_pools()
    client.close()


@pytest.fixture
def ns(r: redis.Redis) -> Iterator[str]:
    name = new_namespace()
    yield name
    drop_namespace(r, name)


def new_namespace() -> str:
    return "t" + uuid.uuid4().hex[:10]


def drop_namespace(r: redis.Redis, name: str) -> None:
    keys = list(r.scan_iter(match=f"{name}:*", count=10_000))
    for i in range(0, len(keys), 500):
        r.delete(*keys[i:i + 500])


def ns_keys(r: redis.Redis, ns: str) -> list[bytes]:
    return sorted(r.scan_iter(match=f"{ns}:*", count=10_000))


@pytest.fixture
def clock() -> ManualClock:
    """An injected clock: transitions see the time the test sets."""
    return ManualClock()


@pytest.fixture(scope="module")
def private() -> Iterator[Any]:
    """A redis-server of this module's own (tests/faults/harness.py's RedisServer): for
    tests that drive Redis itself (out of memory, its script cache)."""
    from faults.harness import redis_server

    with redis_server() as server:
        yield server


@pytest.fixture
def flushable(request: pytest.FixtureRequest, redis_url: str, ns: str,
              clock: ManualClock) -> Iterator[tuple[Any, Client, str]]:
    """(plain client, Client, url) of a Redis whose script cache the test may flush and keep
    flushed until its next call: under pytest-xdist the other test process loads scripts
    into the shared Redis at any moment, so on the single Redis a private one (the session's
    cluster is already this process's own)."""
    url = redis_url if is_cluster_url(redis_url) else request.getfixturevalue("private").url
    plain: Any = (redis.cluster.RedisCluster.from_url(url) if is_cluster_url(redis_url)
                  else redis.Redis.from_url(url))
    with Client(url, ns, shards=4, clock=clock) as c:
        yield plain, c, url
    close_plain(plain)


@pytest.fixture
def client(redis_url: str, ns: str, clock: ManualClock) -> Iterator[Client]:
    """A blocking client on the test's namespace (4 shards) with the injected clock."""
    with Client(redis_url, ns, shards=4, clock=clock) as c:
        yield c


@pytest.fixture
def app_env() -> dict[str, str]:
    """Environment for subprocesses that import the test app (tests/app_tasks.py)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")])
    return env


SCHED = [sys.executable, "-m", "scheduler.cli"]


# A module marked slow as a whole is not even imported by the fast set (`-m "not slow"`, the
# expression .ci/run passes): each test process imported it, its asserts rewritten, only to
# deselect every test in it.
SLOW_MODULE = re.compile(r"^pytestmark = pytest\.mark\.slow\b", re.MULTILINE)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if (config.getoption("markexpr") == "not slow" and collection_path.suffix == ".py"
            and collection_path.name.startswith("test_")
            and SLOW_MODULE.search(collection_path.read_text(encoding="utf-8"))):
        return True
    return None


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("chaos", "fault-injection rounds (tests/faults)")
    group.addoption("--chaos-rounds", type=int, default=2, help="randomized chaos rounds")
    group.addoption("--chaos-jobs", type=int, default=600, help="jobs per chaos round")
    group.addoption("--chaos-seed", type=int, default=None, help="seed (default: random)")


# --- PostgreSQL (history store) -----------------------------------------------------------

POSTGRES_DSN = os.environ.get("SCHED_TEST_POSTGRES_DSN",
                              "postgresql://postgres@127.0.0.1:5432/test")


@pytest.fixture
def pg_dsn() -> Iterator[str]:
    """A DSN whose search_path is a schema of this test's own, dropped afterwards, so parallel
    runs and tests never see each other's tables."""
    import psycopg

    schema = f"t_{uuid.uuid4().hex[:12]}"
    try:
        admin = psycopg.connect(POSTGRES_DSN, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        pytest.fail(f"tests need PostgreSQL at {POSTGRES_DSN} ({exc})")
    admin.execute(f'CREATE SCHEMA "{schema}"')
    sep = "&" if "?" in POSTGRES_DSN else "?"
    try:
        yield f"{POSTGRES_DSN}{sep}options=-csearch_path%3D{schema}"
    finally:
        admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
        admin.close()


@pytest.fixture(params=["sqlite", "postgres"])
def store_dsn(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Each history-store test runs against both stores (schema migrated)."""
    from scheduler.history.store import open_store

    if request.param == "sqlite":
        return f"sqlite://{tmp_path / 'history.sqlite3'}"
    dsn = str(request.getfixturevalue("pg_dsn"))
    s = open_store(dsn)
    s.upgrade()
    s.close()
    return dsn


@pytest.fixture
def store(store_dsn: str) -> Iterator[Any]:
    from scheduler.history.store import open_store

    s = open_store(store_dsn)
    s.upgrade()
    yield s
    s.close()


@pytest.fixture(autouse=True)
def _root_logging_kept() -> Iterator[None]:
    """A `sched` command run in-process (scheduler.cli.logs.setup_logging) replaces the root logger's
    handlers with one writing to the test's captured stderr: put them back, or later tests
    log into a closed stream and lose pytest's log capture."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
