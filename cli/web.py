"""`sched web`: the operator's console (scheduler/web), served by uvicorn."""

from __future__ import annotations

import logging

import click

from scheduler.errors import ConfigError

from .logs import log_options, setup_logging
from .options import Finite, history_source, store_options

log = logging.getLogger("scheduler.web")


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on; anything but loopback needs --token.")
@click.option("--port", type=click.IntRange(min=0, max=65535), default=8080, show_default=True)
@click.option("--token", envvar="SCHED_WEB_TOKEN", default=None,
              help="Every request must carry it (Authorization: Bearer, or sign in once) "
                   "(env SCHED_WEB_TOKEN).")
@click.option("--read-only", is_flag=True, help="Show everything, change nothing.")
@click.option("--sample-interval", type=Finite(min=0.1), default=5.0,
              show_default=True, help="Seconds between the overview charts' samples.")
@store_options
@log_options
@click.pass_obj
def web(obj: dict[str, str], host: str, port: int, token: str | None, read_only: bool,
        sample_interval: float, postgres_dsn: str | None, history_file: str, log_level: str,
        log_format: str) -> None:
    """Serve the web console: overview charts, queues, jobs, slots, schedules, workers, dead
    letters and history, with cancel / replay / purge / delete / trigger (POST, CSRF-checked).
    """
    try:
        import uvicorn

        from scheduler.web import check_bind, create_app
    except ImportError as exc:
        raise ConfigError(f"the console needs the web extra ({exc.name} is missing): "
                          f"pip install 'redis-sched[web]'") from None
    from scheduler import AsyncClient

    check_bind(host, token)
    setup_logging(log_level, log_format)
    client = AsyncClient(obj["redis_url"], obj["namespace"],
                         history=history_source(postgres_dsn, history_file, read_only=True))
    app = create_app(client, token=token, read_only=read_only, sample_s=sample_interval)
    log.info("console for namespace %r on http://%s:%d/%s", obj["namespace"], host, port,
             " (read-only)" if read_only else "")
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False,
                            lifespan="on")
    server = uvicorn.Server(config)
    try:
        server.run()
    except SystemExit as exc:  # uvicorn exits 1 when it cannot bind
        raise ConfigError(f"cannot serve on {host}:{port}; choose another --port") from exc
