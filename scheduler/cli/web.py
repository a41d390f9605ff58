"""`sched web`: the operator's console (scheduler/web), served by uvicorn."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import click

from scheduler.cli.logs import log_options, setup_logging
from scheduler.cli.options import Finite, history_source, store_options
from scheduler.core.errors import ConfigError
from scheduler.core.masking import MASK, masked
from scheduler.core.models import MAX_SECONDS

log = logging.getLogger("scheduler.web")


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on; anything but loopback needs --token.")
@click.option("--port", type=click.IntRange(min=0, max=65535), default=8080, show_default=True)
@click.option("--token", envvar="SCHED_WEB_TOKEN", default=None,
              help="Every request must carry it (Authorization: Bearer, or sign in once) "
                   "(env SCHED_WEB_TOKEN).")
@click.option("--read-only", is_flag=True, help="Show everything, change nothing.")
@click.option("--behind-proxy", is_flag=True,
              help="Served through a reverse proxy: trust its X-Forwarded-Proto (https makes "
                   "the sign-in cookie Secure) and X-Forwarded-For (whose sign-ins are "
                   "limited).")
@click.option("--allow-host", "allow_hosts", multiple=True, metavar="NAME",
              help="Without a token, answer to this Host name too, not only loopback ones "
                   "(a proxy of yours that checks who comes in); repeatable.")
@click.option("--session-hours", type=click.IntRange(min=1, max=24 * 366), default=None,
              help="How long a sign-in lasts, the cookie's Max-Age (12 unless given).")
@click.option("--sample-interval", type=Finite(min=0.1, max=MAX_SECONDS), default=5.0,
              show_default=True, help="Seconds between the overview charts' samples.")
@store_options
@log_options
@click.pass_obj
def web(obj: dict[str, str], host: str, port: int, token: str | None, read_only: bool,
        behind_proxy: bool, allow_hosts: tuple[str, ...], session_hours: int | None,
        sample_interval: float, postgres_dsn: str | None, history_file: str, log_level: str,
        log_format: str) -> None:
    """Serve the web console: overview charts, queues, jobs, slots, schedules, workers, dead
    letters and history, with cancel / replay / purge / delete / trigger (POST, CSRF-checked).
    Without --token it binds only loopback and answers only to loopback Host names.
    """
    try:
        import uvicorn  # noqa: F401  (the web extra is installed)

        from scheduler.web import check_bind, create_app
    except ImportError as exc:
        raise ConfigError(f"the console needs the web extra ({exc.name} is missing): "
                          f"pip install 'redis-sched[web]'") from None
    from scheduler import AsyncClient

    check_bind(host, token)
    setup_logging(log_level, log_format)
    client = AsyncClient(obj["redis_url"], obj["namespace"],
                         history=history_source(postgres_dsn, history_file, read_only=True))
    app = create_app(client, token=token, read_only=read_only, sample_s=sample_interval,
                     behind_proxy=behind_proxy, allow_hosts=allow_hosts,
                     session_s=None if session_hours is None else session_hours * 3600)

    def started(bound: int) -> None:
        # Once bound (the port --port 0 got); the token is never shown, only that one is asked.
        where = f"[{host}]" if ":" in host else host
        log.info("sched web: the console of namespace %r at http://%s:%d/ (Redis %s; %s%s)",
                 obj["namespace"], where, bound, masked(obj["redis_url"]),
                 f"token {MASK}" if token else "no token", ", read-only" if read_only else "")

    server = console_server(app, host, port, started, lambda: log.info("sched web stopped"))
    try:
        server.run()
    except SystemExit as exc:  # uvicorn exits 1 when it cannot bind
        raise ConfigError(f"cannot serve on {host}:{port}; choose another --port") from exc


def console_server(app: Any, host: str, port: int,
                   on_started: Callable[[int], None] | None = None,
                   on_stopped: Callable[[], None] | None = None) -> Any:
    """The uvicorn server of a console (`sched web`, `sched dev`). The app reads a proxy's
    headers itself (--behind-proxy), never uvicorn's way: uvicorn trusts them from any local
    process by default. `on_started` is called with the port once it is bound, `on_stopped`
    once it has shut down (before uvicorn raises again the signal that stopped it: a SIGTERM
    then ends the process as SIGTERM does)."""
    import uvicorn

    class Server(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            if self.started and on_started is not None:
                on_started(self.servers[0].sockets[0].getsockname()[1])

        async def shutdown(self, sockets: Any = None) -> None:
            await super().shutdown(sockets)
            if on_stopped is not None:
                on_stopped()

    return Server(uvicorn.Config(app, host=host, port=port, log_level="warning",
                                 access_log=False, lifespan="on", proxy_headers=False))
