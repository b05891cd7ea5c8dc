"""Prometheus text for the dashboard's ``/metrics``: the cluster view rendered as metric families.

Everything comes from one ``views.cluster.cluster_snapshot`` taken at scrape time (with
the workers' Scrapy stats), so Prometheus scrapes the hub alone: workers open no port. Politeness
keys get series only for the METRIC_KEYS most recently used keys of each crawl, so the label
cardinality stays bounded however many hosts and proxies a crawl meets.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from crawlfleet.alerts.rules import agent_lost, worker_lost
from crawlfleet.politeness.learning import PHASES
from crawlfleet.views.politeness import SITE_BOUND

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_SPIDER_GAUGES = (
    ("queued", "crawlfleet_queued", "Requests waiting in the queue"),
    ("start_urls", "crawlfleet_start_urls", "Start URL entries waiting to be consumed"),
    ("leased", "crawlfleet_leased", "Requests leased by workers"),
    ("failed", "crawlfleet_failed", "Requests on the failed list now"),
    ("deadletter", "crawlfleet_deadletter", "Entries on the dead-letter list now"),
    ("items", "crawlfleet_items", "Items in the items stream"),
    ("total", "crawlfleet_total", "Total the spider reported (for progress)"),
    ("workers_alive", "crawlfleet_workers_alive", "Workers whose lease deadline lies ahead"),
    ("pages_per_minute", "crawlfleet_pages_per_minute", "Pages per minute, all workers, last min"),
)
_DUPE_GAUGES = (
    ("fingerprints", "crawlfleet_dupefilter_fingerprints", "Fingerprints (estimated for Bloom)"),
    ("fill_ratio", "crawlfleet_bloom_fill_ratio", "Share of the Bloom filter's bits set"),
    ("error_rate", "crawlfleet_bloom_estimated_error_rate", "Estimated false-positive rate now"),
)
_WORKER_GAUGES = (
    ("leased", "crawlfleet_worker_leased", "Requests leased by the worker"),
    ("heartbeat_age", "crawlfleet_worker_heartbeat_age_seconds", "Seconds since its heartbeat"),
    ("pages_per_minute", "crawlfleet_worker_pages_per_minute", "Pages per minute, last minute"),
    ("items_per_minute", "crawlfleet_worker_items_per_minute", "Items per minute, last minute"),
)
# Politeness: per crawl, the verdicts; per key (labels site, proxy), these fields.
METRIC_KEYS = 20
BOUNDS = ("none", "workers", "site", "hub")
_KEY_GAUGES = (
    ("budget", "crawlfleet_politeness_budget", "Requests/s the key's slots are handed out at"),
    ("rate", "crawlfleet_politeness_rate", "The key's adaptive rate (requests/s)"),
    ("cap", "crawlfleet_politeness_cap", "robots.txt Crawl-delay cap (requests/s)"),
    ("observed", "crawlfleet_politeness_clean_rate", "Clean responses/s in the key's window"),
    ("cooldown", "crawlfleet_politeness_cooldown_seconds", "Seconds of cool-down left"),
    ("bans_recent", "crawlfleet_politeness_recent_bans", "Ban signals in the last five minutes"),
    ("learned", "crawlfleet_politeness_learned_rate", "Highest rate the key carried clean"),
    ("ceiling", "crawlfleet_politeness_ceiling_rate", "Rate of the key's last ban or slow-down"),
)


def _event(counter: str) -> str:
    return counter.rsplit("/", 1)[-1]


class ViewCollector(Collector):
    """Yields the metric families of one snapshot (None: Redis did not answer)."""

    def __init__(self, view: dict[str, Any] | None) -> None:
        self.view = view

    def collect(self) -> list[Metric]:
        up = GaugeMetricFamily("crawlfleet_redis_up", "1 if the hub's Redis answered this scrape")
        up.add_metric([], 0.0 if self.view is None else 1.0)
        if self.view is None:
            return [up]
        families: list[Metric] = [up]
        spiders = self.view["spiders"]
        paused = GaugeMetricFamily(
            "crawlfleet_paused", "1 while the crawl is paused", labels=["spider"]
        )
        for s in spiders:
            paused.add_metric([s["spider"]], 1.0 if s["paused"] else 0.0)
        families.append(paused)
        for field, name, text in _SPIDER_GAUGES:
            g = GaugeMetricFamily(name, text, labels=["spider"])
            for s in spiders:
                if s[field] is not None:
                    g.add_metric([s["spider"]], float(s[field]))
            families.append(g)
        for field, name, text in _DUPE_GAUGES:
            g = GaugeMetricFamily(name, text, labels=["spider"])
            for s in spiders:
                if s["dupefilter"][field] is not None:
                    g.add_metric([s["spider"]], float(s["dupefilter"][field]))
            families.append(g)
        events = CounterMetricFamily(
            "crawlfleet_frontier_events",
            "Frontier counters, whole cluster",
            labels=["spider", "event"],
        )
        for s in spiders:
            for counter, value in s["counters"].items():
                events.add_metric([s["spider"], _event(counter)], value)
        families.append(events)
        families.extend(self._workers(spiders))
        families.extend(self._politeness(spiders))
        hub = self.view.get("hub")
        if hub is not None:
            rtt = GaugeMetricFamily(
                "crawlfleet_hub_rtt_seconds", "Round trip of one PING to the hub's Redis"
            )
            rtt.add_metric([], hub["rtt_ms"] / 1000)
            families.append(rtt)
            if hub["cpu"] is not None:
                cpu = GaugeMetricFamily(
                    "crawlfleet_hub_cpu_ratio", "Redis CPU seconds per second since the last look"
                )
                cpu.add_metric([], float(hub["cpu"]))
                families.append(cpu)
        pool = GaugeMetricFamily(
            "crawlfleet_pool_available", "Pool size from /count", labels=["pool"]
        )
        pool_up = GaugeMetricFamily("crawlfleet_pool_up", "1 if the pool answered", labels=["pool"])
        for name, entry in self.view["pools"].items():
            pool_up.add_metric([name], 0.0 if entry["error"] else 1.0)
            if entry["count"] is not None:
                pool.add_metric([name], float(entry["count"]))
        families.extend([pool, pool_up])
        families.extend(self._hub(self.view.get("hub")))
        return families

    @staticmethod
    def _hub(hub: dict[str, Any] | None) -> list[Metric]:
        """Redis memory (and whether it is full), the jobs that have not ended and the job
        agents (the alert rules' inputs)."""
        if hub is None:
            return []
        used = GaugeMetricFamily("crawlfleet_redis_used_memory_bytes", "Redis used_memory")
        limit = GaugeMetricFamily(
            "crawlfleet_redis_maxmemory_bytes", "Redis maxmemory (0: no limit)"
        )
        full = GaugeMetricFamily(
            "crawlfleet_redis_full",
            "1 while Redis uses all of its maxmemory and refuses writes (the crawl pauses)",
        )
        refusals = CounterMetricFamily(
            "crawlfleet_redis_oom_refusals",
            "Commands Redis refused with OOM at maxmemory since it started",
        )
        if hub["used_memory"] is not None:  # None: INFO refused (an ACL)
            used.add_metric([], float(hub["used_memory"]))
            limit.add_metric([], float(hub["maxmemory"]))
            full.add_metric([], 1.0 if hub.get("full") else 0.0)
        if hub.get("oom_refusals") is not None:
            refusals.add_metric([], float(hub["oom_refusals"]))
        labels = ["job_id", "project", "spider"]
        running = GaugeMetricFamily(
            "crawlfleet_job_running",
            "1 while the job runs (0: pending, paused, stopping)",
            labels=labels,
        )
        pages = GaugeMetricFamily(
            "crawlfleet_job_pages", "Pages the job's workers crawled so far", labels=labels
        )
        started = GaugeMetricFamily(
            "crawlfleet_job_started_timestamp_seconds", "When the job started", labels=labels
        )
        for job in hub["jobs"]:
            values = [str(job["id"]), str(job["project"] or ""), str(job["spider"] or "")]
            running.add_metric(values, 1.0 if job["state"] == "running" else 0.0)
            pages.add_metric(values, float(job["pages"]))
            if job["started"] is not None:
                started.add_metric(values, float(job["started"]))
        return [
            used,
            limit,
            full,
            refusals,
            running,
            pages,
            started,
            *ViewCollector._agents(hub["agents"]),
        ]

    @staticmethod
    def _agents(agents: list[dict[str, Any]]) -> list[Metric]:
        labels = ["agent", "host"]
        up = GaugeMetricFamily(
            "crawlfleet_agent_up",
            "1 if the job agent's liveness deadline lies ahead",
            labels=labels,
        )
        lost = GaugeMetricFamily(
            "crawlfleet_agent_lost",
            "1 if the job agent's liveness deadline passed without a clean stop",
            labels=labels,
        )
        deadline = GaugeMetricFamily(
            "crawlfleet_agent_deadline_timestamp_seconds",
            "The job agent's liveness deadline (absent once it stopped cleanly)",
            labels=labels,
        )
        for agent in agents:
            values = [agent["name"], agent["host"] or ""]
            up.add_metric(values, 1.0 if agent["alive"] else 0.0)
            lost.add_metric(values, 1.0 if agent_lost(agent) else 0.0)
            if agent["deadline"] is not None:
                deadline.add_metric(values, float(agent["deadline"]))
        return [up, lost, deadline]

    @staticmethod
    def _workers(spiders: list[dict[str, Any]]) -> list[Metric]:
        up = GaugeMetricFamily(
            "crawlfleet_worker_up", "1 if the worker is alive", labels=["spider", "worker", "host"]
        )
        lost = GaugeMetricFamily(
            "crawlfleet_worker_lost",
            "1 if the worker's lease deadline passed without a clean stop",
            labels=["spider", "worker", "host"],
        )
        gauges = [
            (field, GaugeMetricFamily(name, text, labels=["spider", "worker"]))
            for field, name, text in _WORKER_GAUGES
        ]
        events = CounterMetricFamily(
            "crawlfleet_worker_frontier_events",
            "Frontier counters per worker",
            labels=["spider", "worker", "event"],
        )
        scrapy = GaugeMetricFamily(
            "crawlfleet_worker_scrapy_stat",
            "Scrapy stats of each worker (pushed by crawlfleet.extensions.workerstats)",
            labels=["spider", "worker", "stat"],
        )
        for s in spiders:
            for w in s["workers"]:
                labels = [s["spider"], w["id"]]
                up.add_metric([*labels, w["host"] or ""], 1.0 if w["alive"] else 0.0)
                lost.add_metric([*labels, w["host"] or ""], 1.0 if worker_lost(w) else 0.0)
                for field, g in gauges:
                    if w[field] is not None:
                        g.add_metric(labels, float(w[field]))
                for counter, value in w.get("frontier", {}).items():
                    events.add_metric([*labels, _event(counter)], value)
                for stat, value in w.get("scrapy", {}).items():
                    scrapy.add_metric([*labels, stat], float(value))
        return [up, lost, *(g for _, g in gauges), events, scrapy]

    @staticmethod
    def _politeness(spiders: list[dict[str, Any]]) -> list[Metric]:
        bound = GaugeMetricFamily(
            "crawlfleet_politeness_bound",
            "1 for the limit that binds the crawl now (none, workers, site, hub)",
            labels=["spider", "bound"],
        )
        per_spider = [
            ("keys_total", "crawlfleet_politeness_keys", "Politeness keys in the index"),
            ("keys_active", "crawlfleet_politeness_keys_active", "Keys used in the last minute"),
            ("bans_recent", "crawlfleet_politeness_bans_recent", "Bans in the last five minutes"),
        ]
        totals = [(f, GaugeMetricFamily(n, t, labels=["spider"])) for f, n, t in per_spider]
        phases = GaugeMetricFamily(
            "crawlfleet_politeness_phase",
            "1 for the phase the key's controller is in (growing, backing off, cooling down, "
            "probing, holding)",
            labels=["spider", "site", "proxy", "phase"],
        )
        held = GaugeMetricFamily(
            "crawlfleet_politeness_held",
            "1 while the site holds the key back (full, cooling down or banned)",
            labels=["spider", "site", "proxy"],
        )
        gauges = [
            (f, GaugeMetricFamily(n, t, labels=["spider", "site", "proxy"]))
            for f, n, t in _KEY_GAUGES
        ]
        for s in spiders:
            pol = s["politeness"]
            for name in BOUNDS:
                bound.add_metric([s["spider"], name], 1.0 if pol["bound"] == name else 0.0)
            for field, g in totals:
                if pol[field] is not None:
                    g.add_metric([s["spider"]], float(pol[field]))
            for k in pol["keys"][:METRIC_KEYS]:
                labels = [s["spider"], k["site"], k["proxy"] or ""]
                held.add_metric(labels, 1.0 if k["state"] in SITE_BOUND else 0.0)
                for name in PHASES:
                    phases.add_metric([*labels, name], 1.0 if k["phase"] == name else 0.0)
                for field, g in gauges:
                    if k[field] is not None:
                        g.add_metric(labels, float(k[field]))
        return [bound, *(g for _, g in totals), held, phases, *(g for _, g in gauges)]


def render(view: dict[str, Any] | None) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ViewCollector(view))
    return generate_latest(registry)
