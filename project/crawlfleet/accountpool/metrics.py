"""Prometheus metrics: pool sizes and login/check counters read from Redis at scrape time.

Counters live in Redis (``accountpool:stats:<site>``) because the generator and tester may run
in other processes than the API; API request counts are this process's own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from crawlfleet.accountpool.store import Counts

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Redis counter name -> value of the "result" label
_LOGINS = {
    "logins_ok": "ok",
    "logins_rejected": "rejected",
    "logins_error": "error",
    "logins_decrypt": "decrypt",
    "logins_unavailable": "unavailable",
}
_CHECKS = {
    "checks_valid": "valid",
    "checks_rejected": "rejected",
    "checks_expired": "expired",
    "checks_unavailable": "unavailable",
    "checks_error": "error",
}


@dataclass
class Snapshot:
    redis_up: bool = False
    counts: dict[str, Counts] = field(default_factory=dict)
    counters: dict[str, dict[str, int]] = field(default_factory=dict)


class _SnapshotCollector(Collector):
    def __init__(self) -> None:
        self.snapshot = Snapshot()

    def collect(self) -> Iterable[GaugeMetricFamily | CounterMetricFamily]:
        snap = self.snapshot
        yield GaugeMetricFamily(
            "accountpool_redis_up", "1 if Redis answered this scrape", value=int(snap.redis_up)
        )
        gauges = {
            "accounts": ("accountpool_accounts", "accounts stored"),
            "credentials": ("accountpool_credentials", "credentials stored (any expiry)"),
            "valid": ("accountpool_credentials_valid", "credentials that /random may serve"),
            "parked": ("accountpool_accounts_parked", "accounts waiting out a login back-off"),
        }
        for attr, (name, doc) in gauges.items():
            family = GaugeMetricFamily(name, doc, labels=["site"])
            for site, counts in snap.counts.items():
                family.add_metric([site], getattr(counts, attr))
            yield family
        yield from self._counters("accountpool_logins", "login attempts", _LOGINS, snap.counters)
        yield from self._counters("accountpool_checks", "credential checks", _CHECKS, snap.counters)
        reports = CounterMetricFamily(
            "accountpool_reports", "credentials reported as rejected via /report", labels=["site"]
        )
        for site, values in snap.counters.items():
            reports.add_metric([site], values.get("reports", 0))
        yield reports

    @staticmethod
    def _counters(
        name: str, doc: str, names: Mapping[str, str], counters: Mapping[str, Mapping[str, int]]
    ) -> Iterable[CounterMetricFamily]:
        family = CounterMetricFamily(name, doc, labels=["site", "result"])
        for site, values in counters.items():
            for key, result in names.items():
                family.add_metric([site, result], values.get(key, 0))
        yield family


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "accountpool_api_requests",
            "HTTP API requests by endpoint and status",
            ["endpoint", "status"],
            registry=self.registry,
        )
        self._collector = _SnapshotCollector()
        self.registry.register(self._collector)

    def render(self, snapshot: Snapshot) -> bytes:
        self._collector.snapshot = snapshot
        return generate_latest(self.registry)
