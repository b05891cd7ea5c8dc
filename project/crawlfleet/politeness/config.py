"""Politeness settings: read, default and validate every ``POLITENESS_*`` Scrapy setting.

One validated dataclass, :class:`PolitenessConfig`, as ``FrontierConfig`` is for the frontier.
Every error is one line that names the setting. Rates are requests per second per politeness
key (a target host, domain or IP, times the egress proxy when one is used). No rate of a target
is needed: each key learns its own (``crawlfleet.politeness.budget``); ``POLITENESS_RATE`` is
where a key that has learned nothing yet starts, ``POLITENESS_MAX_RATE`` an optional cap.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from crawlfleet.settingtable import default
from crawlfleet.settingtable.values import flag

if TYPE_CHECKING:  # read through its methods only: a worker's clients need not import Scrapy
    from scrapy.settings import BaseSettings

KEY_KINDS = ("host", "domain", "ip")
DEFAULT_RATE: float = default("POLITENESS_RATE")
SITE_FIELDS = ("rate", "min_rate", "max_rate", "burst")


class PolitenessConfigError(ValueError):
    """A politeness setting that cannot work; the message names the setting."""


@dataclass(frozen=True)
class Limits:
    """The rate limits of one key: start, floor and cap (requests/s; ``inf``: none, the key
    learns its ceiling from the site) and burst (requests)."""

    rate: float
    min_rate: float
    max_rate: float
    burst: int


@dataclass(frozen=True)
class PolitenessConfig:
    """Validated politeness settings of a crawl."""

    # every default is the settings table's (crawlfleet.settingtable.politeness)
    enabled: bool = default("POLITENESS_ENABLED")
    key_kind: str = default("POLITENESS_KEY")
    limits: Limits = Limits(DEFAULT_RATE, DEFAULT_RATE / 10, math.inf, default("POLITENESS_BURST"))
    ban_statuses: frozenset[int] = frozenset(default("POLITENESS_BAN_STATUSES"))
    ban_markers: tuple[bytes, ...] = ()
    backoff: float = default("POLITENESS_BACKOFF")
    growth: float = default("POLITENESS_GROWTH")
    probe: float = default("POLITENESS_PROBE")
    probe_interval: float = default("POLITENESS_PROBE_INTERVAL")
    precision: float = default("POLITENESS_PRECISION")
    latency_factor: float = default("POLITENESS_LATENCY_FACTOR")
    window: float = default("POLITENESS_WINDOW")
    cooldown: float = default("POLITENESS_COOLDOWN")
    memory: float = default("POLITENESS_MEMORY")
    max_keys: int = default("POLITENESS_MAX_KEYS")
    lease_size: int = default("POLITENESS_LEASE_SIZE")
    lease_horizon: float = default("POLITENESS_LEASE_HORIZON")
    gc_freeze: bool = default("POLITENESS_GC_FREEZE")
    namespace: str = ""
    lookahead: int = 0  # 0: four times SCHEDULER_PREFETCH
    sites: dict[str, Limits] = field(default_factory=dict)

    def limits_for(self, site: str) -> Limits:
        """The limits of ``site`` (a key without its proxy): its override, else the defaults."""
        return self.sites.get(site, self.limits)

    @classmethod
    def from_settings(cls, settings: BaseSettings, spider: str = "") -> PolitenessConfig:
        kind = str(settings.get("POLITENESS_KEY", default("POLITENESS_KEY"))).strip().lower()
        if kind not in KEY_KINDS:
            raise PolitenessConfigError(
                f"POLITENESS_KEY must be one of {', '.join(KEY_KINDS)}, "
                f"got {settings.get('POLITENESS_KEY')!r}"
            )
        max_rate = _ceiling("POLITENESS_MAX_RATE", settings.get("POLITENESS_MAX_RATE"))
        if settings.get("POLITENESS_RATE") is None:
            # unset: the default start, within the floor and cap the user set
            start = min(DEFAULT_RATE, max_rate)
            min_rate = _number(settings, "POLITENESS_MIN_RATE", start / 10, positive=True)
            rate = min(max(start, min_rate), max_rate)
        else:
            rate = _number(settings, "POLITENESS_RATE", positive=True)
            min_rate = _number(settings, "POLITENESS_MIN_RATE", rate / 10, positive=True)
        if min_rate > max_rate:
            raise PolitenessConfigError(
                f"POLITENESS_MIN_RATE ({min_rate:g}) must not exceed "
                f"POLITENESS_MAX_RATE ({max_rate:g})"
            )
        if not min_rate <= rate <= max_rate:
            raise PolitenessConfigError(
                f"POLITENESS_RATE ({rate:g}) must lie between POLITENESS_MIN_RATE ({min_rate:g}) "
                f"and POLITENESS_MAX_RATE ({max_rate:g})"
            )
        limits = Limits(rate, min_rate, max_rate, _whole(settings, "POLITENESS_BURST"))
        backoff = _fraction(settings, "POLITENESS_BACKOFF")
        growth = _number(settings, "POLITENESS_GROWTH", positive=True)
        if not 1 < growth <= 10:
            raise PolitenessConfigError(
                f"POLITENESS_GROWTH must be above 1 and at most 10, got {growth:g}"
            )
        lease_size = _whole(settings, "POLITENESS_LEASE_SIZE")
        return cls(
            enabled=_bool(settings, "POLITENESS_ENABLED"),
            key_kind=kind,
            limits=limits,
            ban_statuses=_statuses(
                settings.get("POLITENESS_BAN_STATUSES", default("POLITENESS_BAN_STATUSES"))
            ),
            ban_markers=_markers(
                settings.get("POLITENESS_BAN_MARKERS", default("POLITENESS_BAN_MARKERS"))
            ),
            backoff=backoff,
            growth=growth,
            probe=_fraction(settings, "POLITENESS_PROBE"),
            probe_interval=_number(settings, "POLITENESS_PROBE_INTERVAL", positive=True),
            precision=_fraction(settings, "POLITENESS_PRECISION"),
            latency_factor=_latency_factor(settings),
            window=_number(settings, "POLITENESS_WINDOW", positive=True),
            cooldown=_number(settings, "POLITENESS_COOLDOWN", positive=False),
            memory=_number(settings, "POLITENESS_MEMORY", positive=True),
            max_keys=_whole(settings, "POLITENESS_MAX_KEYS"),
            lease_size=lease_size,
            lease_horizon=_number(settings, "POLITENESS_LEASE_HORIZON", positive=True),
            gc_freeze=_bool(settings, "POLITENESS_GC_FREEZE"),
            namespace=str(settings.get("POLITENESS_NAMESPACE") or spider),
            lookahead=_lookahead(settings),
            sites=_sites(settings.get("POLITENESS_SITES") or default("POLITENESS_SITES"), limits),
        )


def _as_number(name: str, raw: Any, positive: bool) -> float:
    if isinstance(raw, bool):
        raise PolitenessConfigError(f"{name} must be a number, got {raw!r}")
    try:
        value = float(raw)
    except (TypeError, ValueError, OverflowError):
        raise PolitenessConfigError(f"{name} must be a number, got {raw!r}") from None
    if not math.isfinite(value):
        raise PolitenessConfigError(f"{name} must be a finite number, got {raw!r}")
    if value < 0 or (positive and value == 0):
        raise PolitenessConfigError(f"{name} must be {'> 0' if positive else '>= 0'}, got {raw!r}")
    return value


def _number(
    settings: BaseSettings, name: str, fallback: float | None = None, *, positive: bool
) -> float:
    """``settings[name]`` as a number; unset: ``fallback`` when computed, else the table's."""
    return _as_number(
        name, settings.get(name, default(name) if fallback is None else fallback), positive
    )


