"""The shared-queue scheduler: Scrapy's scheduler interface on a Redis frontier that loses nothing.

Every worker process of a crawl runs one :class:`Scheduler`. Requests are de-duplicated and pushed
in one atomic round trip; pops lease a small batch to this worker (``SCHEDULER_PREFETCH``) and
acknowledge the previous batch in the same round trip; a heartbeat keeps the leases alive and
returns dead workers' leases to the queue. A Redis failure keeps the work and retries it; a hub
that refuses writes at ``maxmemory`` pauses the worker, retried with back-off and logged once
per episode (``crawlfleet.hub.fullhub``). Settings and keys: docs/reference/.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

import redis
from scrapy import Request, Spider, signals
from scrapy.exceptions import DontCloseSpider

from crawlfleet.frontier import preflight, scripts
from crawlfleet.frontier.base import build_dupefilter
from crawlfleet.frontier.config import FrontierConfig, FrontierConfigError
from crawlfleet.frontier.dupefilter import RedisDupeFilter
from crawlfleet.frontier.feed import StartUrlFeed
from crawlfleet.frontier.leases import Lease, failed_entry
from crawlfleet.frontier.liveness import Liveness
from crawlfleet.frontier.queues import RedisQueue
from crawlfleet.frontier.serialization import RequestCodec
from crawlfleet.frontier.shards import ClusterStatus, Shard, record_shard_count, shard_of
from crawlfleet.hub.connect import redis_from_settings
from crawlfleet.politeness.pacer import pacer_for

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)


class Scheduler(StartUrlFeed):
    """``SCHEDULER = "crawlfleet.frontier.scheduler.Scheduler"``."""

    BACKEND = "redis"

    def __init__(
        self,
        crawler: Crawler,
        config: FrontierConfig,
        client: redis.Redis,
        queue: RedisQueue,
        dupefilter: RedisDupeFilter,
        *,
        shard_filters: tuple[RedisDupeFilter, ...] = (),
    ) -> None:
        """``shard_filters``: the dupefilters of shards 1, 2, … (SCHEDULER_SHARDS)."""
        super().__init__(crawler, config, client, dupefilter)
        self.queue = queue
        start_as_set = "1" if config.start_urls_as_set else "0"
        queue_keys = config.shard_queue_keys or (config.queue_key,)
        start_keys = config.shard_start_urls_keys or (config.start_urls_key,)
        self.shards: list[Shard] = []
        for index, (keys, df) in enumerate(
            zip(config.keys.of_shards(len(queue_keys)), (dupefilter, *shard_filters), strict=True)
        ):
            shard_queue = (
                queue if index == 0 else type(queue)(client, queue_keys[index], queue.site_kind)
            )
            args = [keys.prefix, *self._script_args()[1:], start_as_set]
            script_keys = [
                queue_keys[index],
                keys.seq,
                config.start_urls_key if index == 0 else start_keys[index],
            ]
            self.shards.append(
                Shard(index, keys, shard_queue, df, script_keys, args, ClusterStatus())
            )
        self.home = self.shards[0]
        self._keys, self._args = self.home.script_keys, self.home.args
        # the shard the next pop starts at (each pop starts one further: fair round robin); each
        # worker starts at its own, so that workers started together do not all ask shard 0 first
        self._next_shard = shard_of(self.worker, len(self.shards))
        lua_q, lua_df = type(queue).LUA, dupefilter.LUA_CHECK_AND_ADD
        self._enqueue = client.register_script(scripts.build(lua_q, lua_df, scripts.ENQUEUE))
        self._feed_script = client.register_script(scripts.build(lua_q, lua_df, scripts.FEED))
        self._sync_script = client.register_script(scripts.build(lua_q, lua_df, scripts.SYNC))
        self._claim = client.register_script(scripts.build(lua_q, lua_df, scripts.CLAIM))
        # enqueue items (with their requests and shards) Redis has not taken yet
        self._pending: list[tuple[list[Any], Request, int]] = []
        # cluster stats counted here and written with the next SYNC (in batches)
        self._cluster_stats: Counter[str] = Counter()
        self._flush_call: Any = None
        # Imported here, not at module level: importing it installs a reactor, and Scrapy
        # must have installed its own first.
        from twisted.internet import reactor

        self._reactor: Any = reactor
        self._status = ClusterStatus()
        self._enqueued_since_sync = False
        self._last_sync = 0.0
        # a keyed queue's look further that found no site but these (and when)
        self._no_other_site: tuple[set[str], float] = (set(), 0.0)
        # shards this worker just gave its unknown leases back to (and so left): the next round
        # trip there registers it again, which is no missed deadline
        self._rejoining: set[int] = set()
        # how long an idle worker waits before its next look: SCHEDULER_IDLE_POLL_INTERVAL,
        # doubled after every look that found nothing to do, up to SCHEDULER_IDLE_POLL_MAX
        self._idle_wait = config.idle_poll_interval
        self._info = json.dumps(
            {"host": socket.gethostname(), "pid": os.getpid(), "spider": config.spider}
        )
        # one liveness subscription per shard (each shard reaps its own workers)
        beat, live = config.heartbeat_interval, config.liveness
        self._liveness = [Liveness(client, s.keys, self.worker, beat, live) for s in self.shards]

    @classmethod
    def build(cls, crawler: Crawler, config: FrontierConfig) -> Scheduler:
        """Connect to Redis and check the queue key (errors are one-line FrontierConfigErrors)."""
        client = redis_from_settings(crawler.settings)
        if refused := preflight.problem(
            client, cls._written(crawler, config), config.masked_url, config.spider
        ):
            raise FrontierConfigError(refused)
        queue = config.queue_class(client, config.queue_key, config.site_kind)
        problem = queue.type_error()
        if problem:
            raise FrontierConfigError(problem)
        n = config.shards
        filters = [build_dupefilter(crawler, k, n) for k in range(n)] if n > 1 else []
        df = filters[0] if filters else build_dupefilter(crawler)
        record_shard_count(client, config.keys, n, config.queue_key, config.keys.seq, df.key)
        built = cls(crawler, config, client, queue, df, shard_filters=tuple(filters[1:]))
        built._check_replicas()  # SCHEDULER_WAIT_REPLICAS: said once at start
        return built

    @staticmethod
    def _written(crawler: Crawler, config: FrontierConfig) -> list[str]:
        """A key of each family the crawl writes: its own, its shards', its politeness
        budget's (which may live in another namespace)."""
        keys = [config.queue_key, config.dupefilter_key, config.start_urls_key, config.keys.seq]
        keys += [config.keys.workers, config.keys.stats, config.keys.items]
        keys += [*config.shard_queue_keys, *config.shard_start_urls_keys]
        pacer = pacer_for(crawler)
        if pacer is not None:
            keys += [pacer.budget.keys.politeness_index, pacer.budget.keys.politeness_history]
        return keys

    # -- Scrapy's scheduler interface ---------------------------------------------------------

    def open(self, spider: Spider) -> None:
        self._check_engine()
        self.spider = spider
        self.codec = RequestCodec(spider, self.config.serializer)
        if self.config.flush_on_start:
            self.flush()
        for shard in self.shards:
            shard.df.open()
        # Every shard registers this worker; the home shard last: it seeds only when the whole
        # crawl is empty (the home claim sees its own shard only).
        for shard in (*self.shards[1:], self.home):
            alive = self._liveness[shard.index]
            alive.subscribe()  # before registering: reapers may rely on it from then on
            args = [*shard.args, self._info, *alive.claim_args()]
            claimed, status = self._claim(keys=shard.script_keys, args=args)
            shard.status = ClusterStatus(status)
            if int(claimed) and shard is not self.home:
                self.client.delete(shard.keys.seeding)  # only the home shard's flag counts
        self._seeding = bool(int(claimed)) and not any(
            s.status.queued or s.status.leased_by_others for s in self.shards[1:]
        )
        if int(claimed) and not self._seeding:
            self.client.delete(self.keys.seeding)
        self._status = ClusterStatus.of_shards([s.status for s in self.shards])
        self._last_sync = time.monotonic()
        self.client.hset(
            self.keys.frontier,
            mapping={
                "queue_key": self.config.queue_key,
                "queue_class": f"{type(self.queue).__module__}.{type(self.queue).__name__}",
                "serializer": self.config.serializer,
                "dupefilter_class": f"{type(self.df).__module__}.{type(self.df).__name__}",
                "start_urls_key": self.config.start_urls_key,
                "start_urls_as_set": int(self.config.start_urls_as_set),
                # the site kind a keyed queue files requests under (crawlfleet requeue-failed)
                "politeness_key": self.config.site_kind,
                # where the status read model finds the crawl's politeness keys
                "politeness_namespace": (
                    self.pacer.config.namespace if self.pacer is not None else self.config.spider
                ),
                **self._shard_fields(),
            },
        )
        self.crawler.signals.connect(self._on_idle, signal=signals.spider_idle)
        self._start_loops(self._poke)
        logger.info(
            "Frontier worker %s joined %s at %s: %d queued, %s start requests",
            self.worker,
            self.config.spider,
            self.config.masked_url,
            self._status.queued,
            "running the" if self._seeding else "skipping the",
            extra={"spider": spider},
        )

    def close(self, reason: str) -> None:
        self._stop_loops()
        if self._flush_call is not None and self._flush_call.active():
            self._flush_call.cancel()
        self._collect_finished()
        # Whatever is still buffered or in flight goes back to the queue now, not after a timeout.
        self._sync("release", 0)
        self._crawl_closed(reason)
        for alive in self._liveness:
            alive.close()
        for shard in self.shards:
            shard.df.close(reason)
        if not self.config.persist and self.client.zcard(self.keys.workers) == 0:
            self.flush()

    def has_pending_requests(self) -> bool:
        return bool(self._buffer or self._pending) or self._status.busy(self.worker)

    def enqueue_request(self, request: Request) -> bool:
        admitted = self._admit(request)
        if admitted is None:
            return False
        stored, check = admitted
        item = self._item(stored, check)
        self._pending.append((item, request, self._shard_of(stored.url)))
        if self.config.enqueue_batch:
            # Flushed at the next reactor turn (or before any ack): many requests, one round trip.
            if self._flush_call is None or not self._flush_call.active():
                self._flush_call = self._reactor.callLater(0, self._flush_pending)
            return item[0] != "!dead"
        results = self._flush_pending()
        if results is None:
            return item[0] != "!dead"  # kept for retry; acknowledgements wait for it
        return results[-1] == 1

    def _flush_pending(self, now: bool = False) -> list[int] | None:
        """Send every pending enqueue in one round trip; None (and keep them) if Redis fails.

        While Redis refuses writes at maxmemory, only once the next retry is due (or ``now``).
        """
        if not self._pending:
            return []
        if self._full.waiting() and not now:
            return None
        taken: dict[int, int] = {}  # index in _pending -> result, for the shards that took theirs
        failed = False
        for shard in self.shards:  # one round trip per shard touched
            indexes = [i for i, (_, _, k) in enumerate(self._pending) if k == shard.index]
            if not indexes:
                continue
            args = [*shard.args]
            for i in indexes:
                args.extend(self._pending[i][0])
            try:
                results = self._durably(self._enqueue, shard.script_keys, args)
            except redis.RedisError as exc:
                self._redis_error("enqueue", exc)
                failed = True
                break
            taken.update(zip(indexes, (int(r) for r in results), strict=True))
        if not taken:
            return None
        self._full.accepted()
        pending = [(*p, taken[i]) for i, p in enumerate(self._pending) if i in taken]
        self._pending = [p for i, p in enumerate(self._pending) if i not in taken]
        results = [result for *_, result in pending]
        assert self.spider is not None
        for item, request, index, result in pending:
            if item[0] not in ("", "!dead"):
                self._remember((item[0], item[1]))
            if result == 1:
                self.shards[index].status.queued += 1  # the shard's count until its next sync
                self._count_enqueued()
            elif item[0] != "!dead":
                self.df.log(request, self.spider)
        self._count(results)
        return None if failed else results

    def next_request(self) -> Request | None:
        self._collect_finished()
        self._check_seeding_done()
        if self._status.paused:
            # Paused: nothing handed out (prefetched requests stay leased, heartbeats keep the
            # leases alive); look again every poll interval.
            if time.monotonic() - self._last_sync >= self.config.idle_poll_interval:
                self._sync("pop", 0)
            if self._status.paused:
                return None
        if not self._buffer and self._should_pop():
            self._sync("pop", self.config.prefetch)
            if not self._buffer and self._enqueued_since_sync:  # start URLs were just fed
                self._sync("pop", self.config.prefetch)
        if not self._buffer or self._status.paused:
            return None
        lease = self._next_lease()
        return None if lease is None else self._hand_out(lease)

    def __len__(self) -> int:
        """Requests waiting: this worker's prefetched ones plus the queue as last seen."""
        return len(self._buffer) + self._status.queued

    # -- operations ---------------------------------------------------------------------------

    def flush(self) -> None:
        """Forget the queue, the fingerprints and the seeding marks (SCHEDULER_FLUSH_ON_START)."""
        for shard in self.shards:
            shard.queue.clear()
            shard.df.clear()
        self.client.delete(self.keys.seeding, self.keys.seeded)

    def _shard_fields(self) -> dict[Any, Any]:
        """What a sharded crawl adds to ``<spider>:frontier`` for the operator tools: every
        shard's queue and dupefilter key (an unsharded crawl's hash stays as it was)."""
        if len(self.shards) == 1:
            return {}
        return {
            "shard_queue_keys": json.dumps([s.queue.key for s in self.shards]),
            "shard_dupefilter_keys": json.dumps([s.df.key for s in self.shards]),
        }

    def _filter_for(self, request: Request) -> RedisDupeFilter:
        return self.shards[self._shard_of(request.url)].df

    def _look_further(self) -> bool:
        """Pop more into the buffer (politeness lookahead) when the queue has some: from a keyed
        queue, only requests of other sites than the buffered ones (which must all wait)."""
        if not self._status.queued or self._status.paused:
            return False
        before = len(self._buffer)
        skip: set[str] = set()
        if self.queue.keyed:
            skip = {self.queue.site(lease.request.url) for lease in self._buffer if lease.request}
            # the queue held no other site a moment ago: ask again once per idle poll interval
            sites, at = self._no_other_site
            if sites == skip and time.monotonic() - at < self.config.idle_poll_interval:
                return False
        self._sync("pop", min(self.config.prefetch, self.lookahead - before), skip)
        if skip and len(self._buffer) == before:
            self._no_other_site = (skip, time.monotonic())
        return len(self._buffer) > before

    def _should_pop(self) -> bool:
        if self._status.queued > 0 or self._enqueued_since_sync or self._status.start_urls:
            return True
        return time.monotonic() - self._last_sync >= self._idle_wait

    def _back_off(self, found: bool) -> None:
        """After a pop: look again soon if it found work, else wait twice as long (up to max)."""
        if found:
            self._idle_wait = self.config.idle_poll_interval
        else:
            self._idle_wait = min(2 * self._idle_wait, self.config.idle_poll_max)

    def _count(self, results: list[int]) -> None:
        """Note what an enqueue queued (the scripts counted the crawl's statistics already)."""
        enqueued = results.count(1)
        if enqueued:
            self._enqueued_since_sync = True
            self._status.queued += enqueued

    def _filtered_locally(self) -> None:
        # sent with the next round trip (a pop or a heartbeat): a SIGKILL loses at most those
        self._cluster_stats["dupefilter/filtered"] += 1

    def _kept(self) -> str:
        owed = sum(len(s.acks) + len(s.fails) for s in self.shards)
        return (
            f"pausing, keeping {len(self._pending)} new request(s), "
            f"{owed} acknowledgement(s) and "
            f"{len(self._buffer) + len(self._inflight)} leased request(s)"
        )

    def _collect_finished(self) -> None:
        """Acknowledge leases whose requests the engine has finished with (next round trip)."""
        for lease in self._finished():
            shard = self.shards[lease.shard]
            if lease.failure is not None:
                shard.fails.append((lease.lease_id, failed_entry(lease, self.worker)))
            else:
                shard.acks.append(lease.lease_id)

    def _sync(self, mode: str, npop: int, skip: set[str] | None = None) -> bool:
        """Acknowledge, report failures and dead letters, then pop/beat/release (a pop from a
        keyed queue passes over the sites in ``skip``): one round trip per shard it needs.

        A pop of ``npop`` > 0 asks the shards in turn, each pop starting one shard further
        (fair round robin), those that last showed requests queued first, and stops at the
        first that hands out some (acknowledgements owed to the others wait for their turn or
        the next heartbeat). Every other call (a beat, a release, a pop of 0 that refreshes
        the crawl's status) goes to every shard.
        """
        # New requests reach Redis before the acks of the requests that produced them.
        if mode != "release" and self._full.waiting():
            return False
        if self._pending and self._flush_pending(now=mode == "release") is None:
            return False
        popping = mode == "pop" and npop > 0
        popped, ok = 0, True
        for shard in self._pop_order() if popping else self.shards:
            got = self._sync_shard(shard, mode, npop if popping else 0, skip)
            if got is None:
                ok = False
                if mode == "release":
                    continue  # give back what the other shards will take
                break
            popped += got
            if popping and (popped or self._status.paused):
                break
        if not ok:
            return False
        self._last_sync = time.monotonic()
        self._enqueued_since_sync = False
        if mode == "pop":
            self._back_off(bool(popped) or self._status.queued > 0 or self._status.start_urls > 0)
        if (
            mode == "pop"
            and self._status.start_urls
            and (self._status.queued < 2 * self.config.start_urls_batch_size)
        ):
            self._feed()
        return True

    def _pop_order(self) -> list[Shard]:
        """The shards in the order the next pop asks them (see ``_sync``)."""
        n = len(self.shards)
        start, self._next_shard = self._next_shard, (self._next_shard + 1) % n
        turn = [self.shards[(start + i) % n] for i in range(n)]
        return sorted(turn, key=lambda shard: shard.status.queued == 0)

    def _sync_shard(self, shard: Shard, mode: str, npop: int, skip: set[str] | None) -> int | None:
        """One round trip to ``shard`` (the SYNC script); how many entries it popped, or None
        when Redis failed (everything owed is kept for the next one)."""
        acks, fails, dead = shard.acks, shard.fails, shard.dead
        release_seed = shard is self.home and self._seed_release and not self._seed_released
        # the crawl's statistics counted here go with whichever shard's round trip comes first
        stats = [(name, str(n)) for name, n in self._cluster_stats.items() if n]
        n = len(self.shards)
        sites = sorted(site for site in skip or () if shard_of(site, n) == shard.index)
        args = [
            *shard.args,
            mode,
            str(npop),
            "1" if release_seed else "0",
            self._info,
            str(len(acks)),
            str(len(fails)),
            str(len(dead)),
            str(len(stats)),
            str(len(sites)),
            *acks,
        ]
        for pair in (*fails, *dead, *stats):
            args.extend(pair)
        args.extend(sites)
        try:
            reaped, requeued, popped, status, subscribed = self._sync_script(
                keys=shard.script_keys, args=args
            )
        except redis.RedisError as exc:
            self._redis_error(mode, exc)
            return None
        self._full.accepted()
        shard.acks, shard.fails, shard.dead = [], [], []
        self._cluster_stats.clear()
        if release_seed:
            self._seed_released = True
        shard.status = ClusterStatus(status)
        self._liveness[shard.index].checked(int(subscribed))
        self._status = ClusterStatus.of_shards([s.status for s in self.shards])
        rejoined = shard.index in self._rejoining and mode != "release"
        if rejoined:
            self._rejoining.discard(shard.index)
        if int(reaped) and mode != "release" and not rejoined:
            # Our heartbeat lapsed and another worker gave our leases back to the queue: the
            # prefetched requests are someone else's now.
            mine = [lease for lease in self._buffer if lease.shard == shard.index]
            logger.warning(
                "Frontier worker %s missed its lease deadline; dropping %d prefetched requests "
                "(they were returned to the queue)",
                self.worker,
                len(mine),
                extra={"spider": self.spider},
            )
            for lease in mine:
                self._buffer.remove(lease)
        if int(requeued):
            self.stats.inc_value("scheduler/requeued", int(requeued))
        self._take(popped, shard)
        return len(popped) // 2

    def _return_orphans(self) -> None:
        """Give back leases Redis holds for this worker that it does not know.

        A pop's reply or an acknowledgement lost in a failover (the primary died before a
        replica had it) leaves such leases: this worker's heartbeat would keep them forever.
        """
        logger.warning(
            "Frontier worker %s: Redis holds %d lease(s) this worker does not know (lost in a "
            "failover?); returning them to the queue",
            self.worker,
            self._status.leased_by_me,
            extra={"spider": self.spider},
        )
        if self._sync("release", 0):  # the next round trip registers this worker again
            self._rejoining = {shard.index for shard in self.shards}
            for shard in self.shards:
                self.client.hdel(shard.keys.worker(self.worker), "stopped")

    def _holds_unknown_leases(self) -> bool:
        """Whether Redis, at the last round trip to every shard, held leases for this worker
        while it holds none: no prefetched request, none with the engine (and it is not
        seeding: giving leases back leaves the crawl, and the seeding flag with it)."""
        seeding = self._seeding and not self._seed_released
        return bool(
            self._status.leased_by_me and not self._buffer and not self._inflight and not seeding
        )

    def _take(self, popped: list[bytes], shard: Shard) -> None:
        for i in range(0, len(popped), 2):
            lease_id = popped[i].decode()
            payload = bytes(popped[i + 1])
            request, dead = self._decode(payload, "entry")
            if request is None:
                shard.dead.append((lease_id, dead))
                continue
            self._buffer.append(Lease(lease_id, payload, request, shard=shard.index))

    # -- timers and signals -------------------------------------------------------------------

    def _heartbeat(self) -> None:
        self._collect_finished()
        self._check_seeding_done()
        if self._sync("beat", 0) and self._holds_unknown_leases():
            # Given back here, not only when idle: another worker holding such leases too keeps
            # this one from ever going idle (each counts the other's as work leased elsewhere).
            self._return_orphans()

    def _poke(self) -> None:
        """Wake the engine while waiting for other workers (its own heartbeat is 5 s)."""
        if self._buffer and not self._status.paused:
            return
        self._wake_engine()

    def _on_idle(self, spider: Spider) -> None:
        """Close only when the whole cluster has been idle for SCHEDULER_IDLE_BEFORE_CLOSE."""
        self._collect_finished()
        self._check_seeding_done()
        synced = self._sync("pop", 0 if self._status.paused else self.config.prefetch)
        if self._buffer or not synced:
            self._idle_since = None
            raise DontCloseSpider
        if self._holds_unknown_leases():
            # Leases Redis holds for us that we do not know (a failover lost a pop's reply or an
            # ack) go back first: every other worker counts them as work leased elsewhere.
            self._idle_since = None
            self._return_orphans()
            raise DontCloseSpider
        if (
            self._status.busy(self.worker)  # busy includes a pause: a paused crawl never ends
            or self._status.leased_by_me
            or self._pending
            or any(s.owes() for s in self.shards)
        ):
            self._idle_since = None
            raise DontCloseSpider
        now = time.monotonic()
        if self._idle_since is None:
            self._idle_since = now
        if now - self._idle_since < self.config.idle_before_close:
            raise DontCloseSpider
        logger.info(
            "Frontier %s: nothing queued or leased anywhere; closing",
            self.config.spider,
            extra={"spider": spider},
        )
