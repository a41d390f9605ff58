"""Outbox rows that are not jobs, of every kind an outbox can be handed by something other
than outbox.submit (another service, a restore, a manual fix): the relay must move each to
outbox_rejected with its reason and go on (tests/outbox/, tests/faults/test_outbox.py)."""

from __future__ import annotations

import json

DEEP = 100_000  # past msgspec's decoder: a RecursionError, not a ValidationError


def _spec(**fields: object) -> str:
    return json.dumps(fields)


# (what it is, the row's job id or None for a fresh one, the row's spec)
POISON: list[tuple[str, str | None, str]] = [
    ("nested past the decoder", None, '{"task": "t", "payload": ' + "[" * DEEP + "]" * DEEP
     + "}"),
    ("nested past the payload limit", None, _spec(task="t", payload=json.loads("[" * 100
                                                                               + "]" * 100))),
    ("first fire past year 9999", None, _spec(task="t", cron="0 0 1 1 *",
                                              start_at="9999-12-31T00:00:00Z")),
    ("first fire past year 9999 in its zone", None, _spec(
        task="t", cron="0 23 31 12 *", tz="America/New_York", start_at="9999-12-30T00:00:00Z")),
    ("at past year 9999", None, _spec(task="t", at="9999-12-31T23:59:59.999Z")),
    ("malformed JSON", None, '{"task": "t", '),
    ("not an object", None, '["t"]'),
    ("empty", None, ""),
    ("unknown field", None, _spec(task="t", colour="red")),
    ("task not text", None, _spec(task=5)),
    ("priority not a number", None, _spec(task="t", priority="high")),
    ("retry of the wrong shape", None, _spec(task="t", retry={"max_attempts": "x"})),
    ("queue name not allowed", None, _spec(task="t", queue="no spaces here")),
    ("NUL in the task", None, _spec(task="t\u0000x")),
    ("NUL and ESC in a field's name (the decoder's message quotes it)", None,
     '{"task": "t", "a\\u0000b\\u001b[31m": 1}'),
    ("NUL in the dedupe key", None, _spec(task="t", dedupe_key="k\u0000")),
    ("huge timeout", None, _spec(task="t", timeout=1e308)),
    ("huge integer", None, '{"task": "t", "cron": "* * * * *", "catchup_limit": '
     + "9" * 400 + "}"),
    ("delay past the calendar", None, '{"task": "t", "delay": ' + "9" * 400 + "}"),
    ("payload over the namespace's limit", None, _spec(task="t", payload="x" * 1_100_000)),
    ("no task", None, _spec(payload=1)),
    ("naive instant", None, _spec(task="t", at="2030-01-01T00:00:00")),
    ("unknown time zone", None, _spec(task="t", cron="* * * * *", tz="Mars/Olympus")),
    ("negative delay", None, _spec(task="t", delay=-5)),
    ("job id not an id", "not an id!", _spec(task="t")),
]
