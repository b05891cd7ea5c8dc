"""Structured logs for the account pool: one JSON object (or one key=value line) per event.

Fields passed with ``extra=`` (site, user, event, counts) become fields of the line. Nothing in
this package passes a password or a token to a logger.
"""

from __future__ import annotations

import json
import logging
import sys
import time
import traceback

# Attributes every LogRecord has (and uvicorn's ANSI copy of its message); the rest came from
# ``extra=``.
_STANDARD = set(vars(logging.makeLogRecord({}))) | {
    "message",
    "asctime",
    "taskName",
    "color_message",
}


def _fields(record: logging.LogRecord) -> dict[str, object]:
    fields: dict[str, object] = {
        "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        + f".{int(record.msecs):03d}Z",
        "level": record.levelname.lower(),
        "logger": record.name,
        "msg": record.getMessage(),
    }
    for key, value in vars(record).items():
        if key not in _STANDARD:
            fields[key] = value
    if record.exc_info and record.exc_info[0] is not None:
        fields["error"] = f"{record.exc_info[0].__name__}: {record.exc_info[1]}"
        fields["traceback"] = "".join(traceback.format_exception(*record.exc_info)).rstrip()
    return fields


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(_fields(record), default=str)


class KeyValueFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return " ".join(f"{k}={json.dumps(v, default=str)}" for k, v in _fields(record).items())


def setup_logging(level: str, fmt: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else KeyValueFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # httpx logs every request at INFO; the pool logs one line per cycle instead.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("httpcore").setLevel(logging.WARNING)
