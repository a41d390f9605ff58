"""The most one worker may be given: run slots, process-pool children, worker processes. Past
these a value is a typo or an overflow, not a plan, and taking it would exhaust the machine
(`--processes 99999999999999999999999` forks until the kernel kills the supervisor): the
config Structs and the CLI refuse it in one line."""

from __future__ import annotations

MAX_WORKER_CONCURRENCY = 100_000  # runs in flight in one worker process (--concurrency)
MAX_PROCESS_POOL = 1024  # children of one worker's process pool (--process-pool)
MAX_PROCESSES = 1024  # worker processes under one supervisor (--processes)
