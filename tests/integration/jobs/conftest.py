"""Fixtures of the job tests: ``start_agent``, a real `crawlfleet agent` (jobs_helpers.py)."""

from jobs_helpers import start_agent

__all__ = ["start_agent"]
