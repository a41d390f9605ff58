"""A Redis-native distributed job scheduler."""

from .client import AsyncClient, Client, JobSpec
from .errors import (
    Cancel,
    DurabilityError,
    RedisFailure,
    RedisRefused,
    RedisUnavailable,
    ResultTimeout,
    Retry,
    RunFailed,
    SchedulerError,
    SubmitError,
    ValidationError,
)
from .limits import QueueLimit
from .models import Attempt, Job, RetryPolicy, Slot
from .registry import Context, Registry
from .states import Delivery, Durability, Outcome, SlotStatus

__all__ = [
    "AsyncClient", "Attempt", "Cancel", "Client", "Context", "Delivery", "Durability",
    "DurabilityError", "Job", "JobSpec",
    "Outcome", "QueueLimit", "RedisFailure", "RedisRefused", "RedisUnavailable", "Registry", "ResultTimeout",
    "Retry", "RunFailed",
    "RetryPolicy", "SchedulerError", "Slot", "SlotStatus", "SubmitError", "ValidationError",
]
__version__ = "0.1.0"
