"""Every hub service's settings: one option table each, one parser, one set of rules.

A service declares its settings once, as a tuple of ``Option`` (flag, environment variable,
default, help, how a string becomes the value); ``add_arguments`` turns the table into argparse
flags, ``resolve`` reads them back with the environment, ``shown`` masks them for a log line and
``scripts/gendocs.py`` renders the same table into the service's page in docs/. A flag wins over
the environment, the environment over the default; defaults are values, not parsed.

Kinds of option: ``value`` (one flag value), ``list`` (the flag repeats and replaces the
variable, which is comma or space separated), ``switch`` (the flag sets True) and ``negswitch``
(the flag sets False); the variable of a switch is read as true or false, and checked even when
the flag is given. ``secret=True`` is read from the environment or from the file named by the
option ``file`` — never from a flag: a flag named by a secret option is accepted only to be
refused with one line (``ps`` shows every command line to every user); its value is masked when
shown.

One rule for all services (proxy pool, account pool, dashboard, demo site):

- **Exit status** ``EXIT_OK`` (0) after a clean stop, ``EXIT_FAILURE`` (1) when the service
  cannot run (Redis unreachable for a one-shot run, a port already taken), ``EXIT_CONFIG`` (2)
  on bad configuration — the systemd units say ``RestartPreventExitStatus=2``, so a
  misconfigured service stays failed with its one line instead of restarting for ever.
- **Numbers** are read strictly: an integer option takes digits only (``1e3`` is refused, not
  read as 1000) and every number has a range, so no setting can ask for absurd work.
- **Errors** are a ``ConfigError``: one line naming the flag and its variable
  (``--port/PROXYPOOL_PORT must be an integer between 1 and 65535, got '1e3'``), no traceback,
  no secret (URLs are shown through ``crawlfleet.hub.urls.mask_url``).
"""

from __future__ import annotations

import argparse
import ipaddress
import math
import os
import re
import ssl
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from crawlfleet.hub.urls import DEFAULT_REDIS_URL, mask_url, url_problem

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_CONFIG = 2

_INTEGER = re.compile(r"[+-]?[0-9]{1,20}")
Parser = Callable[[str], Any]  # a string in, the value out, or ValueError with the reason


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


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (``127.0.0.0/8``, ``::1``, ``[::1]``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


# ---- value parsers for option tables: each raises ValueError with the reason only


def text(raw: str) -> str:
    """A non-empty string (surrounding blanks dropped)."""
    value = raw.strip()
    if not value:
        raise ValueError("must not be empty")
    return value


def optional_text(raw: str) -> str:
    """Any string, blanks dropped; empty means unset."""
    return raw.strip()


def integer(low: int, high: int) -> Callable[[str], int]:
    """A parser of integers in ``low..high`` (digits only)."""

    def parse(raw: str) -> int:
        return parse_int(raw, low, high)

    return parse


def number(
    low: float, high: float, *, above: bool = False, unit: str = ""
) -> Callable[[str], float]:
    """A parser of finite numbers in ``low..high`` (``above``: strictly above ``low``)."""

    def parse(raw: str) -> float:
        return parse_number(raw, low, high, above=above, unit=unit)

    return parse


def boolean(raw: str) -> bool:
    """true or false: 1/0, true/false, yes/no, on/off (empty is false)."""
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise ValueError("must be true or false (1/0, yes/no, on/off)")


def choice(*allowed: str) -> Callable[[str], str]:
    """A parser accepting one of ``allowed`` (case-insensitive)."""

    def parse(raw: str) -> str:
        value = raw.strip().lower()
        if value not in allowed:
            raise ValueError(f"must be one of {', '.join(allowed)}")
        return value

    return parse


def redis_url(raw: str) -> str:
    """A Redis URL the connection helper can read (``crawlfleet.hub.urls.url_problem``)."""
    value = raw.strip()
    if not value:
        raise ValueError("must not be empty")
    problem = url_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


def http_url_or_empty(raw: str) -> str:
    """An ``http(s)://`` URL, or empty for unset."""
    value = raw.strip()
    return parse_http_url(value) if value else ""


def items(
    item: Callable[[str], Any], show: Callable[[str], str] = str
) -> Callable[[str], tuple[Any, ...]]:
    """A parser of comma or space separated values, each read by ``item``."""

    def parse(raw: str) -> tuple[Any, ...]:
        values = []
        for part in re.split(r"[,\s]+", raw.strip()):
            if part:
                try:
                    values.append(item(part))
                except ValueError as exc:
                    raise ValueError(f"item {show(part)!r} {exc}") from None
        return tuple(values)

    return parse


# ---- the option table


KINDS = ("value", "list", "switch", "negswitch")


@dataclass(frozen=True)
class Option:
    """One setting: flag, environment variable, default and meaning, declared once."""

    name: str  # the attribute of the service's settings
    flag: str | None  # None: no flag (a secret, or an environment-only setting)
    env: str
    default: Any
    help: str
    parse: Parser = text
    kind: str = "value"
    secret: bool = False  # environment or ``file`` only; masked when shown
    file: str = ""  # secret: the name of the option naming a file that holds it
    show: Callable[[str], str] = str  # how a raw value appears in an error (secrets masked)
    aliases: tuple[str, ...] = ()  # older flags, still accepted
    env_aliases: tuple[str, ...] = ()  # older variables, still read
    metavar: str = "VALUE"

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"option {self.name}: kind must be one of {', '.join(KINDS)}")

    @property
    def names(self) -> str:
        """``--flag/VARIABLE`` (or the variable alone), as errors name the option."""
        return f"{self.flag}/{self.env}" if self.flag and not self.secret else self.env


