"""``redis+cluster://`` URLs: what the one parser reads, and the one line it gives for the rest.

No server is needed: the parser, the masking and the key names connect to nothing (building a
``RedisCluster`` does; that is tested on a real cluster in tests/integration/cluster/).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from scrapy.settings import Settings
from support import urlshapes as shapes
from support.urlshapes import SECRET

from crawlfleet.frontier.config import FrontierConfig, FrontierConfigError, default_wait
from crawlfleet.hub.connect import get_redis
from crawlfleet.hub.errors import RedisConfigError, RedisUrlError
from crawlfleet.hub.keys import ITEMS_KEY, QUEUE_KEY, SpiderKeys
from crawlfleet.hub.urls import (
    has_credentials,
    is_cluster_url,
    mask_url,
    parse_cluster_url,
    redis_location,
    url_problem,
    url_user,
    validate_url,
)


def test_a_full_url_is_read() -> None:
    url = f"redis+cluster://:{SECRET}@h1:7000,10.0.0.2,[::1]:7002/0?socket_timeout=2.5"
    target = parse_cluster_url(url)
    assert target.nodes == (("h1", 7000), ("10.0.0.2", 6379), ("::1", 7002))
    assert (target.password, target.username, target.tls) == (SECRET, None, False)
    assert target.options == {"socket_timeout": 2.5}
    assert target.where == "h1:7000,10.0.0.2:6379,[::1]:7002"
    assert url_problem(url) is None and has_credentials(url) and is_cluster_url(url)
    shown = mask_url(url)
    assert SECRET not in shown and shown.startswith("redis+cluster://:***@h1:7000,10.0.0.2,")
    assert redis_location(url) == "redis+cluster://h1:7000,10.0.0.2,[::1]:7002/0"


@pytest.mark.parametrize(
    ("url", "password", "username", "tls"),
    [
        ("redis+cluster://h:1", None, None, False),
        ("redis+cluster://h:1/", None, None, False),
        ("redis+cluster://h:1/0", None, None, False),
        ("redis+cluster://u:p%40w@h:1,h:2/0", "p@w", "u", False),
        ("redis+cluster://h:1/0?password=qp", "qp", None, False),
        ("rediss+cluster://:pw@h:1/0?ssl_ca_certs=/ca.pem", "pw", None, True),
    ],
)
def test_forms_accepted(url: str, password: str | None, username: str | None, tls: bool) -> None:
    target = parse_cluster_url(url)
    assert (target.password, target.username, target.tls) == (password, username, tls)
    assert url_user(url) == (username or "default")


@pytest.mark.parametrize(
    ("url", "phrase"),
    [
        ("redis+cluster:///0", "names no cluster node"),
        ("redis+cluster://:pw@/0", "names no cluster node"),
        ("redis+cluster://h:1,,h:2/0", "empty host"),
        ("redis+cluster://h:99999/0", "port that is not a number"),
        ("redis+cluster://h:0/0", "port that is not a number"),
        ("redis+cluster://h:x1/0", "port that is not a number"),
        ("redis+cluster://h:1/3", "database other than 0"),
        ("redis+cluster://h:1/zero", "database other than 0"),
        ("redis+cluster://h:1/0/more", "more than /0"),
        ("redis+cluster://h:1/0?colour=red", "1 query parameter(s)"),
        ("redis+cluster://h:1/0?socket_timeout=soon", "wrong kind"),
        ("redis+cluster://h:1/0?ssl_cert_reqs=none", "TLS options"),
        ("redis+cluster://h:1/0?sentinel_password=x", "only Sentinel URLs"),
        ("redis+cluster://[::1/0", "IPv6"),
        ("redis+cluster://h!:1/0", "not a host name"),
        (f"redis+cluster://:pw/{SECRET}@h:1/0", "percent-encode"),
    ],
)
def test_malformed_urls_get_one_line_naming_redis_url(url: str, phrase: str) -> None:
    with pytest.raises(RedisUrlError) as info:
        validate_url(url)
    message = str(info.value)
    assert phrase in message and message.startswith("invalid REDIS_URL"), message
    assert "\n" not in message and SECRET not in message


def test_no_node_answering_is_one_line() -> None:
    url = f"redis+cluster://:{SECRET}@127.0.0.1:1,127.0.0.1:2/0"
    with pytest.raises(RedisConfigError) as info:
        get_redis(url, socket_timeout=1, socket_connect_timeout=1)
    message = str(info.value)
    assert message.startswith("no node of the Redis Cluster at 127.0.0.1:1,127.0.0.1:2 answers")
    assert "(REDIS_URL)" in message and "\n" not in message and SECRET not in message


def test_keys_carry_the_spiders_hash_tag_only_on_a_cluster() -> None:
    plain, tagged = SpiderKeys("book"), SpiderKeys("book", tagged=True)
    assert (plain.prefix, plain.requests, plain.leases("w1")) == (
        "book",
        "book:requests",
        "book:leases:w1",
    )
    assert (tagged.prefix, tagged.requests, tagged.leases("w1")) == (
        "{book}",
        "{book}:requests",
        "{book}:leases:w1",
    )
    assert tagged.glob == "{book}:*" and plain.glob == "book:*"
    assert SpiderKeys.for_url("book", "redis+cluster://h:1/0") == tagged
    for url in ("redis://h:1/0", "redis+sentinel://h:1/svc/0", "rediss://h:1/0"):
        assert SpiderKeys.for_url("book", url) == plain
    assert QUEUE_KEY.resolve(None, "book", ValueError) == "book:requests"
    assert QUEUE_KEY.resolve(None, "book", ValueError, tagged=True) == "{book}:requests"
    assert ITEMS_KEY.resolve("out:%(spider)s", "book", ValueError, tagged=True) == "out:{book}"


def test_a_renamed_key_outside_the_crawls_slot_is_one_line() -> None:
    with pytest.raises(ValueError) as info:
        QUEUE_KEY.resolve("shared-queue", "book", ValueError, tagged=True)
    message = str(info.value)
    assert "SCHEDULER_QUEUE_KEY" in message and "{book}" in message and "\n" not in message
    with pytest.raises(ValueError, match="hash tag"):
        QUEUE_KEY.resolve(None, "bo}ok", ValueError, tagged=True)
    assert QUEUE_KEY.resolve(None, "bo}ok", ValueError) == "bo}ok:requests"  # plain: as today


def test_frontier_config_tags_every_key_on_a_cluster() -> None:
    cluster = Settings({"REDIS_URL": "redis+cluster://:pw@127.0.0.1:7000/0"})
    config = FrontierConfig.from_settings(cluster, "book")
    assert (config.queue_key, config.dupefilter_key, config.start_urls_key) == (
        "{book}:requests",
        "{book}:dupefilter",
        "{book}:start_urls",
    )
    assert config.keys.prefix == "{book}" and config.cluster and config.wait_replicas is None
    plain = FrontierConfig.from_settings(Settings({"REDIS_URL": "redis://h:1/0"}), "book")
    assert (plain.queue_key, plain.keys.prefix, plain.cluster) == ("book:requests", "book", False)
    renamed = Settings({**cluster.copy_to_dict(), "SCHEDULER_QUEUE_KEY": "q"})
    with pytest.raises(FrontierConfigError, match="outside the crawl's hash slot"):
        FrontierConfig.from_settings(renamed, "book")
    assert default_wait("redis+cluster://h:1/0") is None  # the replicas that exist


@pytest.mark.fuzz
@given(
    password=shapes.password,
    hosts=shapes.hosts,
    path=shapes.paths("/0", "", "/", "/1", "/0/x", "//0", "/-1", "/00"),
    query=shapes.queries("?socket_timeout=1", "?db=1", "?nope=1", "?ssl_certfile=x"),
    raw=st.booleans(),
    tls=st.booleans(),
)
def test_any_cluster_url_shape_is_read_or_refused_in_one_line(
    password: str, hosts: list[tuple[str, str]], path: str, query: str, raw: bool, tls: bool
) -> None:
    scheme = "rediss+cluster" if tls else "redis+cluster"
    url = shapes.url(scheme, SECRET + password, raw, hosts, path + query)
    if url_problem(url) is None:
        target = parse_cluster_url(url)
        assert target.nodes and target.tls == tls
        assert all(0 < port < 65536 for _, port in target.nodes)
        assert "db" not in target.options
        assert SECRET not in mask_url(url)
    else:
        shapes.assert_refused_in_one_line(url)
