"""Cluster URLs and detection, without a cluster: what a user can get wrong is refused with one
line that says what to write instead, and a URL of a single Redis stays a single Redis."""

from __future__ import annotations

import pytest

from scheduler import Client
from scheduler.core.errors import ConfigError, RedisUnavailable
from scheduler.redis.clients import sync_redis
from scheduler.redis.cluster import is_cluster
from scheduler.redis.urls import ClusterUrl, find_cluster, parse_cluster


def test_a_cluster_url_names_any_nodes_with_their_credentials_and_tls() -> None:
    c = parse_cluster("rediss+cluster://app:s%40cret@10.0.0.1:7000,[::1]:7001"
                      "?ssl_ca_certs=/etc/ca.pem")
    assert isinstance(c, ClusterUrl)
    assert c.nodes == (("10.0.0.1", 7000), ("::1", 7001))
    options = dict(c.options)
    assert options["ssl"] is True and options["ssl_ca_certs"] == "/etc/ca.pem"
    assert options["username"] == "app" and options["password"] == "s@cret"
    assert parse_cluster("redis+cluster://h:1/0").options == ()
    assert parse_cluster("redis://h:1/0") is None


@pytest.mark.parametrize(("url", "says"), [
    ("redis+cluster://h1,h2:7001", "is not host:port"),
    ("redis+cluster://h1:7000/3", "only database 0"),
    ("redis+cluster://:7000", "is not host:port"),
])
def test_a_bad_cluster_url_says_what_to_write(url: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says) as info:
        parse_cluster(url)
    assert "\n" not in str(info.value)


def test_a_single_redis_is_not_taken_for_a_cluster(redis_url: str) -> None:
    assert find_cluster(redis_url, 2.0) is None
    client = sync_redis(redis_url)
    try:
        assert not is_cluster(client)
    finally:
        client.close()


def test_a_url_nobody_answers_is_a_single_redis_until_it_answers() -> None:
    assert find_cluster("redis://127.0.0.1:1/0", 0.5) is None


def test_an_unreachable_cluster_is_one_line_from_the_sdk() -> None:
    with pytest.raises(RedisUnavailable, match="127.0.0.1:1") as info:
        Client("redis+cluster://127.0.0.1:1,127.0.0.1:2", "t").submit("t", {})
    assert "\n" not in str(info.value) and "Traceback" not in str(info.value)


def test_a_database_that_is_not_a_number_is_refused() -> None:
    with pytest.raises(ConfigError, match="database 'abc' is not a number"):
        sync_redis("redis://127.0.0.1:6379/abc")
