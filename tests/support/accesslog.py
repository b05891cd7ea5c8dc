"""The demo site's access log (``--access-log --log-level info``) as data: one ``Hit`` a request.

uvicorn writes one ``logger=uvicorn.access`` line per response, stamped to the millisecond by the
service's ``kv`` log format, with the client's address as the site saw it (a forward proxy's
source address, when one is used). ``hits`` reads the lines from a byte offset on, so one site's
log serves several crawls; ``most_in_window`` is the largest number of hits in any window of
that many seconds (a sliding window: it is never below what a fixed-window limiter counts).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

# ts=2026-12-01T16:59:59.768Z level=info logger=uvicorn.access event=log
#   msg="127.0.0.2:39440 - \"GET /api/book/?limit=18 HTTP/1.1\" 403"
_LINE = re.compile(
    r'^ts=(?P<ts>\S+) \S+ logger=uvicorn\.access .*?msg="(?P<address>[^ ]+?):\d+ - '
    r'\\"(?P<method>[A-Z]+) (?P<path>\S+) HTTP/[0-9.]+\\" (?P<status>\d{3})'
)


@dataclass(frozen=True)
class Hit:
    """One request the site answered: when (epoch seconds), from where, what, and the status."""

    time: float
    address: str
    method: str
    path: str
    status: int


def hits(log: Path, offset: int = 0) -> list[Hit]:
    """The access-log lines of ``log`` from byte ``offset`` on, in the order they were written."""
    with log.open("rb") as f:
        f.seek(offset)
        text = f.read().decode(errors="replace")
    found = []
    for line in text.splitlines():
        match = _LINE.match(line)
        if match:
            stamp = datetime.strptime(match["ts"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
            found.append(
                Hit(
                    stamp.timestamp(),
                    match["address"],
                    match["method"],
                    match["path"],
                    int(match["status"]),
                )
            )
    return found


def most_in_window(times: list[float], seconds: float = 1.0) -> int:
    """The largest number of ``times`` in any half-open window ``[t, t + seconds)``."""
    ordered = sorted(times)
    best, end = 0, 0
    for start, first in enumerate(ordered):
        while end < len(ordered) and ordered[end] < first + seconds:
            end += 1
        best = max(best, end - start)
    return best