def _as_whole(name: str, raw: Any) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int | str):
        raise PolitenessConfigError(f"{name} must be a whole number > 0, got {raw!r}")
    try:
        value = int(raw)
    except ValueError:
        raise PolitenessConfigError(f"{name} must be a whole number > 0, got {raw!r}") from None
    if value <= 0 or value > 1_000_000:
        raise PolitenessConfigError(f"{name} must be a whole number from 1 to 1000000, got {raw!r}")
    return value


def _fraction(settings: BaseSettings, name: str) -> float:
    value = _number(settings, name, positive=True)
    if value >= 1:
        raise PolitenessConfigError(f"{name} must be a fraction above 0 and below 1, got {value:g}")
    return value


def _ceiling(name: str, raw: Any) -> float:
    """A cap in requests/s (``POLITENESS_MAX_RATE``, a site's ``max_rate``); unset, None, 0 or
    empty: none (``inf``)."""
    if raw is None or raw == math.inf or (isinstance(raw, str) and not raw.strip()):
        return math.inf
    value = _as_number(name, raw, positive=False)
    return value or math.inf


def _latency_factor(settings: BaseSettings) -> float:
    """``POLITENESS_LATENCY_FACTOR``: 0 turns the slow-down signal off, else above 1."""
    value = _number(settings, "POLITENESS_LATENCY_FACTOR", positive=False)
    if 0 < value <= 1:
        raise PolitenessConfigError(
            f"POLITENESS_LATENCY_FACTOR must be above 1 (or 0: off), got {value:g}"
        )
    return value


