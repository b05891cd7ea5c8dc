"""Frontier settings: read, default and validate every Scrapy setting the frontier uses.

Names follow scrapy-redis wherever it has a setting for the same thing, so its users switch by
changing class paths. Every error is one line that names the setting (passwords masked).
"""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass, field
from typing import Any

from scrapy import Request
from scrapy.settings import BaseSettings
from scrapy.utils.misc import load_object

from crawlfleet.frontier.queues import RedisQueue
from crawlfleet.hub.connect import redis_url
from crawlfleet.hub.keys import (
    DUPEFILTER_KEY,
    MAX_SHARDS,
    QUEUE_KEY,
    SHARD_MARK,
    START_URLS_KEY,
    KeySetting,
    SpiderKeys,
)
from crawlfleet.hub.urls import is_cluster_url, is_sentinel_url, mask_url
from crawlfleet.politeness.config import KEY_KINDS
from crawlfleet.settingtable import default
from crawlfleet.settingtable.values import flag, seconds

DEFAULT_QUEUE_CLASS = "crawlfleet.frontier.queues.PriorityQueue"
# the default when politeness is on: a priority queue per politeness key, the keys served in turn
POLITE_QUEUE_CLASS = "crawlfleet.frontier.queues.KeyedPriorityQueue"
SET_DUPEFILTER = "crawlfleet.frontier.dupefilter.SetDupeFilter"
SCRAPY_DEFAULT_DUPEFILTER = "scrapy.dupefilters.RFPDupeFilter"
# URL schemes a queue or start-URL entry may use (SCHEDULER_URL_SCHEMES).
DEFAULT_URL_SCHEMES: tuple[str, ...] = tuple(default("SCHEDULER_URL_SCHEMES"))
# SCHEDULER_SERIALIZER's values: the names of crawlfleet.frontier.serialization.SERIALIZERS
SERIALIZER_NAMES = ("json", "msgpack")
_SCHEME = re.compile(r"[a-z][a-z0-9+.-]*")


class FrontierConfigError(ValueError):
    """A frontier setting that cannot work; the message names the setting."""


def default_wait(url: str) -> int | None:
    """``SCHEDULER_WAIT_REPLICAS``'s default: through Sentinel and on a Redis Cluster, ``None``
    (the replicas that exist, counted at start: ``crawlfleet.frontier.replicas``); else 0."""
    return None if is_sentinel_url(url) or is_cluster_url(url) else 0


def seconds_setting(settings: BaseSettings, name: str, fallback: float | None = None) -> float:
    """``settings[name]`` as seconds > 0; unset: ``fallback`` when computed, else the table's."""
    return seconds(
        settings, name, default(name) if fallback is None else fallback, FrontierConfigError
    )


def _key(
    settings: BaseSettings, key: KeySetting, spider: str, shard: int = 0, shards: int = 1
) -> str:
    """The name of a renameable key (``SCHEDULER_QUEUE_KEY`` …) for ``spider`` (with its hash
    tag on a Redis Cluster), in its shard ``shard`` of ``shards``."""
    tagged = is_cluster_url(redis_url(settings))
    return key.resolve(
        settings.get(key.setting),
        spider,
        FrontierConfigError,
        tagged=tagged,
        shard=shard,
        shards=shards,
    )


def shards_setting(settings: BaseSettings) -> int:
    """``SCHEDULER_SHARDS``: how many shards one crawl is split into (1 to MAX_SHARDS)."""
    raw = settings.get("SCHEDULER_SHARDS", default("SCHEDULER_SHARDS"))
    value = _positive_int("SCHEDULER_SHARDS", raw)
    if value > MAX_SHARDS:
        raise FrontierConfigError(f"SCHEDULER_SHARDS must be at most {MAX_SHARDS}, got {raw!r}")
    return value


def load_class(name: str, path: Any) -> type:
    """The class a setting names (a dotted path or the class itself)."""
    try:
        obj = load_object(path) if isinstance(path, str) else path
    except (ImportError, AttributeError, ValueError, NameError) as exc:
        raise FrontierConfigError(f"{name}: cannot load {path!r}: {exc}") from None
    if not isinstance(obj, type):
        raise FrontierConfigError(f"{name} must name a class, got {path!r}")
    return obj


