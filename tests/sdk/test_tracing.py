"""OpenTelemetry tracing (scheduler/observe/tracing.py): a span per submit call, a span per run
attempt that is its child through the traceparent stored with the job, cron runs linked to
their schedule's submit, and nothing at all when tracing is off."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from helpers import run_until, sched
from scheduler import Client, Context, Registry, RetryPolicy
from scheduler.core.errors import ConfigError
from scheduler.core.keys import DISPATCH_GROUP, shard_of
from scheduler.scripts import calls as scripts


class Spans:
    """A TracerProvider of the test's own (the global one can be set once per process)
    whose finished spans are kept in memory."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    def named(self, prefix: str) -> list[ReadableSpan]:
        return [s for s in self.exporter.get_finished_spans() if s.name.startswith(prefix)]


_GLOBAL: list[Spans] = []


@pytest.fixture
def global_spans() -> Spans:
    """The process's global TracerProvider (it can be set once: the first test sets it),
    its spans cleared."""
    if not _GLOBAL:
        _GLOBAL.append(Spans())
        trace.set_tracer_provider(_GLOBAL[0].provider)
    _GLOBAL[0].exporter.clear()
    return _GLOBAL[0]


@pytest.fixture
def spans() -> Iterator[Spans]:
    s = Spans()
    yield s
    s.provider.shutdown()


def traceparent_of(span: ReadableSpan) -> str:
    ctx = span.get_span_context()
    assert ctx is not None
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def stored_traceparent(client: Client, r: Any, job_id: str) -> Any:
    return r.hget(client.keys.job(shard_of(job_id, client.shards), job_id), "traceparent")


def test_a_submit_has_a_span_and_its_job_stores_the_span_as_traceparent(
        redis_url: str, ns: str, r: Any, spans: Spans) -> None:
    with Client(redis_url, ns, tracing=spans.provider) as client:
        job_id = client.submit("email.send", {"to": "a"}, queue="mail")
        [span] = spans.named("submit")
        assert span.name == "submit email.send" and span.kind is SpanKind.PRODUCER
        assert span.attributes is not None
        assert dict(span.attributes) == {
            "messaging.system": "redis-sched", "messaging.operation.type": "send",
            "sched.task": "email.send", "messaging.destination.name": "mail",
            "sched.job_id": job_id}
        assert stored_traceparent(client, r, job_id).decode() == traceparent_of(span)
        assert client.get_job(job_id).task == "email.send"  # the extra field is harmless


def test_submit_many_is_one_span_whose_traceparent_every_job_stores(
        redis_url: str, ns: str, r: Any, spans: Spans) -> None:
    with Client(redis_url, ns, tracing=spans.provider) as client:
        ids = client.submit_many([{"task": "a" if i % 2 else "b", "payload": i}
                                  for i in range(20)])
        [span] = spans.named("submit")
        assert span.name == "submit"  # two tasks: no single name for the batch
        assert span.attributes is not None
        assert span.attributes["messaging.batch.message_count"] == 20
        assert "sched.task" not in span.attributes and "sched.job_id" not in span.attributes
        assert {stored_traceparent(client, r, i).decode() for i in ids} == {
            traceparent_of(span)}


def test_a_refused_submit_ends_its_span_with_the_error(
        redis_url: str, ns: str, spans: Spans) -> None:
    with Client(redis_url, ns, tracing=spans.provider) as client:
        with pytest.raises(ValueError):
            client.submit("t", queue="bad queue name")
    [span] = spans.named("submit")
    assert span.status.status_code is StatusCode.ERROR
    assert [e.name for e in span.events] == ["exception"]


