"""The history store: one small interface (interface.py), two backends (postgres.py for
production, sqlite.py as the embedded default), and the rows the snapshotter writes
(rows.py). The backends import rows.py and nothing above it, so there is no cycle; callers
import from here."""

from scheduler.history.store.interface import (
    DEFAULT_SQLITE_PATH,
    HistoryStore,
    is_postgres,
    open_store,
)
from scheduler.history.store.rows import (
    DAY_MS,
    SCHEMA_VERSION,
    AttemptRow,
    Batch,
    FireRow,
    JobRow,
    Ledger,
    RecoveryJob,
    SlotRow,
    event_slot_row,
    is_terminal,
    job_row,
    slot_rows,
    text_hash,
)

__all__ = ["DAY_MS", "DEFAULT_SQLITE_PATH", "SCHEMA_VERSION", "AttemptRow", "Batch", "FireRow",
           "HistoryStore", "JobRow", "Ledger", "RecoveryJob", "SlotRow", "event_slot_row", "is_postgres",
           "is_terminal", "job_row", "open_store", "slot_rows", "text_hash"]