def url_schemes_setting(settings: BaseSettings) -> tuple[str, ...]:
    """``SCHEDULER_URL_SCHEMES``: the URL schemes decoded entries may use (default http, https)."""
    raw = settings.get("SCHEDULER_URL_SCHEMES", default("SCHEDULER_URL_SCHEMES"))
    values = raw.split(",") if isinstance(raw, str) else raw
    if not isinstance(values, list | tuple) or not values:
        raise FrontierConfigError(f"SCHEDULER_URL_SCHEMES must list URL schemes, got {raw!r}")
    schemes = tuple(str(v).strip() for v in values)
    for scheme in schemes:
        if not _SCHEME.fullmatch(scheme):
            raise FrontierConfigError(
                f"SCHEDULER_URL_SCHEMES must list lower-case URL schemes like 'https', "
                f"got {scheme!r}"
            )
    return schemes


def request_classes_setting(settings: BaseSettings) -> dict[str, type[Request]]:
    """``SCHEDULER_REQUEST_CLASSES``: the project's Request subclasses that entries may name.

    Keys are the declared path and the path ``Request.to_dict`` writes (``module.Class``).
    """
    raw = settings.get("SCHEDULER_REQUEST_CLASSES") or default("SCHEDULER_REQUEST_CLASSES")
    paths = raw.split(",") if isinstance(raw, str) else raw
    if not isinstance(paths, list | tuple):
        raise FrontierConfigError(
            f"SCHEDULER_REQUEST_CLASSES must be a list of class paths, got {raw!r}"
        )
    classes: dict[str, type[Request]] = {}
    for entry in paths:
        path = entry.strip() if isinstance(entry, str) else entry
        cls = load_class("SCHEDULER_REQUEST_CLASSES", path)
        if not issubclass(cls, Request):
            raise FrontierConfigError(
                f"SCHEDULER_REQUEST_CLASSES: {path!r} is not a scrapy Request subclass"
            )
        if isinstance(path, str):
            classes[path] = cls
        classes[f"{cls.__module__}.{cls.__name__}"] = cls
    return classes


def queue_class_setting(settings: BaseSettings, politeness: bool) -> type:
    """``SCHEDULER_QUEUE_CLASS``: a Redis queue, or a queue that names the scheduler driving it
    (``crawlfleet.frontier.rabbitmq``); unset, the keyed queue when politeness is on, else the
    priority queue."""
    default = POLITE_QUEUE_CLASS if politeness else DEFAULT_QUEUE_CLASS
    queue_class = load_class(
        "SCHEDULER_QUEUE_CLASS", settings.get("SCHEDULER_QUEUE_CLASS") or default
    )
    if not issubclass(queue_class, RedisQueue) and not hasattr(queue_class, "scheduler_path"):
        raise FrontierConfigError(
            f"SCHEDULER_QUEUE_CLASS must be one of crawlfleet.frontier.queues.FifoQueue, "
            f"LifoQueue, PriorityQueue, KeyedPriorityQueue or "
            f"crawlfleet.frontier.rabbitmq.PriorityQueue, "
            f"got {settings.get('SCHEDULER_QUEUE_CLASS')!r}"
        )
    return queue_class


def serializer_setting(settings: BaseSettings) -> str:
    """``SCHEDULER_SERIALIZER``: msgpack (the default) or json; pickle is never used."""
    serializer = str(settings.get("SCHEDULER_SERIALIZER") or default("SCHEDULER_SERIALIZER"))
    if serializer not in SERIALIZER_NAMES:
        raise FrontierConfigError(
            f"SCHEDULER_SERIALIZER must be one of {', '.join(SERIALIZER_NAMES)} "
            f"(pickle is never used), got {serializer!r}"
        )
    return serializer


def lease_settings(settings: BaseSettings) -> tuple[float, float]:
    """``SCHEDULER_LEASE_TIMEOUT`` and ``SCHEDULER_HEARTBEAT_INTERVAL`` (at most a third of it)."""
    lease_timeout = seconds_setting(settings, "SCHEDULER_LEASE_TIMEOUT")
    heartbeat = seconds_setting(settings, "SCHEDULER_HEARTBEAT_INTERVAL", lease_timeout / 6)
    if heartbeat * 3 > lease_timeout * (1 + 1e-9):
        raise FrontierConfigError(
            f"SCHEDULER_HEARTBEAT_INTERVAL ({heartbeat:g}) must be at most a third of "
            f"SCHEDULER_LEASE_TIMEOUT ({lease_timeout:g})"
        )
    return lease_timeout, heartbeat


