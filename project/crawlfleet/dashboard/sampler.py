"""Queue depth over time: the dashboard's sampler appends a cluster sample per spider and interval.

Samples ``"<ms> <queued> <leased> <acked> <items>"`` (Redis server time) go to
``<spider>:ops:queue``, capped to an hour. The append is one Lua call that skips the sample when
the newest one is younger than 80 % of the interval, so several dashboards on one hub (or a
restart) never double the series.
"""

from __future__ import annotations

import math
from typing import Any

import redis

from crawlfleet.extensions.workerstats import HISTORY
from crawlfleet.hub.keys import SpiderKeys
from crawlfleet.hub.lua import read_lua

# KEYS[1] series. ARGV: min gap (ms), cap, values ("q l a i").
_APPEND = read_lua("crawlfleet.dashboard", "append.lua")


class QueueSampler:
    """Appends a queue sample for each spider; called by the dashboard every interval."""

    def __init__(self, client: redis.Redis, interval: float) -> None:
        self.client = client
        self.interval = interval
        self.cap = math.ceil(HISTORY / interval) + 1
        self.script = client.register_script(_APPEND)

    def sample(self, view: dict[str, Any]) -> bool:
        """Record one spider's current numbers (a ``spider_snapshot``); False when skipped."""
        values = " ".join(
            str(int(view[name] or 0)) for name in ("queued", "leased", "acked", "items")
        )
        key = SpiderKeys.for_client(view["spider"], self.client).ops_queue
        added = self.script(keys=[key], args=[int(self.interval * 800), self.cap, values])
        return bool(int(added))
