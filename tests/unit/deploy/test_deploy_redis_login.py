"""filter_plugins/crawlfleet_redis.py ``redis_login``: each service's Redis URL with its own login,
on the Redis nodes and, through Sentinel, on the Sentinels too; what crawlfleet.hub.urls reads back
from it is exactly that user and password, whatever the password holds. Run through Ansible by
every lab converge (the roles' URLs)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from crawlfleet.hub.urls import parse_sentinel_url, url_problem

ROOT = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location(
    "crawlfleet_redis_filters", ROOT / "filter_plugins" / "crawlfleet_redis.py"
)
assert _spec is not None and _spec.loader is not None
filters = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(filters)
redis_login = filters.FilterModule().filters()["redis_login"]

SENTINEL = (
    "rediss+sentinel://:hub-pw@10.0.0.1:26379,10.0.0.2:26379/crawlfleet/0"
    "?sentinel_password=hub-pw&ssl_ca_certs=/etc/crawlfleet/tls/ca.crt"
)


def test_a_plain_url_gets_the_users_login_only() -> None:
    assert redis_login("redis://:hub-pw@10.0.0.1:6379/0", "proxypool", "p/w@x") == (
        "redis://proxypool:p%2Fw%40x@10.0.0.1:6379/0"
    )


def test_a_sentinel_url_logs_in_as_the_user_on_the_sentinels_too() -> None:
    url = redis_login(SENTINEL, "crawler", "crawler-pw")
    assert url == (
        "rediss+sentinel://crawler:crawler-pw@10.0.0.1:26379,10.0.0.2:26379/crawlfleet/0"
        "?sentinel_username=crawler&sentinel_password=crawler-pw"
        "&ssl_ca_certs=/etc/crawlfleet/tls/ca.crt"
    )
    assert "hub-pw" not in url  # the hub's own password stays with the hub


def test_the_default_user_keeps_the_url_as_it_was() -> None:
    assert redis_login(SENTINEL, "", "hub-pw") == SENTINEL


@given(
    user=st.sampled_from(["", "default", "crawler", "dash.board-1"]),
    password=st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1),
)
def test_whatever_the_password_holds_the_url_reads_back_as_that_login(
    user: str, password: str
) -> None:
    url = redis_login(SENTINEL, user, password)
    assert url_problem(url) is None
    target = parse_sentinel_url(url)
    assert (target.password, target.sentinel_password) == (password, password)
    assert target.username == (user or None)
    assert target.sentinel_username == (None if user in ("", "default") else user)
    assert target.options["ssl_ca_certs"] == "/etc/crawlfleet/tls/ca.crt"
