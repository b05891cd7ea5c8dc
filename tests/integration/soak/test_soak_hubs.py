"""The soak's three hubs (``hubs.py``) on a real Sentinel group: a worker's relays carry both the
Sentinels' answers and the primary's traffic, so cutting them silences the hub for that worker
alone; after a failover the worker's client reaches the new primary through its relay, and the
old primary comes back as a replica."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from soak.hubs import ThreeHubs
from support.waiting import wait_until

from crawlfleet.hub.connect import get_redis

SHORT = {"down_after_ms": 1000, "failover_timeout_ms": 4000}  # the tests' group, not the role's


@pytest.fixture
def hubs(tmp_path: Path) -> Iterator[ThreeHubs]:
    three = ThreeHubs(tmp_path / "hubs", **SHORT)
    try:
        yield three
    finally:
        three.stop()


def answers(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except (redis.ConnectionError, redis.TimeoutError):
        return False


def test_a_worker_reaches_the_primary_only_through_its_own_relays(hubs: ThreeHubs) -> None:
    relays, other = hubs.relays(), hubs.relays()
    client = get_redis(hubs.worker_url(relays), socket_timeout=1, socket_connect_timeout=1)
    bystander = get_redis(hubs.worker_url(other), socket_timeout=1, socket_connect_timeout=1)
    try:
        client.set("k", "v")
        primary = hubs.group.primary_port()
        relay_of = {r.target[1]: r.port for r in relays}
        # the Sentinel's answer, rewritten by the relay: the worker's relay to the primary
        assert client.connection_pool.get_master_address() == ("127.0.0.1", relay_of[primary])
        for relay in relays:
            relay.cut()
        client.connection_pool.disconnect()  # a new connection must ask a Sentinel again
        assert not answers(client)
        assert bystander.get("k") == b"v"  # the cut is this worker's only
        for relay in relays:
            relay.heal()
        wait_until(lambda: answers(client), "the worker's hub back after the cut heals", 30)
        assert client.get("k") == b"v"
    finally:
        for relay in [*relays, *other]:
            relay.stop()


def test_after_a_failover_the_worker_follows_through_its_relay_and_the_old_primary_replicates(
    hubs: ThreeHubs,
) -> None:
    relays = hubs.relays()
    client = get_redis(hubs.worker_url(relays), socket_timeout=2, socket_connect_timeout=1)
    try:
        client.set("before", "1")
        old = hubs.group.primary_port()
        nodes = [hubs.group.node_client(n.port) for n in hubs.group.nodes]
        wait_until(
            lambda: all(node.get("before") == b"1" for node in nodes), "the write everywhere", 30
        )
        hubs.failover()
        new = hubs.group.primary_port()
        assert new != old
        relay_of = {r.target[1]: r.port for r in relays}

        def followed() -> bool:
            try:
                client.set("after", "2")
            except (redis.ConnectionError, redis.TimeoutError, redis.ReadOnlyError):
                return False
            return client.connection_pool.get_master_address() == ("127.0.0.1", relay_of[new])

        wait_until(followed, "the worker's client on the new primary, through its relay", 60)
        assert client.get("before") == b"1"

        def replicates() -> bool:
            node = hubs.group.node_client(old)
            return node.info("replication")["role"] == "slave" and node.get("after") == b"2"

        wait_until(replicates, "the old primary back as a replica of the new one", 60)
    finally:
        for relay in relays:
            relay.stop()