def redis_url_option(help_text: str) -> Option:
    """``--redis-url`` / ``REDIS_URL``, as every hub service with Redis reads it (masked)."""
    url = DEFAULT_REDIS_URL
    return Option("redis_url", "--redis-url", "REDIS_URL", url, help_text, redis_url, show=mask_url)


def listen_options(prefix: str, port: int, host_help: str, port_help: str) -> tuple[Option, ...]:
    """``--host`` / ``<PREFIX>_HOST`` (loopback by default) and ``--port`` / ``<PREFIX>_PORT``."""
    return (
        Option("host", "--host", f"{prefix}_HOST", "127.0.0.1", host_help, text),
        Option("port", "--port", f"{prefix}_PORT", port, port_help, integer(1, 65535)),
    )


def tls_options(prefix: str) -> tuple[Option, ...]:
    """``--tls-cert`` / ``<PREFIX>_TLS_CERT`` and ``--tls-key`` / ``<PREFIX>_TLS_KEY``: HTTPS."""
    return (
        Option(
            "tls_cert",
            "--tls-cert",
            f"{prefix}_TLS_CERT",
            "",
            "PEM certificate to serve HTTPS with (with --tls-key; plain HTTP when both are unset)",
            optional_text,
            metavar="FILE",
        ),
        Option(
            "tls_key",
            "--tls-key",
            f"{prefix}_TLS_KEY",
            "",
            "PEM private key of --tls-cert",
            optional_text,
            metavar="FILE",
        ),
    )


def check_tls(values: Mapping[str, Any], prefix: str) -> None:
    """Both TLS files or neither, and the pair loads; else one-line ``ConfigError`` naming them."""
    cert, key = values.get("tls_cert", ""), values.get("tls_key", "")
    names = f"--tls-cert/{prefix}_TLS_CERT and --tls-key/{prefix}_TLS_KEY"
    if bool(cert) != bool(key):
        raise ConfigError(f"{names} go together: set both or neither")
    if not cert:
        return
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert, key)
    except ssl.SSLError as exc:
        said = exc.reason or exc
        raise ConfigError(
            f"{names} are not a certificate and its key ({cert}, {key}): {said}"
        ) from None
    except OSError as exc:
        raise ConfigError(f"{names}: cannot read {exc.filename or cert}: {exc.strerror}") from None


def defaults(options: Iterable[Option]) -> dict[str, Any]:
    """Each option's default by name (what a service's settings class starts from)."""
    return {opt.name: opt.default for opt in options}


def default_text(option: Option) -> str | None:
    """The default as ``--help`` and the docs show it; None when there is none."""
    value = option.default
    if value is None or value in ("", (), frozenset()):
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (frozenset, set, tuple, list)):
        return ",".join(str(v) for v in sorted(value, key=str))
    return str(value)


