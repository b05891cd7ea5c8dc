"""The soak's synthetic web over real sockets: each host on its own loopback address, its pages
and links as drawn, a limited host banning one client address and not another, one access-log
line per answer, and a clean stop on SIGTERM."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from soak.web import Web
from soak.webprocess import start_web
from support.net import free_port
from support.services import log_tail
from support.waiting import wait_until

HOSTS, PAGES = 12, 300


def limited_seed() -> tuple[int, Web]:
    """The first seed whose web has a fast host that limits at 5 requests a second or fewer."""
    for seed in range(1000):
        web = Web.draw(HOSTS, PAGES, seed)
        if any(0 < h.limit <= 5 and h.latency < 0.1 for h in web.hosts):
            return seed, web
    raise AssertionError("no seed below 1000 draws a fast limited host")


@dataclass
class Served:
    web: Web
    port: int
    log: Path
    admin: int


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    seed, web = limited_seed()
    port, admin, log = free_port(), free_port(), tmp_path / "access.log"
    out = tmp_path / "web.out"
    proc = start_web(out, port, admin, HOSTS, PAGES, seed, log, timeout=30)
    yield Served(web, port, log, admin)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 0, log_tail(out)


def test_each_host_serves_its_own_pages_and_links(served: Served) -> None:
    web, port, log = served.web, served.port, served.log
    with httpx.Client(trust_env=False, timeout=10) as http:
        for host in (0, HOSTS - 1):
            answer = http.get(web.url(host, 0, port))
            assert answer.status_code == 200
            for linked in web.links(host, 0):
                assert f'href="{web.url(*linked, port)}"' in answer.text
        last = web.hosts[0].pages
        assert http.get(web.url(0, last, port)).status_code == 404
        assert http.get(f"http://{web.hosts[0].address}:{port}/other").status_code == 404
    lines = log.read_text().splitlines()
    assert len(lines) == 4
    assert lines[0].split()[1:] == ["127.0.0.1", web.hosts[0].address, "/p/0", "200"]


def test_a_limited_host_bans_the_address_over_its_limit_and_no_other(served: Served) -> None:
    web, port = served.web, served.port
    host = next(h for h in web.hosts if 0 < h.limit <= 5 and h.latency < 0.1)
    url = web.url(host.index, 0, port)

    def fetch(_: int) -> httpx.Response:
        with httpx.Client(trust_env=False, timeout=10) as http:
            return http.get(url)

    banned = 429 if host.retry_after else 403
    answers: list[httpx.Response] = []

    def burst_banned() -> bool:
        """limit + 3 requests at once (a loaded machine may spread one burst over more than the
        host's one-second window: then the next burst)."""
        with ThreadPoolExecutor(host.limit + 3) as pool:
            answers[:] = pool.map(fetch, range(host.limit + 3))
        return any(a.status_code == banned for a in answers)

    wait_until(burst_banned, f"a burst over {host.limit}/s banned", timeout=30, interval=0)
    statuses = sorted(a.status_code for a in answers)
    assert statuses.count(200) <= host.limit and set(statuses) <= {200, banned}, statuses
    if host.retry_after:
        refused = next(a for a in answers if a.status_code == 429)
        assert 1 <= int(refused.headers["retry-after"]) <= host.ban
    other = httpx.HTTPTransport(local_address="127.0.0.2")
    with httpx.Client(transport=other, trust_env=False, timeout=10) as http:
        assert http.get(url).status_code == 200  # the ban is per client address


def test_a_ban_storm_refuses_every_address_of_one_host_for_its_time(served: Served) -> None:
    web, port = served.web, served.port
    host = next(h for h in web.hosts if not h.limit and h.latency < 0.1)
    other = next(h for h in web.hosts if h.index != host.index and not h.limit)
    admin = f"http://127.0.0.1:{served.admin}"
    with httpx.Client(trust_env=False, timeout=10) as http:
        assert http.get(web.url(host.index, 0, port)).status_code == 200
        stormed = http.post(f"{admin}/storm?host={host.index}&seconds=600")
        assert stormed.status_code == 200
        assert http.get(web.url(host.index, 0, port)).status_code in (403, 429)
        assert http.get(web.url(other.index, 0, port)).status_code == 200
        for bad in ("host=99&seconds=5", "host=1&seconds=0", "host=x&seconds=5", "seconds=5"):
            answer = http.post(f"{admin}/storm?{bad}")
            assert answer.status_code == 400, bad
            assert answer.text == "POST /storm?host=H&seconds=S"


def test_named_hosts_are_told_apart_by_the_host_header(tmp_path: Path) -> None:
    """The lab's web (``--domain``): one address serves every host, named by the Host header;
    the links and the access log use the names; a name that is no host of the web is a 404."""
    web = Web.draw(HOSTS, PAGES, 3, "soak.test")
    port, admin, log = free_port(), free_port(), tmp_path / "access.log"
    out = tmp_path / "web.out"
    proc = start_web(out, port, admin, HOSTS, PAGES, 3, log, timeout=30, domain="soak.test")
    try:
        with httpx.Client(trust_env=False, timeout=10) as http:
            for host in (0, HOSTS - 1):
                named = {"Host": f"{web.name(host)}:{port}"}
                answer = http.get(f"http://127.0.0.1:{port}/p/0", headers=named)
                assert answer.status_code == 200
                assert f"<h1>{host}/0</h1>" in answer.text
                for linked in web.links(host, 0):
                    assert (
                        f'href="http://{web.name(linked[0])}:{port}/p/{linked[1]}"' in answer.text
                    )
            for other in (f"h{HOSTS}.soak.test", "h1.other.test", "h01.soak.test", "127.0.0.1"):
                answer = http.get(f"http://127.0.0.1:{port}/p/0", headers={"Host": other})
                assert answer.status_code == 404, other
        lines = log.read_text().splitlines()
        assert [line.split()[2:] for line in lines] == [
            ["h0.soak.test", "/p/0", "200"],
            [f"h{HOSTS - 1}.soak.test", "/p/0", "200"],
        ]
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0, log_tail(out)
