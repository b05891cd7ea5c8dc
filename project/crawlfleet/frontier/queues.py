"""The shared request queues: FIFO and LIFO on Redis lists, priority on a sorted set, and
priority per politeness key (one sorted set per site, served in turn).

A queue class is mostly Lua: the scheduler pastes ``LUA`` into its scripts, so pushing (after the
duplicate check), popping under a lease and putting leased entries back are each one atomic step.
The Lua functions see ``QK`` (the queue key) and ``SEQ`` (a counter key) as locals and define:

``q_push(payload, priority, site)``
    append one serialized request (``site``: its politeness key, see :meth:`RedisQueue.site`);
``q_pop(n, skip, nskip) -> {lease_value, payload, ...}``
    remove up to ``n`` entries; ``lease_value`` is what ``q_requeue`` needs to put one back;
    ``skip`` (a Lua set of ``nskip`` sites) names sites the worker cannot use now;
``q_requeue(lease_value)``
    put a leased entry back where it will be popped next;
``q_len() -> integer``;
``q_flush()``
    write what ``q_push`` recorded (every script that pushes calls it once, before it returns
    or reads the queue; a queue that writes at once has an empty one). The keyed queue batches
    its pushes there: one ``INCRBY`` of ``SEQ``, one ``ZADD`` per site, one ``HINCRBY`` of the
    length and one ``ZADD NX`` of the ready sites per script call, instead of four commands a
    request.

``PriorityQueue`` scores an entry by ``-priority`` and prefixes its member with a fixed-width
sequence number, so higher priorities come first, equal priorities come out first-in-first-out,
and identical ``dont_filter`` requests stay separate entries (scrapy-redis collapses them).

``KeyedPriorityQueue`` (the default when politeness is on) is the Mercator/Heritrix frontier: one
such priority set per politeness key, so a worker whose buffered sites must wait takes requests of
other sites instead of waiting behind a slow site's backlog. Its keys all derive from the queue
key ``QK`` (the crawl's hash tag stays in front, so all live in the crawl's Redis Cluster slot):

``QK`` (hash)
    ``len``: the entries queued (``q_len`` in O(1); gone, as the other keys are, once the queue
    is empty);
``QK:ready`` (sorted set)
    every site with entries queued, scored by the value of ``SEQ`` when it was last served or
    came into the queue (0: requeued entries wait there), so a pop serves the least recently
    served sites first;
``QK:site:<site>`` (sorted set)
    that site's entries, as ``PriorityQueue`` keeps them.

A pop of ``n`` takes up to ``n`` sites (skipping the ``skip`` ones) and about ``n / sites``
entries from each (priority order within a site), so a worker's buffer holds several sites for
the pacer to choose from. Its lease value is ``<score>|<len(site)>|<site><member>``: any bytes
may be a site.
"""

from __future__ import annotations

import redis

from crawlfleet.hub.lua import read_lua
from crawlfleet.politeness.budget import site_key


class RedisQueue:
    """Base class: the Redis type behind the queue and its Lua functions.

    ``site_kind`` is the crawl's ``POLITENESS_KEY`` (host, domain or ip): a keyed queue files
    each request under its URL's site of that kind.
    """

    redis_type: str = ""
    LUA: str = ""
    #: whether ``q_push`` files entries by site (the scheduler then computes each one's site)
    keyed = False

    def __init__(self, client: redis.Redis, key: str, site_kind: str = "host") -> None:
        self.client = client
        self.key = key
        self.site_kind = site_kind

    def site(self, url: str) -> str:
        """The site ``q_push`` files a request to ``url`` under ('' when the queue is not keyed)."""
        return site_key(url, self.site_kind) if self.keyed else ""

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
            f"another program uses this key){self._hint(found)}"
        )

    def _hint(self, found: str) -> str:
        """What to do when the key holds another queue class's data (appended to the error)."""
        return ""


class _ListQueue(RedisQueue):
    redis_type = "list"

    def __len__(self) -> int:
        return int(self.client.llen(self.key))


# The list queues' q_flush, q_pop, q_requeue and q_len (each class adds its one-line q_push).
_LIST_COMMON = read_lua("crawlfleet.frontier", "queue_list.lua")


class FifoQueue(_ListQueue):
    """First in, first out (breadth-first crawl order)."""

    LUA = "local function q_push(p, prio) redis.call('RPUSH', QK, p) end\n" + _LIST_COMMON


class LifoQueue(_ListQueue):
    """Last in, first out (depth-first crawl order)."""

    LUA = "local function q_push(p, prio) redis.call('LPUSH', QK, p) end\n" + _LIST_COMMON


class PriorityQueue(RedisQueue):
    """Higher ``Request.priority`` first; first in, first out among equal priorities."""

    redis_type = "zset"
    LUA = read_lua("crawlfleet.frontier", "queue_priority.lua")

    def __len__(self) -> int:
        return int(self.client.zcard(self.key))


class KeyedPriorityQueue(RedisQueue):
    """One priority queue per politeness key, the keys served in turn (see the module docstring).

    The default queue when politeness is on and ``SCHEDULER_QUEUE_CLASS`` is not set.
    """

    redis_type = "hash"
    keyed = True
    LUA = read_lua("crawlfleet.frontier", "queue_keyed.lua")

    @property
    def ready(self) -> str:
        """The sorted set of sites with entries queued (scored by when last served or queued)."""
        return f"{self.key}:ready"

    def site_queue(self, site: bytes) -> bytes:
        """The sorted set holding ``site``'s entries (a site is any bytes)."""
        return f"{self.key}:site:".encode() + site

    def __len__(self) -> int:
        return int(self.client.hget(self.key, "len") or 0)

    def sites(self) -> int:
        """How many sites have entries queued."""
        return int(self.client.zcard(self.ready))

    def clear(self) -> None:
        while True:
            sites: list[bytes] = list(self.client.zrange(self.ready, 0, CLEAR_BATCH - 1))  # type: ignore[arg-type]
            if not sites:
                break
            self.client.delete(*(self.site_queue(site) for site in sites))
            self.client.zrem(self.ready, *sites)
        self.client.delete(self.key, self.ready)

    def _hint(self, found: str) -> str:
        if found == PriorityQueue.redis_type:
            return (
                "; a crawl queued by PriorityQueue (the default before politeness queued by "
                "site): finish it with SCHEDULER_QUEUE_CLASS = "
                "'crawlfleet.frontier.queues.PriorityQueue', or start over with "
                "`crawlfleet purge SPIDER`"
            )
        return ""


# how many sites ``KeyedPriorityQueue.clear`` deletes per round trip
CLEAR_BATCH = 500
