"""`masked`, the one function every error, log line and page passes a Redis URL or a
Postgres DSN through: no form of either shows its password, and the SDK's own errors about
one (a URL it cannot parse, a store it cannot open) show none either."""

from __future__ import annotations

import pytest

from scheduler import Client
from scheduler.core.errors import ConfigError, StoreUnavailable
from scheduler.core.masking import masked, passwords, unencoded
from scheduler.history.store import open_store

# (text, the secrets it holds)
FORMS = [
    ("redis://:hunter2@h:6379/0", ["hunter2"]),
    ("rediss://app:hunter2@h:6380/1", ["hunter2"]),
    ("unix://:hunter2@/var/run/redis.sock?db=2", ["hunter2"]),
    ("unix:///var/run/redis.sock?db=2&password=hunter2", ["hunter2"]),
    ("redis://h:6379/0?password=hunter2", ["hunter2"]),
    ("rediss://h:6380/0?ssl_certfile=/c.pem&ssl_password=hunter2&ssl_cert_reqs=none",
     ["hunter2"]),
    ("redis+sentinel://app:hunter2@a:1,b:2/mymaster/0?sentinel_password=s3ntinel",
     ["hunter2", "s3ntinel"]),
    ("rediss+sentinel://:hunter2@a:1/m?sentinel_username=u&sentinel_password=s3ntinel",
     ["hunter2", "s3ntinel"]),
    ("redis+cluster://app:hunter2@a:1,b:2", ["hunter2"]),
    ("rediss+cluster://:hunter2@[::1]:7000", ["hunter2"]),
    ("redis://app:hun@ter2@h:6379/0", ["hun@ter2", "ter2"]),  # an unencoded @
    ("redis://:hun/ter2@h:6379/0", ["hun/ter2", "ter2"]),  # an unencoded /
    ("redis://app:hun:ter2@h/0", ["hun:ter2", "ter2"]),  # an unencoded :
    ("redis://:p%40ss%2Fword@h/0", ["p%40ss%2Fword", "p@ss/word"]),
    ("redis://@:hunter2@h/0", ["hunter2"]),
    ("postgresql://bob:hunter2@db:5432/sched", ["hunter2"]),
    ("postgres://bob:hunter2@db/sched?sslmode=require", ["hunter2"]),
    ("postgresql://bob:hunter2@[::1:1/db", ["hunter2"]),  # malformed: no closing ]
    ("postgress://bob:hunter2@db/sched", ["hunter2"]),  # a misspelt scheme
    ("postgress:/bob:hunter2@db/sched", ["hunter2"]),  # as a path library writes it
    ("postgresql://bob:hun@ter2@db/sched", ["hun@ter2"]),
    ("postgresql:///sched?host=/tmp&password=hunter2", ["hunter2"]),
    ("host=db user=bob password=hunter2 dbname=sched", ["hunter2"]),
    ("host=db password = hunter2 dbname=sched", ["hunter2"]),
    ("host=db password='hunter 2 two' dbname=sched", ["hunter 2 two", "hunter", "two"]),
    ("host=db password='it\\'s hunter2' dbname=sched", ["hunter2"]),
    ("host=db sslpassword=hunter2 dbname=sched", ["hunter2"]),
    ('psycopg: invalid URI "postgresql://bob:hunter2@[::1:1/db"', ["hunter2"]),
    ("'host=db password=\\'hunter 2\\' dbname=x'", ["hunter"]),  # a repr of one
    ("ERROR redis url 'redis://:hunter2@h:x/0': Port could not be cast", ["hunter2"]),
    ('{"message": "cannot reach redis://:hunter2@h:1/0"}', ["hunter2"]),
    # A password holding white space (the URL goes on past it to its @).
    ("redis://:hun ter2@h:6379/0", ["hun ter2", "ter2"]),
    ("redis://app:hunter2 two@h/0", ["hunter2 two", "hunter2"]),
    ("redis://:hun\tter2@h/0", ["hun\tter2", "ter2"]),
    ("ERROR redis url 'redis://:hun ter2@h:x/0': Port could not be cast", ["ter2"]),
    ("postgresql://bob:hun ter2@db:5432/sched", ["hun ter2", "ter2"]),
    ('connection to "postgresql://bob:my hunter2 pw@db/x" failed', ["hunter2"]),
]


