"""Logging for the long-running commands: `--log-format text` for a terminal, `json` for a
log pipeline (one object per line). The library only logs state changes worth a person's
attention (start, stop, lost leases, refused commits, Redis trouble), never one line per
successful job at info level."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import click
import msgspec

from scheduler.core.masking import masked

# Fields the library and the handler context put on records (LoggerAdapter extras).
_EXTRAS = ("slot_id", "task", "attempt", "worker_id", "shard", "queue")
# The URL and DSN the process was given (main.py): masked in every line, as the patterns
# alone would miss a piece of a password a library printed on its own.
_SOURCES: list[str] = []


def mask_also(sources: tuple[str, ...]) -> None:
    _SOURCES[:] = sources


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(
                timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname.lower(), "logger": record.name,
            "message": masked(record.getMessage(), *_SOURCES)}
        for name in _EXTRAS:
            if name in record.__dict__:
                out[name] = record.__dict__[name]
        if record.exc_info:
            out["exception"] = masked(self.formatException(record.exc_info), *_SOURCES)
        return msgspec.json.encode(out).decode()


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        return masked(super().format(record), *_SOURCES)


def setup_logging(level: str, fmt: str = "text") -> None:
    """Every line masked (scheduler/core/masking.py): a library's error may quote a URL or DSN."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(getattr(logging, level.upper()))


def log_options(fn: Any) -> Any:
    """`--log-level` and `--log-format` for every long-running command."""
    fn = click.option("--log-format", type=click.Choice(["text", "json"]), default="text",
                      envvar="SCHED_LOG_FORMAT",
                      help="text for people, json (one object per line) for log pipelines "
                           "(env SCHED_LOG_FORMAT).")(fn)
    fn = click.option("--log-level", type=click.Choice(
        ["debug", "info", "warning", "error"], case_sensitive=False), default="info")(fn)
    return fn