def test_each_attempt_is_a_run_span_child_of_the_submit_with_its_outcome(
        redis_url: str, ns: str, spans: Spans) -> None:
    """Attempt 1 fails, attempt 2 succeeds: two run spans, siblings under the submit."""
    registry = Registry()
    done = threading.Event()
    tracer = spans.provider.get_tracer("handler")

    @registry.task("flaky")
    async def flaky(ctx: Context, payload: Any) -> str:
        with tracer.start_as_current_span("inside"):
            pass
        if ctx.attempt == 1:
            raise RuntimeError("first try fails")
        done.set()
        return "ok"

    with Client(redis_url, ns, tracing=spans.provider) as client:
        job_id = client.submit("flaky", queue="q1", retry=RetryPolicy(
            max_attempts=3, base_s=0.05, max_s=1, jitter=0))
        asyncio.run(run_until(redis_url, ns, registry, done.is_set, node=True, queues=("q1",),
                              tracing=spans.provider))
        [slot] = client.slots(job_id)
    [submit] = spans.named("submit")
    runs = sorted(spans.named("run"), key=lambda s: s.attributes["sched.attempt"])  # type: ignore[index]
    assert [s.name for s in runs] == ["run flaky", "run flaky"]
    for attempt, (span, outcome) in enumerate(zip(runs, ["failed", "succeeded"],
                                                  strict=True), 1):
        assert span.kind is SpanKind.CONSUMER
        assert span.parent is not None and span.parent.span_id == submit.context.span_id
        assert span.context.trace_id == submit.context.trace_id
        attrs = dict(span.attributes or {})
        assert attrs.pop("sched.start_lag_ms") >= 0  # type: ignore[operator]
        assert attrs.pop("error.type", outcome) == outcome
        assert attrs == {
            "messaging.system": "redis-sched", "messaging.operation.type": "process",
            "messaging.destination.name": "q1", "messaging.message.id": slot.slot_id,
            "sched.task": "flaky", "sched.attempt": attempt, "sched.outcome": outcome}
    failed, succeeded = runs
    assert failed.status.status_code is StatusCode.ERROR
    assert "first try fails" in (failed.status.description or "")
    [event] = failed.events
    assert event.name == "exception" and event.attributes is not None
    assert event.attributes["exception.type"] == "RuntimeError"
    assert succeeded.status.status_code is StatusCode.UNSET and not succeeded.events
    # The handler's own spans are children of its attempt's span.
    inside = spans.named("inside")
    assert sorted(s.parent.span_id for s in inside if s.parent) == sorted(
        s.context.span_id for s in runs)


def test_a_sync_handler_in_a_thread_sees_its_run_span_and_a_timeout_is_an_outcome(
        redis_url: str, ns: str, spans: Spans) -> None:
    registry = Registry()
    tracer = spans.provider.get_tracer("handler")
    finished: list[str] = []

    @registry.task("sync")
    def sync(ctx: Context, payload: Any) -> None:
        with tracer.start_as_current_span("inside-thread"):
            finished.append(threading.current_thread().name)

    @registry.task("slow")
    async def slow(ctx: Context, payload: Any) -> None:
        await asyncio.sleep(10)

    with Client(redis_url, ns, tracing=spans.provider) as client:
        client.submit("sync", queue="q2")
        client.submit("slow", queue="q2", timeout=0.1, retry=RetryPolicy(max_attempts=1))
        asyncio.run(run_until(redis_url, ns, registry, lambda: len(spans.named("run")) == 2,
                              queues=("q2",), tracing=spans.provider))
    runs = {s.attributes["sched.task"]: s for s in spans.named("run")}  # type: ignore[index]
    [inside] = spans.named("inside-thread")
    assert finished[0].startswith("sched-handler")
    assert inside.parent is not None and inside.parent.span_id == runs["sync"].context.span_id
    timed_out = runs["slow"]
    assert timed_out.attributes is not None
    assert timed_out.attributes["sched.outcome"] == "timed_out"
    assert timed_out.attributes["error.type"] == "timed_out"
    assert timed_out.status.status_code is StatusCode.ERROR


@pytest.mark.slow  # waits for cron seconds: ~2 s
def test_each_cron_occurrence_runs_in_a_trace_of_its_own_linked_to_the_submit(
        redis_url: str, ns: str, spans: Spans) -> None:
    registry = Registry()
    seen: set[str] = set()

    @registry.task("tick")
    async def tick(ctx: Context, payload: Any) -> None:
        seen.add(ctx.slot_id)

    with Client(redis_url, ns, tracing=spans.provider) as client:
        client.submit("tick", cron="* * * * * *", queue="q3")
        asyncio.run(run_until(redis_url, ns, registry, lambda: len(seen) >= 2, node=True,
                              queues=("q3",), tracing=spans.provider))
    [submit] = spans.named("submit")
    runs = spans.named("run tick")
    assert len(runs) >= 2 and len({s.attributes["messaging.message.id"]  # type: ignore[index]
                                    for s in runs}) == len(runs)
    for span in runs:
        assert span.parent is None  # a root: a trace per occurrence
        assert span.context.trace_id != submit.context.trace_id
        assert [link.context.span_id for link in span.links] == [submit.context.span_id]
        assert span.attributes is not None and span.attributes["sched.outcome"] == "succeeded"


def test_tracing_off_makes_no_span_and_stores_and_returns_no_traceparent(
        redis_url: str, ns: str, r: Any, global_spans: Spans) -> None:
    registry = Registry()
    ran: list[str] = []

    @registry.task("t")
    async def t(ctx: Context, payload: Any) -> None:
        ran.append(ctx.slot_id)

    with Client(redis_url, ns) as client:  # off, though a global provider is configured
        job_id = client.submit("t", queue="q4")
        assert stored_traceparent(client, r, job_id) is None
        worker = asyncio.run(run_until(redis_url, ns, registry, lambda: bool(ran),
                                       queues=("q4",)))
    assert worker.execution.tracer is None
    assert global_spans.exporter.get_finished_spans() == ()