def idle_before_close_setting(settings: BaseSettings) -> float:
    """``SCHEDULER_IDLE_BEFORE_CLOSE``: seconds >= 0 (0: never close for idleness)."""
    idle = settings.get("SCHEDULER_IDLE_BEFORE_CLOSE", default("SCHEDULER_IDLE_BEFORE_CLOSE"))
    try:
        seconds = float(idle)
    except (TypeError, ValueError):
        raise FrontierConfigError(
            f"SCHEDULER_IDLE_BEFORE_CLOSE must be a number of seconds, got {idle!r}"
        ) from None
    if seconds < 0:
        raise FrontierConfigError(f"SCHEDULER_IDLE_BEFORE_CLOSE must be >= 0, got {idle!r}")
    return seconds


def site_kind_setting(settings: BaseSettings) -> str:
    """``POLITENESS_KEY``: what one politeness key (and one keyed queue's site) is."""
    site_kind = str(settings.get("POLITENESS_KEY") or default("POLITENESS_KEY")).strip().lower()
    if site_kind not in KEY_KINDS:
        raise FrontierConfigError(
            f"POLITENESS_KEY must be one of {', '.join(KEY_KINDS)}, "
            f"got {settings.get('POLITENESS_KEY')!r}"
        )
    return site_kind


def _shard_start_urls_keys(spider: str, url: str, shards: int) -> tuple[str, ...]:
    """Each shard's start-URL key (the shards' own names: never renamed by a setting)."""
    return tuple(
        START_URLS_KEY.resolve(
            None, spider, FrontierConfigError, tagged=is_cluster_url(url), shard=k, shards=shards
        )
        for k in range(shards)
    )


@dataclass
class FrontierConfig:
    """Validated frontier settings of one spider, with its Redis key names resolved."""

    spider: str
    url: str
    queue_key: str
    dupefilter_key: str
    start_urls_key: str
    start_urls_as_set: bool
    start_urls_batch_size: int
    queue_class: type
    serializer: str
    persist: bool
    flush_on_start: bool
    idle_before_close: float
    lease_timeout: float
    heartbeat_interval: float
    idle_poll_interval: float
    prefetch: int
    # the longest wait between an idle worker's looks (its polls back off up to it)
    idle_poll_max: float = 2.0
    enqueue_batch: bool = False
    seen_cache: int = 100_000
    # WAIT after each enqueue: replicas that must hold it (None: as many as exist, up to one,
    # decided at start by crawlfleet.frontier.replicas), and for how long to wait (ms)
    wait_replicas: int | None = 0
    wait_timeout_ms: int = 1000
    worker_id: str = field(default="")
    # what decoded entries may name besides Scrapy's own request classes, and their URL schemes
    request_classes: dict[str, type[Request]] = field(default_factory=dict)
    url_schemes: tuple[str, ...] = DEFAULT_URL_SCHEMES
    # POLITENESS_KEY: the site of a request, as a keyed queue files it (host, domain or ip)
    site_kind: str = "host"
    # SCHEDULER_LIVENESS: hold a liveness subscription, so a dead worker is reaped early
    liveness: bool = True
    # SCHEDULER_SHARDS: shard k's queue key and start-URLs key (shard 0's are the two above;
    # the other shards' start-URLs keys only complete their scripts' KEYS and stay empty)
    shard_queue_keys: tuple[str, ...] = ()
    shard_start_urls_keys: tuple[str, ...] = ()

    @classmethod
    def from_settings(
        cls, settings: BaseSettings, spider: str, politeness: bool = False
    ) -> FrontierConfig:
        """The spider's frontier settings; ``politeness``: the crawl's pacer is on, so an unset
        ``SCHEDULER_QUEUE_CLASS`` means the keyed queue (else the priority queue)."""
        if SHARD_MARK in spider:
            raise FrontierConfigError(
                f"spider name {spider[:60]!r} contains {SHARD_MARK!r}, which names the shards of "
                f"a sharded crawl (SCHEDULER_SHARDS) in Redis; rename the spider"
            )
        queue_class = queue_class_setting(settings, politeness)
        serializer = serializer_setting(settings)
        lease_timeout, heartbeat = lease_settings(settings)
        idle_before_close = idle_before_close_setting(settings)
        prefetch = _positive_int(
            "SCHEDULER_PREFETCH", settings.get("SCHEDULER_PREFETCH", default("SCHEDULER_PREFETCH"))
        )
        idle_poll = seconds_setting(settings, "SCHEDULER_IDLE_POLL_INTERVAL")
        batch = settings.get("REDIS_START_URLS_BATCH_SIZE") or settings.getint(
            "CONCURRENT_REQUESTS", 16
        )
        url = redis_url(settings)
        site_kind = site_kind_setting(settings)
        shards = shards_setting(settings)
        if shards > 1 and not issubclass(queue_class, RedisQueue):
            raise FrontierConfigError(
                f"SCHEDULER_SHARDS is {shards}, but only the Redis queues can be sharded; "
                f"with {settings.get('SCHEDULER_QUEUE_CLASS')} leave it at 1"
            )
        return cls(
            spider=spider,
            url=url,
            shard_queue_keys=tuple(
                _key(settings, QUEUE_KEY, spider, k, shards) for k in range(shards)
            ),
            shard_start_urls_keys=_shard_start_urls_keys(spider, url, shards),
            queue_key=_key(settings, QUEUE_KEY, spider),
            dupefilter_key=_key(settings, DUPEFILTER_KEY, spider),
            start_urls_key=_key(settings, START_URLS_KEY, spider),
            start_urls_as_set=_flag(settings, "REDIS_START_URLS_AS_SET"),
            start_urls_batch_size=_positive_int("REDIS_START_URLS_BATCH_SIZE", batch),
            queue_class=queue_class,
            serializer=serializer,
            persist=_flag(settings, "SCHEDULER_PERSIST"),
            flush_on_start=_flag(settings, "SCHEDULER_FLUSH_ON_START"),
            idle_before_close=idle_before_close,
            lease_timeout=lease_timeout,
            heartbeat_interval=heartbeat,
            idle_poll_interval=idle_poll,
            prefetch=prefetch,
            # never shorter than SCHEDULER_IDLE_POLL_INTERVAL, where the back-off starts
            idle_poll_max=max(idle_poll, seconds_setting(settings, "SCHEDULER_IDLE_POLL_MAX")),
            enqueue_batch=_flag(settings, "SCHEDULER_ENQUEUE_BATCH"),
            seen_cache=whole_setting(settings, "SCHEDULER_SEEN_CACHE", minimum=0),
            wait_replicas=(
                default_wait(url)
                if settings.get("SCHEDULER_WAIT_REPLICAS") is None
                else whole_setting(settings, "SCHEDULER_WAIT_REPLICAS", minimum=0)
            ),
            wait_timeout_ms=int(seconds_setting(settings, "SCHEDULER_WAIT_TIMEOUT") * 1000),
            worker_id=str(settings.get("SCHEDULER_WORKER_ID") or default_worker_id()),
            request_classes=request_classes_setting(settings),
            url_schemes=url_schemes_setting(settings),
            site_kind=site_kind,
            liveness=_flag(settings, "SCHEDULER_LIVENESS"),
        )

    @property
    def shards(self) -> int:
        """``SCHEDULER_SHARDS``: how many shards the crawl is split into."""
        return len(self.shard_queue_keys) or 1

    @property
    def shard_keys(self) -> tuple[SpiderKeys, ...]:
        """The key names of every shard, the home shard (:attr:`keys`) first."""
        return self.keys.of_shards(self.shards)

    @property
    def keys(self) -> SpiderKeys:
        """The crawl's other key names (the three above may be renamed by settings); on a Redis
        Cluster all of them carry the hash tag ``{<spider>}``."""
        return SpiderKeys.for_url(self.spider, self.url)

    @property
    def cluster(self) -> bool:
        """Whether ``REDIS_URL`` is a Redis Cluster (``redis(s)+cluster://``)."""
        return is_cluster_url(self.url)

    @property
    def masked_url(self) -> str:
        return mask_url(self.url)


