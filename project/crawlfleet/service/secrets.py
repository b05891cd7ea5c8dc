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

from dataclasses import dataclass

from crawlfleet.service.options import ConfigError, Option, boolean, is_loopback, optional_text

MIN_API_KEY_LENGTH = 16
INSECURE_FLAG = "--insecure-no-api-key"


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

    def options(self, key_help: str) -> tuple[Option, ...]:
        """The service's API key (a secret), its file and the no-key opt-out, as options."""
        return (
            Option(
                "api_key_file",
                "--api-key-file",
                self.file_env,
                "",
                f"file holding the API key (instead of {self.env})",
                optional_text,
            ),
            Option(
                "api_key",
                "--api-key",
                self.env,
                None,
                f"{key_help}, at least {MIN_API_KEY_LENGTH} characters",
                secret=True,
                file="api_key_file",
            ),
            Option(
                "insecure_no_api_key",
                INSECURE_FLAG,
                self.insecure_env,
                False,
                "allow a non-loopback --host without an API key (not recommended)",
                boolean,
                kind="switch",
                aliases=self.flag_aliases,
                env_aliases=self.insecure_aliases,
            ),
        )


def check_api_key(key: str, source: str) -> str:
    """``key`` if it is long enough; a ``ConfigError`` naming ``source`` (never the key)."""
    if len(key) < MIN_API_KEY_LENGTH:
        raise ConfigError(
            f"the API key from {source} is too short: use at least {MIN_API_KEY_LENGTH} "
            "characters (e.g. `openssl rand -hex 16`)"
        )
    return key


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
    names: ApiKeyNames, found: tuple[str, str] | None, host: str, allowed: bool
) -> str | None:
    """The service's checked API key (None when unset), after both rules above.

    ``found`` is what its secret option resolved to (``crawlfleet.service.options``): the key
    and where it came from, or None.
    """
    key = check_api_key(*found) if found else None
    require_key_off_loopback(host, key, allowed, names)
    return key