@pytest.mark.parametrize("text, secrets", FORMS)
def test_no_form_of_a_url_or_dsn_shows_its_password(text: str, secrets: list[str]) -> None:
    """An unencoded @ or / in the password, ssl_password= and a misspelt scheme leaked."""
    shown = masked(text)
    assert "***" in shown
    for secret in secrets:
        assert secret not in shown, shown
        assert secret not in masked(text, text), shown


@pytest.mark.parametrize("text, shown", [
    ("redis://:hunter2@h:6379/0", "redis://:***@h:6379/0"),
    ("rediss://app:hunter2@h:6380/1", "rediss://app:***@h:6380/1"),
    ("redis://app:hun@ter2@h:6379/0", "redis://app:***@h:6379/0"),
    ("redis://a@b@h:6379/0", "redis://***@h:6379/0"),
    ("postgresql://bob:hunter2@[::1:1/db", "postgresql://bob:***@[::1:1/db"),
    ("host=db user=bob password=hunter2 dbname=sched", "host=db user=bob password=*** "
                                                      "dbname=sched"),
    ("redis://h:6379/0", "redis://h:6379/0"),
    ("redis://app@h:6379/0", "redis://app@h:6379/0"),
    ("redis://:pa ss@h:6379/0", "redis://:***@h:6379/0"),
    ("redis://app:pa ss word@h/0", "redis://app:***@h/0"),
    ("see redis://h:6379/0 and mail ops@example.com", "see redis://h:6379/0 and mail "
                                                       "ops@example.com"),
    ("redis://h:6379/0 user@x", "redis://h:6379/0 user@x"),
    ("no secret here: see https://example.com/docs", "no secret here: see "
                                                     "https://example.com/docs"),
])
def test_what_is_kept_of_a_url(text: str, shown: str) -> None:
    assert masked(text) == shown


def test_a_library_message_loses_the_pieces_of_a_known_password() -> None:
    """A parser that splits a password at an unencoded character prints a piece of it as a
    host or a port: the piece is masked when the text came from that URL or DSN."""
    dsn = "postgresql://bob:s3cret@0bvious@127.0.0.1:1/db"
    assert "0bvious" in passwords(dsn)
    assert masked("failed to resolve host '0bvious@127.0.0.1'", dsn) == \
        "failed to resolve host '***@127.0.0.1'"


@pytest.mark.parametrize("url, refused", [
    ("redis://:hun/ter2@h/0", True), ("redis://:hun?ter2@h/0", True),
    ("redis://:hun#ter2@h/0", True), ("postgresql://bob:hun@ter2@h/db", True),
    ("redis://:hun@ter2@h/0", False),  # redis-py takes the last @
    ("redis://:hunter2@h:6379/0", False), ("unix://:hunter2@/tmp/redis.sock", False),
    ("postgresql://bob:hunter2@h/db", False), ("host=h password=a@b/c", False),
])
def test_a_password_its_parser_would_cut_is_refused(url: str, refused: bool) -> None:
    assert (unencoded(url) is not None) is refused


@pytest.mark.parametrize("url", [
    "redis://:hunter2@h:notaport/0", "redis://:hun/ter2@127.0.0.1:1/0",
    "redis://u:hun?ter2@127.0.0.1:1/0", "redis://:hunter2@h/notadb",
    "redis+cluster://u:hunter2@h:1/3", "redis+cluster://u:hunter2@h:x",
    "redis://:hun ter2@h:notaport/0", "redis://u:hun ter2@h/notadb",
])
def test_the_sdk_says_what_is_wrong_with_a_url_without_its_password(url: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Client(url)
    assert "hunter2" not in str(caught.value) and "ter2" not in str(caught.value)


@pytest.mark.parametrize("dsn", [
    "postgresql://bob:hunter2@[::1:1/db", "postgresql://bob:hun@ter2@127.0.0.1:1/db",
    "postgress://bob:hunter2@127.0.0.1/db", "host=127.0.0.1 port=1 password=hunter2 bogus=1",
    "postgresql://bob:hunter2@127.0.0.1:5432/test",
])
def test_a_store_that_cannot_be_opened_says_why_without_its_password(dsn: str) -> None:
    """StoreUnavailable's text is what the console's History page shows every viewer."""
    with pytest.raises(StoreUnavailable) as caught:
        open_store(dsn).check()
    assert "hunter2" not in str(caught.value) and "ter2" not in str(caught.value)
