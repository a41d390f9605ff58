"""The task catalog (`tasks`): every task a worker has started with, its defaults as the
workers published them (scheduler/worker/catalog.py), and which live workers serve it now,
from their heartbeats. Also what a submit does with a task the catalog does not list
(`check_tasks`): a warning, or with the namespace's `strict_tasks` a refusal. SDK
operations: generators that yield requests (scheduler/sdk/requests.py), driven by Client and
AsyncClient alike."""

from __future__ import annotations

import difflib
import os
import sys
import warnings
from collections.abc import Iterable
from types import FrameType
from typing import Any

import msgspec

from scheduler.core import catalog
from scheduler.core.canary import is_reserved
from scheduler.core.catalog import TaskInfo
from scheduler.core.errors import UnknownTaskWarning, ValidationError
from scheduler.observe.status import MAX_WORKERS, is_alive
from scheduler.sdk.requests import Op, Pipe
from scheduler.sdk.state import ClientState, read_catalog, ready

# Of a worker's hash: what says whether it is alive, whether it serves yet, and what.
_WORKER_FIELDS = ("seen_ms", "lease_ms", "state", "tasks", "task_rates")
KNOWN_LISTED = 10  # known tasks a refusal or warning names, closest first
MAX_WARNED = 4096  # names a client remembers having warned about (then it starts over)
# A warning points at the caller's line, past the frames of this package.
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def tasks(core: ClientState) -> Op[list[TaskInfo]]:
    """The catalog's tasks by name: each one's defaults (queue, timeout, retry, delivery,
    priority, dedupe_ttl, debounce; None where it declares none), its typed payload's
    class, its pool, and the last worker that started with it and when (`seen_ms`). An
    entry stays after its workers stop; the latest start's defaults are the ones listed.
    `workers`: the live workers serving the task now (from the most recently seen
    workers' heartbeats, as `workers()` reads them), `versions`: how many distinct sets of
    defaults they started with, and `succeeded_per_s` / `failed_per_s`: the task's runs
    over their last heartbeat interval."""
    yield from ready(core)
    pipe = Pipe()
    pipe.hgetall(core.keys.tasks)
    pipe.zrevrange(core.keys.workers, 0, MAX_WORKERS - 1)
    raw, seen = yield pipe
    found = sorted((info for info in (catalog.decode(v) for v in raw.values())
                    if info is not None), key=lambda i: i.task)
    if not found or not seen:
        return found
    pipe = Pipe()
    for worker in seen:
        pipe.hmget(core.keys.worker(_text(worker)), *_WORKER_FIELDS)
    replies = yield pipe
    return serving(found, [_text(w) for w in seen], replies, core.clock.now_ms())


def serving(found: list[TaskInfo], worker_ids: list[str], replies: list[Any],
            now_ms: int) -> list[TaskInfo]:
    """The entries with who serves each: `replies` are HMGETs of _WORKER_FIELDS of each
    worker's hash. A worker serves its tasks while it is alive and not waiting for its
    namespace; a field that does not parse reads as absent."""
    workers: dict[str, list[str]] = {}
    digests: dict[str, set[str]] = {}
    rates: dict[str, list[float]] = {}
    for worker_id, (seen_ms, lease_ms, state, served, task_rates) in zip(
            worker_ids, replies, strict=True):
        if seen_ms is None or _text(state) == "waiting" or not is_alive(
                now_ms, _int(seen_ms), _int(lease_ms, 30_000)):
            continue
        for task, digest in catalog.decode_served(served).items():
            workers.setdefault(task, []).append(worker_id)
            digests.setdefault(task, set()).add(digest)
        for task, (ok, failed) in catalog.decode_rates(task_rates).items():
            sums = rates.setdefault(task, [0.0, 0.0])
            sums[0] += ok
            sums[1] += failed
    out = []
    for info in found:
        ok, failed = rates.get(info.task, (0.0, 0.0))
        out.append(msgspec.structs.replace(
            info, workers=sorted(workers.get(info.task, ())),
            versions=len(digests.get(info.task, ())), succeeded_per_s=round(ok, 3),
            failed_per_s=round(failed, 3)))
    return out


def check_tasks(core: ClientState, names: Iterable[str]) -> Op[bool]:
    """What a submit does with task names its client's copy of the catalog does not list
    (validate() notes them in core.unseen): read the catalog again (the copy may be older
    than a worker's start), then for each name still not listed warn (UnknownTaskWarning,
    once per name per client) or, with the namespace's `strict_tasks` on, refuse the submit
    (ValidationError naming the known tasks, closest first). A name already warned about
    costs nothing more, unless the namespace is strict. Returns whether the catalog changed
    (the caller validates its jobs again, with the defaults now listed). The scheduler's own
    tasks (`sched.`, the canary) are served by every worker and never listed: not checked."""
    names = {n for n in names if not is_reserved(n)}
    if not names or (not core.strict_tasks and names <= core.warned):
        return False
    before = core.catalog
    pipe = Pipe()
    read_catalog(pipe, core)
    raw, strict = yield pipe
    core.take_catalog(raw, strict)
    unknown = sorted(n for n in names if n not in core.catalog and n not in core.vouched)
    if unknown and core.strict_tasks:
        raise ValidationError("task", unknown_text(unknown[0], core.catalog, core.namespace)
                              + "; refused: the namespace's strict_tasks is on (`sched "
                                "namespace set --no-strict-tasks` turns it off)")
    for name in unknown:
        if name not in core.warned:
            if len(core.warned) >= MAX_WARNED:
                core.warned.clear()
            core.warned.add(name)
            (core.on_unknown_task or warn)(unknown_text(name, core.catalog, core.namespace))
    return core.catalog is not before


def unknown_text(name: str, known: Iterable[str], namespace: str) -> str:
    """The sentence that names an unknown task and the known ones, closest first."""
    listed = sorted(known)
    if not listed:
        return (f"{name[:200]!r} is not a task of namespace {namespace!r}: no worker has "
                f"started with a task there yet (a typo, or start the workers first)")
    close = difflib.get_close_matches(name, listed, n=KNOWN_LISTED, cutoff=0.0)
    ordered = [*close, *(t for t in listed if t not in close)]
    shown = ", ".join(ordered[:KNOWN_LISTED])
    more = len(ordered) - KNOWN_LISTED
    return (f"{name[:200]!r} is not a task any worker of namespace {namespace!r} has "
            f"registered (known, closest first: {shown}"
            f"{f' and {more} more: sched tasks' if more > 0 else ''}); a typo, or its "
            f"workers have not started yet")


def warn(text: str) -> None:
    if sys.version_info >= (3, 12):
        warnings.warn(text, UnknownTaskWarning, skip_file_prefixes=(_PACKAGE,))
    else:  # the same, by counting this package's frames
        level = 1
        frame: FrameType | None = sys._getframe()
        while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
            frame, level = frame.f_back, level + 1
        warnings.warn(text, UnknownTaskWarning, stacklevel=level)


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value or "")


def _int(value: Any, default: int = 0) -> int:
    try:
        return default if value is None else int(value)
    except ValueError:
        return default
