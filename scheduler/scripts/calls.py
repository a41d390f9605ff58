"""The Lua transitions' calls: one argument builder per script (replies.py decodes).

`Call` values are built here and sent by `run_sync` / `run_async` in one pipelined round
trip, whatever shards they touch, or streamed (`stream_sync`). The round trip is
transport.py's: EVALSHA by SHA, the scripts loaded again on NOSCRIPT, on a Redis Cluster one
pipeline per node, all at once.

The text of each script, as Redis runs it, is source.py's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
import redis
import redis.asyncio

import scheduler.redis.transport as transport
from scheduler.core.namespace import EVENTS_MAXLEN
from scheduler.scripts.source import SOURCES


@dataclass(frozen=True, slots=True)
class Call:
    script: str
    keys: tuple[str, ...]
    args: tuple[Any, ...]


# --- argument builders (one per transition; KEYS are always the shard prefix) --------------


_packer = msgspec.msgpack.Encoder()


def pack(items: list[Any]) -> bytes:
    """The hot-path scripts take their per-item arguments as one msgpack array (cmsgpack in
    Lua) instead of thousands of ARGV strings: redis-py spent much of a worker's CPU
    encoding arguments one by one. Redis's cmsgpack knows no `bin` type, so bytes travel as
    str; numbers arrive in Lua as numbers, so anything compared with a hash field (a token)
    is sent as a string."""
    return _packer.encode(items)


def _s(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def submit(prefix: str, now_ms: int, maxlen: int,
           rows: Sequence[tuple[str, str, str, int, Sequence[Any]]], fresh: bool = False,
           windows: Sequence[Any] = ()) -> Call:
    """rows: (job_id, task, queue, fire_ms, job-hash field/value pairs: str or numbers, the
    payload's JSON as str). `fresh`: every job id was drawn at random for this call alone
    (submit.lua's ARGV[5]: one marker per call instead of an EXISTS per job). `windows`:
    submit.lua's ARGV[6], flat (row number from 1, key id, ttl_ms, debounce_ms) per
    windowed job."""
    items: list[Any] = []
    for job_id, task, queue, fire_ms, fields in rows:
        items += (job_id, task, queue, str(fire_ms), len(fields) // 2)
        items += fields
    args = (now_ms, maxlen, len(rows), pack(items))
    if windows:  # never `fresh`: a windowed job's id is its key's
        return Call("submit", (prefix,), (*args, "", pack(list(windows))))
    return Call("submit", (prefix,), (*args, "1") if fresh else args)


def claim(prefix: str, now_ms: int, worker: str, lease_ms: int,
          entries: Iterable[tuple[str, bytes | str, str]], trace: object = None,
          trim: bool = True, carried: str = "", permitted: bool = False) -> Call:
    """entries: (lane, msg_id, slot_id). trace (a tracing worker's tracer, or anything true):
    grants also carry the job's traceparent and kind and the slot id (replies.traces). trim:
    trim the streams touched. carried: claim.lua's ARGV[7] (the entries' job fields held).
    permitted: the worker holds a queue-wide permit for each entry (else an entry of a queue
    with a queue-wide limit is refused, LIMITED)."""
    items: list[Any] = []
    for queue, msg, slot in entries:
        items += (queue, _s(msg), slot)
    args: tuple[Any, ...] = (now_ms, worker, lease_ms, pack(items))
    if trace or not trim or carried or permitted:
        args += ("1" if trace else "", "1" if trim else "0", carried)
    if permitted:
        args += ("1",)
    return Call("claim", (prefix,), args)


def take(prefix: str, now_ms: int, worker: str, lease_ms: int, queue: str, n: int,
         trace: object = None, again: bool = False, permitted: bool = False,
         workers: int | None = None, mine: dict[str, int] | None = None) -> Call:
    """Claim up to n of a queue's keyed slots in the keys' turns (lua/take.lua), under the
    per-key limit the script reads itself; again: the last take of this queue on this shard
    failed, so its grants are asked for again first; permitted: the worker took queue-wide
    permits for this take (without, a queue with a queue-wide limit takes nothing);
    workers: the live workers taking keyed slots (None: one), among which a per-key limit is
    shared out (the spread), counting `mine`, the runs this worker holds of each key."""
    args: tuple[Any, ...] = (now_ms, worker, lease_ms, queue, n, "1" if trace else "")
    if again or permitted or workers is not None:
        args += ("1" if again else "", "1" if permitted else "")
    if workers is not None:
        flat = [x for key, count in (mine or {}).items() for x in (key, count)]
        args += (workers, _packer.encode(flat) if flat else "")
    return Call("take", (prefix,), args)


def requeue(prefix: str, now_ms: int, maxlen: int,
            entries: Iterable[tuple[str, bytes, str]]) -> Call:
    """entries: (queue, msg_id, slot_id) read but never claimed."""
    args: list[Any] = [now_ms, maxlen, 0]
    for entry in entries:
        args.extend(entry)
    args[2] = (len(args) - 3) // 3
    return Call("requeue", (prefix,), tuple(args))


class Succeeded(msgspec.Struct, gc=False):
    """A run that succeeded, as complete.lua commits it."""
    slot_id: str
    token: int  # the attempt whose lease fences the commit
    started_ms: int
    finished_ms: int
    # The claimed entry (its lane and id), which complete.lua acknowledges if no reader has
    # yet: "" for none (a run started from a sweep); a keyed run's queue and "~<its key>",
    # whose running set fences the commit instead.
    lane: str = ""
    msg_id: bytes | str = ""
    result: bytes | str | None = None  # the return value's JSON, stored with the slot
    logs: bytes | str | None = None  # the run's captured log lines, JSON


class Failed(msgspec.Struct, gc=False):
    """A run that failed, timed out or asked for a retry, as fail.lua commits it."""
    slot_id: str
    token: int
    outcome: str  # an Outcome: failed, timed_out, retried, ...
    error: str
    retry_ms: int  # when the handler asked (Retry(after=...)), else -1: the policy's delay
    u: float  # the retry delay's jitter, uniform in [0, 1)
    started_ms: int
    finished_ms: int
    logs: bytes | str | None = None
    task: str = "?"  # not sent: names the task in the line logged when the slot is dead


class Released(msgspec.Struct, gc=False):
    """A run handed back unfinished (the worker stops), as release.lua takes it."""
    slot_id: str
    token: int
    started_ms: int


Ended = Succeeded | Failed | Released  # how a run ended, for its commit


def complete(prefix: str, now_ms: int, maxlen: int, worker: str,
             items: Sequence[Succeeded]) -> Call:
    """Times go as strings: Lua would print numbers with "%.14g", dearer to Redis than the
    bytes. Results and logs, rare on the hot path, go apart as (item number, JSON) pairs."""
    flat: list[Any] = []
    results: list[Any] = []
    logs: list[Any] = []
    for i, item in enumerate(items):
        msg = item.msg_id
        flat += (item.slot_id, str(item.token), str(int(item.started_ms)),
                 str(int(item.finished_ms)), item.lane,
                 msg if isinstance(msg, str) else msg.decode())
        if item.result is not None:
            results += (i + 1, _s(item.result))
        if item.logs is not None:
            logs += (i + 1, _s(item.logs))
    return Call("complete", (prefix,), (now_ms, maxlen, worker, pack(flat),
                                        pack(results) if results else "",
                                        pack(logs) if logs else ""))


def fail(prefix: str, now_ms: int, maxlen: int, worker: str,
         items: Sequence[Failed]) -> Call:
    """The logs go after the items, as msgpack (item number, JSON) pairs."""
    args: list[Any] = [now_ms, maxlen, worker, len(items)]
    logs: list[Any] = []
    for i, item in enumerate(items):
        args += (item.slot_id, item.token, item.outcome, item.error, item.retry_ms, item.u,
                 item.started_ms, item.finished_ms)
        if item.logs is not None:
            logs += (i + 1, _s(item.logs))
    if logs:
        args.append(pack(logs))
    return Call("fail", (prefix,), tuple(args))


def release(prefix: str, now_ms: int, maxlen: int, worker: str,
            items: Sequence[Released]) -> Call:
    args: list[Any] = [now_ms, maxlen, worker, len(items)]
    for item in items:
        args += (item.slot_id, item.token, item.started_ms)
    return Call("release", (prefix,), tuple(args))


def promote(prefix: str, now_ms: int, maxlen: int, limit: int,
            due_before_ms: int | None = None, ahead_ms: int = 0) -> Call:
    """due_before_ms: only slots due by then (a non-owner's overdue pass); ahead_ms: also
    those due that long after, early."""
    args: tuple[Any, ...] = (now_ms, maxlen, limit,
                             now_ms if due_before_ms is None else due_before_ms)
    return Call("promote", (prefix,), (*args, ahead_ms) if ahead_ms else args)


def heartbeat(prefix: str, now_ms: int, lease_ms: int, worker: str,
              items: Sequence[tuple[Any, ...]], maxlen: int = EVENTS_MAXLEN,
              progress: Sequence[tuple[int, float, str | None, int]] = ()) -> Call:
    """items: (slot_id, token[, new]): new, the run's first heartbeat since its claim,
    announces it in a "claimed" event (heartbeat.lua). progress: (i, fraction, message,
    at_ms) for the runs that reported progress since the last beat, i the run's place in
    `items` (0-based); none adds no argument."""
    args: list[Any] = [now_ms, lease_ms, worker, maxlen, len(items)]
    for item in items:
        args += (item[0], item[1], "1" if len(item) > 2 and item[2] else "")
    if progress:
        args.append(len(progress))
        for i, fraction, message, at_ms in progress:
            args += (i + 1, repr(fraction), message or "", at_ms)
    return Call("heartbeat", (prefix,), tuple(args))


def reclaim(prefix: str, now_ms: int, maxlen: int, limit: int, min_idle_ms: int,
            cursors: Sequence[tuple[str, str]]) -> Call:
    """cursors: (lane, first pending id to look at, "-" to start) for each lane the shard's
    index names."""
    args: list[Any] = [now_ms, maxlen, limit, min_idle_ms, len(cursors)]
    for queue, cursor in cursors:
        args += (queue, cursor)
    return Call("reclaim", (prefix,), tuple(args))


def cancel(prefix: str, now_ms: int, maxlen: int, reason: str, slots: Sequence[str]) -> Call:
    return Call("cancel", (prefix,), (now_ms, maxlen, reason, len(slots), *slots))


def replay(prefix: str, now_ms: int, maxlen: int, slots: Sequence[str]) -> Call:
    return Call("replay", (prefix,), (now_ms, maxlen, len(slots), *slots))


def purge(prefix: str, now_ms: int, maxlen: int, slots: Sequence[str]) -> Call:
    return Call("purge", (prefix,), (now_ms, maxlen, len(slots), *slots))


def delete_job(prefix: str, now_ms: int, maxlen: int, job_id: str, reason: str,
               unmade: Sequence[int] = ()) -> Call:
    """unmade: the recurring job's occurrences from its watermark to now that no node made
    (ledger.unmade), to list in its fire ledger as `deleted`."""
    return Call("delete_job", (prefix,), (now_ms, maxlen, job_id, reason, len(unmade),
                                          *unmade))


def forget(prefix: str, job_ids: list[str]) -> Call:
    return Call("forget", (prefix,), tuple(job_ids))


def trigger(prefix: str, now_ms: int, maxlen: int, job_id: str) -> Call:
    return Call("trigger", (prefix,), (now_ms, maxlen, job_id))


def redefine(prefix: str, now_ms: int, maxlen: int, job_id: str, expected: str, next_ms: int,
             fields: Sequence[Any], unmade: Sequence[int] = ()) -> Call:
    """unmade: the old definition's occurrences from its watermark to now that no node made
    (ledger.unmade), to list in the fire ledger as `redefined`."""
    return Call("redefine", (prefix,), (now_ms, maxlen, job_id, expected, next_ms,
                                        pack([_s(v) if isinstance(v, bytes) else v
                                              for v in fields]), len(unmade), *unmade))


def once(prefix: str, slot_id: str, token: int, name: str) -> Call:
    return Call("once", (prefix,), (slot_id, token, name))


def materialize(prefix: str, now_ms: int, maxlen: int, job_id: str, expected_ms: int,
                digest: str, next_ms: int, missed: int, fires: Sequence[int],
                dropped: Sequence[int] = ()) -> Call:
    """fires: occurrence times (ms) whose slots to create; next_ms -1 ends the job; digest:
    the job's `spec` field the occurrences were computed from ("" for none); dropped: the
    missed occurrences to list in the job's fire ledger (at most `missed`)."""
    return Call("materialize", (prefix,), (now_ms, maxlen, job_id, expected_ms, digest,
                                           next_ms, missed, len(fires), *fires,
                                           len(dropped), *dropped))


def sweep(prefix: str, now_ms: int, maxlen: int, slots: Sequence[bytes]) -> Call:
    """slots: slot ids of one shard, as SCAN found them; sent as one space-separated
    argument (slot ids hold no spaces), which costs a tenth of one argument per id."""
    return Call("sweep", (prefix,), (now_ms, maxlen, b" ".join(slots)))


def lease(prefix: str, now_ms: int, maxlen: int, node_id: str, ttl_ms: int, op: str) -> Call:
    """op: "acquire" (take or renew) | "release"."""
    return Call("lease", (prefix,), (now_ms, maxlen, node_id, ttl_ms, op))


def stats(prefix: str, now_ms: int) -> Call:
    """Read-only: one shard's gauges, over the lanes its index names (lua/stats.lua
    documents the reply)."""
    return Call("stats", (prefix,), (now_ms,))


def key_stats(prefix: str, top: int, budget: int, queue: str = "") -> Call:
    """Read-only: one shard's concurrency keys, each queue's `top` busiest named, at most
    `budget` ring entries read; `queue`: that queue only (lua/key_stats.lua documents the
    reply)."""
    return Call("key_stats", (prefix,), (top, budget, queue))


def clean_lanes(prefix: str, now_ms: int, idle_before_ms: int, limit: int) -> Call:
    """Drop the shard's idle lanes that hold nothing from its `lanes` index (replies.Cleaned)."""
    return Call("clean_lanes", (prefix,), (now_ms, idle_before_ms, limit))


def acquire(permits: str, bucket: str, limit: str, now_ms: int, want: int, ttl_ms: int,
            holder: str, give_back: Sequence[str]) -> Call:
    """Permits for a limited queue (lua/acquire.lua; keys: Keys.permits/bucket/limit), under
    the limit the script reads from `limit` itself."""
    return Call("acquire", (permits, bucket, limit),
                (now_ms, want, ttl_ms, holder, len(give_back), *give_back))


def trim_history(prefix: str, exact: bool = False) -> Call:
    return Call("trim_history", (prefix,), (1 if exact else 0,))


def retire(prefix: str, now_ms: int, retention_ms: int, limit: int) -> Call:
    return Call("retire", (prefix,), (now_ms, retention_ms, limit))


def expire(prefix: str, now_ms: int, retention_ms: int, retain_max: int,
           dead_retention_ms: int, limit: int) -> Call:
    return Call("expire", (prefix,), (now_ms, retention_ms, retain_max, dead_retention_ms,
                                      limit))


def restore(prefix: str, now_ms: int, maxlen: int,
            jobs: Sequence[tuple[str, int, Sequence[str]]],
            slots: Sequence[tuple[str, Sequence[str]]]) -> Call:
    """jobs: (job_id, cron watermark ms or -1, job-hash field/value pairs);
    slots: (slot_id, slot-hash field/value pairs)."""
    args: list[Any] = [now_ms, maxlen, len(jobs)]
    for job_id, cron_ms, fields in jobs:
        args += (job_id, cron_ms, len(fields) // 2, *fields)
    args.append(len(slots))
    for slot, fields in slots:
        args += (slot, len(fields) // 2, *fields)
    return Call("restore", (prefix,), tuple(args))


# --- sending (transport.py sends; these name the library, SOURCES) ----------------------


def run_sync(client: redis.Redis, calls: Sequence[Call], raise_errors: bool = True) -> list[Any]:
    """Run calls in one pipelined round trip; reload scripts once on NOSCRIPT. With
    `raise_errors=False` a call that failed has its exception in its place in the list (the
    others ran); a failed round trip raises either way."""
    return transport.run_scripts_sync(client, SOURCES, calls, raise_errors)[0]


def run_sync_waiting(client: redis.Redis, calls: Sequence[Call], raise_errors: bool = True,
                     wait: tuple[Any, ...] | None = None) -> tuple[list[Any], int]:
    """run_sync, then `wait` (WAIT or WAITAOF) in the same round trip: the results and the
    fewest confirmations (-1 without `wait`; transport.run_scripts_sync)."""
    return transport.run_scripts_sync(client, SOURCES, calls, raise_errors, wait)


async def run_async(client: redis.asyncio.Redis, calls: Sequence[Call],
                    raise_errors: bool = True) -> list[Any]:
    """Async twin of run_sync."""
    return (await transport.run_scripts_async(client, SOURCES, calls, raise_errors))[0]


async def run_async_waiting(client: redis.asyncio.Redis, calls: Sequence[Call],
                            raise_errors: bool = True,
                            wait: tuple[Any, ...] | None = None) -> tuple[list[Any], int]:
    """Async twin of run_sync_waiting."""
    return await transport.run_scripts_async(client, SOURCES, calls, raise_errors, wait)


async def run_async_then(client: redis.asyncio.Redis, calls: Sequence[Call],
                         tail: Callable[[Any], int], raise_errors: bool = True
                         ) -> tuple[list[Any], list[list[Any]]]:
    """run_async, plus the commands `tail` appends, in the same round trip
    (transport.run_scripts_async_then)."""
    return await transport.run_scripts_async_then(client, SOURCES, calls, tail, raise_errors)


def stream_sync(client: redis.Redis, calls: Iterator[Call],
                wait: tuple[Any, ...] | None) -> tuple[list[Any], int]:
    """Each call sent as soon as it is made, the next packed meanwhile (submit_many;
    transport.stream_scripts_sync): errors in their places, and the confirmations."""
    return transport.stream_scripts_sync(client, SOURCES, calls, wait)


async def stream_async(client: redis.asyncio.Redis, calls: Iterator[Call],
                       wait: tuple[Any, ...] | None) -> tuple[list[Any], int]:
    """Async twin of stream_sync."""
    return await transport.stream_scripts_async(client, SOURCES, calls, wait)


def load_sync(client: redis.Redis) -> None:
    transport.load_scripts_sync(client, SOURCES)


async def load_async(client: redis.asyncio.Redis) -> None:
    await transport.load_scripts_async(client, SOURCES)
