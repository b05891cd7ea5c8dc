"""The pools' sizes, read from their ``/count`` endpoints when their URLs are configured (an
``https://`` pool verified against ``<POOL>_CA_FILE``, else ``CRAWLFLEET_CA_FILE``, as the workers'
pool clients do)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx
from scrapy.exceptions import NotConfigured
from scrapy.settings import BaseSettings

from crawlfleet.hub.urls import mask_secrets, mask_url, url_secrets
from crawlfleet.middlewares.poolclient import ca_context

POOL_TIMEOUT = 2.0


@dataclass(frozen=True)
class PoolConfig:
    """Where the pools are; an empty URL means "not configured" (the count is reported as null)."""

    proxypool_url: str = ""
    proxypool_api_key: str = ""
    accountpool_url: str = ""
    accountpool_api_key: str = ""
    accountpool_site: str = "demosite"


def _pool_get(url: str, api_key: str, pool: str) -> httpx.Response:
    headers = {"X-API-Key": api_key} if api_key else {}
    _, verify = ca_context(BaseSettings(), pool)
    # trust_env=False: a pool on the hub must not be reached through an HTTP(S)_PROXY.
    return httpx.get(url, headers=headers, timeout=POOL_TIMEOUT, trust_env=False, verify=verify)


def pool_counts(config: PoolConfig) -> dict[str, dict[str, Any]]:
    """``{"proxypool": {"url", "count", "error"}, "accountpool": {…, "site"}}``; never raises."""
    out: dict[str, dict[str, Any]] = {}
    if config.proxypool_url:
        url = config.proxypool_url.rstrip("/") + "/count"
        out["proxypool"] = _count_of(
            url, config.proxypool_api_key, "PROXYPOOL", lambda r: int(r.text.strip())
        )
    if config.accountpool_url:
        site = config.accountpool_site
        url = f"{config.accountpool_url.rstrip('/')}/{site}/count"
        entry = _count_of(
            url, config.accountpool_api_key, "ACCOUNTPOOL", lambda r: int(r.json()["count"])
        )
        entry["site"] = site
        out["accountpool"] = entry
    return out


def _count_of(url: str, api_key: str, pool: str, parse: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"url": mask_url(url), "count": None, "error": None}
    try:
        response = _pool_get(url, api_key, pool)
        if response.status_code != 200:
            entry["error"] = f"HTTP {response.status_code}: {response.text.strip()[:200]}"
        else:
            entry["count"] = parse(response)
    except httpx.HTTPError as exc:
        entry["error"] = f"{type(exc).__name__}: {exc}"
    except NotConfigured as exc:
        entry["error"] = str(exc)
    except (ValueError, KeyError, TypeError) as exc:
        entry["error"] = f"unexpected answer: {exc}"
    if entry["error"]:
        # A pool's reply or an exception may echo the key or the URL's credentials.
        error = entry["error"].replace(url, entry["url"])
        entry["error"] = mask_secrets(error, (api_key, *url_secrets(url)))
    return entry
