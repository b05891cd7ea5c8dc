"""Configuration of the demo site: one immutable value, parsed from flags or the environment.

It travels to uvicorn's worker processes as JSON in ``DEMOSITE_CONFIG_JSON`` so that every
worker builds the same catalogue and signs tokens with the same secret. Every number has a
range (``LIMITS``), checked here for the command line and for ``/api/admin/config`` alike.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from crawlfleet.service.options import ConfigError

__all__ = ["CONFIG_ENV", "LIMITS", "ConfigError", "SiteConfig", "parse_accounts"]
CONFIG_ENV = "DEMOSITE_CONFIG_JSON"
# 200: a "soft" ban, a page that only its text tells from an answer (BAN_PAGE)
BAN_STATUSES = (403, 429, 200)
# The ban page's text at --ban-status 200: a crawler tells it by this marker
# (POLITENESS_BAN_MARKERS), not by its status.
BAN_PAGE_MARKER = "Access denied: this address sent too many requests"
DAY = 86_400
# Upper bounds of the numbers (the lower ones are in __post_init__): the catalogue draws its ids
# from 9,000,000 numbers and holds them in memory, so a million books is the most it builds.
LIMITS: dict[str, float] = {
    "books": 1_000_000,
    "seed": 2**63 - 1,
    "token_ttl": 30 * DAY,
    "rate_limit": 1_000_000,
    "rate_window": DAY,
    "ban_seconds": DAY,
    "latency_ms": 60_000,
}


@dataclass(frozen=True)
class SiteConfig:
    books: int = 9216
    page_size: int = 18
    max_limit: int = 100
    seed: int = 7
    accounts: dict[str, str] = field(default_factory=lambda: {"admin": "admin"})
    token_ttl: float = 3600.0
    jwt_secret: str = ""
    admin_secret: str = ""
    rate_limit: int = 0
    rate_window: float = 1.0
    ban_seconds: float = 10.0
    ban_status: int = 403
    latency_ms: float = 0.0

    def __post_init__(self) -> None:
        for name, high in LIMITS.items():
            value = getattr(self, name)
            if not -high <= value <= high:  # also refuses nan
                flag = "--" + name.replace("_", "-")
                raise ConfigError(f"{flag} must be at most {high:g}, got {value:g}")
        if self.books < 0:
            raise ConfigError(f"--books must be >= 0, got {self.books}")
        if not 1 <= self.page_size <= self.max_limit:
            raise ConfigError(f"--page-size must be 1..{self.max_limit}, got {self.page_size}")
        if self.token_ttl <= 0:
            raise ConfigError(f"--token-ttl must be > 0 seconds, got {self.token_ttl}")
        if len(self.jwt_secret.encode()) < 32:
            # RFC 7518 3.2: an HS256 key shorter than the hash is weak (PyJWT warns per call).
            raise ConfigError("--jwt-secret must be at least 32 bytes long")
        if self.rate_limit < 0:
            raise ConfigError(f"--rate-limit must be >= 0 (0 = off), got {self.rate_limit}")
        if self.rate_window <= 0:
            raise ConfigError(f"--rate-window must be > 0 seconds, got {self.rate_window}")
        if self.ban_seconds < 0:
            raise ConfigError(f"--ban-seconds must be >= 0, got {self.ban_seconds}")
        if self.ban_status not in BAN_STATUSES:
            raise ConfigError(
                f"--ban-status must be 403, 429 or 200 (a ban page), got {self.ban_status}"
            )
        if self.latency_ms < 0:
            raise ConfigError(f"--latency-ms must be >= 0, got {self.latency_ms}")

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> SiteConfig:
        return cls(**json.loads(text))


def parse_accounts(spec: str) -> dict[str, str]:
    """``user:pass,user2:pass2``, or ``@path`` / a file path with one ``user:pass`` a line."""
    text = spec
    path = Path(spec[1:] if spec.startswith("@") else spec)
    if spec.startswith("@") or (":" not in spec and path.is_file()):
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"--accounts: cannot read {path}: {exc.strerror}") from None
    accounts: dict[str, str] = {}
    for raw in text.replace(",", "\n").splitlines():
        entry = raw.strip()
        if not entry or entry.startswith("#"):
            continue
        user, sep, password = entry.partition(":")
        if not sep or not user or not password:
            raise ConfigError(f"--accounts: expected user:password, got {entry!r}")
        accounts[user] = password
    if not accounts:
        raise ConfigError("--accounts: no accounts given")
    return accounts
