"""Which sites the pool serves and how each one is reached: the site configuration file.

A sites file (YAML or JSON; JSON is valid YAML) maps site names to adapter settings::

    sites:
      demosite:
        adapter: json            # built in; or the name of a plug-in entry point
        base_url: http://127.0.0.1:8000
        login: {url: /api/login, body: {username: "{username}", password: "{password}"},
                token_path: token, rejected_status: [401]}
        header: {name: Authorization, format: "jwt {token}"}
        check: {url: "/api/book/?limit=1&offset=0", ok_status: [200], rejected_status: [401]}

This module validates what every adapter needs (name, adapter, base URL); each adapter
validates its own options (see ``adapters``). Errors are one line naming the setting.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

SITE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
# Top-level paths of the HTTP API that a site name would shadow.
RESERVED_NAMES = frozenset({"health", "metrics"})

# The demo site's adapter (crawlfleet.demosite), shipped as the default configuration.
DEFAULT_SITES: dict[str, dict[str, Any]] = {
    "demosite": {
        "adapter": "json",
        "base_url": "http://127.0.0.1:8000",
        "login": {
            "url": "/api/login",
            "method": "POST",
            "body": {"username": "{username}", "password": "{password}"},
            "body_format": "json",
            "token_path": "token",
            "rejected_status": [401],
        },
        "header": {"name": "Authorization", "format": "jwt {token}"},
        "check": {
            "url": "/api/book/?limit=1&offset=0",
            "method": "GET",
            "ok_status": [200],
            "rejected_status": [401],
        },
        "token_ttl": 3600,
    }
}


class SiteConfigError(ValueError):
    """A site configuration that cannot work; one line naming the setting."""


@dataclass(frozen=True)
class SiteSpec:
    """One site: its name, which adapter logs in, the base URL, and the adapter's own options."""

    name: str
    adapter: str
    base_url: str
    options: Mapping[str, Any] = field(default_factory=dict)


def check_base_url(value: object, where: str) -> str:
    if not isinstance(value, str) or urlsplit(value).scheme not in ("http", "https"):
        raise SiteConfigError(f"{where}: must be an http:// or https:// URL, got {value!r}")
    if not urlsplit(value).hostname:
        raise SiteConfigError(f"{where}: URL has no host: {value!r}")
    return value.rstrip("/")


def parse_sites(data: object, source: str = "sites") -> dict[str, SiteSpec]:
    """Validate a ``{"sites": {name: {...}}}`` document into site specs."""
    if not isinstance(data, Mapping) or not isinstance(data.get("sites"), Mapping):
        raise SiteConfigError(f"{source}: expected a mapping with a 'sites' mapping at the top")
    sites: dict[str, SiteSpec] = {}
    for name, options in data["sites"].items():
        where = f"{source}: sites.{name}"
        if not isinstance(name, str) or not SITE_NAME.match(name) or name in RESERVED_NAMES:
            raise SiteConfigError(
                f"{source}: site name {name!r} must be 1-64 letters, digits, '_', '.', '-' "
                f"and not one of {sorted(RESERVED_NAMES)}"
            )
        if not isinstance(options, Mapping):
            raise SiteConfigError(f"{where}: expected a mapping of settings")
        adapter = options.get("adapter", "json")
        if not isinstance(adapter, str) or not adapter:
            raise SiteConfigError(f"{where}.adapter: must be a non-empty string")
        base_url = check_base_url(options.get("base_url"), f"{where}.base_url")
        rest = {k: v for k, v in options.items() if k not in ("adapter", "base_url")}
        sites[name] = SiteSpec(name, adapter, base_url, rest)
    if not sites:
        raise SiteConfigError(f"{source}: no sites configured")
    return sites


def load_sites(path: str | None, url_overrides: Mapping[str, str]) -> dict[str, SiteSpec]:
    """Sites from ``path`` (YAML/JSON) or the built-in defaults, with base URLs overridden."""
    if path:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise SiteConfigError(f"cannot read sites file {path}: {exc.strerror}") from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            line = f" at line {mark.line + 1}" if mark is not None else ""
            raise SiteConfigError(f"sites file {path}: not valid YAML/JSON{line}") from None
        sites = parse_sites(data, f"sites file {path}")
    else:
        sites = parse_sites({"sites": copy.deepcopy(DEFAULT_SITES)}, "built-in sites")
    for name, url in url_overrides.items():
        if name not in sites:
            raise SiteConfigError(
                f"--site-url {name}=...: unknown site {name!r} (known: {', '.join(sorted(sites))})"
            )
        spec = sites[name]
        sites[name] = SiteSpec(
            name, spec.adapter, check_base_url(url, f"--site-url {name}"), spec.options
        )
    return sites


def parse_site_urls(text: str) -> dict[str, str]:
    """``name=url[,name=url…]`` (the ``ACCOUNTPOOL_SITE_URLS`` format) into a mapping."""
    result: dict[str, str] = {}
    for item in re.split(r"[\s,]+", text.strip()):
        if not item:
            continue
        name, sep, url = item.partition("=")
        if not sep or not name or not url:
            raise SiteConfigError(f"site URL {item!r} must look like NAME=URL")
        result[name] = url
    return result
