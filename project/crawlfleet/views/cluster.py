"""The whole cluster as operators see it: every crawl, the hub and the pools, in one document.

``crawlfleet status``, the dashboard page and its ``/metrics`` all call :func:`cluster_snapshot`,
so they always agree; it puts together the read models of :mod:`crawlfleet.views`. Per spider it
costs two pipelined round trips (fixed keys and the worker list, then per-worker keys), plus two
for the Bloom filter; spiders are discovered with a bounded ``SCAN`` for the
``<spider>:frontier`` hashes every worker writes at start (never ``KEYS``; on a Redis Cluster on
every primary, the keys named ``{<spider>}:…`` by ``SpiderKeys.for_client``).

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
  round trips, and a PING's round trip for the hub (``views.politeness.bound_by`` says which
  limit binds);
* for the ``hub`` entry (the alerts' inputs): the job records and the agents' registry
  (``crawlfleet.jobs.store``), ``INFO memory`` and ``INFO errorstats`` (a full hub);
* the pools' ``/count`` endpoints, when their URLs are configured (an ``https://`` pool verified
  against ``<POOL>_CA_FILE``, else ``CRAWLFLEET_CA_FILE``, as the workers' pool clients do).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import redis

from crawlfleet.hub.urls import mask_url
from crawlfleet.views.bloom import DupefilterCache
from crawlfleet.views.crawl import discover_spiders, spider_snapshot
from crawlfleet.views.hub import HubProbe, hub_health, hub_snapshot
from crawlfleet.views.pools import PoolConfig, pool_counts

# The document's version (status --json's "schema"): raised when a field changes meaning.
SCHEMA_VERSION = 1


def cluster_snapshot(
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
