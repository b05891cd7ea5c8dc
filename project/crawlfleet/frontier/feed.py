"""Start URLs into the Redis frontier: the part of the Redis scheduler that feeds them.

While a crawl runs, ``<spider>:start_urls`` (``LPUSH`` by ``crawlfleet seed`` or any scrapy-redis
style producer) is moved into the queue ``REDIS_START_URLS_BATCH_SIZE`` entries at a time:
decoded as a worker will (:mod:`crawlfleet.frontier.startfeed`), de-duplicated and pushed in one
atomic round trip (``lua/feed.lua``), an entry that cannot become a request dead-lettered. An entry
of another shard than the home shard (``SCHEDULER_SHARDS``) is enqueued into its shard first and
then removed: two nodes on a Redis Cluster, so not one step (the bound is in docs/design.md).
:class:`crawlfleet.frontier.scheduler.Scheduler` is built on :class:`StartUrlFeed`.
"""

from __future__ import annotations

import logging
from typing import Any

import redis
from scrapy import Request

from crawlfleet.frontier.base import FrontierScheduler
from crawlfleet.frontier.leases import dead_entry
from crawlfleet.frontier.queues import RedisQueue
from crawlfleet.frontier.shards import Shard, shard_of
from crawlfleet.frontier.startfeed import StartEntryError, request_from_entry
from crawlfleet.politeness.budget import site_key

# the scheduler's logger: what the feed says is the scheduler's, as before this module
logger = logging.getLogger("crawlfleet.frontier.scheduler")


class StartUrlFeed(FrontierScheduler):
    """How the Redis scheduler turns start-URL entries and requests into its scripts' items, and
    feeds the start URLs; the names below are the scheduler's (set in its ``__init__``)."""

    queue: RedisQueue
    shards: list[Shard]
    home: Shard
    # enqueue items (with their requests and shards) Redis has not taken yet
    _pending: list[tuple[list[Any], Request, int]]
    _keys: list[str]  # the home shard's script KEYS and first ARGV
    _args: list[str]
    _feed_script: Any

    def _flush_pending(self, now: bool = False) -> list[int] | None:
        """Send every pending enqueue (the scheduler's own)."""
        raise NotImplementedError

    def _count(self, results: list[int]) -> None:
        """Note what an enqueue queued (the scheduler's own)."""
        raise NotImplementedError

    def _shard_of(self, url: str) -> int:
        """The shard of a request to ``url``: its politeness key's (SCHEDULER_SHARDS)."""
        if len(self.shards) == 1:
            return 0
        return shard_of(site_key(url, self.config.site_kind), len(self.shards))

    def _item(self, request: Request, check: tuple[str, bytes]) -> list[Any]:
        """ENQUEUE script arguments: dupefilter key and argument, payload, priority, site."""
        payload, dead = self._encode(request)
        if dead:
            return ["!dead", dead, b"", "0", ""]
        return [check[0], check[1], payload, str(request.priority), self.queue.site(request.url)]

    def _feed(self) -> None:
        """Move one batch from the start_urls key into the queue (dedup'ed, atomically)."""
        assert self.spider is not None
        key, size = self.config.start_urls_key, self.config.start_urls_batch_size
        raws: list[bytes]
        try:
            if self.config.start_urls_as_set:
                raws = list(self.client.srandmember(key, size))  # type: ignore[arg-type]
            else:
                raws = list(self.client.lrange(key, 0, size - 1))  # type: ignore[arg-type]
        except redis.RedisError as exc:
            self._redis_error("start_urls", exc)
            return
        assert self.codec is not None
        args: list[Any] = [*self._args]
        refused: set[int] = set()  # entries dead-lettered here (counted once Redis took them)
        # entries of another shard than the home shard: pushed there first, then removed
        moved: list[tuple[bytes, list[Any], Request, int]] = []
        for raw in raws:
            try:
                request = request_from_entry(bytes(raw), self.spider, self.codec.policy)
                shard = self.shards[self._shard_of(request.url)]
                check = ("", b"") if request.dont_filter else shard.df.script_item(request)
                item = self._item(request, check)
                if shard is not self.home:
                    moved.append((bytes(raw), item, request, shard.index))
                    continue
            except Exception as exc:  # StartEntryError, or whatever an odd request raises
                reason = str(exc) if isinstance(exc, StartEntryError) else repr(exc)[:200]
                logger.warning(
                    "Start URL entry moved to the dead-letter list: %s",
                    reason,
                    extra={"spider": self.spider},
                )
                refused.add((len(args) - len(self._args)) // 6)  # its place in the results
                item = [
                    "!dead",
                    dead_entry(bytes(raw), reason, self.worker, "start_urls"),
                    b"",
                    "0",
                    "",
                ]
            args.extend([raw, *item])
        if moved:
            self._move_start_urls(moved)
        if len(args) == len(self._args):
            return
        try:
            results = self._feed_script(keys=self._keys, args=args)
        except redis.RedisError as exc:
            self._redis_error("start_urls", exc)
            return
        counted = [int(r) for r in results]
        dead_here = sum(1 for i in refused if counted[i] == 2)
        if dead_here:
            self.stats.inc_value("scheduler/deadletter", dead_here)
        self._count([r for r in counted if r >= 0])
        fed = counted.count(1)
        if fed:
            self.home.status.queued += fed
            self._count_enqueued(fed)

    def _move_start_urls(self, moved: list[tuple[bytes, list[Any], Request, int]]) -> None:
        """Start-URL entries of shards other than the home shard: enqueued into their shard
        (de-duplicated there), then removed from the start-URLs key. A crash in between leaves
        the entry to be fed again, and its fingerprint filters it then (a ``dont_filter`` entry
        may be crawled twice)."""
        self._pending.extend((item, request, shard) for _, item, request, shard in moved)
        if self._flush_pending(now=True) is None:
            return
        key = self.config.start_urls_key
        try:
            pipe = self.client.pipeline(transaction=False)
            for raw, *_ in moved:
                if self.config.start_urls_as_set:
                    pipe.srem(key, raw)
                else:
                    pipe.lrem(key, 1, raw)  # type: ignore[arg-type]
            pipe.execute()
        except redis.RedisError as exc:
            self._redis_error("start_urls", exc)
