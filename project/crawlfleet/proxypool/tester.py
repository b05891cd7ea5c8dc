"""The tester: fetch the test URL through every proxy, bounded concurrency, a deadline per proxy.

A pass (accepted status, and with the anonymity check the echo URL does not see our own
address) sets the score to 100; anything else subtracts the score step. The tester learns its
own address by fetching the anonymity URL directly once per round, and compares IP addresses
found in the two bodies (as sets, so 127.0.0.1 never matches 127.0.0.10).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import re
import ssl
from dataclasses import dataclass

import httpx

from crawlfleet.proxypool.config import Settings
from crawlfleet.proxypool.proxies import mask_proxy
from crawlfleet.proxypool.store import ProxyStore
from crawlfleet.service.logs import event

log = logging.getLogger("crawlfleet.proxypool.test")
_IP_CANDIDATE = re.compile(r"[0-9]{1,3}(?:\.[0-9]{1,3}){3}|[0-9A-Fa-f]*:[0-9A-Fa-f:.]+")


def addresses_in(text: str) -> set[str]:
    """Every IPv4/IPv6 address written in ``text``, normalised."""
    found = set()
    for candidate in _IP_CANDIDATE.findall(text):
        try:
            found.add(ipaddress.ip_address(candidate).compressed)
        except ValueError:
            continue
    return found


@dataclass
class RoundCounts:
    tested: int = 0
    passed: int = 0
    failed: int = 0
    removed: int = 0
    not_anonymous: int = 0


class AnonymityUnavailable(RuntimeError):
    """The tester could not learn its own address, so no proxy can be judged this round."""


class ProxyTester:
    def __init__(self, settings: Settings, store: ProxyStore) -> None:
        if settings.test_url is None:
            raise ValueError("ProxyTester needs settings.test_url")
        self.settings = settings
        self.test_url = settings.test_url
        self.anonymity_url = settings.anonymity_url or settings.test_url
        self.store = store
        # One TLS context for every client: building one per proxy costs milliseconds of CPU.
        self.ssl_context = ssl.create_default_context()

    def _client(self, proxy: str | None) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            proxy=proxy,
            verify=self.ssl_context,
            trust_env=False,
            timeout=self.settings.test_timeout,
            follow_redirects=False,
        )

    async def own_addresses(self) -> set[str]:
        try:
            async with self._client(None) as client:
                response = await client.get(self.anonymity_url)
        except httpx.HTTPError as exc:
            raise AnonymityUnavailable(
                f"cannot fetch the anonymity URL directly: {type(exc).__name__}"
            ) from None
        found = addresses_in(response.text)
        if not found:
            raise AnonymityUnavailable("the anonymity URL's answer shows no IP address")
        return found

    async def check(self, proxy: str, own: set[str]) -> str | None:
        """None if ``proxy`` passes, else a short reason."""
        try:
            async with asyncio.timeout(self.settings.test_timeout), self._client(proxy) as client:
                response = await client.get(self.test_url)
                if response.status_code not in self.settings.test_statuses:
                    return f"status {response.status_code}"
                if own:
                    body = response.text
                    if self.anonymity_url != self.test_url:
                        body = (await client.get(self.anonymity_url)).text
                    if addresses_in(body) & own:
                        return "not anonymous"
        except (httpx.HTTPError, TimeoutError, OSError) as exc:
            return type(exc).__name__
        return None

    async def _judge(self, proxy: str, own: set[str], counts: RoundCounts) -> None:
        reason = await self.check(proxy, own)
        counts.tested += 1
        if reason is None:
            counts.passed += 1
            await self.store.mark_good(proxy)
        else:
            counts.failed += 1
            counts.not_anonymous += reason == "not anonymous"
            if await self.store.decrease(proxy, self.settings.score_step) == 0:
                counts.removed += 1
        event(
            log,
            "proxy_tested",
            logging.DEBUG,
            proxy=mask_proxy(proxy),
            result="pass" if reason is None else "fail",
            reason=reason,
        )

    async def test_once(self) -> RoundCounts:
        """Test every proxy in the pool once; raises AnonymityUnavailable before touching scores."""
        own = await self.own_addresses() if self.settings.anonymity_check else set()
        counts = RoundCounts()
        queue: asyncio.Queue[str | None] = asyncio.Queue(maxsize=self.settings.test_concurrency * 2)

        async def worker() -> None:
            while (proxy := await queue.get()) is not None:
                await self._judge(proxy, own, counts)

        async def produce() -> None:
            async for batch in self.store.scan():
                for proxy in batch:
                    await queue.put(proxy)
            for _ in range(self.settings.test_concurrency):
                await queue.put(None)

        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(produce())
                for _ in range(self.settings.test_concurrency):
                    group.create_task(worker())
        except ExceptionGroup as group_error:
            # Report the first cause (e.g. Redis went away) the way a plain await would.
            raise group_error.exceptions[0] from None
        await self.store.incr_stats(
            tests_passed=counts.passed, tests_failed=counts.failed, proxies_removed=counts.removed
        )
        return counts
