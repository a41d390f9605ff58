"""OpenTelemetry spans for submits and runs: the `otel` extra, off unless asked for.

Turned on per process: `Client(..., tracing=True)` (or AsyncClient), `WorkerConfig(tracing=
True)`, `sched worker --trace` / `sched submit --trace` (env SCHED_OTEL=1). Spans go to the
TracerProvider the application configured, the global one unless `tracing=` is a provider:
exporters, sampling and the OTEL_* variables are the application's, as with any instrumented
library. Off, this module is never imported and opentelemetry need not be installed: the
submit path pays one `is None` check per call, the claim loop one per claim call and one per
run start and end, the claim script reads and returns nothing more (its trace flag, ARGV[5],
is absent), and no job stores a traceparent.

Spans (attribute names: `messaging.*` from the OpenTelemetry messaging conventions where one
fits, else `sched.*`):

  submit <task>  PRODUCER, one per submit or submit_many call (just `submit` when the batch
                 mixes tasks): messaging.batch.message_count (a batch of other than one
                 job), sched.task and messaging.destination.name (the queue) when the
                 batch has one, sched.job_id for a single job. Its W3C traceparent
                 (`00-<trace id>-<span id>-<flags>`) is stored in each job's hash, field
                 `traceparent`. One span per call, not per job: a span costs the SDK
                 about what submit_many spends on a whole job, and a batch is one
                 operation of its caller.
  run <task>     CONSUMER, one per attempt: messaging.destination.name (the queue),
                 messaging.message.id (the slot id, "<job id>:<fire ms>"), sched.task,
                 sched.attempt, sched.start_lag_ms (claim time minus fire time), and at its
                 end sched.outcome (an Outcome, or "released"/"lost"); failed, timed_out and
                 lost attempts have status ERROR and error.type = the outcome, and a
                 handler's exception is recorded. The span is current while the handler
                 runs (threads too), so spans the handler makes are its children. A run is a
                 child of its job's submit span; a run of a cron occurrence starts a trace of
                 its own with a link to the submit span instead (a series that runs for
                 months would otherwise be one endless trace). The SDK's cost grows with
                 each attribute: hence few attributes, one name for each fact.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

from scheduler.core.errors import ConfigError
from scheduler.core.states import Outcome

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError as exc:  # pragma: no cover: the extra is missing
    raise ConfigError("tracing needs the `otel` extra: pip install 'redis-sched[otel]' "
                      f"(opentelemetry-api; {exc})") from None

import scheduler.scripts.replies as replies
from scheduler import __version__


class Run(Protocol):
    """What a run's span reads of a worker's run in flight (scheduler/worker/inflight.py)."""

    @property
    def slot_id(self) -> str: ...
    @property
    def task(self) -> str: ...
    @property
    def attempt(self) -> int: ...
    @property
    def started_ms(self) -> int: ...
    @property
    def fire_ms(self) -> int: ...
    @property
    def metrics(self) -> Any: ...

FIELD = "traceparent"  # the job-hash field (claim.lua returns it to a worker that asks)
SYSTEM = "redis-sched"  # messaging.system
ERRORS = frozenset({Outcome.FAILED, Outcome.TIMED_OUT, "lost"})
R = TypeVar("R")
Op = Generator[Any, Any, R]  # an SDK operation (sdk/requests.py's Op; not imported: no cycle)
_W3C = TraceContextTextMapPropagator()
_ROOT = otel_context.Context()  # a run's parent is its submit, never the worker's context


def _tracer(provider: Any) -> trace.Tracer:
    return trace.get_tracer("scheduler", __version__, tracer_provider=provider)


def traceparent(span: trace.Span) -> str | None:
    """The span's W3C traceparent; None for a span that is not real (no SDK configured)."""
    carrier: dict[str, str] = {}
    _W3C.inject(carrier, trace.set_span_in_context(span))
    return carrier.get(FIELD)


def _span_context(value: str) -> trace.SpanContext | None:
    """A stored traceparent, parsed (W3C version 00); None if it is not one. By hand: the
    SDK's propagator, with its regex and Context, costs more on every run."""
    parts = value.split("-")
    if len(parts) != 4 or parts[0] != "00" or len(parts[1]) != 32 or len(parts[2]) != 16 \
            or len(parts[3]) != 2:
        return None
    try:
        ctx = trace.SpanContext(int(parts[1], 16), int(parts[2], 16), is_remote=True,
                                trace_flags=trace.TraceFlags(int(parts[3], 16)))
    except ValueError:
        return None
    return ctx if ctx.is_valid else None


def _failed(span: trace.Span, error: BaseException | str, kind: str) -> None:
    span.set_attribute("error.type", kind)
    span.set_status(trace.Status(trace.StatusCode.ERROR, str(error)[:1000]))


