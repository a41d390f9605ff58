"""The invariant checker the fault suite judges its runs with: the package's
(scheduler.testing.invariants), which `sched verify` uses on a user's deployment too."""

from scheduler.testing.invariants import (
                                          EFFECT_KINDS,
                                          FAILURES,
                                          History,
                                          Observed,
                                          Report,
                                          history_violations,
                                          observe,
                                          read_history,
                                          violations,
)

__all__ = ["EFFECT_KINDS", "FAILURES", "History", "Observed", "Report", "history_violations",
           "observe", "read_history", "violations"]
