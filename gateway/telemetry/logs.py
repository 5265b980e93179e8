"""Log output of `countersign serve` and `countersign worker`: plain lines or one JSON object per line.

Who calls it: `gateway.runtime.serve` once at start, with the settings' `log_format` (``[gateway] log_format``
or ``COUNTERSIGN_LOG_FORMAT``) and `access_log`. Every record gets its timestamp (UTC, ISO 8601),
level, logger and message, the current trace and span ids when a span is recording, and the key id
of the principal the request serves (`gateway.telemetry.log_context`); never a token, which no log call is
given. The access log (logger ``countersign.access``, written by `gateway.web.request_telemetry`) is off
unless asked for: it costs a line per request.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, Literal, TextIO

from gateway.telemetry.log_context import key_id
from gateway.telemetry.tracing import current_ids

__all__ = [
    "ACCESS_LOGGER",
    "LOG_FORMATS",
    "ContextFilter",
    "JsonFormatter",
    "LogFormat",
    "PlainFormatter",
    "configure_logging",
]

ACCESS_LOGGER = "countersign.access"
LOG_FORMATS = ("plain", "json")
LogFormat = Literal["plain", "json"]

# The attributes every LogRecord has; anything else was passed with `extra=` and is kept as a field.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}
_CONTEXT = ("trace_id", "span_id", "key_id")


class ContextFilter(logging.Filter):
    """Adds ``trace_id``, ``span_id`` and ``key_id`` to each record (empty when there are none)."""

    def filter(self, record: logging.LogRecord) -> bool:
        ids = current_ids()
        record.trace_id, record.span_id = ids if ids is not None else ("", "")
        if not getattr(record, "key_id", ""):  # the access log names the request's key itself
            record.key_id = key_id()
        return True


def _timestamp(record: logging.LogRecord) -> str:
    moment = datetime.fromtimestamp(record.created, tz=UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line: a message's own line breaks are escaped by JSON."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "timestamp": _timestamp(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in _CONTEXT:
            value = getattr(record, name, "")
            if value:
                entry[name] = value
        for name, value in vars(record).items():
            if name not in _STANDARD and name not in _CONTEXT and not name.startswith("_"):
                entry[name] = value if isinstance(value, int | float | bool | str) else str(value)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        # ASCII only: U+2028, U+0085 and their like split lines for some readers (str.splitlines among them).
        return json.dumps(entry, default=str)


class PlainFormatter(logging.Formatter):
    """``2026-12-01T11:00:00.123Z WARNING gateway.ops.health: message [key=… trace=…]``."""

    def format(self, record: logging.LogRecord) -> str:
        line = f"{_timestamp(record)} {record.levelname} {record.name}: {record.getMessage()}"
        context = [
            f"{label}={value}"
            for label, name in (("key", "key_id"), ("trace", "trace_id"))
            if (value := getattr(record, name, ""))
        ]
        if context:
            line += f" [{' '.join(context)}]"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def configure_logging(
    log_format: LogFormat = "plain",
    *,
    access_log: bool = False,
    level: int = logging.INFO,
    stream: TextIO | None = None,
) -> logging.Handler:
    """Send the gateway's records (and the libraries' warnings) to `stream` (stderr) in `log_format`.

    Replaces the handlers of the root logger, so a second call (tests) does not print twice.

    Raises:
        ValueError: a `log_format` other than ``plain`` or ``json``.
    """
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log_format must be one of {', '.join(LOG_FORMATS)}, not {log_format!r}")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else PlainFormatter())
    handler.addFilter(ContextFilter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    # Our own loggers speak at `level`; libraries only when something is wrong.
    for name in ("gateway", "countersign", "backends"):
        logging.getLogger(name).setLevel(level)
    logging.getLogger(ACCESS_LOGGER).setLevel(logging.INFO if access_log else logging.WARNING)
    return handler
