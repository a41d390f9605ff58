"""Every transition that ends a slot indexes it in its shard's `finished` set, which the
namespace's retention walks (lua/expire.lua): a slot that ended without an entry would stay
in Redis for good (until the sweeper's walk indexes it)."""

from __future__ import annotations

import re
from importlib import resources

import pytest
import redis

from helpers import W, make
from scheduler import Client, RetryPolicy, SlotStatus
from scheduler.core.states import TERMINAL
from scheduler.redis.clock import ManualClock
from scheduler.scripts import calls as scripts
from scheduler.scripts.source import NAMES

LUA = resources.files("scheduler.scripts").joinpath("lua")
_ENDS = re.compile(r"'status', '(" + "|".join(s.value for s in TERMINAL) + r")'")


@pytest.mark.parametrize("name", ["_lib", *NAMES])
def test_each_write_of_a_terminal_status_indexes_the_slot(name: str) -> None:
    """Textual, so a new transition cannot forget it: each line that writes a terminal status
    is followed, before the statement after it, by the index write."""
    lines = LUA.joinpath(f"{name}.lua").read_text().splitlines()
    for i, line in enumerate(lines):
        if "redis.call('HSET'" in line and _ENDS.search(line):
            near = "\n".join(lines[i:i + 4])
            assert "index_finished(" in near or "ended[#ended + 1]" in near, (
                f"{name}.lua:{i + 1} ends a slot without indexing it in `finished`")


def test_the_ends_a_caller_brings_about_are_indexed(r: redis.Redis, client: Client,
                                                     clock: ManualClock) -> None:
    cancelled = make(r, client, clock)
    client.cancel(cancelled.job_id)
    deleted = make(r, client, clock, delay=3600)
    client.delete_job(deleted.job_id)
    lost = make(r, client, clock, delivery="at_most_once")
    lost.claim(lost.read())
    now = clock.now_ms()
    lost.run(scripts.release(lost.prefix, now, 1000, W, [scripts.Released(lost.slot_id, 1, now)]))
    dead = make(r, client, clock, retry=RetryPolicy(max_attempts=1))
    dead.claim(dead.read())
    dead.run(scripts.fail(dead.prefix, now, 1000, W, [scripts.Failed(dead.slot_id, 1, "failed", "no", -1, 0,
                                                       now, now)]))
    for s, status in ((cancelled, SlotStatus.CANCELLED), (deleted, SlotStatus.CANCELLED),
                      (lost, SlotStatus.LOST), (dead, SlotStatus.DEAD)):
        assert s.slot().status is status
        assert r.zscore(s.keys.finished(s.shard), s.slot_id) == now, status
