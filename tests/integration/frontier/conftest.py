"""Fixtures of the frontier tests (defined in frontier_support.py)."""

from frontier_support import site, start_worker

__all__ = ["site", "start_worker"]
