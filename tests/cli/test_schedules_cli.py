"""`sched schedules explain`: one line per fire time within 100 columns, then the summary;
bad input is one line naming the problem, a non-zero exit, nothing written."""

from __future__ import annotations

import json
import time

import pytest
import redis

from conftest import ns_keys
from helpers import sched
from scheduler import Client
from scheduler.core import objective
from scheduler.core.keys import Keys, shard_of
from scheduler.redis.clock import ManualClock


@pytest.mark.parametrize(("args", "says"), [
    (("nope",), "no job 'nope'"),
    (("IMMEDIATE",), "is not a recurring job"),
    (("CRON", "--since", "soon"), "since: 'soon' is not a duration"),
    (("CRON", "--since", "0"), "since: '0' is not allowed"),
    (("CRON", "--since", "-5m"), "since: '-5m' is not allowed"),
    (("CRON", "--limit", "0"), "--limit"),
    (("bad id!",), "job_id"),
])
def test_bad_input_is_one_line(capsys: pytest.CaptureFixture[str], r: redis.Redis,
                               redis_url: str, ns: str, args: tuple[str, ...], says: str) -> None:
    with Client(redis_url, ns) as client:
        ids = {"IMMEDIATE": client.submit("t", delay=3600),
               "CRON": client.submit("t", cron="0 0 1 1 *")}
    before = ns_keys(r, ns)
    code, out, err = sched(capsys, redis_url, ns, "schedules", "explain",
                           *(ids.get(a, a) for a in args))
    lines = err.strip().splitlines()
    assert code != 0 and len(lines) == 1 and says in lines[0], err
    assert "Traceback" not in err and out == ""
    assert ns_keys(r, ns) == before


def test_explain_prints_a_line_per_fire_time_and_the_summary(
        capsys: pytest.CaptureFixture[str], redis_url: str, ns: str) -> None:
    with Client(redis_url, ns) as client:
        now = client.now_ms()
    # Submitted by a client whose clock is 3.5 s behind: three fire times have passed, and no
    # node made them, without waiting for them.
    with Client(redis_url, ns, clock=ManualClock(now - 3500)) as client:
        job_id = client.submit("t", cron="* * * * * *", on_time_within=0.5)
        first = client.get_job(job_id).fire_ms
    with Client(redis_url, ns) as client:
        while client.now_ms() < first + 2500:
            time.sleep(0.1)
    code, out, _ = sched(capsys, redis_url, ns, "schedules", "explain", job_id, "--since", "5s")
    lines = out.splitlines()
    assert code == 0 and lines[0].startswith(f"{job_id}: cron '* * * * * *'")
    fires = [line for line in lines if line.startswith("20")]
    assert len(fires) >= 3 and all(len(line) <= 100 for line in lines)
    assert "pending" in fires[0] and "no_scheduler" in fires[0]
    assert any("on time (within 0.5s)" in line for line in lines)
    code, out, _ = sched(capsys, redis_url, ns, "schedules", "explain", job_id, "--json")
    page = json.loads(out)
    assert code == 0 and page["summary"]["on_time_within_ms"] == 500
    assert {f["state"] for f in page["fires"]} == {"pending"}


def test_explain_prints_the_schedule_against_its_objective(
        capsys: pytest.CaptureFixture[str], r: redis.Redis, redis_url: str, ns: str) -> None:
    with Client(redis_url, ns) as client:
        job_id = client.submit("t", cron="0 0 1 1 *")
        now = client.now_ms()
        code, out, _ = sched(capsys, redis_url, ns, "schedules", "explain", job_id)
        assert code == 0 and "objective:" not in out  # no node counted it yet
        width = objective.bucket_ms(3_600_000)
        shard = shard_of(job_id, client.shards)
        r.hset(Keys(ns).ontime(shard, job_id), mapping={
            objective.field(now - 60_000, "on", width): 96,
            objective.field(now - 60_000, "late", width): 3,
            objective.field(now - 60_000, "catchup", width): 1,
            objective.field(now - 7_200_000, "late", width): 50,  # out of the window
            objective.WINDOW: 3_600_000, objective.TARGET: "0.99"})
        r.zadd(Keys(ns).behind(shard), {job_id: now - 30_000})
    code, out, _ = sched(capsys, redis_url, ns, "schedules", "explain", job_id)
    lines = out.splitlines()
    at = [i for i, x in enumerate(lines) if x.startswith("objective:")]
    assert code == 0 and len(at) == 1 and all(len(x) <= 100 for x in lines)
    assert lines[at[0]].startswith("objective: 96.0% on time over the last 3600s (target 99%): "
                                   "behind since 20")
    assert lines[at[0] + 1] == "  of 100 decided: on time 96, late 3, catchup 1"
    code, out, _ = sched(capsys, redis_url, ns, "schedules", "explain", job_id, "--json")
    assert json.loads(out)["objective"]["on_time_share"] == 0.96
