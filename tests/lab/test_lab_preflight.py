"""Bad input on the way to a crawl: a wrong Redis password, a hub that does not answer, a worker the
hub's firewall does not admit. The playbook stops with a message naming the host and the cause,
the worker keeps its previous configuration, and no crawler unit starts anywhere."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from labcrawl import CRAWLER_ENV, LabCrawl
from labhosts import Lab, recap, run

pytestmark = pytest.mark.lab

# An address of the lab network where no machine lives: nothing answers there.
NOBODY = "172.30.0.99"


def env_digest(crawl: LabCrawl, host: str) -> str:
    return crawl.ssh(host, f"sudo sha256sum {CRAWLER_ENV}").stdout.split()[0]


def converge_worker(*extra: str) -> tuple[int, str]:
    proc = run(
        ["ansible-playbook", "site.yml", "-i", "inventory", "--limit", "b", "--tags", "crawlers",
         *extra],
        timeout=600,
        check=False,
    )  # fmt: skip
    return proc.returncode, proc.stdout


@pytest.fixture(scope="module")
def crawl(lab: Lab) -> Iterator[LabCrawl]:
    """Workers stopped; afterwards the inventory as it is converges b again with no change."""
    crawl = LabCrawl()
    crawl.systemctl("stop")
    yield crawl
    crawl.systemctl("stop")
    code, out = converge_worker()
    assert code == 0 and recap(out)["b"]["changed"] == 0, out[-3000:]


@pytest.mark.parametrize(
    ("extra", "cause"),
    [
        (
            ["-e", "redis_password=not-the-hub-password-0123"],
            "wrong password (REDIS_URL)",
        ),
        (
            # "no route to that address" or "no answer within 5 s", as the bridge answers.
            ["-e", f"crawler_redis_host={NOBODY}"],
            "from b: no ",
        ),
        (
            ["-e", "proxypool_api_key=not-the-proxypool-key-0123"],
            "the proxy pool refused the API key (PROXYPOOL_API_KEY)",
        ),
    ],
    ids=["wrong-redis-password", "hub-unreachable", "wrong-pool-key"],
)
def test_a_worker_that_cannot_use_the_hub_stops_the_play_and_keeps_its_config(
    crawl: LabCrawl, extra: list[str], cause: str
) -> None:
    before = env_digest(crawl, "b")
    code, out = converge_worker(*extra)
    assert code != 0
    assert "b cannot use the hub:" in out, out[-3000:]
    assert cause in out, out[-3000:]
    assert recap(out)["b"]["failed"] == 1
    assert env_digest(crawl, "b") == before
    assert "not-the-" not in out  # secrets never reach the output


def test_a_worker_the_hub_firewall_drops_stops_the_crawl_start_everywhere(
    crawl: LabCrawl,
) -> None:
    crawl.ssh("a", "sudo nft delete element inet crawlfleet crawlers '{ 172.30.0.11 }'")
    try:
        proc = run(
            ["ansible-playbook", "ansible/playbooks/crawl.yml", "-i", "inventory",
             "-e", "crawler_crawl_action=start"],
            timeout=600,
            check=False,
        )  # fmt: skip
        assert proc.returncode != 0
        assert "b cannot use the hub, its workers were not started:" in proc.stdout, proc.stdout
        assert "does its firewall admit this host (b)?" in proc.stdout
        # any_errors_fatal: c, which could reach the hub, did not start a half crawl either.
        assert crawl.running_units() == {}
    finally:
        crawl.ssh("a", "sudo systemctl reload crawlfleet-firewall")
