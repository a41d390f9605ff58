"""A worker that moves its own concurrency between MIN and MAX (`sched worker --autoscale
MIN:MAX`, `WorkerConfig(autoscale=AutoscaleConfig(...))` in the SDK) from the start lag of its
own claims and how busy its run slots are.

Every `interval_s` the `Autoscaler` takes one observation, at no cost to the hot path: the
mean start lag (claim time minus fire time) of the claims since the last one, read off the
`sched_start_lag_seconds` histograms the claim already fills (their count and sum), and the
busy slots now (runs in flight plus claims under way, and whether entries this worker read
wait here for a slot). The `Controller` turns observations into a concurrency:

* raise, by half (at least 1), after `raise_after` observations in a row in which every slot
  was busy and the claims started more than `target_lag_ms` late: work waits for this worker
  and it has no slot for it. Observations with no claim (every slot busy with long runs) do
  not break the row. Raising multiplicatively reaches MAX in a few steps (1 -> 50 in nine),
  which is what a backlog needs;
* lower, by a quarter (at least 1), after `lower_after` observations in a row in which at
  most half the slots were busy: the spare slots only let this worker claim work another
  worker could have taken. Lowering is slower than raising (10 observations against 2, a
  quarter against a half) so a lull does not throw away the slots a burst needs;
* otherwise hold: busy but on time, or between half and all slots busy, is the dead band
  that keeps it from flapping; any observation outside a row's condition resets that row.

Lowering never stops a run: the claim loops read the concurrency before each claim
(`Slots.free()`, scheduler/worker/slots.py), so fewer slots take effect as runs end. The
worker's heartbeat reports the current concurrency (`sched status`, `sched workers`,
`sched_worker_concurrency`) and MAX (what the workers-wanted rule counts a worker as,
scheduler/observe/capacity.py), and each change is one log line. Limits: more slots help
handlers that wait (I/O), not CPU-bound ones, which need more processes (the fleet count of
scheduler/observe/capacity.py); the lag histograms are the process's,
so two workers in one process on the same queue see each other's claims.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Protocol

import msgspec

from scheduler.core.bounds import AUTOSCALE_BOUNDS
from scheduler.core.errors import ConfigError
from scheduler.core.finite import check_bounds, check_finite
from scheduler.observe.metrics import RunMetrics
from scheduler.redis.service import Service

log = logging.getLogger("scheduler.worker.worker")


class AutoscaleConfig(msgspec.Struct, kw_only=True, frozen=True):
    min_concurrency: int
    max_concurrency: int
    target_lag_ms: int = 1000
    """Claims that start later than this while every slot is busy ask for more slots."""
    interval_s: float = 1.0  # between observations
    raise_after: int = 2  # lagging, saturated observations in a row before raising
    lower_after: int = 10  # half-idle observations in a row before lowering

    def __post_init__(self) -> None:
        check_finite(self)
        check_bounds(self, AUTOSCALE_BOUNDS)
        if not 1 <= self.min_concurrency <= self.max_concurrency:
            raise ConfigError(f"autoscale bounds must be 1 <= MIN <= MAX, not "
                              f"{self.min_concurrency}:{self.max_concurrency}")
        if self.target_lag_ms < 0 or self.interval_s <= 0:
            raise ConfigError("the autoscale target lag must be >= 0 and its interval > 0 s")
        if self.raise_after < 1 or self.lower_after < 1:
            raise ConfigError("autoscale raise_after and lower_after must be >= 1")

    @classmethod
    def parse(cls, text: str, **options: Any) -> AutoscaleConfig:
        """`MIN:MAX`, e.g. `1:50`; ConfigError naming the problem otherwise."""
        low, sep, high = text.strip().partition(":")
        if not sep or not low.strip().isdigit() or not high.strip().isdigit():
            raise ConfigError(f"{text!r} is not MIN:MAX (two whole numbers, e.g. 1:50)")
        return cls(min_concurrency=int(low), max_concurrency=int(high), **options)


class Controller:
    """The rule of the module docstring, on observations given to `observe()`: no clock, no
    I/O (what the unit tests drive)."""

    RAISE = 0.5  # of the current concurrency
    LOWER = 0.25
    IDLE = 0.5  # at most this share of the slots busy counts as idle

    def __init__(self, config: AutoscaleConfig) -> None:
        self.config = config
        self.concurrency = config.min_concurrency
        self.lagging = 0  # lagging, saturated observations in a row
        self.idle = 0  # half-idle observations in a row
        self.why = ""  # what the last change was based on (for its log line)

    def observe(self, lag_ms: float | None, busy: int, waiting: bool = False) -> int:
        """One observation: the mean start lag of the claims since the last (None: there was
        none), the busy slots, and whether entries this worker read wait for a slot. Returns
        the concurrency to use from now on."""
        c, cfg = self.concurrency, self.config
        if busy >= c or waiting:  # saturated: more work than slots
            if lag_ms is None:
                return c  # no claim to judge by: neither row breaks
            if lag_ms <= cfg.target_lag_ms:
                self.lagging = self.idle = 0  # keeping up: the dead band
                return c
            self.lagging, self.idle = self.lagging + 1, 0
            if self.lagging >= cfg.raise_after and c < cfg.max_concurrency:
                self.lagging = 0
                self.why = (f"claims started {lag_ms / 1000:.1f}s late on average with "
                            f"every slot busy")
                self.concurrency = min(cfg.max_concurrency, c + max(1, math.ceil(c * self.RAISE)))
        elif busy <= c * self.IDLE:
            self.idle, self.lagging = self.idle + 1, 0
            if self.idle >= cfg.lower_after and c > cfg.min_concurrency:
                self.idle = 0
                self.why = (f"at most half the slots were busy for {cfg.lower_after} "
                            f"observations ({busy} now)")
                self.concurrency = max(cfg.min_concurrency, c - max(1, int(c * self.LOWER)))
        else:
            self.lagging = self.idle = 0  # between half and all slots busy: the dead band
        return self.concurrency


class Scalable(Protocol):
    """What the autoscaler reads of a worker (scheduler/worker/worker.py) and the one call it
    makes."""

    @property
    def running(self) -> dict[str, Any]: ...
    @property
    def claiming(self) -> int: ...
    @property
    def reader(self) -> Any: ...  # its `backlog`: entries read and not claimed yet
    @property
    def run_metrics(self) -> dict[tuple[str, str], RunMetrics]: ...

    def set_concurrency(self, concurrency: int) -> None: ...


class Autoscaler(Service):
    """The worker's loop around a Controller: one observation every `interval_s`."""

    what = "autoscaling"
    log = log

    def __init__(self, worker: Scalable, config: AutoscaleConfig, **service: Any) -> None:
        super().__init__(**service)
        self.worker = worker
        self.controller = Controller(config)
        # Per histogram child: (claims, lag ms) at the last observation. The children are the
        # process's (another worker may have filled one before): a child seen for the first
        # time only sets its baseline.
        self._seen: dict[int, tuple[int, int]] = {}

    def lag_ms(self) -> float | None:
        """The mean start lag of the claims since the last call (None: no claim)."""
        children = {id(m.start_lag): m.start_lag for m in list(self.worker.run_metrics.values())}
        count = total = 0
        for key, child in children.items():
            now = (sum(child.counts), child.sum_ms)
            before = self._seen.get(key, now)
            self._seen[key] = now
            count, total = count + now[0] - before[0], total + now[1] - before[1]
        return total / count if count > 0 else None

    async def run_once(self) -> int:
        w, before = self.worker, self.controller.concurrency
        after = self.controller.observe(self.lag_ms(), len(w.running) + w.claiming,
                                        bool(w.reader.backlog))
        if after != before:
            log.info("autoscale: concurrency %d -> %d (%s)", before, after,
                     self.controller.why)
            w.set_concurrency(after)
        return after

    def delay(self, result: Any) -> float:
        return self.controller.config.interval_s

