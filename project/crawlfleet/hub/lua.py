"""Lua kept as files: every script crawlfleet sends to Redis lives in a ``lua/`` folder beside the
Python that sends it (``crawlfleet/<package>/lua/<name>.lua``), never as a string in a module."""

from __future__ import annotations

from importlib.resources import files


def read_lua(package: str, name: str) -> str:
    """The Lua file ``name`` of ``package`` (``crawlfleet/<package>/lua/<name>``), as text."""
    return files(package).joinpath("lua", name).read_text(encoding="utf-8")
