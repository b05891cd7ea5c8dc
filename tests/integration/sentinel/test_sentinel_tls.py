"""Sentinel over TLS (``rediss+sentinel://``): three redis-server and three Sentinels listening
with TLS only, certificates from ``crawlfleet.service.tlsca``; a sync and an asyncio client write
and read, follow a SIGKILL of the primary, and a certificate that does not verify is one line
naming the host and the cause."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from support.lifecycle import running
from support.secureredis import make_tls_files
from support.sentinel import PASSWORD, SENTINEL_PASSWORD, SentinelGroup, start_sentinel_group
from support.waiting import wait_until

from crawlfleet.frontier.config import default_wait
from crawlfleet.hub.connect import check_connection, get_async_redis, get_redis, sentinel_problem
from crawlfleet.hub.errors import RedisAuthError, RedisUrlError
from crawlfleet.hub.urls import mask_url, parse_sentinel_url, redis_location, validate_url
from crawlfleet.service import tlsca


@pytest.fixture
def tls_group(tmp_path: Path) -> Iterator[SentinelGroup]:
    """One primary, two replicas and three Sentinels, every one on TLS only."""
    yield from running(
        start_sentinel_group(tmp_path / "sentinel", tls=make_tls_files(tmp_path / "ca"))
    )


def test_tls_sentinel_clients_write_read_and_follow_a_failover(tls_group: SentinelGroup) -> None:
    url = tls_group.url()
    assert url.startswith("rediss+sentinel://")
    client = get_redis(url, socket_timeout=2, socket_connect_timeout=2)
    check_connection(client, url)
    client.set("greeting", "over tls")
    assert client.get("greeting") == b"over tls"
    assert client.wait(1, 1000) >= 1  # replicated over TLS (tls-replication yes)

    async def async_round_trip(value: str) -> bytes | None:
        aclient = get_async_redis(url, blocking=True, socket_timeout=2)
        try:
            await aclient.set("async", value)
            return await aclient.get("async")
        finally:
            await aclient.aclose()

    assert asyncio.run(async_round_trip("before")) == b"before"
    old = tls_group.kill_primary()
    new = tls_group.wait_failover(old)
    assert new != old

    def written_after_failover() -> bool:
        try:
            return bool(client.set("after", "failover"))
        except redis.ConnectionError:
            return False

    wait_until(written_after_failover, "a write through the new primary", 20, 0.05)
    assert client.get("greeting") == b"over tls"  # the replica had it
    assert tls_group.node_client(new).get("after") == b"failover"
    assert asyncio.run(async_round_trip("after")) == b"after"


def test_a_wrong_ca_or_name_is_one_line_naming_the_host(tls_group: SentinelGroup) -> None:
    assert tls_group.tls is not None
    other = tls_group.workdir.parent / "other"
    tlsca.ensure_ca(other)
    url = tls_group.url(ca=other / "ca.crt")
    line = _one_line_error(url)
    first = f"127.0.0.1:{tls_group.sentinels[0].port}"
    assert f"the Sentinel at {first}" in line, line
    assert "not signed by the CA in ssl_ca_certs" in line, line
    assert sentinel_problem(url) == line

    # the Sentinels verify, the primary they name does not: its certificate is for another name
    wrong = make_tls_files(tls_group.tls.ca_dir, host="hub", names=("hub.example",))
    for node in tls_group.nodes:
        tls_group.node_client(node.port).execute_command(
            "CONFIG", "SET", "tls-cert-file", str(wrong.cert), "tls-key-file", str(wrong.key)
        )
    line = _one_line_error(tls_group.url())
    primary = f"127.0.0.1:{tls_group.primary_port()}"
    assert f"Redis at {primary}" in line, line
    assert "its name does not match the URL's host" in line, line


def _one_line_error(url: str) -> str:
    client = get_redis(url, socket_timeout=2, socket_connect_timeout=2)
    with pytest.raises(RedisAuthError) as raised:
        check_connection(client, url)
    [line] = str(raised.value).splitlines()
    assert PASSWORD not in line and SENTINEL_PASSWORD not in line
    return line


def test_the_one_parser_reads_rediss_sentinel_and_masks_it() -> None:
    url = (
        "rediss+sentinel://:pw-0123@h1:26380,[::1]/crawl/1?sentinel_password=spw-4567"
        "&ssl_ca_certs=/ca.crt&ssl_certfile=/c.crt&ssl_keyfile=/c.key&ssl_cert_reqs=required"
    )
    target = parse_sentinel_url(url)
    assert target.tls and target.sentinels == (("h1", 26380), ("::1", 26379))
    assert (target.service, target.db, target.password) == ("crawl", 1, "pw-0123")
    assert target.options == {
        "ssl_ca_certs": "/ca.crt",
        "ssl_certfile": "/c.crt",
        "ssl_keyfile": "/c.key",
        "ssl_cert_reqs": "required",
    }
    assert validate_url(url) == url
    shown = mask_url(url)
    assert "pw-0123" not in shown and "spw-4567" not in shown and "ssl_ca_certs=/ca.crt" in shown
    assert redis_location(url) == "rediss+sentinel://h1:26380,[::1]/crawl/1"
    assert default_wait(url) is None  # the replicas that exist, through Sentinel with TLS too
    with pytest.raises(RedisUrlError, match=r"ssl_\*.*rediss\+sentinel:// does"):
        validate_url(url.replace("rediss+", "redis+", 1))
