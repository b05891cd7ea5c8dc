"""One crawl as operators see it, read from the hub in two pipelined round trips (fixed keys and
the worker list, then per-worker keys): the frontier's keys (queue, leases, worker registry and
heartbeats, counters, failed and dead-letter lists, start URLs, the seeding flag), the items
stream, ``<spider>:total``, ``<spider>:paused``, the per-worker series and Scrapy stats under
``<spider>:ops:`` and the queue-depth series; spiders are discovered with a bounded ``SCAN`` for
the ``<spider>:frontier`` hashes every worker writes at start (never ``KEYS``; on a Redis Cluster
on every primary)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis

from crawlfleet.extensions.workerstats import HISTORY
from crawlfleet.frontier.shards import ShardNames, shard_names
from crawlfleet.hub.clock import time_ms
from crawlfleet.hub.keys import FRONTIER_GLOB, SpiderKeys, spider_of_frontier_key
from crawlfleet.hub.urls import is_cluster_client, mask_url
from crawlfleet.views.bloom import DupefilterCache, dupefilter_figures
from crawlfleet.views.hub import hub_health
from crawlfleet.views.politeness import politeness_snapshot
from crawlfleet.views.series import parse_samples, rate_per_minute, throughput_series
from crawlfleet.views.values import as_int, as_num, decode_hash, rounded, text

# Bounds of spider discovery: SCAN batch size and the most spiders reported.
SCAN_COUNT = 1000
MAX_SPIDERS = 200
# Series samples read for a rate (enough for a 60 s window down to 0.5 s sampling).
RATE_SAMPLES = 200


# Frontier counters reported per spider and per worker (docs/reference/redis-keys.md).
FRONTIER_COUNTERS = (
    "scheduler/enqueued",
    "scheduler/dequeued",
    "scheduler/acked",
    "scheduler/requeued",
    "scheduler/failed",
    "scheduler/deadletter",
    "scheduler/requeued_failed",
    "dupefilter/filtered",
)


#: ``spiders[]`` fields summed from the crawl's statistics (every shard's): (field, statistic).
SUMMED_COUNTERS = (
    ("acked", "scheduler/acked"),
    ("enqueued", "scheduler/enqueued"),
    ("dequeued", "scheduler/dequeued"),
    ("requeued", "scheduler/requeued"),
    ("filtered", "dupefilter/filtered"),
)


class UnknownSpiderError(LookupError):
    """No crawl of that name on this Redis; the message lists the spiders that are there."""


def discover_spiders(client: redis.Redis, limit: int = MAX_SPIDERS) -> list[str]:
    """Spiders with a ``<spider>:frontier`` hash, sorted; SCAN in batches, at most ``limit``.

    On a Redis Cluster redis-py's ``scan_iter`` scans every primary, and the hashes are
    ``{<spider>}:frontier``."""
    tagged = is_cluster_client(client)
    names: set[str] = set()
    for key in client.scan_iter(match=FRONTIER_GLOB, count=SCAN_COUNT, _type="hash"):
        name = spider_of_frontier_key(text(key), tagged)
        if name:
            names.add(name)
        if len(names) >= limit:
            break
    return sorted(names)


def require_spider(client: redis.Redis, spider: str, url: str) -> None:
    """Raise :class:`UnknownSpiderError` unless a worker of ``spider`` ever ran against Redis."""
    frontier = SpiderKeys.for_client(spider, client).frontier
    if client.exists(frontier):
        return
    known = discover_spiders(client)
    listed = ", ".join(known) if known else "none"
    raise UnknownSpiderError(
        f"no crawl named {spider!r} at {mask_url(url)} (no {frontier}; known: {listed})"
    )


def _queue_len(pipe: Any, key: str, queue_class: str) -> None:
    if queue_class.endswith("KeyedPriorityQueue"):
        pipe.hget(key, "len")  # its O(1) length counter (crawlfleet.frontier.queues)
    elif queue_class.endswith("PriorityQueue"):
        pipe.zcard(key)
    else:
        pipe.llen(key)


@dataclass
class _Fixed:
    """The first round trip of a crawl's view: its fixed keys and the worker list."""

    now: float
    frontier: dict[str, str]
    registered: Any
    stats: Any
    failed: Any
    dead: Any
    items: Any
    total: Any
    paused: Any
    seeding: Any
    sampled: Any
    shard_count: Any


