"""The handlers benchmark workers run (`--app bench.app:registry`)."""

from __future__ import annotations

from typing import Any

from scheduler import Context, Registry

registry = Registry()


@registry.task("bench.noop")
async def noop(ctx: Context, payload: Any) -> None:
    return None
