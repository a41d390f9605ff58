"""A worker's settings (`sched worker`'s flags, or `WorkerConfig(...)` for an in-process
worker), checked once when made."""

from __future__ import annotations

from typing import Any

import msgspec

from scheduler.core.bounds import (
    MAX_PROCESSES,
    WORKER_BOUNDS,
)
from scheduler.core.errors import ConfigError
from scheduler.core.finite import check_bounds, check_finite
from scheduler.core.keys import check_name
from scheduler.core.namespace import EVENTS_MAXLEN
from scheduler.observe.capacity import DEFAULT_CONCURRENCY
from scheduler.worker.autoscale import AutoscaleConfig


class WorkerConfig(msgspec.Struct, kw_only=True, frozen=True):
    concurrency: int = DEFAULT_CONCURRENCY
    queues: tuple[str, ...] = ("default",)
    batch: int = 500  # most entries claimed per read
    pipelines: int = 2
    """Claim round trips in flight at once: while Redis runs one batch's claim, the worker
    starts the runs of another (one pipeline leaves each side idle half the time)."""
    block_ms: int = 1000  # XREADGROUP BLOCK; also bounds how long stop() waits for the reader
    lease_s: float = 30.0
    grace_s: float = 10.0
    events_maxlen: int = EVENTS_MAXLEN
    claim_replicas: int = 0
    """With N > 0, each claim round trip ends with WAIT N: an at_most_once run starts only
    once N replicas have its claim (a failover then cannot hand it to another worker, which
    would run it twice). One the replicas did not confirm within `replica_timeout_s` is not
    started: its lease runs out and it ends `lost`, as at_most_once allows."""
    replica_timeout_s: float = 1.0
    autoscale: AutoscaleConfig | None = None
    """Move the concurrency between its bounds from the start lag of this worker's claims
    (scheduler/worker/autoscale.py), starting at its MIN; `concurrency` is then not used."""
    # A span per run (scheduler/observe/tracing.py): True, or the TracerProvider to use.
    tracing: Any = False
    eager_start: bool = True
    """Python 3.12+: start each handler's task eagerly (execution.py), so a handler that
    returns without awaiting ends within its claim, never scheduled on the loop (less worker
    CPU per no-op job: `python -m bench burndown` against `--no-eager`). A handler's code up
    to its first await then runs inside the claim: False (`sched worker --no-eager-start`)
    schedules every task as asyncio does by default. No effect on 3.11."""

    process_pool: int | None = None
    """Child processes that run the `pool="process"` handlers (scheduler/worker/pool.py);
    None: one per core. Started only when the registry has such a task."""
    max_tasks_per_child: int = 0
    """Replace a process-pool child after this many runs (for leaky libraries); 0: never."""

    def __post_init__(self) -> None:
        check_finite(self)
        if not self.queues:
            raise ConfigError("a worker needs at least one queue")
        for q in self.queues:
            check_name("queue", q)
        if self.max_tasks_per_child < 0:
            raise ConfigError("max tasks per child must be >= 0 (0: never replace), not "
                              f"{self.max_tasks_per_child}")
        if self.batch < 1 or self.block_ms < 1 or self.pipelines < 1:
            raise ConfigError("batch, block_ms and pipelines must be >= 1")
        if self.lease_s < 1:
            raise ConfigError(f"lease must be >= 1 s, not {self.lease_s}")
        if self.grace_s < 0:
            raise ConfigError(f"grace period must be >= 0 s, not {self.grace_s}")
        if self.claim_replicas < 0 or self.replica_timeout_s <= 0:
            raise ConfigError("claim replicas must be >= 0 and the replica timeout > 0 s")
        check_bounds(self, WORKER_BOUNDS)


class SupervisorRef(msgspec.Struct, kw_only=True, frozen=True):
    """The supervisor (`sched worker --processes N`) that started this worker as one of its
    children, as it tells the child (the SCHED_SUPERVISOR environment variable, JSON). The
    heartbeat writes it into the worker's registry entry, so `sched workers` and the console
    group the children under their supervisor; the supervisor itself writes nothing."""

    id: str
    pid: int
    host: str
    index: int  # which child: 0 .. processes - 1
    processes: int  # the children the supervisor keeps running
    restarts: int  # the supervisor's restart count when it started this child

    def __post_init__(self) -> None:
        if not self.id or len(self.id) > 200:
            raise ConfigError("id must be 1 to 200 characters")
        if self.pid < 1 or not 1 <= self.processes <= MAX_PROCESSES or self.restarts < 0:
            raise ConfigError(f"pid must be >= 1, processes 1 to {MAX_PROCESSES:,} and "
                              f"restarts >= 0")
        if not 0 <= self.index < self.processes:
            raise ConfigError(f"index must be 0 .. {self.processes - 1}, not {self.index}")

    @classmethod
    def parse(cls, text: str, source: str = "SCHED_SUPERVISOR") -> SupervisorRef:
        """Decode and check the JSON a supervisor hands its child; anything else is one
        ConfigError naming `source`."""
        try:
            return msgspec.json.decode(text, type=cls)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise ConfigError(
                f"{source} is not a supervisor's description ({exc}); it is set by `sched "
                f"worker --processes N` for its children: unset it to run a worker on its "
                f"own") from None

    def registry_fields(self) -> dict[str, str | int]:
        """What the worker's registry entry adds (scheduler/observe/status.py reads it)."""
        return {"supervisor": self.id, "supervisor_pid": self.pid, "child": self.index,
                "processes": self.processes, "restarts": self.restarts}
