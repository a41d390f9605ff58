"""Managing a job's series: end it (`delete_job`), see its next fire times (`next_fires`)
and run it once more now (`trigger`). Operations of the SDK like those of operations.py:
generators that yield requests, driven by Client and AsyncClient alike."""

from __future__ import annotations

import msgspec

from . import scripts
from .cronspec import CronSpec
from .errors import JobNotFound, ValidationError
from .operations import _ready, get_job
from .replies import Code, Deleted, triggered
from .sdk_core import Core, Op, Scripts

MAX_NEXT_FIRES = 1000


class JobDeleted(msgspec.Struct, frozen=True):
    """What `delete_job` did: `cancelled` slots that had not started, `running` slots left to
    finish; `before` when the job had been deleted already (nothing changed)."""

    job_id: str
    cancelled: int
    running: int
    before: bool = False


def delete_job(core: Core, job_id: str, reason: str = "deleted by operator") -> Op[JobDeleted]:
    """End a job's series: a recurring job creates no occurrence after this, every slot of
    it that has not started is cancelled, and a running one finishes. The definition stays
    (`get_job` shows `deleted_ms`). Deleting twice changes nothing the second time."""
    if not isinstance(reason, str) or not reason.strip() or len(reason) > 200:
        raise ValidationError("reason", "must be a line of text of at most 200 characters")
    yield from _ready(core)
    call = scripts.delete_job(core.prefix_of(job_id), core.clock.now_ms(), core.events_maxlen,
                              job_id, " ".join(reason.split()))
    done = Deleted.decode((yield Scripts([call]))[0])
    if done.code is Code.MISSING:
        raise JobNotFound(job_id)
    return JobDeleted(job_id, done.cancelled, done.running, before=done.code is Code.TERMINAL)


def next_fires(core: Core, job_id: str, n: int = 10) -> Op[list[int]]:
    """The next `n` fire times (Redis ms) of a job, from now: a recurring job's coming
    occurrences (within its start_at / end_at), a delayed or `at` job's one fire time while
    it is ahead; none for a job that was deleted or has run."""
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_NEXT_FIRES:
        raise ValidationError("n", f"{n!r} is not allowed; must be an integer from 1 to "
                                   f"{MAX_NEXT_FIRES}")
    job = yield from get_job(core, job_id)
    if job.next_fire_ms is None:
        return []
    if not job.cron:
        return [job.next_fire_ms]
    out: list[int] = []
    for fire in CronSpec(job.cron, job.tz or "UTC").after(job.next_fire_ms - 1):
        if (job.end_ms and fire > job.end_ms) or len(out) == n:
            break
        out.append(fire)
    return out


def trigger(core: Core, job_id: str) -> Op[str]:
    """Run a job once more now, beside its schedule: a new slot, dispatched at once; returns
    its id. Refused for a deleted job (ValidationError)."""
    yield from _ready(core)
    call = scripts.trigger(core.prefix_of(job_id), core.clock.now_ms(), core.events_maxlen,
                           job_id)
    code, slot = triggered((yield Scripts([call]))[0])
    if code is Code.MISSING:
        raise JobNotFound(job_id)
    if code is Code.TERMINAL:
        raise ValidationError("job_id", f"job {job_id!r} was deleted: it cannot be triggered")
    return slot