def _whole(settings: BaseSettings, name: str) -> int:
    return _as_whole(name, settings.get(name, default(name)))


def _bool(settings: BaseSettings, name: str) -> bool:
    return flag(settings, name, default(name), PolitenessConfigError)


def _lookahead(settings: BaseSettings) -> int:
    """``POLITENESS_LOOKAHEAD``; 0 when unset (the scheduler then uses four times its prefetch)."""
    raw = settings.get("POLITENESS_LOOKAHEAD")
    return 0 if raw is None else _as_whole("POLITENESS_LOOKAHEAD", raw)


def _list(name: str, raw: Any) -> list[Any]:
    if isinstance(raw, str):
        return [part.strip() for part in raw.split(",") if part.strip()]
    if isinstance(raw, list | tuple | set | frozenset):
        return list(raw)
    raise PolitenessConfigError(f"{name} must be a list (or comma-separated), got {raw!r}")


def _statuses(raw: Any) -> frozenset[int]:
    statuses = set()
    for entry in _list("POLITENESS_BAN_STATUSES", raw):
        text = str(entry).strip()
        if isinstance(entry, bool) or not text.isdigit() or not 100 <= int(text) <= 599:
            raise PolitenessConfigError(
                f"POLITENESS_BAN_STATUSES must list HTTP statuses (100-599), got {entry!r}"
            )
        statuses.add(int(text))
    return frozenset(statuses)


def _markers(raw: Any) -> tuple[bytes, ...]:
    # a list only: a marker may hold a comma
    entries = [raw] if isinstance(raw, str | bytes) else raw
    if not isinstance(entries, list | tuple):
        raise PolitenessConfigError(
            f"POLITENESS_BAN_MARKERS must be a list of strings, got {raw!r}"
        )
    markers = []
    for entry in entries:
        marker = entry.encode("utf-8", "surrogatepass") if isinstance(entry, str) else entry
        if not isinstance(marker, bytes) or not marker:
            raise PolitenessConfigError(
                f"POLITENESS_BAN_MARKERS must list non-empty strings, got {entry!r}"
            )
        markers.append(marker)
    return tuple(markers)


def _sites(raw: Any, defaults: Limits) -> dict[str, Limits]:
    """``POLITENESS_SITES``: site → start rate, or site → {rate, min_rate, max_rate, burst} (each
    optional: a start, a floor, a cap); a dict or its JSON text (as an inventory renders it into
    the worker environment)."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError as exc:
            raise PolitenessConfigError(f"POLITENESS_SITES is not valid JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise PolitenessConfigError(f"POLITENESS_SITES must be a dict site -> rate, got {raw!r}")
    sites = {}
    for site, value in raw.items():
        if not isinstance(site, str) or not site.strip() or any(c in site for c in " /@"):
            raise PolitenessConfigError(f"POLITENESS_SITES: {site!r} is not a host name")
        name = f"POLITENESS_SITES[{site!r}]"
        fields = value if isinstance(value, dict) else {"rate": value}
        unknown = sorted(str(k) for k in fields if k not in SITE_FIELDS)
        if unknown:
            raise PolitenessConfigError(
                f"{name}: unknown field {unknown[0]!r} (use {', '.join(SITE_FIELDS)})"
            )
        if not fields:
            raise PolitenessConfigError(f"{name} is empty (give {', '.join(SITE_FIELDS)})")
        max_rate = _ceiling(f"{name}['max_rate']", fields.get("max_rate", defaults.max_rate))
        rate = _as_number(
            f"{name}['rate']", fields.get("rate", min(defaults.rate, max_rate)), positive=True
        )
        # a site's own rate widens the default floor and cap for that site
        min_rate = _as_number(
            f"{name}['min_rate']", fields.get("min_rate", min(defaults.min_rate, rate)), True
        )
        if "max_rate" not in fields:
            max_rate = max(max_rate, rate)
        if not min_rate <= rate <= max_rate:
            raise PolitenessConfigError(
                f"{name}: rate {rate:g} must lie between min_rate {min_rate:g} "
                f"and max_rate {max_rate:g}"
            )
        burst = _as_whole(f"{name}['burst']", fields.get("burst", defaults.burst))
        sites[site.strip().lower()] = Limits(rate, min_rate, max_rate, burst)
    return sites
