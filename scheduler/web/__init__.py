"""The operator's console (`sched web`; the optional `web` extra): `create_app(client)` is an
ASGI app to serve with uvicorn or mount in a service of your own."""

from scheduler.web.app import create_app
from scheduler.web.guard import check_bind

__all__ = ["check_bind", "create_app"]