def add_arguments(parser: argparse.ArgumentParser, options: Iterable[Option]) -> None:
    """Add every option's flag to ``parser``; values stay strings until ``resolve``."""
    for opt in options:
        if opt.flag is None:
            continue
        if opt.secret:
            # Accepted by the parser only to be refused with one clear line (see ``resolve``).
            parser.add_argument(opt.flag, dest=opt.name, help=argparse.SUPPRESS)
            continue
        flags = (opt.flag, *opt.aliases)
        envs = " or ".join((opt.env, *opt.env_aliases))
        shown = default_text(opt) or "unset"
        help_text = f"{opt.help} [env {envs}; default {shown}]".replace("%", "%%")
        if opt.kind in ("switch", "negswitch"):
            parser.add_argument(
                *flags, dest=opt.name, action="store_true", default=None, help=help_text
            )
        elif opt.kind == "list":
            parser.add_argument(
                *flags, dest=opt.name, action="append", metavar=opt.metavar, help=help_text
            )
        else:
            parser.add_argument(*flags, dest=opt.name, metavar=opt.metavar, help=help_text)


def _parse(opt: Option, raw: str, source: str) -> Any:
    try:
        return opt.parse(raw)
    except ValueError as exc:
        reason = str(exc).splitlines()[0] if str(exc) else "is not valid"
        shown = "" if opt.kind == "list" else f", got {opt.show(raw)[:60]!r}"
        via = "" if source in (opt.flag, opt.env) else f" (from {source})"
        raise ConfigError(f"{opt.names}{via} {reason}{shown}") from None


def _switch(opt: Option, given: Any, environ: Mapping[str, str]) -> Any:
    value = opt.default
    names = (opt.env, *opt.env_aliases)
    found = [_parse(opt, environ[env], env) for env in names if env in environ]
    if found:
        value = any(found) if opt.kind == "switch" else found[0]
    if given:
        value = opt.kind == "switch"
    return value


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
        content = Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise ConfigError(f"{file_names}: cannot read {path}: {reason}") from None
    if not content:
        raise ConfigError(f"{file_names}: {path} is empty")
    return content, f"{file_names.partition(' ')[0]} {path}"


def _secret(
    opt: Option, given: Any, holder: Option | None, path: str, environ: Mapping[str, str]
) -> tuple[str, str] | None:
    """(secret, where it came from) or None; a flag given for it is refused."""
    file_names = f"{holder.flag} / {holder.env}" if holder is not None else ""
    if given is not None:
        raise ConfigError(
            f"{opt.flag} is refused: a flag shows the key to every user in ps; set "
            f"{opt.env}{f' or {file_names}' if file_names else ''}"
        )
    if holder is None:
        value = environ.get(opt.env, "").strip()
        return (value, opt.env) if value else None
    return read_secret(opt.env, file_names, path, environ)


def _flag_text(given: Any) -> str:
    """A flag's value as text: argparse hands ``--x=--`` over as an empty list."""
    return given if isinstance(given, str) else " ".join(map(str, given))


def resolve(
    options: Iterable[Option], args: argparse.Namespace, environ: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Every option's value (flag, else environment, else default), checked; ``ConfigError``."""
    env = os.environ if environ is None else environ
    table = list(options)
    values: dict[str, Any] = {}
    for opt in table:
        given = getattr(args, opt.name, None)
        if opt.secret:
            continue
        if opt.kind in ("switch", "negswitch"):
            values[opt.name] = _switch(opt, given, env)
        elif opt.kind == "list" and given:
            values[opt.name] = _parse(opt, ",".join(map(_flag_text, given)), opt.flag or opt.env)
        elif opt.kind == "value" and given is not None:
            values[opt.name] = _parse(opt, _flag_text(given), opt.flag or opt.env)
        elif opt.env in env:
            values[opt.name] = _parse(opt, env[opt.env], opt.env)
        else:
            values[opt.name] = opt.default
    by_name = {opt.name: opt for opt in table}
    for opt in table:
        if opt.secret:
            holder = by_name[opt.file] if opt.file else None
            path = str(values.get(opt.file) or "") if opt.file else ""
            values[opt.name] = _secret(opt, getattr(args, opt.name, None), holder, path, env)
    return values


def shown(options: Iterable[Option], values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` fit for a start-up log line: secrets as ``***``, URLs masked."""
    out: dict[str, Any] = {}
    for opt in options:
        value = values.get(opt.name)
        if opt.secret:
            value = "***" if value else None
        elif isinstance(value, str):
            value = opt.show(value)
        elif isinstance(value, tuple):
            value = [opt.show(v) if isinstance(v, str) else v for v in value]
        elif isinstance(value, frozenset):
            value = ",".join(map(str, sorted(value)))
        out[opt.name] = value
    return out
