"""A worker's liveness subscription: how the reaper tells a dead worker from a silent one.

Each worker holds a subscription to its channel ``<spider>:alive:<worker>`` (``SpiderKeys.alive``)
on a Redis connection of its own, and declares when it registers (claim.lua: ``alive_ms`` in its
worker hash) that it may be reaped once that channel has no subscriber and its last heartbeat is
older than 1.5 heartbeat intervals. A SIGKILLed process's socket closes and Redis drops its
subscription at once, so its leases come back about 1.5 intervals after its last heartbeat
instead of at its lease deadline; a frozen process (SIGSTOP, a stopped VM) keeps its socket and
its leases. A Redis restart, a failover or ``CLIENT KILL TYPE pubsub`` drops every subscription:
each heartbeat's reply says how many subscribers the worker's channel has, and a worker that
finds none subscribes again at once, well before the 1.5 intervals are up. On a Redis Cluster the
channel is sharded (``SSUBSCRIBE``, ``PUBSUB SHARDNUMSUB``; Redis >= 7.0): it carries the crawl's
hash tag, so it lives on the node that serves the crawl's scripts. Through Sentinel the connection
is taken from the pool, which asks the Sentinels for the primary.

``SCHEDULER_LIVENESS = False`` declares nothing (reaped at the deadline only); so does a worker
whose ACL user may not subscribe to the channel (a warning says so).
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import redis

from crawlfleet.hub.keys import SpiderKeys
from crawlfleet.hub.urls import is_cluster_client

logger = logging.getLogger(__name__)

# How long (seconds) a (re)subscription waits for Redis's confirmation on the reactor thread;
# without one in time the subscription is assumed to stand (the next heartbeat checks it).
CONFIRM_TIMEOUT = 0.5
# A worker is reaped this many heartbeat intervals after its last heartbeat once unsubscribed.
ALIVE_INTERVALS = 1.5


class Liveness:
    """The subscription of one worker (``heartbeat``: its interval in seconds; ``enabled``:
    ``SCHEDULER_LIVENESS``)."""

    def __init__(
        self, client: redis.Redis, keys: SpiderKeys, worker: str, heartbeat: float, enabled: bool
    ) -> None:
        self.client = client
        self.channel = keys.alive(worker)
        self._worker_key = keys.worker(worker)
        self.sharded = is_cluster_client(client)
        self.bound_ms = int(ALIVE_INTERVALS * heartbeat * 1000) if enabled else 0
        self._pubsub: Any = None

    def claim_args(self) -> list[str]:
        """What claim.lua records: the bound (ms, 0 = none) and whether the channel is sharded."""
        return [str(self.bound_ms), "1" if self.sharded else "0"]

    def subscribe(self) -> bool:
        """(Re)subscribe on a fresh connection of its own; False when that failed.

        A refusal by the ACL turns liveness off for this worker (it stays reapable at its
        deadline only) and is logged once; any other error is retried after the next heartbeat.
        """
        if not self.bound_ms:
            return False
        self.close()
        pubsub = self.client.pubsub()
        try:
            if self.sharded:
                pubsub.ssubscribe(self.channel)
                pubsub.get_sharded_message(timeout=CONFIRM_TIMEOUT)
            else:
                pubsub.subscribe(self.channel)
                pubsub.get_message(timeout=CONFIRM_TIMEOUT)
        except redis.exceptions.NoPermissionError as exc:
            pubsub.close()
            self.bound_ms = 0
            logger.warning(
                "SCHEDULER_LIVENESS: Redis refused the subscription to %s (%s); this worker's "
                "leases come back only at its lease deadline. Let the crawler's ACL user "
                "subscribe to it (`crawlfleet acl render`)",
                self.channel,
                str(exc).splitlines()[0][:200],
            )
            with contextlib.suppress(redis.RedisError):  # reapers must not rely on it now
                self.client.hset(self._worker_key, "alive_ms", 0)
            return False
        except redis.RedisError as exc:
            pubsub.close()
            logger.info("Liveness subscription to %s failed (%s); retrying", self.channel, exc)
            return False
        self._pubsub = pubsub
        return True

    def checked(self, subscribers: int) -> None:
        """A heartbeat's reply: ``subscribers`` of the channel (-1: none declared)."""
        if subscribers == 0 and self.bound_ms:
            logger.info("Liveness subscription to %s lost; subscribing again", self.channel)
            self.subscribe()

    def close(self) -> None:
        if self._pubsub is not None:
            pubsub, self._pubsub = self._pubsub, None
            with contextlib.suppress(redis.RedisError, OSError):
                pubsub.close()
