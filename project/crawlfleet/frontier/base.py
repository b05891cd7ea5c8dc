"""What every frontier scheduler shares, whatever holds its queue (Redis or RabbitMQ).

:class:`FrontierScheduler` is Scrapy's scheduler interface over the frontier: it builds the
backend's scheduler from the settings (``SCHEDULER_QUEUE_CLASS`` chooses: a queue class with a
``scheduler_path`` brings its own subclass), starts classic spiders, filters start requests on
the workers that do not seed, keeps the fingerprint cache, encodes requests (an unserializable one
becomes a dead letter), hands requests out under a lease, and notices when the engine is done with
one. With the politeness pacer (``crawlfleet.politeness.pacer``) it hands out the buffered request
whose politeness key may be hit first, holding that key's slot, looks further into the queue
(up to ``POLITENESS_LOOKAHEAD`` buffered requests) when no buffered key may be hit now, and
otherwise wakes the engine when the first slot is due.

It is also the single place that reads Scrapy engine internals (``_slot.inprogress``,
``_slot.nextcall``, ``_start``): watch it on Scrapy upgrades. A backend subclass adds how entries
are pushed, popped, settled and reported (the Redis scripts, or the broker and its Redis outbox).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import redis
import redis.cluster
from scrapy import Request, Spider
from scrapy.core.scheduler import BaseScheduler
from scrapy.utils.misc import build_from_crawler
from twisted.internet.task import LoopingCall

from crawlfleet.frontier import replicas
from crawlfleet.frontier.config import (
    SCRAPY_DEFAULT_DUPEFILTER,
    SET_DUPEFILTER,
    FrontierConfig,
    FrontierConfigError,
    load_class,
)
from crawlfleet.frontier.dupefilter import RedisDupeFilter
from crawlfleet.frontier.leases import FailureTap, Lease, dead_entry, unwrap
from crawlfleet.frontier.serialization import DecodeError, EncodeError, RequestCodec
from crawlfleet.frontier.spiderstart import adopt_start_requests, keep_start_items_if
from crawlfleet.hub.clock import hub_ms
from crawlfleet.hub.errors import RedisConfigError
from crawlfleet.hub.fullhub import FullHub, is_full
from crawlfleet.politeness.pacer import Pacer, missing_middleware, pacer_for

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

# How often (seconds) an unreachable Redis is reported while the worker keeps retrying.
ERROR_LOG_INTERVAL = 10.0


class NotReplicated(redis.RedisError):
    """Fewer replicas than SCHEDULER_WAIT_REPLICAS confirmed a write in time."""


def build_dupefilter(crawler: Crawler, shard: int = 0, shards: int = 1) -> RedisDupeFilter:
    """The crawl's Redis dupefilter from DUPEFILTER_CLASS (every backend keeps it in Redis); of
    ``shard`` of ``shards`` (SCHEDULER_SHARDS), that shard's."""
    settings = crawler.settings
    path = settings.get("DUPEFILTER_CLASS")
    if not path or path == SCRAPY_DEFAULT_DUPEFILTER:
        # Scrapy's in-memory default cannot be shared; an unset DUPEFILTER_CLASS means "the set".
        path = SET_DUPEFILTER
    cls = load_class("DUPEFILTER_CLASS", path)
    if not issubclass(cls, RedisDupeFilter):
        raise FrontierConfigError(
            f"DUPEFILTER_CLASS {path!r} is not a Redis dupefilter; use "
            f"crawlfleet.frontier.dupefilter.SetDupeFilter or BloomDupeFilter"
        )
    if shards == 1:
        return build_from_crawler(cls, crawler)
    return build_from_crawler(cls, crawler, shard=shard, shards=shards)


def lookahead(pacer: Pacer | None, config: FrontierConfig) -> int:
    """How many requests a worker buffers at most to find a key that may be hit now:
    ``POLITENESS_LOOKAHEAD``, or four times ``SCHEDULER_PREFETCH`` when that is 0 or unset."""
    return (pacer.config.lookahead if pacer is not None else 0) or 4 * config.prefetch