def test_tracing_off_never_imports_the_tracing_module(redis_url: str, ns: str,
                                                     app_env: dict[str, str]) -> None:
    """(redis-py 8 imports opentelemetry itself where it is installed: not asserted.)"""
    code = ("import sys; from scheduler import Client; from scheduler.worker.worker import Worker; "
            f"c = Client({redis_url!r}, {ns!r}); c.submit('t'); c.close(); "
            "assert 'scheduler.observe.tracing' not in sys.modules, 'imported'")
    subprocess.run([sys.executable, "-c", code], env=app_env, check=True, timeout=60)


def test_tracing_true_uses_the_global_provider_and_so_does_sched_submit_trace(
        redis_url: str, ns: str, r: Any, global_spans: Spans,
        capsys: pytest.CaptureFixture[str]) -> None:
    registry = Registry()
    ran: list[str] = []

    @registry.task("t")
    async def t(ctx: Context, payload: Any) -> None:
        ran.append(ctx.slot_id)

    code, out, _ = sched(capsys, redis_url, ns, "submit", "t", "--queue", "q6", "--trace")
    assert code == 0
    [submit] = global_spans.named("submit t")
    with Client(redis_url, ns) as client:
        assert stored_traceparent(client, r, out.strip()).decode() == traceparent_of(submit)
    asyncio.run(run_until(redis_url, ns, registry, lambda: bool(ran), queues=("q6",),
                          tracing=True))
    [run] = global_spans.named("run t")
    assert run.parent is not None and run.parent.span_id == submit.context.span_id


@pytest.mark.parametrize("trace", [False, True])
def test_the_claim_script_returns_the_traceparent_only_when_asked(
        redis_url: str, ns: str, r: Any, spans: Spans, trace: bool) -> None:
    with Client(redis_url, ns, tracing=spans.provider) as client:
        job_id = client.submit("t", queue="q5")
        shard = shard_of(job_id, client.shards)
        stream = client.keys.queue(shard, "q5")
        r.xgroup_create(stream, DISPATCH_GROUP, id="0", mkstream=True)
        [(_, [(msg, fields)])] = r.xreadgroup(DISPATCH_GROUP, "w", {stream: ">"}, count=1)
        call = scripts.claim(client.keys.prefix(shard), client.now_ms(), "w", 30_000,
                             [("q5", msg, fields[b"s"].decode())], trace)
        grant = scripts.run_sync(r, [call])[0]  # flat: the code, then its values
    [submit] = spans.named("submit")
    if trace:
        assert len(grant) == 9 and grant[8].decode() == fields[b"s"].decode()
        assert grant[6].decode() == traceparent_of(submit) and grant[7] is None  # the default kind
    else:
        assert len(grant) == 6


def test_tracing_without_the_otel_extra_says_what_to_install(
        redis_url: str, ns: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "scheduler.observe.tracing", raising=False)
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    with pytest.raises(ConfigError, match=r"redis-sched\[otel\]"):
        Client(redis_url, ns, tracing=True)


def test_a_stored_traceparent_is_parsed_back_exactly(spans: Spans) -> None:
    from scheduler.observe import tracing

    span = spans.provider.get_tracer("t").start_span("s")
    value = tracing.traceparent(span)  # type: ignore[arg-type]
    assert value is not None
    ctx = tracing._span_context(value)
    assert ctx is not None and ctx.is_remote
    assert (ctx.trace_id, ctx.span_id, ctx.trace_flags) == (
        span.get_span_context().trace_id, span.get_span_context().span_id,
        span.get_span_context().trace_flags)


@pytest.mark.parametrize("value", [
    "", "junk", "01-" + "1" * 32 + "-" + "2" * 16 + "-01", "00-" + "0" * 32 + "-" + "2" * 16 + "-01",
    "00-" + "1" * 32 + "-" + "0" * 16 + "-01", "00-" + "x" * 32 + "-" + "2" * 16 + "-01",
    "00-" + "1" * 31 + "-" + "2" * 16 + "-01-"])
def test_a_malformed_traceparent_gives_the_run_no_parent(value: str) -> None:
    from scheduler.observe import tracing

    assert tracing._span_context(value) is None


def test_the_asyncio_client_traces_its_submits_the_same_way(
        redis_url: str, ns: str, r: Any, spans: Spans) -> None:
    from scheduler import AsyncClient

    async def go() -> str:
        async with AsyncClient(redis_url, ns, tracing=spans.provider) as client:
            return await client.submit("t")

    job_id = asyncio.run(go())
    [span] = spans.named("submit t")
    with Client(redis_url, ns) as client:
        assert stored_traceparent(client, r, job_id).decode() == traceparent_of(span)
