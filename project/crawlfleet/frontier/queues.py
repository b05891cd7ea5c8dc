"""The shared request queues: FIFO and LIFO on Redis lists, priority on a sorted set.

A queue class is mostly Lua: the scheduler pastes ``LUA`` into its scripts, so pushing (after the
duplicate check), popping under a lease and putting leased entries back are each one atomic step.
The Lua functions see ``QK`` (the queue key) and ``SEQ`` (a counter key) as locals and define:

``q_push(payload, priority)``
    append one serialized request;
``q_pop(n) -> {lease_value, payload, ...}``
    remove up to ``n`` entries; ``lease_value`` is what ``q_requeue`` needs to put one back;
``q_requeue(lease_value)``
    put a leased entry back where it will be popped next;
``q_len() -> integer``.

``PriorityQueue`` scores an entry by ``-priority`` and prefixes its member with a fixed-width
sequence number, so higher priorities come first, equal priorities come out first-in-first-out,
and identical ``dont_filter`` requests stay separate entries (scrapy-redis collapses them).
"""

from __future__ import annotations

import redis


class RedisQueue:
    """Base class: the Redis type behind the queue and its Lua functions."""

    redis_type: str = ""
    LUA: str = ""

    def __init__(self, client: redis.Redis, key: str) -> None:
        self.client = client
        self.key = key

    def __len__(self) -> int:
        raise NotImplementedError

    def clear(self) -> None:
        self.client.delete(self.key)

    def type_error(self) -> str | None:
        """A one-line reason when the key already holds another Redis type, else None."""
        found = self.client.type(self.key)
        found = found.decode() if isinstance(found, bytes) else str(found)
        if found in ("none", self.redis_type):
            return None
        return (
            f"SCHEDULER_QUEUE_KEY {self.key!r} holds a Redis {found}, but "
            f"{type(self).__name__} needs a {self.redis_type} (another queue class or "
            f"another program uses this key)"
        )


class _ListQueue(RedisQueue):
    redis_type = "list"

    def __len__(self) -> int:
        return int(self.client.llen(self.key))


_LIST_COMMON = """
local function q_pop(n)
  local got = redis.call('LPOP', QK, n)
  local out = {}
  if got then
    for i = 1, #got do out[#out + 1] = got[i]; out[#out + 1] = got[i] end
  end
  return out
end
local function q_requeue(v) redis.call('LPUSH', QK, v) end
local function q_len() return redis.call('LLEN', QK) end
"""


class FifoQueue(_ListQueue):
    """First in, first out (breadth-first crawl order)."""

    LUA = "local function q_push(p, prio) redis.call('RPUSH', QK, p) end\n" + _LIST_COMMON


class LifoQueue(_ListQueue):
    """Last in, first out (depth-first crawl order)."""

    LUA = "local function q_push(p, prio) redis.call('LPUSH', QK, p) end\n" + _LIST_COMMON


class PriorityQueue(RedisQueue):
    """Higher ``Request.priority`` first; first in, first out among equal priorities."""

    redis_type = "zset"
    LUA = """
local function q_push(p, prio)
  local seq = redis.call('INCR', SEQ)
  redis.call('ZADD', QK, -tonumber(prio), string.format('%016x', seq) .. p)
end
local function q_pop(n)
  local got = redis.call('ZPOPMIN', QK, n)
  local out = {}
  for i = 1, #got, 2 do
    out[#out + 1] = got[i + 1] .. '|' .. got[i]
    out[#out + 1] = string.sub(got[i], 17)
  end
  return out
end
local function q_requeue(v)
  local bar = string.find(v, '|', 1, true)
  redis.call('ZADD', QK, tonumber(string.sub(v, 1, bar - 1)), string.sub(v, bar + 1))
end
local function q_len() return redis.call('ZCARD', QK) end
"""

    def __len__(self) -> int:
        return int(self.client.zcard(self.key))
