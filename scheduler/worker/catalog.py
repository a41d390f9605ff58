"""What a worker publishes of its tasks when it starts: one entry per task in the namespace's
catalog (`<ns>:tasks`, core/catalog.py), written in one HSET, so `Client.tasks()` and
`sched tasks` list every task a worker has run with its defaults. An entry is overwritten by
each worker that starts with the task (the latest start's defaults are listed) and stays
after its workers stop: the catalog says what was registered, `seen_ms` when. Which workers
serve a task now is not here but in each worker's heartbeat (`served`), which ends with it."""

from __future__ import annotations

from typing import Any

from scheduler.core import catalog
from scheduler.core.keys import Keys
from scheduler.redis import transport
from scheduler.worker.registry import Registry, Task


def entry(task: Task, worker_id: str, now_ms: int) -> catalog.TaskInfo:
    kind = task.payload_type
    return catalog.TaskInfo(
        task=task.name, **task.defaults,
        payload_type=None if kind is None else f"{kind.__module__}.{kind.__qualname__}",
        pool="process" if task.process else "thread", worker=worker_id, seen_ms=now_ms)


def served(registry: Registry) -> bytes:
    """What the worker's heartbeat says it serves: each task with its defaults' digest."""
    return catalog.served([entry(task, "", 0) for task in registry.tasks.values()])


async def publish(client: Any, keys: Keys, registry: Registry, worker_id: str,
                  now_ms: int) -> None:
    """Write the registry's tasks into the catalog (nothing for an empty registry)."""
    if registry.tasks:
        await transport.call(client, "hset", keys.tasks, mapping={
            name: catalog.encode(entry(task, worker_id, now_ms))
            for name, task in registry.tasks.items()})
