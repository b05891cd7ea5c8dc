"""Time series the workers and the dashboard's sampler append (``"<ms> <v1> <v2> …"`` entries):
parsed, turned into per-minute rates over ``RATE_WINDOW`` and into charts' points."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any

from crawlfleet.views.values import text

# Rates are computed over this window (seconds).
RATE_WINDOW = 60.0


def parse_samples(raw: Iterable[Any]) -> list[tuple[float, list[float]]]:
    """``[(seconds, [values…])]`` from ``"<ms> <v1> <v2> …"`` entries; junk entries are skipped."""
    out: list[tuple[float, list[float]]] = []
    for entry in raw:
        parts = text(entry).split()
        try:
            t = int(parts[0]) / 1000.0
            values = [float(p) for p in parts[1:]]
        except (IndexError, ValueError):
            continue
        out.append((t, values))
    out.sort(key=lambda s: s[0])
    return out


def rate_per_minute(
    samples: Sequence[tuple[float, list[float]]], now: float, index: int = 0
) -> float | None:
    """Per-minute rate of counter ``index`` over the last RATE_WINDOW seconds of ``samples``.

    The base is the last sample at least a window before the newest one (or the first sample);
    a worker silent for longer than a window has a rate of 0; fewer than two samples give None.
    """
    if len(samples) < 2:
        return None
    t_last, v_last = samples[-1]
    if now - t_last > RATE_WINDOW:
        return 0.0
    base = samples[0]
    for sample in samples:
        if sample[0] <= t_last - RATE_WINDOW:
            base = sample
        else:
            break
    span = t_last - base[0]
    if span <= 0:
        return None
    return max(0.0, v_last[index] - base[1][index]) / span * 60.0


def throughput_series(
    samples: Sequence[tuple[float, list[float]]], index: int = 0
) -> list[list[float]]:
    """``[[seconds, per-minute rate]]`` between consecutive samples (a counter reset counts 0)."""
    points: list[list[float]] = []
    for (t0, v0), (t1, v1) in itertools.pairwise(samples):
        if t1 > t0:
            points.append([t1, round(max(0.0, v1[index] - v0[index]) / (t1 - t0) * 60.0, 2)])
    return points
