"""Where proxies come from: the static list, a file, provider URLs and plug-ins; one fetch cycle.

A source is any object with a ``name`` and ``async fetch(client) -> Iterable[str]`` returning
lines (``host:port`` or ``scheme://[user:pass@]host:port``). Scrapers of public proxy lists are
plug-ins: a distribution declares an entry point in the group ``crawlfleet.proxypool.sources``
whose object, called with no argument, returns such a source; ``--source-plugin NAME`` enables it.
Lines that are not proxies are skipped and counted; a failing source is logged and counted.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Protocol, runtime_checkable

import httpx

from crawlfleet.proxypool.config import ConfigError, Settings, safe_url
from crawlfleet.proxypool.proxies import ProxyFormatError, parse_proxy
from crawlfleet.proxypool.store import ProxyStore
from crawlfleet.service.logs import event

ENTRY_POINT_GROUP = "crawlfleet.proxypool.sources"
log = logging.getLogger("crawlfleet.proxypool.fetch")


@runtime_checkable
class ProxySource(Protocol):
    name: str

    async def fetch(self, client: httpx.AsyncClient) -> Iterable[str]: ...


class StaticSource:
    """Proxies listed in the configuration (what a team with paid proxies has)."""

    name = "static"

    def __init__(self, proxies: Iterable[str]) -> None:
        self.proxies = tuple(proxies)

    async def fetch(self, client: httpx.AsyncClient) -> Iterable[str]:
        return self.proxies


class FileSource:
    """One proxy per line in a local file, re-read at every cycle so edits need no restart."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)
        self.name = f"file:{path}"

    async def fetch(self, client: httpx.AsyncClient) -> Iterable[str]:
        return (await asyncio.to_thread(self.path.read_text, encoding="utf-8")).splitlines()


class SourceError(RuntimeError):
    """A source answered, but not with a list (the message is safe to log)."""


class UrlSource:
    """A provider API answering ``host:port`` lines."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.name = safe_url(url)

    async def fetch(self, client: httpx.AsyncClient) -> Iterable[str]:
        response = await client.get(self.url)
        if response.status_code != 200:
            raise SourceError(f"HTTP {response.status_code}")
        return response.text.splitlines()


def load_plugins(names: Iterable[str]) -> list[ProxySource]:
    """Instantiate the named entry points; an unknown or broken one is a configuration error."""
    installed = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
    sources: list[ProxySource] = []
    for name in names:
        if name not in installed:
            known = ", ".join(sorted(installed)) or "none"
            raise ConfigError(f"unknown source plug-in {name!r} (installed: {known})")
        try:
            source = installed[name].load()()
        except Exception as exc:
            raise ConfigError(f"source plug-in {name!r} failed to load: {exc}") from None
        if not isinstance(source, ProxySource):
            raise ConfigError(f"source plug-in {name!r} has no name and async fetch(client)")
        sources.append(source)
    return sources


def build_sources(settings: Settings) -> list[ProxySource]:
    sources: list[ProxySource] = []
    if settings.proxies:
        sources.append(StaticSource(settings.proxies))
    if settings.proxies_file:
        sources.append(FileSource(settings.proxies_file))
    sources.extend(UrlSource(url) for url in settings.source_urls)
    sources.extend(load_plugins(settings.source_plugins))
    return sources


@dataclass
class FetchCounts:
    sources: int = 0
    errors: int = 0
    lines: int = 0
    invalid: int = 0
    added: int = 0
    existing: int = 0
    full: int = 0


def _error_text(exc: BaseException) -> str:
    # httpx messages may quote the URL (and a provider key in its query): name the failure only.
    if isinstance(exc, SourceError):
        return str(exc)
    if isinstance(exc, httpx.HTTPError | TimeoutError):
        return type(exc).__name__
    return f"{type(exc).__name__}: {exc}"


async def _lines(source: ProxySource, client: httpx.AsyncClient, timeout: float) -> list[str]:
    async with asyncio.timeout(timeout):
        return [str(line) for line in await source.fetch(client)]


async def fetch_once(
    sources: list[ProxySource], store: ProxyStore, client: httpx.AsyncClient, timeout: float
) -> FetchCounts:
    """Fetch every source concurrently, then add the valid proxies to the pool in batches."""
    counts = FetchCounts(sources=len(sources))
    results = await asyncio.gather(
        *(_lines(source, client, timeout) for source in sources), return_exceptions=True
    )
    proxies: dict[str, None] = {}  # ordered set: first seen first added when the pool fills up
    for source, result in zip(sources, results, strict=True):
        if isinstance(result, BaseException):
            counts.errors += 1
            event(
                log, "source_error", logging.WARNING, source=source.name, error=_error_text(result)
            )
            continue
        invalid = 0
        for line in result:
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            counts.lines += 1
            try:
                proxies[parse_proxy(text)] = None
            except ProxyFormatError:
                invalid += 1
        if invalid:
            event(log, "source_invalid_lines", logging.WARNING, source=source.name, invalid=invalid)
        counts.invalid += invalid
    added = await store.add(list(proxies))
    counts.added, counts.existing, counts.full = added.added, added.existing, added.full
    await store.incr_stats(
        fetch_added=counts.added,
        fetch_invalid=counts.invalid,
        fetch_errors=counts.errors,
        fetch_refused_full=counts.full,
    )
    return counts
