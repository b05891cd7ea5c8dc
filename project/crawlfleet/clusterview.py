"""The operators' read model: the numbers of a crawl, read from the hub's Redis in few round trips.

``crawlfleet status``, the dashboard page and its ``/metrics`` all call :func:`snapshot`, so they
always agree. Per spider it costs two pipelined round trips (fixed keys and the worker list, then
per-worker keys), plus two for the Bloom filter; spiders are discovered with a bounded ``SCAN``
for the ``<spider>:frontier`` hashes every worker writes at start (never ``KEYS``; on a Redis
Cluster on every primary, the keys named ``{<spider>}:…`` by ``SpiderKeys.for_client``).

Where the numbers come from (keys: docs/reference/redis-keys.md):

* frontier keys: queue, leases, worker registry and heartbeats, cluster and per-worker counters,
  failed and dead-letter lists, start URLs, the seeding flag;
* ``<spider>:items`` (items stream), ``<spider>:total`` (the spider's known total), the Bloom
  filter's own keys;
* keys of the operator tools: ``<spider>:paused`` (``crawlfleet pause``), per-worker time series
  and Scrapy stats under ``<spider>:ops:`` (``crawlfleet.extensions.workerstats``) and the
  queue-depth series (the dashboard's sampler);
* the politeness budget's keys (``crawlfleet.politeness``): the most recently used state hashes
  of ``<namespace>:politeness:index`` and the recent bans (``<namespace>:politeness:bans``; the
  namespace is the ``politeness_namespace`` of ``<spider>:frontier``, else the spider), two more
  round trips, and a PING's round trip for the hub (:func:`bound_by` says which limit binds);
* for the ``hub`` entry (the alerts' inputs): the job records and the agents' registry
  (``crawlfleet.jobs.store``), ``INFO memory`` and ``INFO errorstats`` (a full hub);
* the pools' ``/count`` endpoints, when their URLs are configured (an ``https://`` pool verified
  against ``<POOL>_CA_FILE``, else ``CRAWLFLEET_CA_FILE``, as the workers' pool clients do).
"""

from __future__ import annotations

import itertools
import json
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import redis
from scrapy.exceptions import NotConfigured
from scrapy.settings import BaseSettings

from crawlfleet.extensions.workerstats import HISTORY
from crawlfleet.frontier.bloom import BloomFilter
from crawlfleet.frontier.bloomlayout import BloomConfigError
from crawlfleet.frontier.shards import ShardNames, crawl_shards, shard_names
from crawlfleet.hub.keys import FRONTIER_GLOB, SpiderKeys, spider_of_frontier_key
from crawlfleet.hub.urls import is_cluster_client, mask_secrets, mask_url, url_secrets
from crawlfleet.jobs import store
from crawlfleet.middlewares.poolclient import ca_context
from crawlfleet.politeness import learning

SCHEMA_VERSION = 1
# Bounds of spider discovery: SCAN batch size and the most spiders reported.
SCAN_COUNT = 1000
MAX_SPIDERS = 200
# Rates are computed over this window (seconds); series samples older than HISTORY are dropped.
RATE_WINDOW = 60.0
# Series samples read for a rate (enough for a 60 s window down to 0.5 s sampling).
RATE_SAMPLES = 200
POOL_TIMEOUT = 2.0

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


class UnknownSpiderError(LookupError):
    """No crawl of that name on this Redis; the message lists the spiders that are there."""


