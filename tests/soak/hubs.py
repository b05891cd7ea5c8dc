"""The soak's hub on loopback: one redis-server as the role configures one (AOF on), or, with
``--hubs 3``, three (a primary, two replicas) watched by three Sentinels with the role's
``down-after`` and ``failover-timeout`` (issue 37: "a Sentinel failover where the soak runs on
three hubs"). Both give the soak the same handles: the URL the pools and export use, a client of
the primary of the moment, each worker's relays (``relay.py``: cut together) and the URL through
them, and the hub's faults (freeze, restart from the AOF, failover).
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import redis
from soak.relay import Relay
from support.net import free_port
from support.sentinel import Node, SentinelGroup, start_sentinel_group

from redis_server import RedisServer, start_redis

# What the redis role configures a Sentinel set with (roles/redis/defaults/main.yml): a primary
# silent this long is down (a freeze of 5-10 s may end in a failover, as on the role's hosts).
DOWN_AFTER_MS = 5000
FAILOVER_TIMEOUT_MS = 30000
FAILOVER_WAIT = 120  # seconds a failover may take before the soak says so


class OneHub:
    """One redis-server, AOF on."""

    def __init__(self, workdir: Path) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.server: RedisServer = start_redis(workdir)

    @property
    def url(self) -> str:
        return self.server.url

    def client(self) -> redis.Redis:
        """A client of the hub (the caller closes it)."""
        return self.server.client()

    def relays(self) -> list[Relay]:
        """One worker's relays to the hub, started."""
        return [Relay(free_port(), ("127.0.0.1", self.server.port)).start()]

    def worker_url(self, relays: list[Relay]) -> str:
        return f"redis://127.0.0.1:{relays[0].port}/0"

    def freeze(self, seconds: float) -> None:
        self.server.process.send_signal(signal.SIGSTOP)
        time.sleep(seconds)
        self.server.process.send_signal(signal.SIGCONT)

    def restart(self) -> None:
        self.server.stop()
        self.server.start()

    def failover(self) -> None:
        raise RuntimeError("a failover needs three hubs (--hubs 3)")

    def stop(self) -> None:
        self.server.stop()


class ThreeHubs:
    """A primary, two replicas and three Sentinels (quorum 2) with the role's timings."""

    def __init__(
        self,
        workdir: Path,
        down_after_ms: int = DOWN_AFTER_MS,
        failover_timeout_ms: int = FAILOVER_TIMEOUT_MS,
    ) -> None:
        self.group: SentinelGroup = start_sentinel_group(
            workdir, down_after_ms=down_after_ms, failover_timeout_ms=failover_timeout_ms
        )

    @property
    def url(self) -> str:
        return self.group.url()

    def client(self) -> redis.Redis:
        """A client of the primary the Sentinels agree on now (the caller closes it; while they
        disagree, in a failover, an AssertionError: the sampler's gap)."""
        return self.group.node_client(self.group.primary_port(), socket_timeout=30)

    def relays(self) -> list[Relay]:
        """One worker's relays: one to each data node, then one to each Sentinel that answers
        each node's port as the port of this worker's relay to it."""
        group = self.group
        nodes = {n.port: Relay(free_port(), ("127.0.0.1", n.port)).start() for n in group.nodes}
        ports = {port: relay.port for port, relay in nodes.items()}
        sentinels = [
            Relay(free_port(), ("127.0.0.1", s.port), ports).start() for s in self.group.sentinels
        ]
        return [*nodes.values(), *sentinels]

    def worker_url(self, relays: list[Relay]) -> str:
        sentinels = [r for r in relays if r.ports]
        hosts = ",".join(f"127.0.0.1:{r.port}" for r in sentinels)
        group = self.group
        return (
            f"redis+sentinel://:{group.password}@{hosts}/{group.service}/0"
            f"?sentinel_password={group.sentinel_password}"
        )

    def _primary(self) -> Node:
        port = self.group.primary_port()
        return next(n for n in self.group.nodes if n.port == port)

    def freeze(self, seconds: float) -> None:
        node = self._primary()
        node.process.send_signal(signal.SIGSTOP)
        time.sleep(seconds)
        node.process.send_signal(signal.SIGCONT)

    def restart(self) -> None:
        """Stop the primary and start it again from its AOF (still the primary when it is back
        within ``down-after``, as an operator's restart is)."""
        self.group.restart(self._primary())

    def failover(self) -> None:
        """SIGKILL the primary, wait until the Sentinels promote a replica, then start the old
        one again from its AOF (the Sentinels make it a replica of the new primary)."""
        old = self.group.kill_primary()
        new = self.group.wait_failover(old, timeout=FAILOVER_WAIT)
        node = next(n for n in self.group.nodes if n.port == old)
        self.group.restart(node, replica_of=new)

    def stop(self) -> None:
        self.group.stop()


def start_hubs(workdir: Path, count: int) -> OneHub | ThreeHubs:
    if count not in (1, 3):
        raise ValueError(f"--hubs must be 1 or 3, got {count}")
    return OneHub(workdir) if count == 1 else ThreeHubs(workdir)
