"""The package's sides, by module name, for the checks that read its source."""

from __future__ import annotations

# What runs inside `scrapy crawl` and reads Scrapy settings: never an operator view.
WORKER_SIDE = (
    "crawlfleet.frontier",
    "crawlfleet.politeness",
    "crawlfleet.extensions",
    "crawlfleet.pipelines",
    "crawlfleet.middlewares",
    "crawlfleet.addon",
    "crawlfleet.fleetsettings",
)
