"""An app whose worker processes die a few seconds after they import it, each time, as a
worker the OOM killer ends again and again would: `sched worker --processes N` must restart
it with a growing backoff and then stop with an error, not restart it for ever."""

from __future__ import annotations

import os
import threading
import time

from scheduler import Registry

registry = Registry()
LIFE_S = float(os.environ.get("SCHED_TEST_LIFE_S", "3"))


def _die() -> None:
    time.sleep(LIFE_S)
    os._exit(3)


threading.Thread(target=_die, daemon=True).start()
