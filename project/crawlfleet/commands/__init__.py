"""Operator sub-commands of `crawlfleet` (one module per command)."""
