"""The soak's synthetic web as drawn: reproducible, sized as asked, skewed, every page reachable,
and its limiter banning exactly what it should (an injected clock)."""

from __future__ import annotations

from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from soak.web import MAX_HOSTS, Host, Limiter, Web, address, index_of


def walk(web: Web) -> set[tuple[int, int]]:
    """Every (host, page) reachable from host 0's root by following links."""
    seen = {(0, 0)}
    todo = deque(seen)
    while todo:
        for link in web.links(*todo.popleft()):
            if link not in seen:
                seen.add(link)
                todo.append(link)
    return seen


def test_the_soak_web_is_reproducible_skewed_and_all_reachable() -> None:
    web = Web.draw(1000, 300_000, seed=37)
    assert web == Web.draw(1000, 300_000, seed=37)
    assert web != Web.draw(1000, 300_000, seed=38)
    counts = sorted((h.pages for h in web.hosts), reverse=True)
    assert sum(counts) == 300_000 and min(counts) >= 1
    assert sum(counts[:100]) > 0.5 * 300_000  # a tenth of the hosts hold most pages
    limited = sum(1 for h in web.hosts if h.limit)
    slow = sum(1 for h in web.hosts if h.latency >= 0.5)
    failing = sum(1 for h in web.hosts if h.fail)
    assert 50 <= limited <= 150 and 5 <= slow <= 40 and 10 <= failing <= 60
    assert walk(web) == set(web.reachable())


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 40), st.integers(0, 400), st.integers(0, 2**32))
def test_any_drawn_web_holds_exactly_its_pages_all_reachable(
    hosts: int, more: int, seed: int
) -> None:
    web = Web.draw(hosts, hosts + more, seed)
    assert [h.index for h in web.hosts] == list(range(hosts))
    assert sum(h.pages for h in web.hosts) == hosts + more
    assert all(h.pages >= 1 for h in web.hosts)
    assert walk(web) == set(web.reachable())


@pytest.mark.parametrize(
    ("hosts", "pages", "error"),
    [
        (0, 10, "--hosts must be from 1 to 62500, got 0"),
        (MAX_HOSTS + 1, 10**6, "--hosts must be from 1 to 62500, got 62501"),
        (10, 9, "--pages must be at least --hosts (10), got 9"),
    ],
)
def test_a_web_that_cannot_be_drawn_is_one_line(hosts: int, pages: int, error: str) -> None:
    with pytest.raises(ValueError) as raised:
        Web.draw(hosts, pages, seed=1)
    assert str(raised.value) == error


@given(st.integers(0, MAX_HOSTS - 1))
def test_a_host_index_and_its_address_map_both_ways(index: int) -> None:
    assert index_of(address(index)) == index


@pytest.mark.parametrize(
    "other", ["127.0.0.1", "127.77.0.0", "127.77.0.251", "127.77.x.1", "127.77.0", "::1", ""]
)
def test_an_address_that_is_no_host_of_the_web_is_none(other: str) -> None:
    assert index_of(other) is None


@given(st.integers(0, 99), st.text(max_size=20))
def test_named_hosts_map_both_ways_and_nothing_else_is_a_host(index: int, other: str) -> None:
    web = Web.draw(100, 200, seed=1, domain="soak.lab")
    assert web.index(web.name(index)) == index
    assert web.url(index, 3, 80) == f"http://h{index}.soak.lab:80/p/3"
    assert web.logged(index, 3) == f"h{index}.soak.lab/p/3"
    found = web.index(other)  # any other text: no host, or the host of exactly that name
    assert found is None or web.name(found) == other.lower()
    bad_names = ("h100.soak.lab", "h-1.soak.lab", "h01.soak.lab", "h1.soak.lab.evil", "h1",
                 "h².soak.lab", "x1.soak.lab", "h.soak.lab")  # fmt: skip
    for bad in bad_names:
        assert web.index(bad) is None


@pytest.mark.parametrize("domain", ["soak lab", "soak..lab", "soak/lab", ".lab"])
def test_a_domain_that_cannot_name_hosts_is_one_line(domain: str) -> None:
    with pytest.raises(ValueError, match=r"^--domain must be dot-separated letters and digits"):
        Web.draw(10, 20, seed=1, domain=domain)


def test_the_limiter_bans_an_address_over_the_limit_for_the_ban_and_no_other() -> None:
    host = Host(0, 10, 0.0, limit=2, ban=5.0, retry_after=False, fail=0.0, size=0)
    free = Host(1, 10, 0.0, limit=0, ban=5.0, retry_after=False, fail=0.0, size=0)
    limiter = Limiter()
    assert [limiter.admit(host, "a", t) for t in (0.0, 0.1)] == [0.0, 0.0]
    assert limiter.admit(host, "a", 0.2) == 5.0  # the third in one second: banned
    assert limiter.admit(host, "b", 0.3) == 0.0  # another address is not
    assert limiter.admit(host, "a", 4.2) == pytest.approx(1.0)
    assert limiter.admit(host, "a", 5.2) == 0.0  # the ban is over
    assert all(limiter.admit(free, "a", t / 100) == 0.0 for t in range(100))


def test_a_ban_storm_refuses_every_address_of_its_host_until_it_ends() -> None:
    free = Host(1, 10, 0.0, limit=0, ban=5.0, retry_after=False, fail=0.0, size=0)
    other = Host(2, 10, 0.0, limit=0, ban=5.0, retry_after=False, fail=0.0, size=0)
    limiter = Limiter()
    limiter.storm(1, now=10.0, seconds=60.0)
    assert limiter.admit(free, "a", 10.0) == 60.0 and limiter.admit(free, "b", 40.0) == 30.0
    assert limiter.admit(other, "a", 20.0) == 0.0
    assert limiter.admit(free, "a", 70.0) == 0.0
