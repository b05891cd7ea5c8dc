"""Fixtures of the ACL tests: ``start_agent``, a real `crawlfleet agent` (acl_helpers.py)."""

from acl_helpers import start_agent

__all__ = ["start_agent"]
