"""The politeness budgets on a Redis Cluster: their scripts run in the namespace's slot (every key
``{book}:politeness:…``), on an injected clock (no test sleeps)."""

from __future__ import annotations

from scrapy.settings import Settings
from support.rediscluster import RedisClusterGroup

from crawlfleet.hub.connect import get_redis
from crawlfleet.politeness.budget import Budget, Outcome
from crawlfleet.politeness.config import PolitenessConfig


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_budget_leases_and_backs_off_in_one_slot(cluster: RedisClusterGroup) -> None:
    client = get_redis(cluster.url(), socket_timeout=5)
    clock = Clock()
    settings = Settings({"POLITENESS_RATE": 8, "POLITENESS_MIN_RATE": 1, "POLITENESS_WINDOW": 5})
    budget = Budget(client, PolitenessConfig.from_settings(settings, "book"), clock=clock)
    used = 0
    while clock.now < 1002.0:  # every slot of two seconds at 8/s
        if budget.acquire("site.example") == 0:
            used += 1
            budget.record("site.example", Outcome(ban=False))
        else:
            clock.now = round(clock.now + 0.001, 6)
    assert used in (16, 17)
    for _ in range(3):
        budget.record("site.example", Outcome(ban=True))
    assert budget.state("site.example").rate == 4
    keys = [k for node in cluster.keys_by_node().values() for k in node]
    assert keys and all(k.startswith("{book}:politeness:") for k in keys), keys
    assert len([n for n in cluster.keys_by_node().values() if n]) == 1
