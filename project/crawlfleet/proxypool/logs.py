"""Structured log lines (``key=value`` or JSON objects) on stderr for the proxy pool service.

Call ``event(logger, "fetch_cycle", added=3, ...)``: the event name and the fields become one
line, so a cycle's counts can be grepped or shipped to a log store without parsing prose.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

_RESERVED = ("ts", "level", "logger", "event", "traceback")


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


def _record_fields(record: logging.LogRecord) -> dict[str, Any]:
    fields = getattr(record, "fields", None)
    base: dict[str, Any] = {
        "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        + f".{int(record.msecs):03d}Z",
        "level": record.levelname.lower(),
        "logger": record.name,
    }
    if fields is None:  # a plain message from a library (uvicorn, httpx)
        base["event"] = "log"
        base["msg"] = record.getMessage()
    else:
        base["event"] = record.msg
        base.update({k: v for k, v in fields.items() if k not in _RESERVED})
    if record.exc_info:
        base["traceback"] = logging.Formatter().formatException(record.exc_info)
    return base


def _kv(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    if not text or any(c in text for c in ' "=\n\t'):
        return json.dumps(text)
    return text


class KeyValueFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return " ".join(f"{k}={_kv(v)}" for k, v in _record_fields(record).items())


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(_record_fields(record), default=str)


def setup(fmt: str, level: str) -> None:
    """Send every logger (ours, uvicorn's, httpx's) through one structured handler on stderr."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else KeyValueFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # httpx logs every request at INFO: one line per tested proxy would drown the cycle lines.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
