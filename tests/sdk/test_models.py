"""Validation names the bad field and what is allowed."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from scheduler import RetryPolicy
from scheduler.core.errors import ValidationError
from scheduler.core.models import (
    check_delivery,
    check_task,
    check_timeout,
    decode_payload,
    encode_payload,
)


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"max_attempts": 0}, "max_attempts"),
    ({"max_attempts": 1.5}, "max_attempts"),
    ({"base_s": -1}, "base_s"),
    ({"base_s": float("nan")}, "base_s"),
    ({"base_s": 10, "max_s": 5}, "max_s"),
    ({"jitter": 2}, "jitter"),
])
def test_bad_retry_policies_name_the_field(kwargs: dict[str, float], field: str) -> None:
    with pytest.raises(ValidationError) as err:
        RetryPolicy(**kwargs)  # type: ignore[arg-type]
    assert err.value.field == field


def test_backoff_grows_exponentially_up_to_the_cap_and_jitter_only_shortens() -> None:
    p = RetryPolicy(max_attempts=10, base_s=1, max_s=10, jitter=0.5)
    assert [p.delay_s(n, 0) for n in (1, 2, 3, 4, 5)] == [1, 2, 4, 8, 10]
    assert p.delay_s(3, 0.999) == pytest.approx(4 * (1 - 0.5 * 0.999))


@pytest.mark.parametrize("value", ["fast", "", None, 3])
def test_unknown_delivery_lists_the_allowed_values(value: object) -> None:
    with pytest.raises(ValidationError, match="at_least_once, at_most_once, exactly_once"):
        check_delivery(value)


@pytest.mark.parametrize("value", [-1, 0, float("inf"), "5", True])
def test_timeouts_must_be_positive_numbers(value: object) -> None:
    with pytest.raises(ValidationError, match="timeout"):
        check_timeout(value)


@pytest.mark.parametrize("value", ["", " padded", 7, "x" * 201])
def test_bad_task_names(value: object) -> None:
    with pytest.raises(ValidationError, match="task"):
        check_task(value)


def test_payloads_are_json_and_size_limited() -> None:
    value = {"to": "a@b.c", "n": [1, 2.5, None, True]}
    assert decode_payload(encode_payload(value)) == value
    with pytest.raises(ValidationError, match="not a JSON value"):
        encode_payload({"f": object()})


@pytest.mark.parametrize(("payload", "says"), [
    ({"x": float("nan")}, "JSON cannot represent"),
    ([float("inf")], "JSON cannot represent"),
    ({"b": b"raw"}, "a bytes"),
    ({"s": {1, 2}}, "a set"),
    ((1, 2), "a tuple"),
    ({1: "a"}, "not a string"),
    ({"when": datetime(2027, 1, 1, tzinfo=UTC)}, "a datetime"),
])
def test_a_payload_json_would_change_is_refused(payload: object, says: str) -> None:
    """msgspec would encode these quietly as something else (null, base64, a list, a
    string): the handler would not get what was submitted."""
    with pytest.raises(ValidationError, match=says):
        encode_payload(payload)


def test_payload_size_is_limited() -> None:
    with pytest.raises(ValidationError, match="over the limit of 10 bytes"):
        encode_payload("x" * 20, max_bytes=10)
