"""A Redis-native distributed job scheduler."""

from scheduler.core.catalog import TaskInfo
from scheduler.core.errors import (
    Cancel,
    DurabilityError,
    RedisFailure,
    RedisRefused,
    RedisUnavailable,
    ResultExpired,
    ResultTimeout,
    Retry,
    RunFailed,
    SchedulerError,
    SubmitError,
    UnknownTaskWarning,
    ValidationError,
)
from scheduler.core.ledger import Fire, FirePage, FiresSummary, FireState, Objective, Reason
from scheduler.core.limits import QueueLimit
from scheduler.core.models import Attempt, Job, Progress, RetryPolicy, Slot
from scheduler.core.namespace import RetentionSettings
from scheduler.core.states import Delivery, Durability, Outcome, SlotStatus
from scheduler.sdk.client import AsyncClient, Client, JobSpec
from scheduler.worker.handles import TaskHandle
from scheduler.worker.registry import Context, Registry, SyncContext

__all__ = [
    "AsyncClient", "Attempt", "Cancel", "Client", "Context", "Delivery", "Durability", "Fire",
    "FirePage", "FireState", "FiresSummary", "Objective", "Reason",
    "DurabilityError", "Job", "JobSpec", "Outcome", "Progress", "QueueLimit", "RedisFailure",
    "RedisRefused", "RedisUnavailable", "Registry", "ResultExpired", "ResultTimeout",
    "RetentionSettings", "Retry", "RetryPolicy",
    "RunFailed", "SchedulerError", "Slot", "SlotStatus", "SubmitError", "SyncContext",
    "TaskHandle", "TaskInfo", "UnknownTaskWarning", "ValidationError",
]
__version__ = "0.1.0"