def _flag(settings: BaseSettings, name: str) -> bool:
    return flag(settings, name, default(name), FrontierConfigError)


def _positive_int(name: str, raw: Any) -> int:
    try:
        value = int(raw)
    except (TypeError, ValueError):
        raise FrontierConfigError(f"{name} must be an integer, got {raw!r}") from None
    if value <= 0 or str(value) != str(raw).strip():
        raise FrontierConfigError(f"{name} must be a whole number > 0, got {raw!r}")
    return value


def whole_setting(settings: BaseSettings, name: str, *, minimum: int | None = None) -> int:
    """``settings[name]`` (the table's default when unset) as an integer, at least ``minimum``."""
    raw = settings.get(name, default(name))
    wanted = "an integer" if minimum is None else f"a whole number >= {minimum}"
    try:
        value = int(raw)
    except (TypeError, ValueError):
        raise FrontierConfigError(f"{name} must be {wanted}, got {raw!r}") from None
    if str(value) != str(raw).strip() or (minimum is not None and value < minimum):
        raise FrontierConfigError(f"{name} must be {wanted}, got {raw!r}")
    return value


def default_worker_id() -> str:
    """``host:pid:random`` — unique per process, readable by operators."""
    return f"{socket.gethostname()}:{os.getpid()}:{os.urandom(3).hex()}"