class SubmitTracer:
    """A client's submit spans (scheduler/sdk/jobs.py, submit_many)."""

    def __init__(self, provider: Any = None) -> None:
        self.tracer = _tracer(provider)

    def submit(self, jobs: Sequence[Any],
               op: Callable[[tuple[str, ...]], Op[R]]) -> Op[R]:
        """Run the submit operation inside one span for the call: `op(fields)`, the
        job-hash fields to store with every job (the span's traceparent)."""
        tasks, queues = _names(jobs, "task"), _names(jobs, "queue")
        attributes: dict[str, Any] = {"messaging.system": SYSTEM,
                                      "messaging.operation.type": "send"}
        if len(jobs) != 1:
            attributes["messaging.batch.message_count"] = len(jobs)
        if len(tasks) == 1:
            attributes["sched.task"] = next(iter(tasks))
        if len(queues) == 1:
            attributes["messaging.destination.name"] = next(iter(queues))
        name = f"submit {attributes['sched.task']}" if len(tasks) == 1 else "submit"
        span = self.tracer.start_span(name, kind=trace.SpanKind.PRODUCER, attributes=attributes)
        try:
            parent = traceparent(span)
            result = yield from op((FIELD, parent) if parent else ())
            if isinstance(result, list) and len(result) == 1:
                span.set_attribute("sched.job_id", result[0])
            return result
        except Exception as exc:
            span.record_exception(exc)
            _failed(span, exc, type(exc).__name__)
            raise
        finally:
            span.end()


def _names(jobs: Iterable[Any], field: str) -> set[str]:
    """The distinct task or queue names of a batch of JobSpecs or mappings (not validated
    yet: anything not a string is left out, and so is a queue the job leaves to its task's
    defaults: the task catalog may route it)."""
    out = set()
    for job in jobs:
        value = job.get(field) if isinstance(job, Mapping) else getattr(job, field)
        if isinstance(value, str):
            out.add(value)
    return out


class ContextPool(ThreadPoolExecutor):
    """A thread pool whose calls run in the caller's contextvars (run_in_executor does not
    carry them): a sync handler sees its run's span as current."""

    def submit(self, fn: Callable[..., R], /, *args: Any, **kwargs: Any) -> Future[R]:
        return super().submit(contextvars.copy_context().run, fn, *args, **kwargs)


class RunTracer:
    """A worker's run spans. The worker hands it each claim reply (`claimed`); Execution
    begins a run's span when it starts the run and ends it with the outcome."""

    pool = ContextPool

    def __init__(self, provider: Any = None) -> None:
        self.tracer = _tracer(provider)
        # slot -> (traceparent, cron) of the claim reply being started; the worker starts a
        # reply's runs before it awaits anything, so one reply's worth at a time.
        self.pending: dict[str, tuple[str | None, bool]] = {}
        self.spans: dict[Run, trace.Span] = {}

    def claimed(self, reply: Sequence[Any], entries: Sequence[tuple[Any, Any, str]]
                ) -> list[replies.Grant | int | None]:
        """replies.claimed for a tracing worker: one shard's claim reply (sent with the
        trace flag) decoded, its trace part kept for the runs about to start."""
        self.pending = replies.traces(reply)
        return replies.claimed(reply, entries, traced=True)

    def begin(self, run: Run) -> contextvars.Context:
        """Start the run's span; returns the context its handler's task runs in."""
        parent_id, cron = self.pending.pop(run.slot_id, (None, False))
        queue = run.metrics.queue
        submitted = _span_context(parent_id) if parent_id else None
        parent, links = _ROOT, []
        if submitted is not None and cron:
            links = [trace.Link(submitted)]
        elif submitted is not None:
            parent = trace.set_span_in_context(trace.NonRecordingSpan(submitted), _ROOT)
        # Few attributes, one name per fact: the SDK pays for each on every run.
        span = self.tracer.start_span(
            f"run {run.task}", context=parent, kind=trace.SpanKind.CONSUMER, links=links,
            attributes={"messaging.system": SYSTEM, "messaging.operation.type": "process",
                        "messaging.destination.name": queue,
                        "messaging.message.id": run.slot_id, "sched.task": run.task,
                        "sched.attempt": run.attempt,
                        "sched.start_lag_ms": run.started_ms - run.fire_ms})
        self.spans[run] = span
        ctx = contextvars.copy_context()
        ctx.run(otel_context.attach, trace.set_span_in_context(span))  # never detached: the
        return ctx                                                    # context ends with it

    def raised(self, run: Run, exc: BaseException) -> None:
        """The handler raised: its exception goes on the span (the outcome follows)."""
        span = self.spans.get(run)
        if span is not None:
            span.record_exception(exc)

    def end(self, run: Run, kind: str, error: str) -> None:
        span = self.spans.pop(run, None)
        if span is None:
            return
        span.set_attribute("sched.outcome", kind)
        if kind in ERRORS:
            _failed(span, error or kind, kind)
        span.end()
