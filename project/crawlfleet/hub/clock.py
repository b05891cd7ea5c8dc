"""The hub's clock: Redis's ``TIME``, the one clock every worker, script and record agrees on.

Workers' clocks may disagree; lease deadlines, politeness slots, job records and the dashboard's
ages all use the Redis server's. ``NOW_MS`` is the Lua function ``now_ms()`` the scripts include
(the frontier's, the politeness budget's, the RabbitMQ backend's coordination); ``hub_ms`` is the
same reading from Python, ``time_ms`` the same for a ``TIME`` reply taken in a pipeline.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from crawlfleet.hub.lua import read_lua

#: ``local function now_ms()``: Redis's clock in milliseconds, inside a script.
NOW_MS = read_lua("crawlfleet.hub", "now_ms.lua")


def time_ms(reply: Sequence[Any]) -> float:
    """A ``TIME`` reply (seconds, microseconds) in milliseconds."""
    seconds, micros = reply
    return int(seconds) * 1000 + int(micros) / 1000


def hub_ms(client: Any) -> float:
    """Redis's clock (``TIME``) in milliseconds: the scripts' clock."""
    return time_ms(client.time())
