"""``redis+sentinel://`` URLs: what the one parser reads, and the one line it gives for the rest.

No server is needed: building a Sentinel-backed client connects to nothing until it is used.
"""

from __future__ import annotations

import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st
from support import urlshapes as shapes
from support.urlshapes import SECRET

from crawlfleet.frontier.config import default_wait
from crawlfleet.hub.connect import get_async_redis, get_redis
from crawlfleet.hub.errors import RedisUrlError
from crawlfleet.hub.urls import (
    has_credentials,
    mask_url,
    parse_sentinel_url,
    redis_location,
    url_problem,
    validate_url,
)


def test_a_full_url_is_read() -> None:
    url = (
        f"redis+sentinel://:{SECRET}@h1:26380,10.0.0.2,[::1]:26381/crawl/3"
        f"?sentinel_password=spw&socket_timeout=2.5"
    )
    target = parse_sentinel_url(url)
    assert target.sentinels == (("h1", 26380), ("10.0.0.2", 26379), ("::1", 26381))
    assert (target.service, target.db, target.password) == ("crawl", 3, SECRET)
    assert target.sentinel_password == "spw" and target.options == {"socket_timeout": 2.5}
    assert target.where == "h1:26380,10.0.0.2:26379,[::1]:26381"
    assert url_problem(url) is None and has_credentials(url)
    shown = mask_url(url)
    assert SECRET not in shown and "spw" not in shown and "sentinel_password=***" in shown
    assert redis_location(url) == "redis+sentinel://h1:26380,10.0.0.2,[::1]:26381/crawl/3"


@pytest.mark.parametrize(
    ("url", "service", "db", "password", "username"),
    [
        ("redis+sentinel://h:1/svc", "svc", 0, None, None),
        ("redis+sentinel://h:1/svc/", "svc", 0, None, None),
        ("redis+sentinel://u:p%40w@h:1/svc/2", "svc", 2, "p@w", "u"),
        ("redis+sentinel://h:1/svc/0?password=qp", "svc", 0, "qp", None),
    ],
)
def test_forms_accepted(
    url: str, service: str, db: int, password: str | None, username: str | None
) -> None:
    target = parse_sentinel_url(url)
    assert (target.service, target.db, target.password, target.username) == (
        service,
        db,
        password,
        username,
    )


@pytest.mark.parametrize(
    ("url", "phrase"),
    [
        ("redis+sentinel://h:1", "names no service"),
        ("redis+sentinel:///svc/0", "names no Sentinel"),
        ("redis+sentinel://h:1,,h:2/svc/0", "empty host"),
        ("redis+sentinel://h:99999/svc/0", "port that is not a number"),
        ("redis+sentinel://h:x1/svc/0", "port that is not a number"),
        ("redis+sentinel://h:1/svc/zero", "database that is not a whole number"),
        ("redis+sentinel://h:1/svc/0/more", "more than /<service>/<db>"),
        ("redis+sentinel://h:1/sv c/0", "service name"),
        ("redis+sentinel://h:1/svc/0?colour=red", "1 query parameter(s)"),
        ("redis+sentinel://h:1/svc/0?socket_timeout=soon", "wrong kind"),
        ("redis+sentinel://h:1/svc/0?ssl_cert_reqs=none", "TLS options"),
        ("redis+sentinel://[::1/svc/0", "IPv6"),
        ("redis+sentinel://h!:1/svc/0", "not a host name"),
        (f"redis+sentinel://:pw/{SECRET}@h:1/svc/0", "percent-encode"),
    ],
)
def test_malformed_urls_get_one_line_naming_redis_url(url: str, phrase: str) -> None:
    with pytest.raises(RedisUrlError) as info:
        validate_url(url)
    message = str(info.value)
    assert phrase in message and message.startswith("invalid REDIS_URL")
    assert "\n" not in message and SECRET not in message


def test_sentinel_clients_are_built_without_connecting() -> None:
    url = "redis+sentinel://:pw@127.0.0.1:1,127.0.0.1:2/crawl/4?sentinel_password=spw"
    client = get_redis(url, socket_timeout=1)
    assert client is get_redis(url, socket_timeout=1)  # one pool per process
    pool = client.connection_pool
    assert isinstance(pool, redis.sentinel.SentinelConnectionPool)
    assert pool.connection_kwargs["db"] == 4 and pool.connection_kwargs["password"] == "pw"
    manager = pool.sentinel_manager
    assert [s.connection_pool.connection_kwargs["port"] for s in manager.sentinels] == [1, 2]
    assert manager.sentinels[0].connection_pool.connection_kwargs["password"] == "spw"
    blocking = get_async_redis(url, blocking=True, max_connections=3, timeout=2)
    assert blocking.connection_pool.max_connections == 3
    assert default_wait(url) is None and default_wait("redis://h:1/0") == 0


def test_a_sentinel_acl_user_is_read_masked_and_used() -> None:
    url = (
        "redis+sentinel://crawler:pw@127.0.0.1:1/crawl/0"
        "?sentinel_username=crawler&sentinel_password=spw"
    )
    target = parse_sentinel_url(url)
    assert (target.username, target.sentinel_username, target.sentinel_password) == (
        "crawler",
        "crawler",
        "spw",
    )
    assert "sentinel_username" not in target.options  # not passed on to the primary's client
    assert "sentinel_username=***" in mask_url(url) and "spw" not in mask_url(url)
    manager = get_redis(url, socket_timeout=1).connection_pool.sentinel_manager
    kwargs = manager.sentinels[0].connection_pool.connection_kwargs
    assert (kwargs["username"], kwargs["password"]) == ("crawler", "spw")


@pytest.mark.fuzz
@given(
    password=shapes.password,
    hosts=shapes.hosts,
    path=shapes.paths("/crawl/0", "/crawl", "", "/", "/crawl/0/x", "//0", "/crawl/-1"),
    query=shapes.queries("?sentinel_password=x", "?socket_timeout=1", "?db=1", "?nope=1"),
    raw=st.booleans(),
)
def test_any_sentinel_url_shape_is_read_or_refused_in_one_line(
    password: str, hosts: list[tuple[str, str]], path: str, query: str, raw: bool
) -> None:
    url = shapes.url("redis+sentinel", SECRET + password, raw, hosts, path + query)
    if url_problem(url) is None:
        target = parse_sentinel_url(url)
        assert target.sentinels and target.service
        assert all(0 < port < 65536 for _, port in target.sentinels)
        get_redis(url)  # builds, connects to nothing
        assert SECRET not in mask_url(url)
    else:
        shapes.assert_refused_in_one_line(url)
