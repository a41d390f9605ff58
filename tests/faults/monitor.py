"""The live half of the checker: while faults are injected, a thread samples the Redis under
test and records what no end state can show.

- lease: a slot `running` with its lease more than `grace_ms` over (nobody reclaimed it);
- orphan: a slot `queued` whose stream entry is gone, or `running` past its lease with no
  pending entry, for longer than `orphan_grace_ms` (the sweeper did not repair it).

Neither counts the time the truth's outages cover (no node could repair anything then).

Unreachable Redis (a restart fault) skips a sample; nothing else is tolerated.
"""

from __future__ import annotations

import threading
from typing import Any

import redis

from scheduler.core.keys import DEFAULT_PRIORITY, DISPATCH_GROUP, Keys
from scheduler.redis.clients import sync_redis

from .truth import Truth


class Monitor(threading.Thread):
    def __init__(self, url: str, ns: str, *, grace_ms: int, orphan_grace_ms: int,
                 interval_s: float = 0.5, truth: Truth | None = None) -> None:
        super().__init__(daemon=True)
        self.truth = truth or Truth()  # its outages are not counted against a grace
        self.redis = sync_redis(url, timeout_s=5)  # any URL the processes take (sentinel)
        self.keys = Keys(ns)
        self.grace_ms = grace_ms
        self.orphan_grace_ms = orphan_grace_ms
        self.interval_s = interval_s
        self.violations: list[str] = []
        self.samples = 0
        self._seen: set[str] = set()
        self._orphan_since: dict[str, int] = {}
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.wait(self.interval_s):
            try:
                self.sample()
            except redis.exceptions.RedisError:
                continue  # Redis restarting: nothing to read this time

    def stop(self) -> list[str]:
        self._halt.set()
        self.join(10)
        self.redis.close()
        return self.violations

    def sample(self) -> None:
        sec, usec = self.redis.time()
        now = int(sec) * 1000 + int(usec) // 1000
        shards = int(self.redis.hget(self.keys.meta, "shards") or 0)
        for shard in range(shards):
            self._shard(shard, now)
        self.samples += 1

    def _shard(self, shard: int, now: int) -> None:
        r, keys = self.redis, self.keys
        slot_keys = list(r.scan_iter(match=f"{keys.prefix(shard)}slot:*", count=5000))
        pipe = r.pipeline(transaction=False)
        for k in slot_keys:
            pipe.hmget(k, "status", "lease_until", "msg", "queue", "priority")
        cut = len(keys.slot(shard, ""))
        rows = [(k.decode()[cut:], *row) for k, row in zip(slot_keys, pipe.execute(),
                                                           strict=True)]
        suspects: list[tuple[str, str, Any, str]] = []
        for slot, status, lease, msg, queue, priority in rows:
            if (status == b"running" and lease and now > int(lease) + self.grace_ms
                    and now - int(lease) - self.truth.outage_ms(int(lease), now) > self.grace_ms):
                self._once(slot, f"lease: {slot}: running {now - int(lease)} ms past its "
                                 f"lease (seen live; outages: "
                                 f"{self.truth.outages_within(int(lease), now)})")
            if status in (b"queued", b"running") and msg and queue:
                # its entry is in its priority's lane
                suspects.append((slot, status.decode(), msg, keys.queue(
                    shard, queue.decode(), int(priority) if priority else DEFAULT_PRIORITY)))
        pipe = r.pipeline(transaction=False)
        for _, _, msg, stream in suspects:
            pipe.xrange(stream, msg, msg)
            pipe.xpending_range(stream, DISPATCH_GROUP, min=msg, max=msg, count=1)
        replies = pipe.execute(raise_on_error=False)
        current = set()
        for i, (slot, status, _, _) in enumerate(suspects):
            entry, pending = replies[2 * i], replies[2 * i + 1]
            if isinstance(entry, Exception) or isinstance(pending, Exception):
                continue  # no group yet: nobody has read the stream
            orphan = not entry if status == "queued" else not pending
            if orphan:
                current.add(slot)
                since = self._orphan_since.setdefault(slot, now)
                if now - since - self.truth.outage_ms(since, now) > self.orphan_grace_ms:
                    self._once(slot, f"orphan: {slot}: {status} without its "
                                     f"{'stream' if status == 'queued' else 'pending'} entry "
                                     f"for {now - since} ms (seen live)")
        for slot in list(self._orphan_since):
            if slot not in current:
                del self._orphan_since[slot]

    def _once(self, slot: str, message: str) -> None:
        key = message.split(":", 1)[0] + slot
        if key not in self._seen:
            self._seen.add(key)
            self.violations.append(message)
