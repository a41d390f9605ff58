"""A claim takes at most a pipeline's share of the run slots, so that at any concurrency every
claim pipeline has a round trip in flight while the others' runs go (slots.py, Slots.share)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from helpers import run_until
from scheduler import Client, Context, Registry
from scheduler.worker.claims import Claims


def test_each_claim_takes_a_share_and_both_pipelines_claim_at_once(
        redis_url: str, ns: str, monkeypatch: pytest.MonkeyPatch) -> None:
    registry = Registry()
    done: list[str] = []

    @registry.task("t")
    async def t(ctx: Context, payload: Any) -> None:
        await asyncio.sleep(0.002)
        done.append(ctx.slot_id)

    sizes: list[int] = []
    in_flight = [0, 0]  # now, most at once
    real = Claims.claim

    async def spy(self: Any, entries: Any, *args: Any, **kw: Any) -> int:
        sizes.append(sum(len(v) for v in entries.values()))
        in_flight[0] += 1
        in_flight[1] = max(in_flight[1], in_flight[0])
        try:
            return await real(self, entries, *args, **kw)
        finally:
            in_flight[0] -= 1

    monkeypatch.setattr(Claims, "claim", spy)
    with Client(redis_url, ns) as client:
        client.submit_many([{"task": "t", "payload": i} for i in range(2000)])
        asyncio.run(run_until(redis_url, ns, registry, lambda: len(done) == 2000,
                              concurrency=100, pipelines=2))
    print(f"{len(sizes)} claims, largest {max(sizes)}, {in_flight[1]} in flight at most")
    assert max(sizes) <= 50
    assert in_flight[1] == 2
