"""Rules every hub service applies to its settings: exit statuses, numbers, URLs, addresses.

One rule for all services (proxy pool, account pool, dashboard, demo site):

- **Exit status** ``EXIT_OK`` (0) after a clean stop, ``EXIT_FAILURE`` (1) when the service
  cannot run (Redis unreachable for a one-shot run, a port already taken), ``EXIT_CONFIG`` (2)
  on bad configuration — the systemd units say ``RestartPreventExitStatus=2``, so a
  misconfigured service stays failed with its one line instead of restarting for ever.
- **Numbers** are read strictly: an integer option takes digits only (``1e3`` is refused, not
  read as 1000) and every number has a range, so no setting can ask for absurd work.
- **Errors** are a ``ConfigError``: one line naming the flag and its variable, no traceback,
  no secret (URLs are shown through ``crawlfleet.redisconn.mask_url``).
"""

from __future__ import annotations

import ipaddress
import math
import re
from urllib.parse import urlsplit

from crawlfleet.redisconn import mask_url

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_CONFIG = 2

_INTEGER = re.compile(r"[+-]?[0-9]{1,20}")


class ConfigError(ValueError):
    """A setting that cannot work (exit status 2); one line naming the flag and the variable."""


class ServiceFailure(RuntimeError):
    """The service cannot run although its configuration is valid (exit status 1)."""


def parse_int(raw: str, low: int, high: int) -> int:
    """``raw`` as an integer in ``low..high``; ``ValueError`` with the rule otherwise."""
    text = str(raw).strip()
    if not _INTEGER.fullmatch(text) or not low <= int(text) <= high:
        raise ValueError(f"must be an integer between {low} and {high}")
    return int(text)


def parse_number(
    raw: str, low: float, high: float, *, above: bool = False, unit: str = ""
) -> float:
    """``raw`` as a finite number in ``low..high`` (``above``: strictly above ``low``)."""
    try:
        value = float(str(raw).strip())
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and low <= value <= high) or (above and value == low):
        raise ValueError(f"must be {'>' if above else '>='} {low:g} and <= {high:g}{unit}")
    return value


def parse_http_url(raw: str) -> str:
    """``raw`` if it is an ``http(s)://host[:port]`` URL; ``ValueError`` (no secret) otherwise."""
    value = str(raw).strip()
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 -- raises ValueError on a port that is no number
    except ValueError:
        raise ValueError("is not a valid URL (bad host, IPv6 bracket or port)") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http:// or https:// URL with a host")
    return value


def http_url(raw: str, names: str) -> str:
    """``parse_http_url`` with a ``ConfigError`` naming ``names`` (e.g. ``--x / X_URL``)."""
    try:
        return parse_http_url(raw)
    except ValueError as exc:
        raise ConfigError(f"{names} {exc}: {mask_url(raw)!r}") from None


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (``127.0.0.0/8``, ``::1``, ``[::1]``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
