"""The HTTP side of metrics: `/metrics` (Prometheus text format) and `/healthz`, served from a
daemon thread so scrapes never wait on the event loop (and a busy loop never delays a scrape).

`sched exporter` serves a registry holding only the namespace gauges; `--metrics-port` on
`sched worker` / `sched scheduler` serves the process registry; `sched dev` serves both.
Each listens on loopback unless told otherwise (`--metrics-host`, the exporter's `--host`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line per scrape is noise; failures show in sched_exporter_up


# Loopback unless the operator says otherwise: what a scrape shows (queue names, workers'
# hosts, concurrency keys when asked for) is the operator's, and a Prometheus on another host
# or container is reached by passing its interface (or 0.0.0.0) on purpose.
METRICS_HOST = "127.0.0.1"


class MetricsServer:
    def __init__(self, registry: CollectorRegistry, *, host: str = METRICS_HOST, port: int = 0,
                 healthy: Callable[[], bool] = lambda: True) -> None:
        metrics = make_wsgi_app(registry)

        def app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
            if environ.get("PATH_INFO") == "/healthz":
                ok = healthy()
                start_response("200 OK" if ok else "503 Service Unavailable",
                               [("Content-Type", "text/plain")])
                return [b"ok\n" if ok else b"unhealthy\n"]
            return metrics(environ, start_response)  # type: ignore[no-any-return]

        self.server = make_server(host, port, app, ThreadingWSGIServer, handler_class=_Quiet)
        self.port: int = self.server.server_port
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True,
                                       name=f"metrics-{self.port}")

    def start(self) -> MetricsServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        """Idempotent."""
        if self.thread.is_alive():
            self.server.shutdown()
        self.server.server_close()
