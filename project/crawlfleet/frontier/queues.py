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


# the queues that write at once: nothing to flush
_NO_FLUSH = "local function q_flush() end\n"

_LIST_COMMON = (
    _NO_FLUSH
    + """
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
)


class FifoQueue(_ListQueue):
    """First in, first out (breadth-first crawl order)."""

    LUA = "local function q_push(p, prio) redis.call('RPUSH', QK, p) end\n" + _LIST_COMMON


class LifoQueue(_ListQueue):
    """Last in, first out (depth-first crawl order)."""

    LUA = "local function q_push(p, prio) redis.call('LPUSH', QK, p) end\n" + _LIST_COMMON


class PriorityQueue(RedisQueue):
    """Higher ``Request.priority`` first; first in, first out among equal priorities."""

    redis_type = "zset"
    LUA = (
        _NO_FLUSH
        + """
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
    )

    def __len__(self) -> int:
        return int(self.client.zcard(self.key))


class KeyedPriorityQueue(RedisQueue):
    """One priority queue per politeness key, the keys served in turn (see the module docstring).

    The default queue when politeness is on and ``SCHEDULER_QUEUE_CLASS`` is not set.
    """

    redis_type = "hash"
    keyed = True
    LUA = """
local KQ_READY = QK .. ':ready'
local KQ_CHUNK = 2000  -- arguments per ZADD (unpack's limit is about 8000)
local function kq_of(site) return QK .. ':site:' .. site end
-- q_push records; q_flush numbers the batch in push order (FIFO among equal priorities) and
-- writes it: one ZADD per site, one HINCRBY, one ZADD NX of the sites (each scored by its first
-- entry's number, as single pushes would have).
local kq_batch = {}
local function kq_zadd(key, flag, args)
  for i = 1, #args, KQ_CHUNK do
    local last = math.min(i + KQ_CHUNK - 1, #args)
    if flag then redis.call('ZADD', key, flag, unpack(args, i, last))
    else redis.call('ZADD', key, unpack(args, i, last)) end
  end
end
local function q_push(p, prio, site)
  kq_batch[#kq_batch + 1] = {p, -tonumber(prio), site}
end
local function q_flush()
  local n = #kq_batch
  if n == 0 then return end
  local seq = redis.call('INCRBY', SEQ, n) - n
  local by_site, sites, ready = {}, {}, {}
  for i, e in ipairs(kq_batch) do
    local args = by_site[e[3]]
    if not args then
      args = {}
      by_site[e[3]] = args
      sites[#sites + 1] = e[3]
      ready[#ready + 1] = seq + i
      ready[#ready + 1] = e[3]
    end
    args[#args + 1] = e[2]
    args[#args + 1] = string.format('%016x', seq + i) .. e[1]
  end
  kq_batch = {}
  for _, site in ipairs(sites) do kq_zadd(kq_of(site), nil, by_site[site]) end
  redis.call('HINCRBY', QK, 'len', n)
  kq_zadd(KQ_READY, 'NX', ready)
end
local function q_pop(n, skip, nskip)
  local out = {}
  if n <= 0 then return out end
  local sites = {}
  for _, site in ipairs(redis.call('ZRANGE', KQ_READY, 0, n + (nskip or 0) - 1)) do
    if not (skip and skip[site]) and #sites < n then sites[#sites + 1] = site end
  end
  if #sites == 0 then return out end
  local now = redis.call('INCR', SEQ)
  -- served: site -> whether it may still hold entries (false once a pop got fewer than asked)
  local taken, served = 0, {}
  while taken < n and #sites > 0 do
    local left = {}
    for i, site in ipairs(sites) do
      if taken >= n then break end
      local want = math.ceil((n - taken) / (#sites - i + 1))
      local got = redis.call('ZPOPMIN', kq_of(site), want)
      for j = 1, #got, 2 do
        out[#out + 1] = got[j + 1] .. '|' .. #site .. '|' .. site .. got[j]
        out[#out + 1] = string.sub(got[j], 17)
      end
      taken = taken + #got / 2
      if served[site] == nil then served[site] = true end
      if #got / 2 == want then
        if taken < n then left[#left + 1] = site end
      else
        served[site] = false  -- fewer than asked for: the site is empty
      end
    end
    sites = left
  end
  for site, more in pairs(served) do
    if more and redis.call('EXISTS', kq_of(site)) == 1 then
      redis.call('ZADD', KQ_READY, 'XX', now, site)
    else
      redis.call('ZREM', KQ_READY, site)
    end
  end
  -- an empty queue leaves no key behind (as a list or a sorted set does)
  if redis.call('HINCRBY', QK, 'len', -taken) <= 0 then redis.call('DEL', QK) end
  return out
end
local function q_requeue(v)
  local bar = string.find(v, '|', 1, true)
  local bar2 = string.find(v, '|', bar + 1, true)
  local size = tonumber(string.sub(v, bar + 1, bar2 - 1))
  local site = string.sub(v, bar2 + 1, bar2 + size)
  local member = string.sub(v, bar2 + size + 1)
  if redis.call('ZADD', kq_of(site), tonumber(string.sub(v, 1, bar - 1)), member) == 1 then
    redis.call('HINCRBY', QK, 'len', 1)
  end
  redis.call('ZADD', KQ_READY, 'LT', 0, site)
end
local function q_len() return tonumber(redis.call('HGET', QK, 'len') or '0') end
"""

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
