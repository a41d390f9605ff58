"""Finds slots that nothing will move again and sets them going (nothing stays stuck without
escalation).

Every other loop finds its work through an index: the promoter through `due`, workers
through the dispatch streams, the reclaimer through the pending lists and `leases`. A slot
that falls out of its index (a stream entry deleted or trimmed, a pending entry acked by hand,
a consumer group recreated, a `due` entry removed) would wait forever, and nothing would say
so. The sweeper walks the slot hashes themselves, with SCAN, and hands each batch to
`sweep.lua`, which decides per slot, atomically and fenced, what is stranded and repairs it
(lua/sweep.lua lists the cases). Repairs are counted (`sched_orphans_recovered_total`,
`orphans` in each shard's stats) and `sched status` reports the slots still waiting for
their lease to run out before they can be repaired.

One node sweeps the whole namespace: the owner of shard 0 (a walk of the keyspace costs the
same whatever shards it is for, so more than one walker would only multiply the cost; the
script is correct whoever runs it). The walk is paced at `keys_per_s` so a large keyspace
costs Redis a bounded share (SCAN visits every key of the database, not only ours); a new
walk starts `interval_s` after the last one started. So an orphan is repaired within about
`interval_s` plus the walk's length (keys / `keys_per_s`), and, when it was running, its
lease.

A key costs Redis its SCAN step and a sweep.lua read, which for a finished slot is its
status alone, and this process a little. Ids are gathered per shard into calls of `batch`
ids: a SCAN page spreads over every shard, and a script call per shard per page costs more
per key. At the default pace the walk takes a small share of a core of Redis and of the node's.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, defaultdict
from typing import Any

import redis.asyncio

import scheduler.observe.metrics as metrics
import scheduler.redis.cluster as cluster
import scheduler.scripts.calls as scripts
from scheduler.core.keys import Keys
from scheduler.core.namespace import EVENTS_MAXLEN
from scheduler.redis.clock import Clock, resync
from scheduler.redis.service import Service
from scheduler.scripts.replies import Swept

log = logging.getLogger("scheduler.node.sweeper")


class Sweeper(Service):
    what = "orphan sweep"
    log = log

    def __init__(self, client: redis.asyncio.Redis, keys: Keys, clock: Clock, *,
                 interval_s: float = 10.0, keys_per_s: int = 5_000, count: int = 500,
                 batch: int = 500, events_maxlen: int = EVENTS_MAXLEN) -> None:
        super().__init__()
        self.redis = client
        self.keys = keys
        self.clock = clock
        self.interval_s = interval_s
        self.keys_per_s = keys_per_s
        self.count = count
        self.batch = batch
        self.found: defaultdict[int, list[bytes]] = defaultdict(list)  # shard -> ids to sweep
        self.events_maxlen = events_maxlen
        self.active = False  # the node sets it while it owns shard 0
        self.cursor = 0  # of the walk: 0 when it is over
        self._node_cursor = 0  # of the SCAN of the node being walked
        self._nodes: list[Any] = [client]  # nodes still to walk (each primary of a cluster)
        self.started: float | None = None  # monotonic start of the walk in progress
        self.last_start = -1e18
        self.waiting: Counter[int] = Counter()  # shard -> waiting orphans seen in this walk
        self.shards_seen: set[int] = set()
        self._had_waiting: set[int] = set()
        self.totals: Counter[str] = Counter()
        self.sweeps = 0

    async def run_once(self) -> bool:
        """One SCAN step and the sweep of what it found; True while a walk is in progress."""
        if not self.active:
            return False
        if self.started is None:
            if time.monotonic() - self.last_start < self.interval_s:
                return False
            self.started = self.last_start = time.monotonic()
            self.waiting.clear()
            self.shards_seen.clear()
            self._nodes = ([c for _, c in cluster.primaries(self.redis)]
                           if cluster.is_cluster(self.redis) else [self.redis])
        await resync(self.clock, self.redis)
        cursor, keys = await self._scan()
        for key in keys:  # bytes: no process decodes replies
            parsed = self.keys.parse_slot_key(key if isinstance(key, bytes) else key.encode())
            if parsed is not None:
                self.found[parsed[0]].append(parsed[1])
        self.cursor = int(cursor)
        full = {shard: ids for shard, ids in self.found.items()
                if len(ids) >= self.batch or self.cursor == 0}
        if full:
            await self._sweep(full)
            for shard in full:
                del self.found[shard]
        if self.cursor == 0:
            await self._finish()
            return False
        return True

    async def _scan(self) -> tuple[int, list[Any]]:
        """One SCAN step of the walk, which goes through each primary of a cluster in turn
        (SCAN sees one node's keys); the cursor returned is 0 only at the end of the last."""
        cursor, keys = await self._nodes[0].scan(self._node_cursor,
                                                 match=self.keys.slot_pattern(),
                                                 count=self.count, _type="HASH")
        self._node_cursor = int(cursor)
        if self._node_cursor == 0 and len(self._nodes) > 1:
            self._nodes.pop(0)
            return 1, keys
        return self._node_cursor, keys

    async def _sweep(self, by_shard: dict[int, list[bytes]]) -> None:
        now = self.clock.now_ms()
        shards = list(by_shard)
        calls = [scripts.sweep(self.keys.prefix(s), now, self.events_maxlen, by_shard[s])
                 for s in shards]
        for shard, reply in zip(shards, await scripts.run_async(self.redis, calls),
                                strict=True):
            result = Swept.decode(reply)
            self.shards_seen.add(shard)
            self.waiting[shard] += result.waiting
            for action, n in result.repaired().items():
                self.totals[action] += n
                metrics.ORPHANS_RECOVERED.labels(action).inc(n)
            if result.repaired():
                log.warning("shard %d: recovered orphaned slot(s): %s (see the 'orphaned' "
                            "events)", shard, ", ".join(f"{n} {a}" for a, n in
                                                         result.repaired().items()))

    async def _finish(self) -> None:
        """A walk ended: record per shard how many orphans wait for their lease."""
        pipe = cluster.pipeline(self.redis)
        for shard in self.shards_seen | self._had_waiting:
            pipe.hset(self.keys.stats(shard), "orphans_waiting", self.waiting[shard])
        await pipe.execute()
        self._had_waiting = {s for s, n in self.waiting.items() if n}
        self.sweeps += 1
        self.started = None

    def delay(self, walking: Any) -> float:
        if walking:
            return self.count / self.keys_per_s
        if not self.active:
            return 1.0
        return max(0.05, self.interval_s - (time.monotonic() - self.last_start))