def _read_fixed(client: redis.Redis, k: SpiderKeys) -> _Fixed:
    pipe = client.pipeline(transaction=False)
    if not k.tagged:  # a cluster pipeline runs no TIME (no key): asked on its own below
        pipe.time()
    pipe.hgetall(k.frontier)
    pipe.zrange(k.workers, 0, -1, withscores=True)
    pipe.hgetall(k.stats)
    pipe.llen(k.failed)
    pipe.llen(k.deadletter)
    pipe.xlen(k.items)
    pipe.get(k.total)
    pipe.get(k.paused)
    pipe.get(k.seeding)
    pipe.zrange(k.ops_workers, 0, -1, withscores=True)
    pipe.get(k.shard_count)
    # A key of another type answers with an error; those numbers are reported as null.
    replies = list(pipe.execute(raise_on_error=False))
    now_raw = client.time() if k.tagged else replies.pop(0)
    frontier_raw, *rest = replies
    now = time_ms(now_raw) / 1000  # seconds
    return _Fixed(now, decode_hash(frontier_raw), *rest)


def _worker_deadlines(fixed: _Fixed) -> dict[str, float | None]:
    """id -> lease deadline (s), None for a worker not registered that wrote samples lately."""
    workers: dict[str, float | None] = {}
    if isinstance(fixed.registered, list):
        for member, score in fixed.registered:
            workers[text(member)] = float(score) / 1000.0
    if isinstance(fixed.sampled, list):
        for member, score in fixed.sampled:
            if fixed.now - float(score) / 1000.0 <= HISTORY:
                workers.setdefault(text(member), None)
    return workers


def _worker_row(
    w: str,
    deadline: float | None,
    now: float,
    replies: Sequence[Any],
    extra: dict[str, Any],
    *,
    with_scrapy: bool,
) -> tuple[dict[str, Any], list[tuple[float, list[float]]]]:
    """One worker's row and its samples, from its replies (leases, record, stats, series and,
    ``with_scrapy``, its Scrapy stats) and what its shards add (``extra``)."""
    leases, whash_raw, wstats_raw, series_raw = replies[:4]
    whash = decode_hash(whash_raw)
    wstats = _summed(decode_hash(wstats_raw), extra["stats"])
    samples = parse_samples(series_raw if isinstance(series_raw, list) else [])
    try:
        info = json.loads(whash.get("info", "{}"))
    except ValueError:
        info = {}
    heartbeat = as_num(whash.get("heartbeat"))
    since_ms = as_num(whash.get("waiting_since"))
    waiting_since = since_ms / 1000.0 if since_ms is not None and math.isfinite(since_ms) else None
    two = bool(samples) and len(samples[-1][1]) > 1  # the series counts items too
    row: dict[str, Any] = {
        "id": w,
        "host": info.get("host") if isinstance(info, dict) else None,
        "pid": info.get("pid") if isinstance(info, dict) else None,
        # Written by the worker stats extension from the crawler role's environment.
        "project": whash.get("project") or None,
        "version": whash.get("version") or None,
        "alive": deadline is not None and deadline > now,
        "registered": deadline is not None,
        "heartbeat_age": None if heartbeat is None else round(now - heartbeat / 1000.0, 3),
        "lease_expires_in": None if deadline is None else round(deadline - now, 3),
        "leased": (leases if isinstance(leases, int) else 0) + extra["leased"],
        "acked": as_int(wstats.get("scheduler/acked")),
        "failed": as_int(wstats.get("scheduler/failed")),
        "pages": int(samples[-1][1][0]) if samples else None,
        "items": int(samples[-1][1][1]) if two else None,
        "pages_per_minute": rounded(rate_per_minute(samples, now, 0)),
        "items_per_minute": rounded(rate_per_minute(samples, now, 1)) if two else None,
        "stopped": "stopped" in whash,
        # what the worker waits for (replicas that do not confirm its writes), since when
        "waiting": whash.get("waiting") or None,
        "waiting_for": None if waiting_since is None else round(now - waiting_since, 3),
    }
    if with_scrapy:
        scrapy = ((k, as_num(v)) for k, v in decode_hash(replies[4]).items())
        row["scrapy"] = {k: v for k, v in scrapy if v is not None}
        row["frontier"] = {k: as_int(wstats.get(k)) for k in FRONTIER_COUNTERS}
    return row, samples


