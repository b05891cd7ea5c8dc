"""The frontier scheduler for a RabbitMQ queue: manual acks instead of Redis leases.

``crawlfleet.frontier.scheduler.Scheduler`` hands over to this class when
``SCHEDULER_QUEUE_CLASS`` is :class:`crawlfleet.frontier.rabbitmq.PriorityQueue`. A delivery is
acknowledged when the engine is done with its request (the same point the Redis scheduler acks a
lease: the request left ``engine._slot.inprogress``), and only after the requests its page
produced were committed to the broker; a worker that dies holds unacknowledged deliveries, which
the broker gives to the others. With the politeness pacer it hands out by politeness key as the
Redis scheduler does (``FrontierScheduler._next_lease``), looking through up to
``POLITENESS_LOOKAHEAD`` buffered deliveries (the broker's prefetch count leaves room for them
beside ``CONCURRENT_REQUESTS`` in flight); buffered deliveries stay unacknowledged. Duplicates
are filtered in Redis first (see :mod:`crawlfleet.frontier.rabbitmq.coord`), then the request is
published.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import TYPE_CHECKING, Any

import redis
from scrapy import Request, Spider, signals
from scrapy.exceptions import DontCloseSpider

from crawlfleet.frontier.base import (
    ERROR_LOG_INTERVAL,
    FrontierScheduler,
    build_dupefilter,
    lookahead,
)
from crawlfleet.frontier.config import FrontierConfig, FrontierConfigError
from crawlfleet.frontier.dupefilter import RedisDupeFilter
from crawlfleet.frontier.leases import Lease, failed_entry
from crawlfleet.frontier.rabbitmq import coord
from crawlfleet.frontier.rabbitmq.client import Delivery
from crawlfleet.frontier.rabbitmq.queue import PriorityQueue
from crawlfleet.frontier.serialization import RequestCodec
from crawlfleet.hub.connect import redis_from_settings
from crawlfleet.politeness.pacer import pacer_for

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)


class RabbitMQScheduler(FrontierScheduler):
    """Built by ``FrontierScheduler.from_crawler`` for RabbitMQ queues (``scheduler_path``)."""

    BACKEND = "rabbitmq"

    def __init__(
        self,
        crawler: Crawler,
        config: FrontierConfig,
        client: redis.Redis,
        queue: PriorityQueue,
        dupefilter: RedisDupeFilter,
    ) -> None:
        super().__init__(crawler, config, client, dupefilter)
        self.queue = queue
        self._args = self._script_args()
        df_lua = dupefilter.LUA_CHECK_AND_ADD
        self._enqueue = client.register_script(coord.build(df_lua, coord.ENQUEUE))
        self._sync_script = client.register_script(coord.build(df_lua, coord.SYNC))
        # publishes not committed yet: (broker sequence number, outbox id)
        self._unconfirmed: deque[tuple[int, str]] = deque()
        self._committed: list[str] = []
        self._fails: list[str] = []
        self._dead: list[str] = []
        self._to_ack: list[Delivery] = []  # acked once their failed/dead entries are stored
        self._pending: list[tuple[list[Any], Request]] = []
        self._outbox_seq = 0
        self._others_busy = 0
        self._cluster_seeding = ""
        self._paused = False
        self._unsent = 0

    @classmethod
    def build(cls, crawler: Crawler, config: FrontierConfig) -> RabbitMQScheduler:
        """Connect to Redis and RabbitMQ (errors are one-line ``FrontierConfigError``s)."""
        client = redis_from_settings(crawler.settings)
        # The broker sends at most this many unacknowledged messages: those in flight, and with
        # the pacer the buffered ones it looks through (``POLITENESS_LOOKAHEAD``).
        unacked = crawler.settings.getint("CONCURRENT_REQUESTS", 16)
        pacer = pacer_for(crawler)
        if pacer is not None:
            unacked += lookahead(pacer, config)
        queue = PriorityQueue.from_settings(
            crawler.settings,
            config.queue_key,
            prefetch=unacked,
            flush=config.flush_on_start,
            count_interval=config.idle_poll_interval,
        )
        dupefilter = build_dupefilter(crawler)
        queue.open()
        return cls(crawler, config, client, queue, dupefilter)

    # -- Scrapy's scheduler interface ---------------------------------------------------------

    def open(self, spider: Spider) -> None:
        self._check_engine()
        self.spider = spider
        self.codec = RequestCodec(spider, self.config.serializer)
        if self.config.flush_on_start:
            # the queue itself was deleted and re-declared when it was opened
            self.df.clear()
            self.client.delete(self.keys.seeding, self.keys.seeded)
        self.df.open()
        self._sync("claim")
        self.crawler.signals.connect(self._on_idle, signal=signals.spider_idle)
        self._start_loops(self._poll)
        logger.info(
            "Frontier worker %s joined %s on RabbitMQ %s (queue %r, %d ready), %s start requests",
            self.worker,
            self.config.spider,
            self.queue.client.masked_url,
            self.queue.key,
            self.queue.client.message_count,
            "running the" if self._seeding else "skipping the",
            extra={"spider": spider},
        )

    def close(self, reason: str) -> None:
        self._stop_loops()
        self._collect_finished()
        # Failed and dead-letter entries stored in Redis first: their acks then go out below.
        self._sync("sync")
        # Whatever is buffered goes back to the broker now; acks and publishes are committed.
        while self._buffer:
            lease = self._buffer.popleft()
            self.queue.nack(lease.extra["delivery"])
        self.queue.close(timeout=max(5.0, self.config.heartbeat_interval))
        self._confirmations()
        self._sync("release")
        self._crawl_closed(reason)
        self.df.close(reason)

    def has_pending_requests(self) -> bool:
        return bool(self._buffer or self._pending or self.queue.client.deliveries) or self._busy()

    def enqueue_request(self, request: Request) -> bool:
        admitted = self._admit(request)
        if admitted is None:
            return False
        stored, check = admitted
        item = self._item(stored, check)
        if item is None:
            return False
        self._pending.append((item, request))
        results = self._flush_pending()
        if results is None:
            return True  # kept; checked and published when Redis answers again
        return results[-1] == 1

    def next_request(self) -> Request | None:
        self._collect_finished()
        self._check_seeding_done()
        if self._paused:
            return None
        if not all(self.queue.valid(lease.extra["delivery"]) for lease in self._buffer):
            # their connection was lost: the broker has put those messages back already
            valid = [lease for lease in self._buffer if self.queue.valid(lease.extra["delivery"])]
            self._buffer.clear()
            self._buffer.extend(valid)
        if not self._buffer:
            self._take(self.config.prefetch)
        lease = self._next_lease()
        return None if lease is None else self._hand_out(lease)

    def __len__(self) -> int:
        """Requests waiting: this worker's buffered ones plus the broker's count as last seen."""
        return (
            len(self._buffer) + len(self.queue.client.deliveries) + self.queue.client.message_count
        )

    # -- enqueue ------------------------------------------------------------------------------

    def _item(self, request: Request, check: tuple[str, bytes]) -> list[Any] | None:
        payload, dead = self._encode(request)
        if dead:
            self._dead.append(dead)
            return None
        self._outbox_seq += 1
        entry = b"%d|" % request.priority + payload
        return [check[0], check[1], f"{self.worker}:{self._outbox_seq}", entry]

    def _flush_pending(self) -> list[int] | None:
        """Duplicate check + outbox in Redis (one round trip), then publish the new ones."""
        if not self._pending:
            return []
        args: list[Any] = [*self._args]
        for item, _ in self._pending:
            args.extend(item)
        try:
            results = [int(r) for r in self._enqueue(keys=[], args=args)]
        except redis.RedisError as exc:
            self._redis_error("enqueue", exc)
            return None
        self._full.accepted()
        pending, self._pending = self._pending, []
        assert self.spider is not None
        for (item, request), result in zip(pending, results, strict=True):
            if item[0]:
                self._remember((item[0], item[1]))
            if result == 1:
                self._publish(item[2], item[3])
                self._count_enqueued()
            else:
                self.df.log(request, self.spider)
        return results

    def _publish(self, outbox_id: str, entry: bytes) -> None:
        bar = entry.index(b"|")
        seq = self.queue.push(entry[bar + 1 :], int(entry[:bar]))
        self._unconfirmed.append((seq, outbox_id))

    def _confirmations(self) -> None:
        confirmed = self.queue.client.confirmed
        while self._unconfirmed and self._unconfirmed[0][0] <= confirmed:
            self._committed.append(self._unconfirmed.popleft()[1])

    # -- deliveries and acks ------------------------------------------------------------------

    def _take(self, upto: int) -> None:
        """Buffer deliveries the broker has sent, until ``upto`` are buffered."""
        while len(self._buffer) < upto:
            delivery = self.queue.pop()
            if delivery is None:
                return
            request, dead = self._decode(delivery.body, "message")
            if request is None:
                self._dead.append(dead)
                self._to_ack.append(delivery)
                continue
            lease = Lease(str(delivery.tag), delivery.body, request, extra={"delivery": delivery})
            self._buffer.append(lease)

    def _look_further(self) -> bool:
        """Buffer more of the deliveries already sent (politeness lookahead) when there are."""
        before = len(self._buffer)
        self._take(self.lookahead)
        return len(self._buffer) > before

    def _collect_finished(self) -> None:
        """Ack deliveries whose requests the engine has finished with (after their children)."""
        if not self._inflight:
            return
        # Children first: the enqueues a page produced reach the outbox and the publish list
        # before its ack, so the broker commits them before (or with) the ack.
        if self._pending and self._flush_pending() is None:
            return
        for lease in self._finished():
            delivery: Delivery = lease.extra["delivery"]
            if lease.failure is not None:
                self._fails.append(failed_entry(lease, self.worker))
                self._to_ack.append(delivery)
            else:
                self.queue.ack(delivery)
                self.stats.inc_value("scheduler/acked")

    def _held(self) -> int:
        return len(self._buffer) + len(self._inflight) + len(self.queue.client.deliveries)

    # -- Redis coordination -------------------------------------------------------------------

    def _sync(self, mode: str) -> bool:
        """One Redis round trip: heartbeat, outbox bookkeeping, failed/dead entries, status."""
        self._confirmations()
        if self._pending and self._flush_pending() is None:
            return False
        committed, fails, dead = self._committed, self._fails, self._dead
        release_seed = self._seed_release and not self._seed_released
        queued = self.queue.client.message_count if mode == "claim" else 0
        args = [
            *self._args,
            mode,
            str(self._held()),
            str(queued),
            "1" if release_seed else "0",
            str(len(committed)),
            str(len(fails)),
            str(len(dead)),
            *committed,
            *fails,
            *dead,
        ]
        try:
            claimed, adopted, others_busy, seeding, paused, unsent = self._sync_script(
                keys=[], args=args
            )
        except redis.RedisError as exc:
            if mode == "claim":
                raise FrontierConfigError(f"Redis at {self.config.masked_url}: {exc}") from None
            self._redis_error(mode, exc)
            return False
        self._full.accepted()
        self._committed, self._fails, self._dead = [], [], []
        for delivery in self._to_ack:
            self.queue.ack(delivery)
        self._to_ack = []
        if release_seed:
            self._seed_released = True
        if mode == "claim":
            self._seeding = bool(int(claimed))
        for i in range(0, len(adopted), 2):
            self._publish(adopted[i].decode(), bytes(adopted[i + 1]))
        if adopted:
            logger.info(
                "Frontier worker %s republished %d requests a dead worker had not published",
                self.worker,
                len(adopted) // 2,
                extra={"spider": self.spider},
            )
            self.stats.inc_value("scheduler/republished", len(adopted) // 2)
        self._others_busy = int(others_busy)
        self._cluster_seeding = seeding.decode() if isinstance(seeding, bytes) else str(seeding)
        self._paused = bool(int(paused))
        self._unsent = int(unsent)
        return True

    def _busy(self) -> bool:
        """Whether anything anywhere may still produce or hold requests (besides our buffer)."""
        client = self.queue.client
        return bool(
            client.message_count
            or client.deliveries
            or not client.published_all()
            or client.pending()
            or self._others_busy
            or self._unsent
            or self._cluster_seeding not in ("", self.worker)
            or self._paused
            or not client.connected.is_set()
        )

    # -- timers and signals -------------------------------------------------------------------

    def _heartbeat(self) -> None:
        if self.queue.client.fatal is not None:
            logger.error("Frontier RabbitMQ: %s", self.queue.client.fatal)
        elif not self.queue.client.connected.is_set():
            self._broker_down()

    def _poll(self) -> None:
        """Every SCHEDULER_IDLE_POLL_INTERVAL: ack what finished, sync, wake the engine."""
        self._collect_finished()
        self._check_seeding_done()
        self._sync("sync")
        if self._buffer and not self._paused:
            return
        if self.queue.client.deliveries or not self._paused:
            self._wake_engine()

    def _on_idle(self, spider: Spider) -> None:
        """Close only when the whole cluster looked idle for long enough (docs/design.md)."""
        self._collect_finished()
        self._check_seeding_done()
        synced = self._sync("sync")
        if (
            not synced
            or self._buffer
            or self._inflight
            or self._pending
            or self._to_ack
            or self._busy()
        ):
            self._idle_since = None
            raise DontCloseSpider
        now = time.monotonic()
        if self._idle_since is None:
            self._idle_since = now
        # Other workers report what they hold once per poll interval: wait a few of those, so a
        # message that was just delivered to someone else is seen before this worker leaves.
        needed = max(self.config.idle_before_close, 5 * self.config.idle_poll_interval)
        if now - self._idle_since < needed:
            raise DontCloseSpider
        logger.info(
            "Frontier %s: nothing queued or held anywhere; closing",
            self.config.spider,
            extra={"spider": spider},
        )

    def _broker_down(self) -> None:
        now = time.monotonic()
        if now - self._last_error_log >= ERROR_LOG_INTERVAL:
            self._last_error_log = now
            logger.warning(
                "Frontier RabbitMQ at %s unreachable (%s); reconnecting, nothing is lost",
                self.queue.client.masked_url,
                self.queue.client.error,
                extra={"spider": self.spider},
            )
