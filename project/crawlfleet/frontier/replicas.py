"""How many replicas an enqueue waits for (``SCHEDULER_WAIT_REPLICAS``), decided at start.

Unset, the setting means *the replicas that exist*: through Sentinel and on a Redis Cluster the
frontier asks each primary that holds the crawl how many replicas are online (``WAIT`` with the
replicas it would want, bounded by ``SCHEDULER_WAIT_TIMEOUT``: it needs no right beyond the one
every enqueue already uses). With one on every such primary, each enqueue waits for one (a
failover to it loses nothing Scrapy was told about); with none anywhere, or on any shard, enqueues
do not wait, and the worker says so once at start (before, every enqueue on a cluster without
replicas failed and was retried for ever). A number the project sets is kept as a requirement:
fewer replicas at start are said once, and enqueues wait until enough confirm.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import redis.cluster

logger = logging.getLogger(__name__)


def node_client(client: Any, key: str) -> Any:
    """The connection that runs commands for ``key``: on a Redis Cluster the client of the
    primary holding its slot (a cluster client sends ``WAIT`` to every primary), else ``client``."""
    if isinstance(client, redis.cluster.RedisCluster):
        return client.get_redis_connection(client.get_node_from_key(key))
    return client


def _node_name(client: Any, key: str, where: str) -> str:
    """The primary holding ``key``, as a log line names it (``host:port`` on a cluster)."""
    if isinstance(client, redis.cluster.RedisCluster):
        return str(client.get_node_from_key(key).name)
    return where


def online_replicas(client: Any, want: int, timeout_ms: int) -> int:
    """Replicas of ``client``'s primary that are online, counting up to ``want``: those that
    acknowledged this connection's writes at once, else within ``timeout_ms``."""
    now = int(client.wait(0, 0))  # at once: the replicas already past this connection's writes
    return now if now >= want else int(client.wait(want, timeout_ms))


def decide(
    client: Any, keys: Iterable[str], wanted: int | None, timeout_ms: int, where: str
) -> int:
    """The replicas each enqueue waits for: ``wanted`` when the project set it, else 1 when every
    primary holding one of ``keys`` has an online replica and 0 when one has none (said once).
    Raises ``redis.RedisError`` when the hub does not answer: the caller decides again later."""
    ask = 1 if wanted is None else wanted
    if ask == 0:
        return 0
    found, where = min(
        (online_replicas(node_client(client, key), ask, timeout_ms), _node_name(client, key, where))
        for key in keys
    )
    if wanted is None:
        if found == 0:
            logger.warning(
                "SCHEDULER_WAIT_REPLICAS: the primary holding this crawl at %s has no replica "
                "online; enqueues do not wait (a failover can lose the last ones): set "
                "SCHEDULER_WAIT_REPLICAS=1 to require one",
                where,
            )
            return 0
        return 1
    if found < wanted:
        logger.warning(
            "SCHEDULER_WAIT_REPLICAS=%d: the primary holding this crawl at %s has %d replica(s) "
            "online; every enqueue waits until %d confirm it",
            wanted,
            where,
            found,
            wanted,
        )
    return wanted