def _read_workers(
    client: redis.Redis,
    k: SpiderKeys,
    frontier: dict[str, str],
    ids: Sequence[str],
    *,
    with_series: bool,
    with_scrapy: bool,
) -> list[Any]:
    """The second round trip: the queue's and the start URLs' lengths, the queue-depth series
    (``with_series``), then per worker its leases, record, stats, series (and Scrapy stats)."""
    queue_key = frontier.get("queue_key", k.requests)
    start_key = frontier.get("start_urls_key", k.start_urls)
    pipe = client.pipeline(transaction=False)
    _queue_len(pipe, queue_key, frontier.get("queue_class", ""))
    if frontier.get("start_urls_as_set") == "1":
        pipe.scard(start_key)
    else:
        pipe.llen(start_key)
    if with_series:
        pipe.lrange(k.ops_queue, 0, -1)
    for w in ids:
        pipe.hlen(k.leases(w))
        pipe.hgetall(k.worker(w))
        pipe.hgetall(k.worker_stats(w))
        pipe.lrange(k.ops_series(w), 0 if with_series else -RATE_SAMPLES, -1)
        if with_scrapy:
            pipe.hgetall(k.ops_scrapy(w))
    return list(pipe.execute(raise_on_error=False))


def _worker_rows(
    workers: dict[str, float | None],
    now: float,
    replies: Sequence[Any],
    shards: dict[str, Any] | None,
    *,
    with_scrapy: bool,
    with_series: bool,
) -> tuple[list[dict[str, Any]], dict[str, list[list[float]]]]:
    """Every worker's row (in id order) and, ``with_series``, its throughput over the last hour."""
    per = 5 if with_scrapy else 4
    rows: list[dict[str, Any]] = []
    throughput: dict[str, list[list[float]]] = {}
    for i, w in enumerate(sorted(workers)):
        extra = shards["workers"][w] if shards is not None else {"leased": 0, "stats": {}}
        row, samples = _worker_row(
            w, workers[w], now, replies[i * per : (i + 1) * per], extra, with_scrapy=with_scrapy
        )
        rows.append(row)
        if with_series:
            cutoff = now - HISTORY
            throughput[w] = [pt for pt in throughput_series(samples) if pt[0] >= cutoff]
    return rows, throughput


