"""Helpers of the operator tests: the real `crawlfleet` CLI (support.cli), crawl settings."""

from __future__ import annotations

from support.cli import Result, assert_one_line_error, cli, cli_process
from support.crawl import ROOT, frontier_settings

__all__ = ["ROOT", "Result", "assert_one_line_error", "cli", "cli_process", "crawl_settings"]

EXTENSION = "crawlfleet.extensions.workerstats.WorkerStats"


def crawl_settings(redis_url: str, **extra: object) -> dict[str, object]:
    """Frontier settings of the frontier tests, with per-worker statistics every 0.3 s."""
    return frontier_settings(
        redis_url,
        EXTENSIONS={EXTENSION: 500},
        WORKERSTATS_INTERVAL=0.3,
        CONCURRENT_REQUESTS=2,
        **extra,
    )
