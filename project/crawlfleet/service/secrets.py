"""Where a hub service's secrets come from and the rules its API key follows.

Secrets never come from a flag (``ps`` shows every process's command line to every user): a
service reads its API key from ``<SERVICE>_API_KEY`` or from the file named by
``--api-key-file`` / ``<SERVICE>_API_KEY_FILE``, never both. One rule for the proxy pool, the
account pool and the dashboard:

- an API key has at least ``MIN_API_KEY_LENGTH`` (16) characters;
- a service refuses a non-loopback ``--host`` without a key unless
  ``--insecure-no-api-key`` / ``<SERVICE>_INSECURE_NO_API_KEY`` is set (the dashboard's older
  ``--allow-no-api-key`` / ``DASHBOARD_ALLOW_NO_API_KEY`` is kept as an alias).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from crawlfleet.service.options import ConfigError, is_loopback

MIN_API_KEY_LENGTH = 16
INSECURE_FLAG = "--insecure-no-api-key"
TRUE = ("1", "true", "yes", "on")
FALSE = ("", "0", "false", "no", "off")


@dataclass(frozen=True)
class ApiKeyNames:
    """The names one service reads its key and its opt-out from, e.g. prefix ``PROXYPOOL``."""

    prefix: str
    insecure_aliases: tuple[str, ...] = ()  # older variable names of the opt-out
    flag_aliases: tuple[str, ...] = ()  # older flags of the opt-out

    @property
    def env(self) -> str:
        return f"{self.prefix}_API_KEY"

    @property
    def file_env(self) -> str:
        return f"{self.prefix}_API_KEY_FILE"

    @property
    def insecure_env(self) -> str:
        return f"{self.prefix}_INSECURE_NO_API_KEY"


def read_secret(
    env_name: str, file_names: str, path: str, environ: Mapping[str, str]
) -> tuple[str, str] | None:
    """(secret, where it came from) from ``env_name`` or the file at ``path``; None if neither."""
    direct = environ.get(env_name, "").strip()
    if direct and path:
        raise ConfigError(f"set only one of {env_name} and {file_names}")
    if direct:
        return direct, env_name
    if not path:
        return None
    try:
        text = Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise ConfigError(f"{file_names}: cannot read {path}: {reason}") from None
    if not text:
        raise ConfigError(f"{file_names}: {path} is empty")
    return text, f"{file_names.partition(' ')[0]} {path}"


def check_api_key(key: str, source: str) -> str:
    """``key`` if it is long enough; a ``ConfigError`` naming ``source`` (never the key)."""
    if len(key) < MIN_API_KEY_LENGTH:
        raise ConfigError(
            f"the API key from {source} is too short: use at least {MIN_API_KEY_LENGTH} "
            "characters (e.g. `openssl rand -hex 16`)"
        )
    return key


def parse_switch(raw: str, names: str) -> bool:
    value = raw.strip().lower()
    if value in TRUE:
        return True
    if value in FALSE:
        return False
    raise ConfigError(f"{names} must be true or false (1/0, yes/no, on/off), got {raw[:40]!r}")


def insecure_allowed(names: ApiKeyNames, flag: bool, environ: Mapping[str, str]) -> bool:
    """The opt-out: the flag, or the variable (or one of its aliases) set to true."""
    allowed = flag
    for env in (names.insecure_env, *names.insecure_aliases):
        if env in environ:
            allowed = parse_switch(environ[env], f"{INSECURE_FLAG} / {env}") or allowed
    return allowed


def require_key_off_loopback(host: str, key: str | None, allowed: bool, names: ApiKeyNames) -> None:
    """Refuse a non-loopback ``host`` without an API key unless the opt-out is set."""
    if key or allowed or is_loopback(host):
        return
    alias = "".join(f", alias {flag}" for flag in names.flag_aliases)
    raise ConfigError(
        f"refusing to listen on non-loopback address {host!r} without an API key: set "
        f"{names.env} or --api-key-file / {names.file_env} (or pass {INSECURE_FLAG}{alias})"
    )


def api_key(
    names: ApiKeyNames, path: str, environ: Mapping[str, str], host: str, allowed: bool
) -> str | None:
    """The service's checked API key (None when unset), after both rules above."""
    found = read_secret(names.env, f"--api-key-file / {names.file_env}", path, environ)
    key = check_api_key(*found) if found else None
    require_key_off_loopback(host, key, allowed, names)
    return key
