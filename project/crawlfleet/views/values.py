"""Values as Redis returns them, read leniently: bytes or text, numbers or junk (junk reads as 0 or
None, never an exception: a view shows what is there)."""

from __future__ import annotations

import math
from typing import Any


def text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def as_int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def as_num(value: Any) -> float | int | None:
    try:
        shown = text(value)
        return int(shown) if shown.lstrip("-").isdigit() else float(shown)
    except (TypeError, ValueError):
        return None


def decode_hash(raw: Any) -> dict[str, str]:
    if not isinstance(raw, dict):
        return {}
    return {text(k): text(v) for k, v in raw.items()}


def rounded(value: float | None) -> float | None:
    """Two decimals for a view; None for None, infinity and NaN (JSON has neither)."""
    return None if value is None or not math.isfinite(value) else round(value, 2)
