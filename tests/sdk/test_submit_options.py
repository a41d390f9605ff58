"""The submit options are JobSpec's fields (jobspec.SUBMIT_OPTIONS), and every entry point
that takes them states each one by that name, with JobSpec's default and type: both
clients' `submit` and `schedule` (a series' subset, SCHEDULE_OPTIONS), their I/O-free
operations, the outbox's `submit`, a task handle's three submits, `sched submit`, and
`registry.task`'s per-task defaults (TASK_OPTIONS). An entry point that lacks an option,
misspells one or defaults it differently fails here, naming it."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import Any

import pytest

import scheduler.outbox.writer as outbox
import scheduler.sdk.jobs as jobs
import scheduler.sdk.schedules as schedules
from scheduler import AsyncClient, Client, Registry, TaskHandle
from scheduler.cli.main import submit as submit_command
from scheduler.core.jobspec import (
    NOT_IN_A_SCHEDULE,
    SCHEDULE_OPTIONS,
    SUBMIT_OPTIONS,
    TASK_OPTIONS,
    TIMING_OPTIONS,
    JobSpec,
    option_defaults,
)
from scheduler.history.store import HistoryStore

# Parameters of the entry points that are not options of the job: what it is, where it
# goes, how the call waits.
NOT_OPTIONS = {"self", "core", "conn", "client", "task", "payload", "name", "durability",
               "schema", "max_payload_bytes", "shards", "namespace", "pool"}
# `sched submit`'s parameters for options it spells otherwise: --max-attempts builds the
# RetryPolicy, and `at` is a Python keyword's neighbour in click (at_).
CLI_NAMES = {"retry": "max_attempts", "at": "at_"}

SUBMITS: dict[str, Callable[..., Any]] = {
    "Client.submit": Client.submit,
    "AsyncClient.submit": AsyncClient.submit,
    "sdk.jobs.submit": jobs.submit,
    "outbox.submit": outbox.submit,
    "TaskHandle.submit": TaskHandle.submit,
    "TaskHandle.asubmit": TaskHandle.asubmit,
    "TaskHandle.outbox_submit": TaskHandle.outbox_submit,
}
SCHEDULES: dict[str, Callable[..., Any]] = {
    "Client.schedule": Client.schedule,
    "AsyncClient.schedule": AsyncClient.schedule,
    "sdk.schedules.schedule": schedules.schedule,
}


def options_of(f: Callable[..., Any]) -> dict[str, inspect.Parameter]:
    params = inspect.signature(f).parameters
    assert not any(p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL) for p in params.values()), \
        f"{f.__qualname__} hides its parameters behind *args / **kwargs"
    return {n: p for n, p in params.items() if n not in NOT_OPTIONS}


def hints(f: Callable[..., Any]) -> dict[str, Any]:
    return typing.get_type_hints(f, localns={"HistoryStore": HistoryStore, "Client": Client,
                                             "AsyncClient": AsyncClient})


def test_the_options_are_jobspecs_fields() -> None:
    assert SUBMIT_OPTIONS == JobSpec.__struct_fields__[2:]
    assert JobSpec.__struct_fields__[:2] == ("task", "payload")
    assert set(TIMING_OPTIONS) <= set(SUBMIT_OPTIONS)
    assert set(NOT_IN_A_SCHEDULE) <= set(SUBMIT_OPTIONS)
    assert set(SCHEDULE_OPTIONS) == set(SUBMIT_OPTIONS) - set(NOT_IN_A_SCHEDULE)
    assert "cron" in SCHEDULE_OPTIONS and len(SUBMIT_OPTIONS) == 19


@pytest.mark.parametrize("where", sorted(SUBMITS) + sorted(SCHEDULES))
def test_each_entry_point_states_each_option_with_jobspecs_default_and_type(
        where: str) -> None:
    f = {**SUBMITS, **SCHEDULES}[where]
    expected = SUBMIT_OPTIONS if where in SUBMITS else SCHEDULE_OPTIONS
    stated = options_of(f)
    assert set(stated) == set(expected), (
        f"{where}: lacks {sorted(set(expected) - set(stated))}, "
        f"has unknown {sorted(set(stated) - set(expected))}")
    defaults, types, theirs = option_defaults(), hints(JobSpec), hints(f)
    for name, p in stated.items():
        if where in SCHEDULES and name == "cron":  # a series' one required option
            assert p.default is p.empty and p.kind is p.KEYWORD_ONLY, where
            continue
        assert p.default == defaults[name], f"{where}: {name} defaults to {p.default!r}"
        assert theirs[name] == types[name], f"{where}: {name} is {theirs[name]}"


def test_registry_task_states_each_option_a_task_declares_a_default_for() -> None:
    """None: the task declares none; the types are JobSpec's."""
    stated = options_of(Registry.task)
    assert list(stated) == list(TASK_OPTIONS), f"registry.task states {list(stated)}"
    types, theirs = hints(JobSpec), hints(Registry.task)
    for name, p in stated.items():
        assert p.default is None and p.kind is p.KEYWORD_ONLY, name
        assert theirs[name] == types[name], f"registry.task: {name} is {theirs[name]}"


def test_sched_submit_has_an_option_for_each() -> None:
    params = {p.name for p in submit_command.params}
    missing = [o for o in SUBMIT_OPTIONS if CLI_NAMES.get(o, o) not in params]
    assert not missing, f"sched submit has no option for {missing}"


def test_a_named_schedule_refuses_what_is_not_its_option(redis_url: str, ns: str) -> None:
    """An option that does not fit a series is a TypeError at the call, as any unknown
    keyword is: nothing is written."""
    with Client(redis_url, ns) as client:
        for option in NOT_IN_A_SCHEDULE:
            with pytest.raises(TypeError, match=option):
                client.schedule("s", "t", cron="* * * * *", **{option: 1})
        with pytest.raises(TypeError, match="queu"):
            client.schedule("s", "t", cron="* * * * *", queu="mail")  # type: ignore[call-arg]
        assert client.list_jobs() == []
        assert client.schedule("s", "t", cron="0 3 * * *", queue="mail", priority=1) == "s"
        job = client.get_job("s")
        assert (job.queue, job.priority, job.cron) == ("mail", 1, "0 3 * * *")