def spider_snapshot(
    client: redis.Redis,
    spider: str,
    *,
    with_series: bool = False,
    with_scrapy: bool = False,
    dupefilter_cache: DupefilterCache | None = None,
    hub: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Every number of one spider's crawl (the ``spiders[]`` entry of ``status --json``).

    ``with_series`` adds ``series`` (the dashboard's charts: queue depth and per-worker
    throughput over the last hour); ``with_scrapy`` adds each worker's Scrapy stats (metrics).
    ``hub`` is :func:`hub_health` for the politeness verdict (None: one PING measures it).
    """
    k = SpiderKeys.for_client(spider, client)
    fixed = _read_fixed(client, k)
    now, frontier = fixed.now, fixed.frontier
    others = shard_names(k, fixed.shard_count, frontier)[1:]  # a sharded crawl's shards 1, 2, …
    queue_key = frontier.get("queue_key", k.requests)
    queue_class = frontier.get("queue_class", "")
    workers = _worker_deadlines(fixed)
    ids = sorted(workers)

    replies = _read_workers(
        client, k, frontier, ids, with_series=with_series, with_scrapy=with_scrapy
    )
    queued, start_urls = _queued(replies[0]), replies[1]
    failed, dead = fixed.failed, fixed.dead
    shards = _shard_sums(client, others, queue_class, ids) if others else None
    if shards is not None:
        queued = _add(queued, shards["queued"])
        failed, dead = _add(failed, shards["failed"]), _add(dead, shards["deadletter"])
    queue_samples = parse_samples(replies[2]) if with_series else []
    rest = replies[3 if with_series else 2 :]

    worker_rows, throughput = _worker_rows(
        workers, now, rest, shards, with_scrapy=with_scrapy, with_series=with_series
    )

    stats = _summed(decode_hash(fixed.stats), shards["stats"] if shards is not None else {})
    rates = [r["pages_per_minute"] for r in worker_rows if r["pages_per_minute"] is not None]
    seeding, total, items = fixed.seeding, fixed.total, fixed.items
    result: dict[str, Any] = {
        "spider": spider,
        "paused": fixed.paused is not None and not isinstance(fixed.paused, Exception),
        "queue_key": queue_key,
        "queue_class": queue_class.rsplit(".", 1)[-1] or None,
        "shards": 1 + len(others),
        "queued": queued if isinstance(queued, int) else None,
        "start_urls": start_urls if isinstance(start_urls, int) else None,
        "leased": sum(r["leased"] for r in worker_rows),
        **{field: as_int(stats.get(name)) for field, name in SUMMED_COUNTERS},
        "failed": failed if isinstance(failed, int) else None,
        "deadletter": dead if isinstance(dead, int) else None,
        "items": items if isinstance(items, int) else None,
        "total": as_int(total) if isinstance(total, bytes) and text(total).isdigit() else None,
        "pages_per_minute": round(sum(rates), 2) if rates else None,
        "seeding": text(seeding) if isinstance(seeding, bytes) else None,
        "workers_alive": sum(1 for r in worker_rows if r["alive"]),
        "workers": worker_rows,
        "dupefilter": (
            dupefilter_cache.get(client, spider, frontier)
            if dupefilter_cache is not None
            else dupefilter_figures(client, spider, frontier)
        ),
        "counters": {k: as_int(stats.get(k)) for k in FRONTIER_COUNTERS},
        "time": round(now, 3),
    }
    result["politeness"] = _politeness(
        client, frontier.get("politeness_namespace") or spider, now, result, hub
    )
    if with_series:
        result["series"] = {
            "queue": [[t, *v[:2]] for t, v in queue_samples if t >= now - HISTORY and len(v) >= 2],
            "throughput": throughput,
        }
    return result


def _politeness(
    client: redis.Redis,
    namespace: str,
    now: float,
    crawl: dict[str, Any],
    hub: dict[str, Any] | None,
) -> dict[str, Any]:
    """The crawl's politeness keys and the verdict on what binds it (``hub``: as above)."""
    return politeness_snapshot(
        client,
        namespace,
        now * 1000,
        waiting=sum(crawl[f] or 0 for f in ("queued", "start_urls", "leased")),
        workers_alive=crawl["workers_alive"],
        paused=crawl["paused"],
        hub=hub if hub is not None else hub_health(client),
    )


def _queued(raw: Any) -> Any:
    """A queue length reply as a number (a keyed queue's counter: bytes, None when empty)."""
    if raw is None or isinstance(raw, bytes):
        return int(raw or 0)
    return raw


def _add(a: Any, b: Any) -> Any:
    """``a + b`` of two replies that are numbers, else ``a`` (an error or None stays one)."""
    return a + b if isinstance(a, int) and isinstance(b, int) else a


def _summed(a: dict[str, str], b: dict[str, int]) -> dict[str, str]:
    """Counter hash ``a`` with the counters of ``b`` added (the shards of a sharded crawl)."""
    if not b:
        return a
    out = dict(a)
    for name, value in b.items():
        out[name] = str(as_int(out.get(name)) + value)
    return out


def _shard_sums(
    client: redis.Redis, shards: Sequence[ShardNames], queue_class: str, ids: Sequence[str]
) -> dict[str, Any]:
    """What shards 1, 2, … of a sharded crawl add to the home shard's numbers (one pipelined
    round trip): queued, failed, dead letters, the crawl's counters, and per worker its leases
    and counters. Paused, start URLs, the seeder and items live in the home shard only."""
    pipe = client.pipeline(transaction=False)
    for shard in shards:
        _queue_len(pipe, shard.queue_key, queue_class)
        pipe.llen(shard.keys.failed)
        pipe.llen(shard.keys.deadletter)
        pipe.hgetall(shard.keys.stats)
        for w in ids:
            pipe.hlen(shard.keys.leases(w))
            pipe.hgetall(shard.keys.worker_stats(w))
    replies = iter(pipe.execute(raise_on_error=False))
    sums: dict[str, Any] = {"queued": 0, "failed": 0, "deadletter": 0, "stats": {}}
    sums["workers"] = {w: {"leased": 0, "stats": {}} for w in ids}

    def count(into: dict[str, int], raw: Any) -> None:
        for name, value in decode_hash(raw).items():
            into[name] = into.get(name, 0) + as_int(value)

    for _ in shards:
        for field in ("queued", "failed", "deadletter"):
            value = _queued(next(replies)) if field == "queued" else next(replies)
            sums[field] += value if isinstance(value, int) else 0
        count(sums["stats"], next(replies))
        for w in ids:
            leases = next(replies)
            sums["workers"][w]["leased"] += leases if isinstance(leases, int) else 0
            count(sums["workers"][w]["stats"], next(replies))
    return sums
