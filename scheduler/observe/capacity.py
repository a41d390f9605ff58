"""How many workers the observed lag and throughput call for: the `workers:` line of `sched
status` (`in_words`), its `scaling` record in `--json`, and the exporter's
`sched_workers_wanted` gauge that an autoscaler (KEDA, deploy/keda-scaledobject.yaml) reads.

The rule, per queue, from what the status already reads (no command or per-job work of its
own): the live workers' heartbeats give each queue's completion rate X (runs ended per second),
mean run time W (over the runs that ended in the last heartbeat interval) and runs in flight
P; the stream gives the ready backlog B (entries no worker has read yet).

    load   = max(P, X * W)         run slots the observed flow keeps busy (Little's law; P
                                   alone while runs last longer than a heartbeat interval)
    flow   = load / U              with headroom: a worker at utilisation U (0.8) still takes
                                   a burst without queueing it
    drain  = B * W / T             slots that start the backlog within the target lag T
                                   (30 s): B jobs at W seconds each, done in T seconds
           = min(B, C) when W is unknown (no run ended yet: no worker, or runs longer than a
                                   heartbeat interval): one more worker's worth, to measure
    slots  = flow + drain          never below P: in-flight work keeps its slots
                                   (a queue's keys' queued slots are in B; under a per-key
                                   limit L, K keys with queued slots run at most K * L at
                                   once, K * R * W under a per-key rate R, so their part of
                                   drain is at most that)

    wanted = ceil(sum of slots over the queues / C)

C is the run slots per worker: the mean concurrency bound of the live workers (an autoscaling
worker's MAX: it grows into the slots it is given), or `DEFAULT_CONCURRENCY` when none is
alive. So a namespace with no worker and a backlog asks for one worker, a steady flow asks for
load / U slots, and a backlog asks for more in proportion to how long it would take to start.
The backlog term is the start-lag term too: the newest of B ready jobs starts B / X' seconds
from now at completion rate X', and the drain slots make that at most T.

Why T is 30 s and not the 2 s start lag the requirements ask of a job: the fleet reacts in
tens of seconds (an autoscaler's polling, a pod's start, rates averaged over a heartbeat
interval), so a target shorter than that only adds workers after the backlog that called for
them is gone, then removes them. The 2 s is held inside the fleet: by the headroom U, and by
each worker's own concurrency (`--autoscale`, scheduler/worker/autoscale.py, which reacts in seconds).

Limits: the count assumes every worker reads every queue; a deployment that reads a few
queues should scale on those queues' `sched_queue_slots_wanted` divided by its own concurrency.
More slots help only handlers that wait (I/O); CPU-bound handlers need more processes, which
is what the worker count gives. Rates are averages over a heartbeat interval (lease / 3), so
the count moves at that pace; an autoscaler adds its own smoothing (KEDA's cooldown, the HPA's
stabilization window).
"""

from __future__ import annotations

import math

import msgspec

from scheduler.core.bounds import SCALING_BOUNDS
from scheduler.core.errors import ConfigError
from scheduler.core.finite import check_bounds, check_finite
from scheduler.observe.records import QueueStatus, Scaling, WorkerStatus

DEFAULT_CONCURRENCY = 100  # a worker's run slots unless told otherwise (WorkerConfig's default)


class ScalingTarget(msgspec.Struct, kw_only=True, frozen=True):
    target_lag_s: float = 30.0
    """The backlog should start within this long (its drain window)."""
    utilisation: float = 0.8
    """Busy slots over all slots that the fleet is sized for: the rest is headroom."""
    slots_per_worker: int | None = None
    """Run slots per worker; None: the live workers' mean bound (DEFAULT_CONCURRENCY if none)."""

    def __post_init__(self) -> None:
        check_finite(self)
        if not self.target_lag_s > 0:
            raise ConfigError(f"the target lag must be > 0 s, not {self.target_lag_s}")
        if not 0 < self.utilisation <= 1:
            raise ConfigError(f"the target utilisation must be in (0, 1], not "
                              f"{self.utilisation}")
        if self.slots_per_worker is not None and self.slots_per_worker < 1:
            raise ConfigError(f"slots per worker must be >= 1, not {self.slots_per_worker}")
        check_bounds(self, SCALING_BOUNDS)


def queue_slots(q: QueueStatus, target: ScalingTarget, per_worker: int) -> float:
    """The run slots one queue calls for (the module docstring's rule)."""
    rate = q.succeeded_per_s + q.failed_per_s
    load = max(float(q.inflight), rate * q.mean_run_s)
    drain = _drain(q.depth, q.mean_run_s, target, per_worker)
    # More slots than the keys may fill start none of their slots sooner: K keys run at
    # most K * L at once, and K * R * W under a rate R (Little's law).
    caps: list[float] = []
    if q.per_key_concurrency is not None:
        caps.append(q.keys_waiting * q.per_key_concurrency)
    if q.per_key_rate is not None and q.mean_run_s > 0:
        caps.append(q.keys_waiting * q.per_key_rate * q.mean_run_s)
    if caps and q.keyed_waiting:
        keyed = _drain(q.keyed_waiting, q.mean_run_s, target, per_worker)
        drain -= max(0.0, keyed - min(caps))
    return max(float(q.inflight), load / target.utilisation + drain)


def _drain(backlog: int, mean_run_s: float, target: ScalingTarget, per_worker: int) -> float:
    if not backlog:
        return 0.0
    if mean_run_s > 0:
        return backlog * mean_run_s / target.target_lag_s
    return float(min(backlog, per_worker))


def plan(queues: list[QueueStatus], workers: list[WorkerStatus],
         target: ScalingTarget | None = None) -> Scaling:
    """The workers wanted for these queues, given the workers seen (only live ones count)."""
    target = target or ScalingTarget()
    alive = [w for w in workers if w.alive]
    per_worker = target.slots_per_worker or (
        round(sum(w.max_concurrency or w.concurrency for w in alive) / len(alive)) if alive
        else DEFAULT_CONCURRENCY) or 1
    by_queue = {q.queue: queue_slots(q, target, per_worker) for q in queues}
    slots = sum(by_queue.values())
    # Any flow at all wants a worker; 2.0000001 from float sums is still 2.
    wanted = math.ceil(round(slots / per_worker, 6))
    return Scaling(running=len(alive), wanted=wanted, change=wanted - len(alive),
                   slots_wanted=round(slots, 2), slots_per_worker=per_worker,
                   by_queue={q: round(n, 2) for q, n in by_queue.items()},
                   target_lag_s=target.target_lag_s,
                   target_utilisation=target.utilisation)


def _workers(n: int) -> str:
    return f"{n} worker{'' if n == 1 else 's'}"


def in_words(scaling: Scaling, queues: list[QueueStatus]) -> str:
    """What the rule says, for people (`sched status`): "idle, no work waiting" when no queue
    holds or runs anything (a trickle of recent runs still asks the rule for a worker), else
    "the load calls for 3 workers at 100 run slots each: add 1" (or "enough", or "2 more than it
    needs")."""
    if not any(q.depth or q.pending or q.inflight for q in queues):
        return "idle, no work waiting"
    if scaling.change > 0:
        verdict = f"add {scaling.change}"
    elif scaling.change < 0:
        verdict = f"{-scaling.change} more than it needs"
    else:
        verdict = "enough"
    return (f"the load calls for {_workers(scaling.wanted)} at {scaling.slots_per_worker} run "
            f"slots each: {verdict}")
