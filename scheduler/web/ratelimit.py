"""Failed sign-ins per client address, limited: at most `SIGN_IN_LIMIT` in any
`SIGN_IN_WINDOW_S`, then every sign-in from that address is refused (429, Retry-After) until
the oldest failure leaves the window.

The table is bounded: at most `max_addresses` addresses, the least recently failing dropped
first, each holding at most `limit` times. An IPv6 client counts by its /64, the block one
host usually holds, so that it cannot step through its own addresses.
"""

from __future__ import annotations

import ipaddress
import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable

SIGN_IN_LIMIT = 5
SIGN_IN_WINDOW_S = 60.0
MAX_ADDRESSES = 10_000


class SignInLimiter:
    def __init__(self, limit: int = SIGN_IN_LIMIT, window_s: float = SIGN_IN_WINDOW_S,
                 max_addresses: int = MAX_ADDRESSES,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.window_s = window_s
        self.max_addresses = max_addresses
        self.clock = clock
        self.failures: OrderedDict[str, deque[float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self.failures)

    def retry_after(self, address: str | None) -> int:
        """Whole seconds until `address` may try again; 0 when it may now."""
        times = self.failures.get(_key(address))
        if times is None or len(times) < self.limit:
            return 0
        wait = times[0] + self.window_s - self.clock()
        return max(0, math.ceil(wait))

    def failed(self, address: str | None) -> None:
        key = _key(address)
        times = self.failures.pop(key, None)
        if times is None:
            times = deque(maxlen=self.limit)
        now = self.clock()
        while times and times[0] + self.window_s <= now:
            times.popleft()
        times.append(now)
        self.failures[key] = times  # now the most recent
        while len(self.failures) > self.max_addresses:
            self.failures.popitem(last=False)

    def succeeded(self, address: str | None) -> None:
        self.failures.pop(_key(address), None)


def _key(address: str | None) -> str:
    try:
        ip = ipaddress.ip_address(address or "")
    except ValueError:
        return address or ""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)
