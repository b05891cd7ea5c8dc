"""The frontier's Lua scripts: every scheduler operation is one atomic Redis round trip.

Scripts are assembled from parts kept as ``.lua`` files in ``crawlfleet/frontier/lua/`` (one per
operation, plus the shared ones): a prelude (key names, clock, stats, leases, reaping),
the queue class's ``LUA`` (``q_push``/``q_pop``/``q_requeue``/``q_len``) and the dupefilter's
``LUA_CHECK_AND_ADD`` (``check_and_add(key, arg)``). Redis ≥ 6.2 is required (``LPOP`` with a
count, ``ZPOPMIN``), and ``TIME`` inside scripts (effects replication, the default since 5.0):
lease deadlines use the Redis server's clock, so workers' clocks may disagree.

Every script receives ``KEYS = {queue, seq, start_urls}`` and
``ARGV = {prefix, worker, lease_ms, start_urls_is_set, ...}``. Every other key is derived from
the prefix (``<spider>``) in one part, ``keys.lua``; key layout: docs/reference/redis-keys.md.
Reaping touches other workers' lease keys, so all of a crawl's keys must live in one slot: on a
Redis Cluster the prefix is the hash tag ``{<spider>}`` (``SpiderKeys.tagged``), so every script
runs on the one node serving it.
"""

from __future__ import annotations

from crawlfleet.hub.clock import NOW_MS
from crawlfleet.hub.lua import read_lua


def lua(name: str) -> str:
    """A Lua part of the frontier (``crawlfleet/frontier/lua/NAME``), as text."""
    return read_lua("crawlfleet.frontier", name)


# The key names (P, W and every key derived from them): the start of both backends' preludes.
KEY_NAMES = lua("keys.lua")
PRELUDE = "\n".join((KEY_NAMES, lua("prelude.lua")))

LEASES = lua("leases.lua")

ENQUEUE = lua("enqueue.lua")

FEED = lua("feed.lua")

SYNC = lua("sync.lua")

CLAIM = lua("claim.lua")

REQUEUE_FAILED = lua("requeue_failed.lua")


def build(queue_lua: str, dupefilter_lua: str, body: str) -> str:
    """One script: prelude, clock, queue functions, lease functions, dupefilter function, body."""
    return "\n".join((PRELUDE, NOW_MS, queue_lua, LEASES, dupefilter_lua, body))
