"""Structured log lines on stderr for every hub service: ``key=value`` pairs or JSON objects.

One line per event. ``event(logger, "fetch_cycle", added=3)`` names the event and its fields;
a record logged the usual way (``log.info("...", extra={"event": "start", "site": s})``)
becomes ``event`` (``log`` when it has none), ``msg`` and its ``extra`` fields. A line's own
keys (``ts``, ``level``, ``logger``, ``event``, ``traceback``) cannot be overwritten by a
field. An exception adds ``error`` (its type and message, unless a field is named so) and
``traceback``.

Formats: ``json``, and ``kv`` (also accepted as ``text``, the account pool's older name):
values without blanks, quotes or ``=`` are written bare, the rest as JSON strings.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

FORMATS = ("kv", "text", "json")
_RESERVED = ("ts", "level", "logger", "event", "traceback")
# Attributes every LogRecord has (and uvicorn's ANSI copy of its message); the rest came from
# ``extra=``.
_STANDARD = set(vars(logging.makeLogRecord({}))) | {
    "message",
    "asctime",
    "taskName",
    "color_message",
    "fields",
}


def event(
    logger: logging.Logger,
    name: str,
    level: int = logging.INFO,
    /,
    exc_info: BaseException | None = None,
    **fields: Any,
) -> None:
    """Log ``name`` with ``fields``; ``exc_info`` adds the traceback as one escaped field."""
    logger.log(level, name, exc_info=exc_info, extra={"fields": fields})


def record_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The fields of one line, in order: time, level, logger, event, message, the rest."""
    base: dict[str, Any] = {
        "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        + f".{int(record.msecs):03d}Z",
        "level": record.levelname.lower(),
        "logger": record.name,
    }
    fields = getattr(record, "fields", None)
    if fields is not None:  # ``event()``
        base["event"] = record.msg
    else:
        extras = {k: v for k, v in vars(record).items() if k not in _STANDARD}
        base["event"] = extras.pop("event", "log")
        base["msg"] = record.getMessage()
        fields = extras
    base.update({k: v for k, v in fields.items() if k not in _RESERVED})
    if record.exc_info and record.exc_info[0] is not None:
        base.setdefault("error", f"{record.exc_info[0].__name__}: {record.exc_info[1]}")
        base["traceback"] = logging.Formatter().formatException(record.exc_info)
    return base


def _kv(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    if not text or any(c in text for c in ' "=\n\t'):
        return json.dumps(text)
    return text


class KeyValueFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return " ".join(f"{k}={_kv(v)}" for k, v in record_fields(record).items())


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(record_fields(record), default=str)


def setup(fmt: str, level: str) -> None:
    """Send every logger (ours, uvicorn's, httpx's) through one structured handler on stderr."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else KeyValueFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # httpx logs every request at INFO: one line per tested proxy or login would drown the
    # cycle lines.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("httpcore").setLevel(logging.WARNING)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
