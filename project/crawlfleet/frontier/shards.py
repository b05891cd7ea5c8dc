"""One crawl split into shards (``SCHEDULER_SHARDS``): which shard a request belongs to, what a
worker keeps per shard, and the shard count recorded in Redis.

Each shard is a whole frontier under its own key prefix (``SpiderKeys(spider, tagged, k, n)``,
:func:`crawlfleet.hub.keys.shard_name`): queue, dupefilter, seq, workers, leases, stats,
failed, deadletter, paused. The scripts run on one shard per call, unchanged; the scheduler
multiplexes them. A request's shard is a stable hash of its politeness key (the site of
``POLITENESS_KEY``), so a site's queue and fingerprints live in one shard, and on a Redis
Cluster in one slot. Start URLs, seeding and items stay in shard 0, the home shard.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, field
from typing import Any

from crawlfleet.frontier.config import FrontierConfigError
from crawlfleet.frontier.dupefilter import RedisDupeFilter
from crawlfleet.frontier.queues import RedisQueue
from crawlfleet.hub.keys import MAX_SHARDS, SpiderKeys


def shard_of(site: str, shards: int) -> int:
    """The shard of a politeness key ``site`` (any string): CRC-32 of its UTF-8 bytes mod
    ``shards``, the same in every process and Python version."""
    if shards == 1:
        return 0
    return zlib.crc32(site.encode("utf-8", "surrogatepass")) % shards


def record_shard_count(client: Any, keys: SpiderKeys, shards: int, *data: str) -> None:
    """Record ``shards`` in the home shard (``<spider>:shards``), or refuse in one line when the
    crawl's persisted data has another count: a record that differs, or no record but ``data``
    (home-shard keys a crawl leaves, e.g. its queue and seq) under more than one shard. With one
    shard nothing is written (the crawl's keys are exactly those of an unsharded crawl)."""
    home = keys.home
    raw = client.get(home.shard_count)
    if raw is None and shards > 1:
        if any(client.exists(k) for k in data):
            raw = b"1"  # written by an unsharded crawl, which records nothing
        else:
            client.set(home.shard_count, shards, nx=True)
            raw = client.get(home.shard_count)  # another worker may have been first
    found = 1 if raw is None else int(raw)
    if found != shards:
        raise FrontierConfigError(
            f"SCHEDULER_SHARDS is {shards} but the crawl {keys.spider!r} in Redis was split into "
            f"{found} shard(s) ({home.shard_count}); purge it first (crawlfleet purge "
            f"{keys.spider}) to change the count"
        )


class ClusterStatus:
    """What the last round trip saw of the whole crawl."""

    def __init__(self, raw: list[Any] | None = None) -> None:
        raw = raw or [0, 0, 0, 0, b"", 0]
        self.queued = int(raw[0])
        self.leased_by_others = int(raw[1])
        self.leased_by_me = int(raw[2])
        self.start_urls = int(raw[3])
        seeding = raw[4]
        self.seeding = seeding.decode() if isinstance(seeding, bytes) else str(seeding)
        # `crawlfleet pause SPIDER`: hand out nothing, keep leases alive, never finish
        self.paused = bool(int(raw[5]))

    @classmethod
    def of_shards(cls, shards: list[ClusterStatus]) -> ClusterStatus:
        """The whole crawl from its shards' last statuses: queued and leased summed, start URLs
        and the seeder from the home shard (the first), paused if any shard is."""
        whole = cls()
        home = shards[0]
        whole.queued = sum(s.queued for s in shards)
        whole.leased_by_others = sum(s.leased_by_others for s in shards)
        whole.leased_by_me = sum(s.leased_by_me for s in shards)
        whole.start_urls, whole.seeding = home.start_urls, home.seeding
        whole.paused = any(s.paused for s in shards)
        return whole

    def busy(self, me: str) -> bool:
        """Whether anything anywhere may still produce or hold requests (besides our own work)."""
        return bool(
            self.queued
            or self.leased_by_others
            or self.start_urls
            or self.seeding not in ("", me)
            or self.paused
        )


@dataclass(eq=False)
class Shard:
    """What a worker keeps for one shard: its names, queue and dupefilter, the scripts' KEYS
    and first ARGV, the crawl as the shard's last round trip showed it, and the
    acknowledgements, failures and dead letters waiting for its next round trip."""

    index: int
    keys: SpiderKeys
    queue: RedisQueue
    df: RedisDupeFilter
    script_keys: list[str]
    args: list[str]
    status: ClusterStatus = field(default_factory=ClusterStatus)
    acks: list[str] = field(default_factory=list)
    fails: list[tuple[str, str]] = field(default_factory=list)
    dead: list[tuple[str, str]] = field(default_factory=list)

    def owes(self) -> bool:
        """Whether acknowledgements, failures or dead letters wait for a round trip."""
        return bool(self.acks or self.fails or self.dead)


@dataclass(frozen=True)
class ShardNames:
    """Where one shard of a crawl keeps what the operator tools read: its key names, its queue
    and its fingerprints (the last two may be renamed by settings, so the workers record them)."""

    keys: SpiderKeys
    queue_key: str
    dupefilter_key: str


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def crawl_shards(
    client: Any, spider: str, frontier: dict[str, str] | None = None
) -> list[ShardNames]:
    """Every shard of ``spider``'s crawl as ``client`` reaches it, the home shard first: as many
    as ``<spider>:shards`` records (one without a record), with the queue and dupefilter keys
    the workers wrote to ``<spider>:frontier`` (``frontier``: that hash, if already read)."""
    home = SpiderKeys.for_client(spider, client)
    if frontier is None:
        frontier = {_text(k): _text(v) for k, v in (client.hgetall(home.frontier) or {}).items()}
    return shard_names(home, client.get(home.shard_count), frontier)


def shard_names(home: SpiderKeys, recorded: Any, frontier: dict[str, str]) -> list[ShardNames]:
    """:func:`crawl_shards` from what was read: ``recorded`` is ``<spider>:shards`` (None, or a
    reply that is no count: one shard), ``frontier`` the decoded ``<spider>:frontier``."""
    try:
        shards = int(recorded) if isinstance(recorded, bytes | str | int) else 1
    except ValueError:
        shards = 1
    if not 1 <= shards <= MAX_SHARDS:
        shards = 1
    queues = _listed(frontier.get("shard_queue_keys"))
    filters = _listed(frontier.get("shard_dupefilter_keys"))
    bloom = frontier.get("dupefilter_class", "").endswith("BloomDupeFilter")
    out = []
    for k, keys in enumerate(home.of_shards(shards)):
        queue = frontier.get("queue_key", keys.requests) if k == 0 else keys.requests
        dupefilter = keys.bloomfilter if bloom else keys.dupefilter
        out.append(
            ShardNames(
                keys,
                queues[k] if k < len(queues) else queue,
                filters[k] if k < len(filters) else dupefilter,
            )
        )
    return out


def _listed(raw: str | None) -> list[str]:
    try:
        value = json.loads(raw) if raw else []
    except ValueError:
        return []
    return [str(v) for v in value] if isinstance(value, list) else []