class FrontierScheduler(BaseScheduler):
    """The shared part of ``crawlfleet.frontier.scheduler.Scheduler`` and its RabbitMQ sibling."""

    #: the backend's name in the ``scheduler/enqueued/<backend>`` and ``…/dequeued/…`` stats
    BACKEND = ""

    def __init__(
        self,
        crawler: Crawler,
        config: FrontierConfig,
        client: redis.Redis,
        dupefilter: RedisDupeFilter,
    ) -> None:
        self.crawler = crawler
        self.config = config
        self.client = client
        self.df = dupefilter
        self.stats = crawler.stats
        self.worker = config.worker_id
        self.keys = config.keys
        self.spider: Spider | None = None
        self.codec: RequestCodec | None = None
        self._buffer: deque[Lease] = deque()
        self._inflight: dict[int, Lease] = {}
        # (dupefilter key, argument) of fingerprints Redis has recorded, least recently used first
        self._seen: OrderedDict[tuple[str, bytes], None] = OrderedDict()
        self._seeding = False
        self._seed_release = False
        self._seed_released = False
        self._idle_since: float | None = None
        self._last_error_log = 0.0
        # Redis at maxmemory: one warning per episode, retries every poll interval doubling
        # up to SCHEDULER_IDLE_POLL_MAX
        self._full = FullHub(
            logger,
            f"Frontier worker {self.worker}",
            config.idle_poll_interval,
            config.idle_poll_max,
        )
        self._loops: list[LoopingCall] = []
        self.pacer = pacer_for(crawler)
        self.lookahead = lookahead(self.pacer, config)
        self._wake_call: Any = None
        self._wake_at = 0.0
        # what this worker waits for, as its record in Redis says (None: nothing)
        self._waiting_for: str | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> FrontierScheduler:
        spider = crawler.spider
        name = spider.name if spider is not None else getattr(crawler.spidercls, "name", "")
        if spider is not None:
            # Built before Scrapy reads spider.start(): a classic start_requests() spider starts.
            adopt_start_requests(spider)
        try:
            polite = pacer_for(crawler) is not None
            config = FrontierConfig.from_settings(crawler.settings, name, politeness=polite)
            delegate = getattr(config.queue_class, "scheduler_path", None)
            # a queue outside Redis brings its own scheduler (RabbitMQ)
            target: Any = load_class("SCHEDULER_QUEUE_CLASS", delegate) if delegate else cls
            built: FrontierScheduler = target.build(crawler, config)
            # after the settings and the connection are checked: those errors come first
            if missing := missing_middleware(crawler):
                raise FrontierConfigError(missing)
        except (FrontierConfigError, RedisConfigError) as exc:
            # Scrapy follows this with its own tracebacks; this line is the one to read.
            logger.critical("Frontier cannot start: %s", exc)
            raise
        if spider is not None:
            keep_start_items_if(spider, lambda: built._seeding)
        return built

    @classmethod
    def build(cls, crawler: Crawler, config: FrontierConfig) -> FrontierScheduler:
        """Connect the backend (errors are one-line ``FrontierConfigError``s)."""
        raise NotImplementedError

    # -- the worker's periodic loops ---------------------------------------------------------

    def _script_args(self) -> list[str]:
        """The first arguments of every coordination script: key prefix, worker, lease deadline.

        The deadline (ms) is one heartbeat short of the lease timeout: reapers look once per
        heartbeat interval, so a silent worker's leases are back within the timeout.
        """
        deadline = self.config.lease_timeout - self.config.heartbeat_interval
        return [self.keys.prefix, self.worker, str(int(deadline * 1000))]

    def _start_loops(self, poll: Callable[[], Any]) -> None:
        """The heartbeat and the idle poll, started once the worker has joined the crawl."""
        for interval, func in (
            (self.config.heartbeat_interval, self._heartbeat),
            (self.config.idle_poll_interval, poll),
        ):
            loop = LoopingCall(func)
            loop.start(interval, now=False)
            self._loops.append(loop)

    def _stop_loops(self) -> None:
        for loop in self._loops:
            if loop.running:
                loop.stop()
        self._loops.clear()
        if self._wake_call is not None and self._wake_call.active():
            self._wake_call.cancel()

    def _heartbeat(self) -> None:
        """Renew this worker's leases and read the cluster's status (each backend its own way)."""
        raise NotImplementedError

    # -- enqueue ------------------------------------------------------------------------------

    def _admit(self, request: Request) -> tuple[Request, tuple[str, bytes]] | None:
        """The request to store and its duplicate check; None when it is dropped right here.

        Dropped: a start request on a worker that does not seed (another worker seeded, or the
        crawl is under way), and a request whose fingerprint this worker already saw Redis record
        (fingerprints are never removed during a crawl, so no round trip is needed to know).
        """
        if request.meta.get("is_start_request") and not self._seeding:
            self.stats.inc_value("scheduler/start_skipped")
            return None
        stored = unwrap(request)
        check = ("", b"") if stored.dont_filter else self._filter_for(stored).script_item(stored)
        if check in self._seen:
            self._seen.move_to_end(check)
            self._filtered_locally()
            assert self.spider is not None
            self.df.log(request, self.spider)
            return None
        return stored, check

    def _filter_for(self, request: Request) -> RedisDupeFilter:
        """The dupefilter that records ``request``'s fingerprint (a sharded crawl: its shard's)."""
        return self.df

    def _filtered_locally(self) -> None:
        """A duplicate known without a round trip (the Redis backend counts it for the cluster)."""

    def _remember(self, seen_key: tuple[str, bytes]) -> None:
        if self.config.seen_cache:
            self._seen[seen_key] = None
            if len(self._seen) > self.config.seen_cache:
                self._seen.popitem(last=False)
            # a gauge (the fingerprints held now): a worker's memory grows until it is full
            self.stats.set_value("scheduler/seen_cache", len(self._seen))

    def _encode(self, request: Request) -> tuple[bytes, str]:
        """``(payload, "")``, or ``(b"", its dead-letter entry)`` when it cannot be stored."""
        assert self.codec is not None
        try:
            return self.codec.encode(request), ""
        except EncodeError as exc:
            message = "Cannot store %s in the frontier (%s); it goes to the dead-letter list"
            logger.error(message, request, exc, extra={"spider": self.spider})
            raw = f"{request.method} {request.url} meta={sorted(request.meta)}".encode()
            return b"", self._dead_letter(raw, f"unserializable: {exc}", "enqueue")

    def _decode(self, payload: bytes, what: str) -> tuple[Request | None, str]:
        """``(request, "")`` for a popped ``payload``, or ``(None, its dead-letter entry)``.

        ``what`` names the payload in the log line (a Redis "entry", a RabbitMQ "message").
        """
        assert self.codec is not None
        try:
            request = self.codec.decode(payload)
        except DecodeError as exc:
            message = "Frontier %s moved to the dead-letter list: %s"
            logger.warning(message, what, exc, extra={"spider": self.spider})
            return None, self._dead_letter(payload, str(exc), "queue")
        # Only this worker's own spider.start() output counts as start requests; a popped
        # request (and the meta its callbacks copy) must not look like one.
        request.meta.pop("is_start_request", None)
        return request, ""

    def _dead_letter(self, raw: bytes, reason: str, source: str) -> str:
        """Count one dead-letter entry and return its line for ``<spider>:deadletter``."""
        self.stats.inc_value("scheduler/deadletter")
        return dead_entry(raw, reason, self.worker, source)

    def _count_enqueued(self, n: int = 1) -> None:
        self.stats.inc_value(f"scheduler/enqueued/{self.BACKEND}", n)
        self.stats.inc_value("scheduler/enqueued", n)

    # -- hand out and settle ------------------------------------------------------------------

    def _hand_out(self, lease: Lease) -> Request:
        """The leased request for the engine, watched until the engine is done with it."""
        request = lease.request
        assert request is not None
        request.errback = FailureTap(lease, request.errback)
        self._inflight[id(request)] = lease
        self.stats.inc_value(f"scheduler/dequeued/{self.BACKEND}")
        self.stats.inc_value("scheduler/dequeued")
        return request

    def _next_lease(self) -> Lease | None:
        """The buffered lease to hand out now, or None (the buffer is empty, or every buffered
        request's politeness key must wait: the engine is woken when the first slot is due).

        Without the pacer: the first one. With it: the request whose key may be hit first holds
        a slot of it (buffer order within a key, so priority holds there); when no buffered key
        has a slot now the backend pops more (``_look_further``) up to ``POLITENESS_LOOKAHEAD``
        buffered requests. Buffered requests stay leased to this worker (heartbeats renew them,
        ``close`` gives them back), however long they wait.
        """
        if not self._buffer:
            return None
        if self.pacer is None:
            return self._buffer.popleft()
        while self._buffer:
            requests = [lease.request for lease in self._buffer if lease.request is not None]
            choice = self.pacer.choose(requests)
            if choice.index is not None:
                lease = self._buffer[choice.index]
                del self._buffer[choice.index]
                self.stats.inc_value("politeness/scheduler/paced")
                return lease
            if len(self._buffer) >= self.lookahead or not self._look_further():
                self.stats.inc_value("politeness/scheduler/waits")
                self._wake_in(choice.wait)
                return None
            self.stats.inc_value("politeness/scheduler/lookahead")
        return None

    def _look_further(self) -> bool:
        """Buffer more requests from the queue; whether any came (a backend that cannot: no)."""
        return False

    def _wake_in(self, seconds: float) -> None:
        """Wake the engine in ``seconds`` (the earliest of the wake-ups asked for)."""
        at = time.monotonic() + seconds
        if self._wake_call is not None and self._wake_call.active():
            if self._wake_at <= at:
                return
            self._wake_call.cancel()
        # Imported here: importing the reactor installs one, and Scrapy must install its own.
        from twisted.internet import reactor as installed

        reactor: Any = installed
        self._wake_at = at
        self._wake_call = reactor.callLater(seconds, self._wake_engine)

    def _finished(self) -> Iterator[Lease]:
        """Leases whose requests the engine has finished with (removed from the in-flight set).

        The engine keeps a request in ``_slot.inprogress`` from download until its response (or
        failure) has been handled by the spider, including enqueueing the new requests.
        """
        if not self._inflight:
            return
        slot = getattr(self._engine(), "_slot", None)
        inprogress = getattr(slot, "inprogress", None)
        if inprogress is None:
            inprogress = set()  # driven directly: every handed-out request counts as done
        for key, lease in list(self._inflight.items()):
            if lease.request not in inprogress:
                del self._inflight[key]
                yield lease

    # -- engine internals ---------------------------------------------------------------------

    def _engine(self) -> Any:
        """The running engine, or None (a scheduler driven directly, as in tests and tools)."""
        try:
            return self.crawler.engine
        except RuntimeError:
            return None

    def _check_engine(self) -> None:
        """Fail at start, not silently, if the engine lacks what acknowledgements rely on."""
        engine = self._engine()
        if engine is None:
            return
        slot = getattr(engine, "_slot", None)
        if not (
            isinstance(getattr(slot, "inprogress", None), set)
            and hasattr(slot, "nextcall")
            and hasattr(engine, "_start")
        ):
            raise FrontierConfigError(
                "this Scrapy engine has no _slot.inprogress/_slot.nextcall/_start; the frontier "
                "scheduler needs Scrapy 2.19 (pinned in crawlfleet's dependencies)"
            )

    def _crawl_closed(self, reason: str) -> None:
        """A worker that finished the crawl (nothing queued, nobody holding a request: Scrapy's
        ``finished``) lets the next run of the crawl run its start requests again."""
        if reason != "finished":
            return
        try:
            self.client.delete(self.keys.seeded)
        except redis.RedisError as exc:
            self._redis_error("close", exc)

    def _check_seeding_done(self) -> None:
        # The engine drops its start iterator once spider.start() is exhausted; until then the
        # seeding flag tells other workers that more requests are coming.
        engine = self._engine()
        if self._seeding and not self._seed_released and getattr(engine, "_start", None) is None:
            self._seed_release = True

    def _wake_engine(self) -> None:
        """Have the engine ask for requests again now (its own heartbeat is 5 s)."""
        slot = getattr(self._engine(), "_slot", None)
        nextcall = getattr(slot, "nextcall", None)
        if nextcall is not None:
            nextcall.schedule()

    def _count_replicas(self, wanted: int | None) -> int:
        """``replicas.decide`` for the primaries holding the crawl's queues (every shard's)."""
        keys = list(self.config.shard_queue_keys or (self.config.queue_key,))
        timeout, where = self.config.wait_timeout_ms, self.config.masked_url
        return replicas.decide(self.client, keys, wanted, timeout, where)

    def _wait_replicas(self) -> int:
        """``SCHEDULER_WAIT_REPLICAS``, counted from the replicas online the first time it is
        needed when the setting is unset (raises ``redis.RedisError`` if the hub does not answer:
        the caller retries, and the count is taken again)."""
        if self.config.wait_replicas is None:
            self.config.wait_replicas = self._count_replicas(None)
        return self.config.wait_replicas

    def _check_replicas(self) -> None:
        """At start: count the replicas (unset setting) or say once that fewer than the set number
        are online; a hub that does not answer now is counted at the first enqueue."""
        with contextlib.suppress(redis.RedisError):
            if self.config.wait_replicas is None:
                self._wait_replicas()
            elif self.config.wait_replicas:
                self._count_replicas(self.config.wait_replicas)

    def _durably(self, script: Any, keys: list[str], args: list[Any]) -> Any:
        """Run a write ``script``; with ``SCHEDULER_WAIT_REPLICAS``, also ``WAIT`` for replicas.

        Script and WAIT go in one round trip on one connection (WAIT counts that connection's
        writes): ``EVALSHA`` itself, not redis-py's script object, which would first ask
        ``SCRIPT EXISTS`` in a round trip of its own. A hub that lost the script (restarted,
        failed over, ``SCRIPT FLUSH``) answers NOSCRIPT without running anything: it is loaded
        and the write sent again. Too few replicas within ``SCHEDULER_WAIT_TIMEOUT`` raise
        ``NotReplicated``, a Redis error: the caller keeps the work and retries it, as after any
        Redis failure.
        """
        want = self._wait_replicas()
        if not want:
            return script(keys=keys, args=args)
        cluster = isinstance(self.client, redis.cluster.RedisCluster)
        try:
            # A cluster pipeline runs no script and sends WAIT to every primary on other
            # connections: both go to the node of the crawl's slot, on one connection.
            node = replicas.node_client(self.client, keys[0])
            result, acked = self._script_and_wait(node, script, keys, args, want)
            if isinstance(result, redis.exceptions.NoScriptError):
                node.script_load(script.script)
                result, acked = self._script_and_wait(node, script, keys, args, want)
            if isinstance(result, Exception):
                raise result
        except redis.RedisError:
            if cluster:  # that node died or lost the slot (MOVED): learn the slots again
                with contextlib.suppress(redis.RedisError, redis.exceptions.RedisClusterException):
                    self.client.nodes_manager.initialize()  # type: ignore[attr-defined]
            raise
        if int(acked) < want:
            problem = NotReplicated(
                f"{acked} of the {want} replica(s) SCHEDULER_WAIT_REPLICAS asks for took the "
                f"write within SCHEDULER_WAIT_TIMEOUT ({self.config.wait_timeout_ms} ms)"
            )
            self._waiting("replicas", str(problem))
            raise problem
        self._waiting(None)
        return result

    def _script_and_wait(
        self, node: redis.Redis, script: Any, keys: list[str], args: list[Any], want: int
    ) -> tuple[Any, Any]:
        """One round trip: ``script``'s EVALSHA, then WAIT; the script's error is returned in
        place (WAIT still answers: nothing of a NOSCRIPT was written)."""
        pipe = node.pipeline(transaction=False)
        pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
        pipe.wait(want, self.config.wait_timeout_ms)
        result, acked = pipe.execute(raise_on_error=False)
        if isinstance(acked, Exception):
            raise acked
        return result, acked

    def _waiting(self, what: str | None, why: str = "") -> None:
        """Say in the worker's record (``crawlfleet status``) what it waits for since when, or
        that it waits no more: written when an episode starts and when it ends. A hub that
        refuses the record is left to the caller's retry."""
        if (what is None) == (self._waiting_for is None):
            return
        key = self.keys.worker(self.worker)
        with contextlib.suppress(redis.RedisError):
            if what is None:
                self.client.hdel(key, "waiting", "waiting_since")
            else:
                since = int(hub_ms(self.client))
                self.client.hset(key, mapping={"waiting": f"{what}: {why}", "waiting_since": since})
            self._waiting_for = what

    def _kept(self) -> str:
        """What this worker holds back while Redis refuses writes (for the full-hub line)."""
        return "pausing, keeping its requests"

    def _redis_error(self, what: str, exc: Exception) -> None:
        if is_full(exc):
            self.stats.inc_value("scheduler/hub_full_refused")
            self._full.refused(what, self._kept(), self.config.masked_url)
            return
        now = time.monotonic()
        if now - self._last_error_log >= ERROR_LOG_INTERVAL:
            self._last_error_log = now
            logger.warning(
                "Frontier Redis %s failed at %s (%s); retrying, nothing is lost",
                what,
                self.config.masked_url,
                exc,
                extra={"spider": self.spider},
            )
