"""Sentinel failover with the per-role ACL users, as the redis role sets it up on three hubs: the
replicas log in as ``replica``, the Sentinels as ``sentinel``, every service as its own user on
the servers and on the Sentinels. A failover still happens and the clients follow it; a service's
user can find the primary but neither steer the Sentinels nor replicate; bad logins are one line."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from support.lifecycle import running
from support.sentinel import ACL_PASSWORDS, SentinelGroup, start_sentinel_group
from support.waiting import wait_until

from crawlfleet.hub.connect import check_connection, get_redis
from crawlfleet.hub.errors import RedisConfigError


@pytest.fixture
def acl_group(tmp_path: Path) -> Iterator[SentinelGroup]:
    yield from running(start_sentinel_group(tmp_path / "sentinel", acl=True))


def test_a_failover_happens_and_the_crawler_user_follows_it(acl_group: SentinelGroup) -> None:
    url = acl_group.url(user="crawler")
    client = get_redis(url, socket_timeout=2, socket_connect_timeout=2)
    check_connection(client, url)
    script = client.register_script("return redis.call('INCR', KEYS[1])")
    assert script(keys=["site:counter"]) == 1
    assert client.wait(1, 1000) >= 1  # the replicas replicate as the replica user
    with pytest.raises(redis.exceptions.NoPermissionError):
        client.get("accounts:alice")  # not the crawler's keys, on the primary either
    old = acl_group.kill_primary()
    new = acl_group.wait_failover(old)  # the Sentinels promoted it as the sentinel user

    def incremented() -> bool:
        try:
            return bool(script(keys=["site:counter"]) == 2)
        except redis.ConnectionError:
            return False

    wait_until(incremented, "the crawler's script on the new primary", 30, 0.02)
    assert acl_group.node_client(new).get("site:counter") == b"2"


def test_a_service_user_finds_the_primary_and_nothing_more(acl_group: SentinelGroup) -> None:
    sentinel = acl_group.sentinels[0]
    crawler = redis.Redis(
        port=sentinel.port, username="crawler", password=ACL_PASSWORDS["crawler"], socket_timeout=2
    )
    assert crawler.sentinel_get_master_addr_by_name(acl_group.service)[1] == (
        acl_group.primary_port()
    )
    assert acl_group.service in crawler.sentinel_masters()
    for command in (
        ("SENTINEL", "FAILOVER", acl_group.service),
        ("SENTINEL", "SET", acl_group.service, "quorum", "1"),
        ("SENTINEL", "REMOVE", acl_group.service),
        ("SENTINEL", "RESET", "*"),
        ("ACL", "LIST"),
    ):
        with pytest.raises(redis.exceptions.NoPermissionError):
            crawler.execute_command(*command)
    # the hub's own users on a server: replication and watching, no key
    primary = acl_group.primary_port()
    for user in ("replica", "sentinel"):
        hub = redis.Redis(port=primary, username=user, password=acl_group.password)
        assert hub.ping()
        with pytest.raises(redis.exceptions.NoPermissionError):
            hub.get("site:counter")
    with pytest.raises(redis.exceptions.NoPermissionError):
        redis.Redis(
            port=primary, username="crawler", password=ACL_PASSWORDS["crawler"]
        ).execute_command("REPLICAOF", "NO", "ONE")
    assert set(acl_group.named_primaries()) == {primary}  # nothing above changed the set


@pytest.mark.parametrize(
    ("change", "phrase"),
    [
        ({"sentinel_password": "wrong-password-0123"}, "refused sentinel_password"),
        ({"sentinel_username": "nobody"}, "does not let sentinel_username ask for the primary"),
    ],
)
def test_a_bad_sentinel_login_is_one_line(
    acl_group: SentinelGroup, change: dict[str, str], phrase: str
) -> None:
    if "sentinel_username" in change:
        for sentinel in acl_group.sentinels:  # a user that may log in and nothing else
            acl_group.sentinel_client(sentinel).acl_setuser(
                "nobody", enabled=True, passwords=[f"+{ACL_PASSWORDS['crawler']}"],
                commands=["-@all", "+auth", "+hello", "+ping"],
            )  # fmt: skip
    url = acl_group.url(user="crawler")
    for name, value in change.items():
        current = f"{name}=" + (
            ACL_PASSWORDS["crawler"] if name == "sentinel_password" else "crawler"
        )
        assert current in url
        url = url.replace(current, f"{name}={value}")
    with pytest.raises(RedisConfigError) as caught:
        check_connection(get_redis(url, socket_timeout=2, socket_connect_timeout=2), url)
    message = str(caught.value)
    assert phrase in message and "\n" not in message, message
    assert ACL_PASSWORDS["crawler"] not in message and "wrong-password" not in message
