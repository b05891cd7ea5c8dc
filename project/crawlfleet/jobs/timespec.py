"""When a schedule fires: ``--every`` durations (``6h``, ``1h30m``, ``90s``) and ``--cron``
expressions (five fields, UTC, read by ``cronsim``), each checked with a one-line error.

:func:`next_fire` is the one rule of catch-up: the first occurrence strictly after ``now``, so a
scheduler that was down for many occurrences fires once when it is back, not once per miss.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from cronsim import CronSim, CronSimError

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
MIN_EVERY = 1
MAX_EVERY = 366 * 86400
_EVERY = re.compile(r"(?:[0-9]{1,7}[smhd])+")
_PART = re.compile(r"([0-9]{1,7})([smhd])")


class TimeSpecError(ValueError):
    """A ``--cron`` or ``--every`` that does not parse (one line naming the flag)."""


def parse_every(text: str) -> int:
    """Seconds of ``text`` (``6h``, ``1h30m``, ``45s``, ``2d``); :class:`TimeSpecError`."""
    value = text.strip().lower()
    if not _EVERY.fullmatch(value):
        raise TimeSpecError(
            f"--every {text[:40]!r} is not a duration: write it like 6h, 30m, 1h30m, 90s or 2d"
        )
    seconds = sum(int(n) * UNITS[unit] for n, unit in _PART.findall(value))
    if not MIN_EVERY <= seconds <= MAX_EVERY:
        raise TimeSpecError(
            f"--every {text[:40]!r} must be between {MIN_EVERY} second and 366 days"
        )
    return seconds


def check_cron(text: str) -> str:
    """``text`` (blanks normalised) if it is a five-field cron expression, else
    :class:`TimeSpecError`."""
    expr = " ".join(text.split())
    if len(expr.split()) != 5:
        raise TimeSpecError(
            f"--cron {text[:60]!r} must have five fields (minute hour day month weekday), "
            f"like '0 3 * * *'"
        )
    try:
        CronSim(expr, datetime(2000, 1, 1, tzinfo=UTC))
    except (CronSimError, ValueError, IndexError, KeyError) as exc:
        raise TimeSpecError(f"--cron {text[:60]!r} does not parse: {exc}") from None
    return expr


def next_fire(
    *, now: float, cron: str = "", every: int = 0, previous: float | None = None
) -> float:
    """The first occurrence strictly after ``now`` (epoch seconds, UTC).

    ``every`` keeps its phase: the next of ``previous + k * every`` after ``now`` (``previous``
    defaults to ``now``, so a new schedule first fires one period after it was added).
    """
    if cron:
        start = datetime.fromtimestamp(int(now), UTC)
        for fire in CronSim(cron, start):
            if fire.timestamp() > now:
                return fire.timestamp()
        raise TimeSpecError(f"--cron {cron!r} never fires")  # pragma: no cover - cronsim raises
    if every <= 0:
        raise TimeSpecError("a schedule needs --cron or --every")
    base = now if previous is None else previous
    if base > now:
        return base
    periods = int((now - base) // every) + 1
    return base + periods * every
