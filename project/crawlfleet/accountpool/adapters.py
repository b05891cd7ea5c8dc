"""Site adapters: how to log in to a site and how to check that a credential still works.

Most sites are served by configuration alone (``JsonLoginAdapter``, adapter name ``json``):
a login request built from a body template, the token read from the JSON answer (or a
cookie), the header the site wants, and an authenticated URL to check a credential with.

Sites that need code are plug-ins: a Python package declares an entry point in the group
``crawlfleet.accountpool.adapters`` whose object is called as ``factory(spec)`` with the
``SiteSpec`` and returns an object with the ``SiteAdapter`` methods. The site's ``adapter``
setting names the entry point.

Adapters signal outcomes with exceptions so the loops can treat them differently:
``LoginRejected`` (the site said the credentials are wrong: count it and back the account
off), ``LoginError`` (an answer we cannot use: back off too), ``SiteUnavailable`` (network
error, throttling, server error: stop this cycle for the site without blaming the account).
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any, Protocol
from urllib.parse import urljoin

import httpx
import jwt

from crawlfleet.accountpool.sites import SiteConfigError, SiteSpec

ENTRY_POINT_GROUP = "crawlfleet.accountpool.adapters"


class LoginRejected(Exception):
    """The site refused the username/password (wrong password, locked account)."""


class LoginError(Exception):
    """The site answered, but not with a usable credential."""


class SiteUnavailable(Exception):
    """The site could not be asked (network error, ban, throttling, 5xx)."""


class CheckResult(enum.Enum):
    VALID = "valid"
    REJECTED = "rejected"


@dataclass(frozen=True)
class Credential:
    token: str
    expires_at: float


class SiteAdapter(Protocol):
    """What the generator and tester need from a site."""

    name: str

    def header(self, token: str) -> tuple[str, str]:
        """The request header that carries ``token`` (name, value)."""
        ...

    async def login(self, client: httpx.AsyncClient, username: str, password: str) -> Credential:
        """Log in; raise ``LoginRejected``, ``LoginError`` or ``SiteUnavailable`` on failure."""
        ...

    async def check(self, client: httpx.AsyncClient, token: str) -> CheckResult:
        """Ask the site whether ``token`` still works; raise ``SiteUnavailable`` if unsure."""
        ...


AdapterFactory = Callable[[SiteSpec], SiteAdapter]


def _status_list(value: object, where: str, default: Sequence[int]) -> frozenset[int]:
    if value is None:
        return frozenset(default)
    if not isinstance(value, list) or not all(
        isinstance(v, int) and 100 <= v <= 599 for v in value
    ):
        raise SiteConfigError(f"{where}: must be a list of HTTP status codes, got {value!r}")
    return frozenset(value)


def _string(options: Mapping[str, Any], key: str, where: str, default: str | None = None) -> str:
    value = options.get(key, default)
    if not isinstance(value, str) or not value:
        raise SiteConfigError(f"{where}.{key}: must be a non-empty string, got {value!r}")
    return value


def _mapping(options: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    value = options.get(key, {})
    if not isinstance(value, Mapping):
        raise SiteConfigError(f"{where}.{key}: expected a mapping")
    return value


def _render(template: Any, username: str, password: str) -> Any:
    """Fill ``{username}``/``{password}`` inside the strings of a JSON-like template."""
    if isinstance(template, str):
        # str.replace, not str.format: templates may contain other braces, and a format
        # error message could quote the password.
        return template.replace("{username}", username).replace("{password}", password)
    if isinstance(template, Mapping):
        return {k: _render(v, username, password) for k, v in template.items()}
    if isinstance(template, list):
        return [_render(v, username, password) for v in template]
    return template


def _dig(data: Any, path: str) -> Any:
    for part in path.split("."):
        if isinstance(data, Mapping) and part in data:
            data = data[part]
        elif isinstance(data, list) and part.isdigit() and int(part) < len(data):
            data = data[int(part)]
        else:
            return None
    return data


def jwt_expiry(token: str) -> float | None:
    """The ``exp`` claim of a JWT (signature not verified: only the site can), else None."""
    try:
        claims = jwt.decode(token, options={"verify_signature": False, "verify_exp": False})
    except jwt.InvalidTokenError:
        return None
    exp = claims.get("exp")
    return float(exp) if isinstance(exp, int | float) else None


class JsonLoginAdapter:
    """The configurable adapter (``adapter: json``): see the module docstring and docs."""

    def __init__(self, spec: SiteSpec) -> None:
        where = f"sites.{spec.name}"
        opts = spec.options
        self.name = spec.name
        self.base_url = spec.base_url + "/"
        login = _mapping(opts, "login", where)
        lw = f"{where}.login"
        self.login_url = urljoin(self.base_url, _string(login, "url", lw))
        self.login_method = _string(login, "method", lw, "POST").upper()
        self.body: Any = login.get("body", {"username": "{username}", "password": "{password}"})
        self.body_format = _string(login, "body_format", lw, "json")
        if self.body_format not in ("json", "form"):
            raise SiteConfigError(f"{lw}.body_format: must be 'json' or 'form'")
        if self.body_format == "form" and not (
            isinstance(self.body, Mapping) and all(isinstance(v, str) for v in self.body.values())
        ):
            raise SiteConfigError(f"{lw}.body: a form body must be a mapping of strings")
        token_path = login.get("token_path")
        token_cookie = login.get("token_cookie")
        if (token_path is None) == (token_cookie is None):
            raise SiteConfigError(f"{lw}: set exactly one of token_path or token_cookie")
        self.token_path = _string(login, "token_path", lw) if token_path is not None else None
        self.token_cookie = _string(login, "token_cookie", lw) if token_cookie is not None else None
        expires_in = login.get("expires_in_path")
        self.expires_in_path = (
            _string(login, "expires_in_path", lw) if expires_in is not None else None
        )
        self.login_rejected = _status_list(
            login.get("rejected_status"), f"{lw}.rejected_status", (401, 403)
        )
        header = _mapping(opts, "header", where)
        self.header_name = _string(header, "name", f"{where}.header", "Authorization")
        self.header_format = _string(header, "format", f"{where}.header", "jwt {token}")
        if "{token}" not in self.header_format:
            raise SiteConfigError(f"{where}.header.format: must contain '{{token}}'")
        check = _mapping(opts, "check", where)
        cw = f"{where}.check"
        self.check_url = urljoin(self.base_url, _string(check, "url", cw))
        self.check_method = _string(check, "method", cw, "GET").upper()
        self.check_ok = _status_list(check.get("ok_status"), f"{cw}.ok_status", (200,))
        self.check_rejected = _status_list(
            check.get("rejected_status"), f"{cw}.rejected_status", (401,)
        )
        if self.check_ok & self.check_rejected:
            raise SiteConfigError(f"{cw}: ok_status and rejected_status overlap")
        ttl = opts.get("token_ttl", 3600)
        if not isinstance(ttl, int | float) or isinstance(ttl, bool) or ttl <= 0:
            raise SiteConfigError(f"{where}.token_ttl: must be a number of seconds > 0")
        self.token_ttl = float(ttl)
        unknown = set(opts) - {"login", "header", "check", "token_ttl"}
        if unknown:
            raise SiteConfigError(f"{where}: unknown setting(s) {', '.join(sorted(unknown))}")

    def header(self, token: str) -> tuple[str, str]:
        return self.header_name, self.header_format.replace("{token}", token)

    async def login(self, client: httpx.AsyncClient, username: str, password: str) -> Credential:
        body = _render(self.body, username, password)
        kwargs: dict[str, Any] = {"json": body} if self.body_format == "json" else {"data": body}
        try:
            response = await client.request(self.login_method, self.login_url, **kwargs)
        except httpx.HTTPError as exc:
            # The exception text names the URL, never the body (which holds the password).
            raise SiteUnavailable(f"{type(exc).__name__}: {exc}") from None
        status = response.status_code
        if status in self.login_rejected:
            raise LoginRejected(f"login answered HTTP {status}")
        if not 200 <= status < 300:
            raise SiteUnavailable(f"login answered HTTP {status}")
        token = self._token(response)
        now = time.time()
        expires_at = jwt_expiry(token)
        if expires_at is None and self.expires_in_path is not None:
            seconds = _dig(self._json(response), self.expires_in_path)
            if isinstance(seconds, int | float) and not isinstance(seconds, bool):
                expires_at = now + float(seconds)
        if expires_at is None:
            expires_at = now + self.token_ttl
        return Credential(token, expires_at)

    def _json(self, response: httpx.Response) -> Any:
        try:
            return response.json()
        except ValueError:
            raise LoginError("login answer is not JSON") from None

    def _token(self, response: httpx.Response) -> str:
        if self.token_cookie is not None:
            value = response.cookies.get(self.token_cookie)
            where = f"cookie {self.token_cookie!r}"
        else:
            assert self.token_path is not None
            value = _dig(self._json(response), self.token_path)
            where = f"JSON path {self.token_path!r}"
        if not isinstance(value, str) or not value:
            raise LoginError(f"no token at {where} in the login answer")
        return value

    async def check(self, client: httpx.AsyncClient, token: str) -> CheckResult:
        name, value = self.header(token)
        try:
            response = await client.request(
                self.check_method, self.check_url, headers={name: value}
            )
        except httpx.HTTPError as exc:
            raise SiteUnavailable(f"{type(exc).__name__}: {exc}") from None
        if response.status_code in self.check_ok:
            return CheckResult.VALID
        if response.status_code in self.check_rejected:
            return CheckResult.REJECTED
        # A ban, throttling or an outage says nothing about this credential.
        raise SiteUnavailable(f"check answered HTTP {response.status_code}")


BUILTIN_ADAPTERS: dict[str, AdapterFactory] = {"json": JsonLoginAdapter}


def build_adapter(spec: SiteSpec) -> SiteAdapter:
    """The adapter for ``spec``: built in, or the plug-in entry point it names."""
    factory = BUILTIN_ADAPTERS.get(spec.adapter)
    if factory is None:
        found = entry_points(group=ENTRY_POINT_GROUP, name=spec.adapter)
        if not found:
            available = sorted({*BUILTIN_ADAPTERS, *entry_points(group=ENTRY_POINT_GROUP).names})
            raise SiteConfigError(
                f"sites.{spec.name}.adapter: no adapter {spec.adapter!r} (built in or entry point "
                f"in {ENTRY_POINT_GROUP}); available: {', '.join(available)}"
            )
        try:
            factory = next(iter(found)).load()
        except Exception as exc:
            raise SiteConfigError(
                f"sites.{spec.name}.adapter: cannot load plug-in {spec.adapter!r}: "
                f"{type(exc).__name__}: {exc}"
            ) from None
    adapter = factory(spec)
    for method in ("login", "check", "header"):
        if not callable(getattr(adapter, method, None)):
            raise SiteConfigError(
                f"sites.{spec.name}.adapter: plug-in {spec.adapter!r} has no {method}() method"
            )
    return adapter
