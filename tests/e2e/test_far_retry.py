"""A handler passes on an upstream's absurd Retry-After (1e15 s): a real worker process
retries it in a year, the longest delay, and logs the cut; the slot and every page that
lists it read as usual. A slot hash holding a number no reader takes (as a script once stored
such a retry, "1e+17") is marked unreadable on each console page, none answers 500."""

from __future__ import annotations

import time

import pytest
import redis

from helpers import http_get, running, sched_process, serve_console
from scheduler import Client, SlotStatus
from scheduler.core.keys import shard_of
from scheduler.core.models import MAX_SECONDS

pytestmark = pytest.mark.slow


def _pages(queue: str, job_id: str, slot_id: str) -> list[str]:
    return ["/scheduled", "/retrying", f"/queues/{queue}", f"/queues/{queue}/scheduled",
            f"/queues/{queue}/retrying", f"/jobs/{job_id}", f"/slots/{slot_id}", "/jobs",
            f"/search?id={slot_id}"]


def test_a_handler_retry_after_1e15_s_waits_a_year_and_every_read_goes_on(
        r: redis.Redis, redis_url: str, ns: str, app_env: dict[str, str]) -> None:
    with Client(redis_url, ns) as client:
        job_id = client.submit("test.retry_after", {"after": 1e15}, queue="far")
        before = client.now_ms()
        worker = sched_process(redis_url, ns, app_env, "worker", "--app", "app_tasks:registry",
                               "--queues", "far", "--lease", "5")
        with running(worker):
            deadline = time.monotonic() + 30
            while (slot := client.slots(job_id)[0]).failures < 1:
                assert worker.poll() is None and time.monotonic() < deadline, "no retry"
                time.sleep(0.05)
            after = client.now_ms()
        _, err = worker.communicate()
        assert slot.status is SlotStatus.SCHEDULED and slot.unreadable is None
        assert before + MAX_SECONDS * 1000 <= slot.available_ms <= after + MAX_SECONDS * 1000
        assert b"Retry(after=1e+15) is past the longest delay, a year" in err
        assert [s.slot_id for s in client.scheduled("far", retrying=True).slots] == [slot.slot_id]

        spoiled = client.submit("test.retry_after", {"after": 1}, queue="far", delay=60)
        spoiled_slot = client.slots(spoiled)[0]
        r.hset(client.keys.slot(shard_of(spoiled, client.shards), spoiled_slot.slot_id),
               "available_ms", "1.0000017e+18")
        web, base = serve_console(redis_url, ns)
        with running(web):
            for job, slot_id in ((job_id, slot.slot_id), (spoiled, spoiled_slot.slot_id)):
                for page in _pages("far", job, slot_id):
                    status, body = http_get(base + page)
                    assert status == 200, (page, body[-2000:])
            for page in ("/scheduled", f"/slots/{spoiled_slot.slot_id}",
                         f"/jobs/{spoiled}"):
                assert "unreadable" in http_get(base + page)[1], page
