"""Recovers work whose worker vanished (nothing stays running forever).

`run_once()` reads each shard's `lanes` index, then runs `reclaim.lua` on every shard in one
pipelined round trip: expired leases (found through stream entries idle past the lease, in
the lanes the shard's index names, and for at_most_once slots through each shard's `leases`
zset) are re-dispatched, ended `lost` (at_most_once) or dead-lettered; pending entries that a
worker read but never claimed are dispatched again. A lane with a pending entry is always
indexed (lua/clean_lanes.lua keeps it), so a pass walks the lanes in use, not every queue
name the namespace ever saw. Like the promoter it is safe to run on several nodes at once.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import redis.asyncio

import scheduler.observe.metrics as metrics
import scheduler.redis.cluster as cluster
import scheduler.scripts.calls as scripts
from scheduler.core.keys import Keys
from scheduler.core.namespace import EVENTS_MAXLEN
from scheduler.redis.clock import Clock, resync
from scheduler.redis.service import Service
from scheduler.scripts.replies import Reclaimed

log = logging.getLogger("scheduler.node.reclaimer")
WORKER_FORGET_LEASES = 10


class Reclaimer(Service):
    what = "reclaim pass"
    log = log

    def __init__(self, client: redis.asyncio.Redis, keys: Keys, shards: Sequence[int],
                 clock: Clock, *, lease_ms: int = 30_000, batch: int = 500,
                 interval_s: float = 1.0, events_maxlen: int = EVENTS_MAXLEN) -> None:
        super().__init__()
        self.redis = client
        self.keys = keys
        self.shards = list(shards)
        self.clock = clock
        self.lease_ms = lease_ms
        self.batch = batch
        self.interval_s = interval_s
        self.events_maxlen = events_maxlen
        self.cursors: dict[tuple[int, str], str] = {}
        self.totals = dict.fromkeys(Reclaimed.COUNTS, 0)

    async def run_once(self) -> dict[str, int]:
        """One pass over every shard; returns what it did."""
        await resync(self.clock, self.redis)
        pipe = cluster.pipeline(self.redis)
        for s in self.shards:
            pipe.zrange(self.keys.lane_index(s), 0, -1)
        indexed: list[list[str]] = [sorted(lane.decode() for lane in found)
                                    for found in await pipe.execute()]
        now = self.clock.now_ms()
        calls = [scripts.reclaim(self.keys.prefix(s), now, self.events_maxlen, self.batch,
                                 self.lease_ms,
                                 [(lane, self.cursors.get((s, lane), "-")) for lane in streams])
                 for s, streams in zip(self.shards, indexed, strict=True)]
        replies = await scripts.run_async(self.redis, calls)
        # Workers that vanished without a clean stop stay in the registry; after many leases
        # of silence they are surely gone (their hash already expired).
        await self.redis.zremrangebyscore(self.keys.workers, "-inf",
                                          now - WORKER_FORGET_LEASES * self.lease_ms)
        done = dict.fromkeys(self.totals, 0)
        self.cursors = {}  # of the lanes indexed now: a lane that left the index is forgotten
        for shard, streams, raw in zip(self.shards, indexed, replies, strict=True):
            reply = Reclaimed.decode(raw)
            for name, count in reply.counts().items():
                done[name] += count
            for lane, cursor in zip(streams, reply.cursors, strict=True):
                self.cursors[(shard, lane)] = cursor
        for name, count in done.items():
            self.totals[name] += count
        expired = done["reclaimed"] + done["lost"] + done["dead"]
        if expired:
            metrics.LEASE_TIMEOUTS.inc(expired)
        if done["reclaimed"] + done["redispatched"]:
            metrics.RECLAIMS.inc(done["reclaimed"] + done["redispatched"])
        if any(done.values()):
            log.warning("reclaimed expired leases: %s", ", ".join(
                f"{count} {name}" for name, count in done.items() if count))
        return done

    def delay(self, done: dict[str, int]) -> float:
        return 0 if sum(done.values()) >= self.batch else self.interval_s