def _s(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _num(value: Any) -> float | int | None:
    try:
        text = _s(value)
        return int(text) if text.lstrip("-").isdigit() else float(text)
    except (TypeError, ValueError):
        return None


def _decode_hash(raw: Any) -> dict[str, str]:
    if not isinstance(raw, dict):
        return {}
    return {_s(k): _s(v) for k, v in raw.items()}


def discover_spiders(client: redis.Redis, limit: int = MAX_SPIDERS) -> list[str]:
    """Spiders with a ``<spider>:frontier`` hash, sorted; SCAN in batches, at most ``limit``.

    On a Redis Cluster redis-py's ``scan_iter`` scans every primary, and the hashes are
    ``{<spider>}:frontier``."""
    tagged = is_cluster_client(client)
    names: set[str] = set()
    for key in client.scan_iter(match=FRONTIER_GLOB, count=SCAN_COUNT, _type="hash"):
        name = spider_of_frontier_key(_s(key), tagged)
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


# -- series ------------------------------------------------------------------------------------


def parse_samples(raw: Iterable[Any]) -> list[tuple[float, list[float]]]:
    """``[(seconds, [values…])]`` from ``"<ms> <v1> <v2> …"`` entries; junk entries are skipped."""
    out: list[tuple[float, list[float]]] = []
    for entry in raw:
        parts = _s(entry).split()
        try:
            t = int(parts[0]) / 1000.0
            values = [float(p) for p in parts[1:]]
        except (IndexError, ValueError):
            continue
        out.append((t, values))
    out.sort(key=lambda s: s[0])
    return out


def rate_per_minute(
    samples: Sequence[tuple[float, list[float]]], now: float, index: int = 0
) -> float | None:
    """Per-minute rate of counter ``index`` over the last RATE_WINDOW seconds of ``samples``.

    The base is the last sample at least a window before the newest one (or the first sample);
    a worker silent for longer than a window has a rate of 0; fewer than two samples give None.
    """
    if len(samples) < 2:
        return None
    t_last, v_last = samples[-1]
    if now - t_last > RATE_WINDOW:
        return 0.0
    base = samples[0]
    for sample in samples:
        if sample[0] <= t_last - RATE_WINDOW:
            base = sample
        else:
            break
    span = t_last - base[0]
    if span <= 0:
        return None
    return max(0.0, v_last[index] - base[1][index]) / span * 60.0


def throughput_series(
    samples: Sequence[tuple[float, list[float]]], index: int = 0
) -> list[list[float]]:
    """``[[seconds, per-minute rate]]`` between consecutive samples (a counter reset counts 0)."""
    points: list[list[float]] = []
    for (t0, v0), (t1, v1) in itertools.pairwise(samples):
        if t1 > t0:
            points.append([t1, round(max(0.0, v1[index] - v0[index]) / (t1 - t0) * 60.0, 2)])
    return points


# -- pools -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PoolConfig:
    """Where the pools are; an empty URL means "not configured" (the count is reported as null)."""

    proxypool_url: str = ""
    proxypool_api_key: str = ""
    accountpool_url: str = ""
    accountpool_api_key: str = ""
    accountpool_site: str = "demosite"


def _pool_get(url: str, api_key: str, pool: str) -> httpx.Response:
    headers = {"X-API-Key": api_key} if api_key else {}
    _, verify = ca_context(BaseSettings(), pool)
    # trust_env=False: a pool on the hub must not be reached through an HTTP(S)_PROXY.
    return httpx.get(url, headers=headers, timeout=POOL_TIMEOUT, trust_env=False, verify=verify)


def pool_counts(config: PoolConfig) -> dict[str, dict[str, Any]]:
    """``{"proxypool": {"url", "count", "error"}, "accountpool": {…, "site"}}``; never raises."""
    out: dict[str, dict[str, Any]] = {}
    if config.proxypool_url:
        url = config.proxypool_url.rstrip("/") + "/count"
        out["proxypool"] = _count_of(
            url, config.proxypool_api_key, "PROXYPOOL", lambda r: int(r.text.strip())
        )
    if config.accountpool_url:
        site = config.accountpool_site
        url = f"{config.accountpool_url.rstrip('/')}/{site}/count"
        entry = _count_of(
            url, config.accountpool_api_key, "ACCOUNTPOOL", lambda r: int(r.json()["count"])
        )
        entry["site"] = site
        out["accountpool"] = entry
    return out


def _count_of(url: str, api_key: str, pool: str, parse: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"url": mask_url(url), "count": None, "error": None}
    try:
        response = _pool_get(url, api_key, pool)
        if response.status_code != 200:
            entry["error"] = f"HTTP {response.status_code}: {response.text.strip()[:200]}"
        else:
            entry["count"] = parse(response)
    except httpx.HTTPError as exc:
        entry["error"] = f"{type(exc).__name__}: {exc}"
    except NotConfigured as exc:
        entry["error"] = str(exc)
    except (ValueError, KeyError, TypeError) as exc:
        entry["error"] = f"unexpected answer: {exc}"
    if entry["error"]:
        # A pool's reply or an exception may echo the key or the URL's credentials.
        error = entry["error"].replace(url, entry["url"])
        entry["error"] = mask_secrets(error, (api_key, *url_secrets(url)))
    return entry


# -- the hub -----------------------------------------------------------------------------------


class HubProbe:
    """Remembers Redis's CPU time between snapshots, so that a watching reader (``status
    --watch``, the dashboard) sees the share of a core Redis used since its previous look."""

    def __init__(self) -> None:
        self._last: tuple[float, float] | None = None  # (monotonic s, CPU s) of the last look
        self._share: float | None = None

    def cpu(self, client: redis.Redis) -> float | None:
        """Redis's CPU seconds per second since the previous call at least a second ago (None:
        the first call, or ``INFO`` refused by the user's ACL)."""
        try:
            info = client.info("cpu")
            used = float(info["used_cpu_sys"]) + float(info["used_cpu_user"])
        except (redis.ResponseError, KeyError, TypeError, ValueError):
            return None
        now = time.monotonic()
        last = self._last
        if last is not None and now - last[0] < 1.0:
            return self._share
        self._last = (now, used)
        self._share = None if last is None else round(max(used - last[1], 0.0) / (now - last[0]), 3)
        return self._share


def hub_health(client: redis.Redis, probe: HubProbe | None = None) -> dict[str, Any]:
    """``{"rtt_ms": the round trip of one PING, "cpu": HubProbe.cpu or None}``.

    Redis runs one command at a time: when its CPU is saturated, or a slow command or script
    holds it, every client's round trip grows; so the PING's round trip is the signal any reader
    can measure (also the dashboard's ACL user, which may not run ``INFO``).
    """
    start = time.perf_counter()
    client.ping()
    rtt = (time.perf_counter() - start) * 1000
    return {"rtt_ms": round(rtt, 3), "cpu": probe.cpu(client) if probe is not None else None}


# -- politeness --------------------------------------------------------------------------------

# Keys read per crawl: the most recently used ones of the politeness index.
POLITENESS_KEYS = 50
# A key leased or banned within ACTIVE_WINDOW seconds is active; bans are counted over the last
# BAN_WINDOW seconds (the ban record keeps ten minutes).
ACTIVE_WINDOW = 60.0
BAN_WINDOW = 300.0
# A key is "full" when its clean responses per second reach NEAR_BUDGET of its budget; while
# its window is younger than OBSERVE_MIN seconds (no rate yet), when its next free slot lies
# less than max(one interval, SLOT_SLACK) seconds in the past (every slot up to now was taken).
# Slots alone do not say it: a worker that cannot keep up leases slots and drops them.
NEAR_BUDGET = 0.8
SLOT_SLACK = 0.5
OBSERVE_MIN = 1.0
# The hub binds when a PING takes HUB_SLOW_MS or more, or Redis uses HUB_BUSY_CPU of a core.
HUB_SLOW_MS = 20.0
HUB_BUSY_CPU = 0.9
# The rate history: entries read per crawl, keys charted (the most recently used), and how far
# back (s).
HISTORY_READ = 2000
HISTORY_KEYS = 8
HISTORY_SECONDS = 3600.0
# Garbage state hashes: at most this many warnings per crawl (the rest are counted).
MAX_WARNINGS = 5
# Key states that mean the site holds the key back.
SITE_BOUND = ("full", "cooling", "banned")
_NEVER = learning.NEVER


def politeness_key(
    key: str, raw: dict[str, str], now_ms: float, used_ms: float, recent_bans: int
) -> dict[str, Any]:
    """One key's row (``politeness.keys[]`` of ``status --json``) from its state hash at
    ``now_ms`` (the scripts' clock); :class:`BadKeyState` when a field is not a number."""
    f = learning.decode(key, raw)
    rate = f.get("rate", 0.0) if f.get("rate", 0.0) > 0 else None
    cap = f.get("cap", 0.0) if f.get("cap", 0.0) > 0 else None
    budget = min(r for r in (rate, cap) if r is not None) if rate or cap else None
    tat = f.get("tat", _NEVER)
    next_slot = (tat - now_ms) / 1000 if tat > _NEVER else None
    cooldown = max(f.get("cool", 0.0) - now_ms, 0.0) / 1000
    # clean responses a second over this window and the one before (workers report theirs
    # with their next lease: one window alone lags)
    elapsed = (now_ms - f.get("window", 0.0) + f.get("pwin", 0.0)) / 1000
    observed = (
        (f.get("oks", 0.0) + f.get("pok", 0.0)) / elapsed
        if f.get("window", 0.0) > 0 and elapsed >= OBSERVE_MIN
        else None
    )
    banned = f.get("banned", _NEVER)
    ban_age = (now_ms - banned) / 1000 if banned > _NEVER else None
    idle = (now_ms - used_ms) / 1000
    if idle > ACTIVE_WINDOW:
        state = "idle"
    elif cooldown > 0:
        state = "cooling"
    elif ban_age is not None and ban_age <= ACTIVE_WINDOW:
        state = "banned"
    elif budget is not None and (
        observed >= NEAR_BUDGET * budget
        if observed is not None
        else next_slot is not None and next_slot > -max(1 / budget, SLOT_SLACK)
    ):
        state = "full"
    else:
        state = "slack"
    site, _, proxy = key.partition("@")
    return {
        "key": key,
        "site": site,
        "proxy": proxy or None,
        "state": state,
        "budget": _round(budget),
        "rate": _round(rate),
        "cap": _round(cap),
        "observed": _round(observed),
        "next_slot": _round(next_slot),
        "cooldown": round(cooldown, 2),
        "bans": int(f.get("bans", 0)),
        "bans_recent": recent_bans,
        "last_ban_age": _round(ban_age),
        "idle": round(idle, 2),
        "phase": learning.phase(f, now_ms),
        "learned": _round(f.get("good") or None),
        "ceiling": _round(f.get("bad") or None),
        "why": learning.why(f),
        "learned_age": _round((now_ms - f["learned"]) / 1000 if f.get("learned") else None),
    }


def bound_by(
    keys: Sequence[dict[str, Any]],
    *,
    waiting: int,
    workers_alive: int,
    paused: bool,
    hub: dict[str, Any] | None,
) -> tuple[str, str]:
    """Which limit binds the crawl now, and why: ``(verdict, one-line reason)``, in this order:

    ``none`` nothing waits (no queued, start-URL or leased request) or the crawl is paused;
    ``hub`` a PING took HUB_SLOW_MS or more, or Redis used HUB_BUSY_CPU of a core;
    ``site`` at least half of the active keys are full, cooling down or banned: add proxies;
    ``workers`` otherwise (keys below their budget while requests wait): add worker hosts.
    """
    if paused:
        return "none", "paused"
    if waiting <= 0:
        return "none", "idle: no request waits"
    if hub is not None:
        cpu = hub.get("cpu")
        if hub["rtt_ms"] >= HUB_SLOW_MS:
            return "hub", f"Redis answers a PING in {hub['rtt_ms']:.0f} ms: relieve the hub"
        if cpu is not None and cpu >= HUB_BUSY_CPU:
            return "hub", f"Redis uses {cpu:.0%} of a core: relieve the hub"
    if not workers_alive:
        return "workers", f"{waiting:,} requests wait and no worker is alive: start workers"
    active = [k for k in keys if k["state"] != "idle"]
    held = [k for k in active if k["state"] in SITE_BOUND]
    if active and 2 * len(held) >= len(active):
        states = ", ".join(
            f"{sum(1 for k in held if k['state'] == s)} {s}"
            for s in SITE_BOUND
            if any(k["state"] == s for k in held)
        )
        return "site", f"{len(held)} of {len(active)} active keys held ({states}): add proxies"
    slack = len(active) - len(held)
    return "workers", (
        f"{slack} of {len(active)} active keys below their budget while requests wait: add hosts"
        if active
        else "requests wait, no key paced: add hosts"
    )


def _recent_bans(rows: Any, prefix: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for member in rows if isinstance(rows, list) else []:
        _, _, state = _s(member).partition(" ")
        if state.startswith(prefix):
            key = state[len(prefix) :]
            counts[key] = counts.get(key, 0) + 1
    return counts


def politeness_snapshot(
    client: redis.Redis,
    namespace: str,
    now_ms: float,
    *,
    waiting: int = 0,
    workers_alive: int = 0,
    paused: bool = False,
    hub: dict[str, Any] | None = None,
    limit: int = POLITENESS_KEYS,
) -> dict[str, Any]:
    """The ``politeness`` section of a crawl (two pipelined round trips): its ``limit`` most
    recently used keys (``namespace`` is ``POLITENESS_NAMESPACE``), and :func:`bound_by`.

    ``now_ms`` is the scripts' clock (Redis ``TIME``; a test's injected clock). A state hash with
    a field that is not a number is left out and named in ``warnings``.
    """
    k = SpiderKeys.for_client(namespace, client)
    prefix = k.politeness("")
    pipe = client.pipeline(transaction=False)
    pipe.zrevrange(k.politeness_index, 0, limit - 1, withscores=True)
    pipe.zcard(k.politeness_index)
    pipe.zrangebyscore(k.politeness_bans, now_ms - BAN_WINDOW * 1000, "+inf")
    pipe.lrange(k.politeness_history, -HISTORY_READ, -1)
    index, total, ban_rows, history = pipe.execute(raise_on_error=False)
    used = [(_s(m), float(t)) for m, t in index] if isinstance(index, list) else []
    bans = _recent_bans(ban_rows, prefix)
    pipe = client.pipeline(transaction=False)
    for name, _ in used:
        pipe.hgetall(name)
    hashes = pipe.execute(raise_on_error=False) if used else []
    rows: list[dict[str, Any]] = []
    warnings: list[str] = []
    skipped = 0
    for (name, used_ms), raw in zip(used, hashes, strict=True):
        key = name[len(prefix) :] if name.startswith(prefix) else ""
        problem = None if key else f"politeness index member {name[:80]!r} is not a state hash"
        if key and isinstance(raw, Exception):  # a key of another type
            problem = f"politeness key {key!r}: {str(raw)[:80]}; key skipped"
        elif key:
            if not raw:
                continue  # expired since its last use (the index is trimmed once a window)
            try:
                rows.append(
                    politeness_key(key, _decode_hash(raw), now_ms, used_ms, bans.get(key, 0))
                )
            except learning.BadKeyState as exc:
                problem = f"{exc} is not a number; key skipped"
        if problem:
            skipped += 1
            if len(warnings) < MAX_WARNINGS:
                warnings.append(problem)
    if skipped > len(warnings):
        warnings.append(f"{skipped - len(warnings)} more politeness keys skipped")
    verdict, reason = bound_by(
        rows, waiting=waiting, workers_alive=workers_alive, paused=paused, hub=hub
    )
    return {
        "namespace": namespace,
        "bound": verdict,
        "reason": reason,
        "keys_total": total if isinstance(total, int) else None,
        "keys_active": sum(1 for r in rows if r["state"] != "idle"),
        "bans_recent": sum(bans.values()),
        "keys": rows,
        "history": rate_history(history, prefix, rows[:HISTORY_KEYS], now_ms),
        "warnings": warnings,
    }


def rate_history(
    entries: Any, prefix: str, rows: Sequence[dict[str, Any]], now_ms: float
) -> dict[str, list[list[Any]]]:
    """``politeness.history``: for each of ``rows``' keys, how its rate moved over the last
    HISTORY_SECONDS — ``[seconds, rate, why]`` per change (``why``: ``learning.WHY``'s words;
    ``ban`` and ``slow-down`` are the chart's marks), oldest first. Unreadable entries are
    skipped."""
    wanted = {r["key"] for r in rows}
    found: dict[str, list[list[Any]]] = {key: [] for key in wanted}
    for entry in entries if isinstance(entries, list) else []:
        parts = _s(entry).split(" ", 3)
        if len(parts) != 4 or not parts[3].startswith(prefix):
            continue
        key = parts[3][len(prefix) :]
        try:
            at, rate, why = float(parts[0]), float(parts[1]), int(parts[2])
        except ValueError:
            continue
        if key in found and now_ms - at <= HISTORY_SECONDS * 1000 and math.isfinite(rate):
            found[key].append([round(at / 1000, 3), rate, learning.WHY.get(why, "start")])
    return found


# -- one spider --------------------------------------------------------------------------------


def _queue_len(pipe: Any, key: str, queue_class: str) -> None:
    if queue_class.endswith("KeyedPriorityQueue"):
        pipe.hget(key, "len")  # its O(1) length counter (crawlfleet.frontier.queues)
    elif queue_class.endswith("PriorityQueue"):
        pipe.zcard(key)
    else:
        pipe.llen(key)


def _dupefilter(client: redis.Redis, spider: str, frontier: dict[str, str]) -> dict[str, Any]:
    """The crawl's fingerprints: its filter's figures, summed over the shards of a sharded crawl
    (``key`` is the home shard's; the fill and error rates the worst shard's)."""
    cls = frontier.get("dupefilter_class", "")
    info: dict[str, Any] = {
        "class": cls.rsplit(".", 1)[-1] or None,
        "key": None,
        "fingerprints": None,
        "capacity": None,
        "fill_ratio": None,
        "error_rate": None,
        "design_error_rate": None,
        "over_capacity": None,
    }
    if not cls:
        return info
    shards = crawl_shards(client, spider, frontier)
    info["key"] = shards[0].dupefilter_key
    if cls.endswith("BloomDupeFilter"):
        try:
            blooms = [BloomFilter.existing(client, s.dupefilter_key).info() for s in shards]
        except BloomConfigError:
            return info
        info.update(
            fingerprints=_sum_or_none(b["count_estimate"] for b in blooms),
            capacity=sum(b["capacity"] for b in blooms),
            fill_ratio=max(b["fill_ratio"] for b in blooms),
            error_rate=max(b["estimated_error_rate"] for b in blooms),
            design_error_rate=blooms[0]["error_rate"],
            over_capacity=any(b["over_capacity"] for b in blooms),
        )
    else:
        sizes = [
            int(client.scard(s.dupefilter_key))
            for s in shards
            if client.type(s.dupefilter_key) in (b"set", "set")
        ]
        if sizes:
            info["fingerprints"] = sum(sizes)
    return info


def _sum_or_none(values: Iterable[Any]) -> int | None:
    """The sum, or None when any is None (a count the filter cannot tell)."""
    total = 0
    for value in values:
        if value is None:
            return None
        total += value
    return total


class DupefilterCache:
    """Reuse a spider's Bloom filter figures for ``ttl`` seconds.

    They change slowly and come from ``BITCOUNT`` over the whole filter (171 MiB for 10^8 URLs
    at 0.1 %): Redis time the frontier should not pay on every redraw of ``status --watch`` or
    every poll of the dashboard. A set's size (``SCARD``) costs nothing and is never cached.
    """

    def __init__(self, ttl: float = 30.0) -> None:
        self.ttl = ttl
        self._entries: dict[str, tuple[float, dict[str, Any]]] = {}

    def get(self, client: redis.Redis, spider: str, frontier: dict[str, str]) -> dict[str, Any]:
        now = time.monotonic()
        entry = self._entries.get(spider)
        if entry is not None and now - entry[0] < self.ttl:
            return entry[1]
        info = _dupefilter(client, spider, frontier)
        if info["fill_ratio"] is not None:
            self._entries[spider] = (now, info)
        return info


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
    (
        frontier_raw,
        registered,
        stats_raw,
        failed,
        dead,
        items,
        total,
        paused,
        seeding,
        sampled,
        shard_count,
    ) = replies
    now = float(now_raw[0]) + float(now_raw[1]) / 1e6
    frontier = _decode_hash(frontier_raw)
    others = shard_names(k, shard_count, frontier)[1:]  # a sharded crawl's shards 1, 2, …
    queue_key = frontier.get("queue_key", k.requests)
    queue_class = frontier.get("queue_class", "")
    start_key = frontier.get("start_urls_key", k.start_urls)

    workers: dict[str, float | None] = {}  # id -> lease deadline (s), None when not registered
    if isinstance(registered, list):
        for member, score in registered:
            workers[_s(member)] = float(score) / 1000.0
    if isinstance(sampled, list):
        for member, score in sampled:
            if now - float(score) / 1000.0 <= HISTORY:
                workers.setdefault(_s(member), None)
    ids = sorted(workers)

    pipe = client.pipeline(transaction=False)
    _queue_len(pipe, queue_key, queue_class)
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
    replies = list(pipe.execute(raise_on_error=False))
    queued, start_urls = _queued(replies[0]), replies[1]
    shards = _shard_sums(client, others, queue_class, ids) if others else None
    if shards is not None:
        queued = _add(queued, shards["queued"])
        failed, dead = _add(failed, shards["failed"]), _add(dead, shards["deadletter"])
    queue_samples = parse_samples(replies[2]) if with_series else []
    rest = replies[3 if with_series else 2 :]
    per = 5 if with_scrapy else 4

    worker_rows: list[dict[str, Any]] = []
    throughput: dict[str, list[list[float]]] = {}
    for i, w in enumerate(ids):
        leases, whash_raw, wstats_raw, series_raw = rest[i * per : i * per + 4]
        whash = _decode_hash(whash_raw)
        extra: dict[str, Any] = (
            shards["workers"][w] if shards is not None else {"leased": 0, "stats": {}}
        )
        wstats = _summed(_decode_hash(wstats_raw), extra["stats"])
        samples = parse_samples(series_raw if isinstance(series_raw, list) else [])
        try:
            info = json.loads(whash.get("info", "{}"))
        except ValueError:
            info = {}
        deadline = workers[w]
        heartbeat = _num(whash.get("heartbeat"))
        since_ms = _num(whash.get("waiting_since"))
        waiting_since = (
            since_ms / 1000.0 if since_ms is not None and math.isfinite(since_ms) else None
        )
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
            "acked": _int(wstats.get("scheduler/acked")),
            "failed": _int(wstats.get("scheduler/failed")),
            "pages": int(samples[-1][1][0]) if samples else None,
            "items": int(samples[-1][1][1]) if samples and len(samples[-1][1]) > 1 else None,
            "pages_per_minute": _round(rate_per_minute(samples, now, 0)),
            "items_per_minute": _round(rate_per_minute(samples, now, 1))
            if samples and len(samples[-1][1]) > 1
            else None,
            "stopped": "stopped" in whash,
            # what the worker waits for (replicas that do not confirm its writes), since when
            "waiting": whash.get("waiting") or None,
            "waiting_for": None if waiting_since is None else round(now - waiting_since, 3),
        }
        if with_scrapy:
            row["scrapy"] = {
                k: v
                for k, v in ((k, _num(v)) for k, v in _decode_hash(rest[i * per + 4]).items())
                if v is not None
            }
            row["frontier"] = {k: _int(wstats.get(k)) for k in FRONTIER_COUNTERS}
        worker_rows.append(row)
        if with_series:
            cutoff = now - HISTORY
            throughput[w] = [pt for pt in throughput_series(samples) if pt[0] >= cutoff]

    stats = _summed(_decode_hash(stats_raw), shards["stats"] if shards is not None else {})
    rates = [r["pages_per_minute"] for r in worker_rows if r["pages_per_minute"] is not None]
    seeding_s = _s(seeding) if isinstance(seeding, bytes) else None
    result: dict[str, Any] = {
        "spider": spider,
        "paused": paused is not None and not isinstance(paused, Exception),
        "queue_key": queue_key,
        "queue_class": queue_class.rsplit(".", 1)[-1] or None,
        "shards": 1 + len(others),
        "queued": queued if isinstance(queued, int) else None,
        "start_urls": start_urls if isinstance(start_urls, int) else None,
        "leased": sum(r["leased"] for r in worker_rows),
        "acked": _int(stats.get("scheduler/acked")),
        "enqueued": _int(stats.get("scheduler/enqueued")),
        "dequeued": _int(stats.get("scheduler/dequeued")),
        "requeued": _int(stats.get("scheduler/requeued")),
        "filtered": _int(stats.get("dupefilter/filtered")),
        "failed": failed if isinstance(failed, int) else None,
        "deadletter": dead if isinstance(dead, int) else None,
        "items": items if isinstance(items, int) else None,
        "total": _int(total) if isinstance(total, bytes) and _s(total).isdigit() else None,
        "pages_per_minute": round(sum(rates), 2) if rates else None,
        "seeding": seeding_s,
        "workers_alive": sum(1 for r in worker_rows if r["alive"]),
        "workers": worker_rows,
        "dupefilter": (
            dupefilter_cache.get(client, spider, frontier)
            if dupefilter_cache is not None
            else _dupefilter(client, spider, frontier)
        ),
        "counters": {k: _int(stats.get(k)) for k in FRONTIER_COUNTERS},
        "time": round(now, 3),
    }
    waiting = sum(result[f] or 0 for f in ("queued", "start_urls", "leased"))
    result["politeness"] = politeness_snapshot(
        client,
        frontier.get("politeness_namespace") or spider,
        now * 1000,
        waiting=waiting,
        workers_alive=result["workers_alive"],
        paused=result["paused"],
        hub=hub if hub is not None else hub_health(client),
    )
    if with_series:
        result["series"] = {
            "queue": [[t, *v[:2]] for t, v in queue_samples if t >= now - HISTORY and len(v) >= 2],
            "throughput": throughput,
        }
    return result


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
        out[name] = str(_int(out.get(name)) + value)
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
        for name, value in _decode_hash(raw).items():
            into[name] = into.get(name, 0) + _int(value)

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


def _round(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, 2)


def snapshot(
    client: redis.Redis,
    url: str,
    spiders: Sequence[str] | None = None,
    pools: PoolConfig | None = None,
    *,
    with_series: bool = False,
    with_scrapy: bool = False,
    dupefilter_cache: DupefilterCache | None = None,
    hub_probe: HubProbe | None = None,
) -> dict[str, Any]:
    """The whole view (``status --json``): every (or the given) spider, the hub's round trip
    (and CPU share, with a ``hub_probe`` that saw an earlier snapshot), and the pool sizes."""
    names = list(spiders) if spiders else discover_spiders(client)
    hub = hub_health(client, hub_probe)
    views = [
        spider_snapshot(
            client,
            name,
            with_series=with_series,
            with_scrapy=with_scrapy,
            dupefilter_cache=dupefilter_cache,
            hub=hub,
        )
        for name in names
    ]
    return {
        "schema": SCHEMA_VERSION,
        "time": round(time.time(), 3),
        "redis": mask_url(url),
        "spiders": views,
        "pools": pool_counts(pools or PoolConfig()),
        # the round trip and CPU share (politeness verdict) and the hub's own numbers (alerts)
        "hub": {**hub, **hub_snapshot(client, views)},
    }


# -- the hub -----------------------------------------------------------------------------------


def hub_full(memory: dict[str, Any]) -> bool:
    """Whether Redis refuses writes now (``INFO memory``): it has a ``maxmemory`` and uses it
    all, not counting its replication and AOF buffers (``mem_not_counted_for_evict``), as Redis
    itself counts. With ``noeviction`` (the redis role's) every write that adds data fails."""
    limit = _int(memory.get("maxmemory"))
    counted = _int(memory.get("used_memory")) - _int(memory.get("mem_not_counted_for_evict"))
    return limit > 0 and counted >= limit


def oom_refusals(errors: dict[str, Any]) -> int:
    """Commands Redis refused with ``OOM`` (at ``maxmemory``) since it started (``INFO
    errorstats``; 0 when none was)."""
    entry = errors.get("errorstat_OOM")
    return _int(entry.get("count")) if isinstance(entry, dict) else 0


def _hub_memory(client: redis.Redis) -> dict[str, Any]:
    """``used_memory``, ``maxmemory``, ``full`` (:func:`hub_full`) and ``oom_refusals``
    (:func:`oom_refusals`), each None where ``INFO`` is refused. On a Redis Cluster those of every
    primary added up, full when one primary is (it refuses the writes of its slots)."""
    if is_cluster_client(client):
        primaries = client.PRIMARIES  # type: ignore[attr-defined]
        try:
            nodes = list(client.info("memory", target_nodes=primaries).values())
            stats = list(client.info("errorstats", target_nodes=primaries).values())
        except redis.ResponseError:
            nodes = stats = []
    else:
        info = client.pipeline(transaction=False)
        info.info("memory")
        info.info("errorstats")
        memory, errors = info.execute(raise_on_error=False)
        nodes = [] if isinstance(memory, redis.ResponseError) else [memory]
        stats = [] if isinstance(errors, redis.ResponseError) else [errors]
    return {
        "used_memory": sum(_int(n.get("used_memory")) for n in nodes) if nodes else None,
        "maxmemory": sum(_int(n.get("maxmemory")) for n in nodes) if nodes else None,
        "full": any(hub_full(n) for n in nodes) if nodes else None,
        "oom_refusals": sum(oom_refusals(n) for n in stats) if stats else None,
    }


def hub_snapshot(client: redis.Redis, spiders: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The hub's own numbers (the ``hub`` entry of ``status --json``, read by the alerts).

    Redis memory (``INFO memory``), whether it is full (:func:`hub_full`) and how many writes it
    refused at ``maxmemory`` (``INFO errorstats``; each None where INFO is refused), the jobs
    that have not ended with the pages their workers crawled so far (as a job's record counts
    them when it ends), every registered job agent (``crawlfleet agent``) with its liveness, and
    each worker's ``proxy/banned`` (its Scrapy stats) of the given ``spider_snapshot`` views.
    """
    seconds, micros = client.time()
    pipe = client.pipeline(transaction=False)
    for view in spiders:
        for w in view["workers"]:
            pipe.hget(
                SpiderKeys.for_client(view["spider"], client).ops_scrapy(w["id"]), "proxy/banned"
            )
    replies = iter(pipe.execute(raise_on_error=False))
    bans = {
        view["spider"]: {w["id"]: _int(_num(next(replies))) for w in view["workers"]}
        for view in spiders
    }
    now = int(seconds) + int(micros) / 1e6
    # A user refused INFO or the jobs' and agents' keys (not the ACL's dashboard) gets no memory,
    # no jobs, no agents.
    jobs: list[dict[str, Any]] = []
    try:
        found = store.agents(client)
        active = store.active_jobs(client)
    except redis.ResponseError:
        found, active = [], []
    hosts = {agent.name: agent.host for agent in found}
    for job in active:
        listed = job.get("workers")
        workers: list[Any] = listed if isinstance(listed, list) else []
        pids = {w: job["hosts"].get(w, {}).get("pids", []) for w in workers}
        started = _num(job.get("started"))
        jobs.append(
            {
                "id": job["id"],
                "project": job.get("project"),
                "spider": job.get("spider"),
                "state": job.get("state"),
                "started": None if started is None else round(started / 1000.0, 3),
                "pages": store.crawl_numbers(client, str(job.get("spider")), pids, hosts)["pages"],
            }
        )
    return {
        "time": round(now, 3),
        **_hub_memory(client),
        "jobs": jobs,
        "agents": [
            {
                "name": agent.name,
                "host": agent.host,
                "runner": agent.runner,
                "alive": agent.alive,
                "stopped": agent.stopped,
                "deadline": None if agent.stopped else round(agent.deadline / 1000.0, 3),
                "heartbeat_age": None
                if agent.heartbeat is None
                else round(now - agent.heartbeat / 1000.0, 3),
            }
            for agent in found
        ],
        "bans": bans,
    }
