"""Typed reads of Scrapy settings whose errors name the setting (one line each).

Scrapy's own ``settings.getbool`` answers a value such as ``"maybe"`` with a generic
"Supported values for boolean settings are …" that does not say which setting was wrong (and takes
``2`` or ``0.5`` without a word); every true-or-false setting crawlfleet reads goes through
:func:`flag` instead, and every number of seconds that must be above 0 through :func:`seconds`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # read through its methods only: importing this module needs no Scrapy
    from scrapy.settings import BaseSettings

WORDS = {"1": True, "true": True, "0": False, "false": False}


def flag(
    settings: BaseSettings, name: str, default: bool, error: type[Exception] = ValueError
) -> bool:
    """``settings[name]`` as true or false: ``True``/``False``, ``1``/``0``, or the strings
    ``"1"``/``"0"``/``"true"``/``"false"`` in any case; unset (or None) is ``default``. Anything
    else raises ``error`` naming ``name``: stricter than Scrapy's ``getbool``, which takes ``2``
    as true and ``0.5`` as false."""
    raw = settings.get(name)
    if raw is None:
        return default
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, int) and raw in (0, 1):
        return bool(raw)
    if isinstance(raw, str) and raw.strip().lower() in WORDS:
        return WORDS[raw.strip().lower()]
    raise error(f"{name} must be true or false, got {_shown(raw)}")


def seconds(
    settings: BaseSettings, name: str, default: float, error: type[Exception] = ValueError
) -> float:
    """``settings[name]`` as a finite number of seconds above 0; unset is ``default``. Anything
    else raises ``error`` naming ``name`` (``inf`` and ``nan`` too: a timeout of ``inf`` seconds
    never ends, and cannot become milliseconds)."""
    raw = settings.get(name, default)
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise error(f"{name} must be a number of seconds, got {_shown(raw)}") from None
    if not (value > 0 and math.isfinite(value)):
        raise error(f"{name} must be > 0, got {_shown(raw)}")
    return value


def _shown(raw: Any) -> str:
    text = repr(raw)
    return text if len(text) <= 80 else text[:77] + "..."
