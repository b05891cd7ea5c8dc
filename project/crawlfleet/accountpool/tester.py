"""The tester: asks each site whether the stored credentials still work, and drops the rest.

Per cycle and site it walks the credentials hash: an expired or unreadable credential is
removed without asking the site; the others are checked against the site's authenticated
check URL with bounded concurrency, and the ones the site rejects are removed (the generator
then logs the account in again). When the site is unreachable or throttling us, the cycle for
that site stops and nothing is removed: an outage says nothing about a credential.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

import httpx

from crawlfleet.accountpool.adapters import CheckResult, SiteAdapter, SiteUnavailable
from crawlfleet.accountpool.store import AccountStore, CredentialRecord

log = logging.getLogger("crawlfleet.accountpool.tester")


@dataclass
class TestResult:
    __test__ = False  # not a pytest test class

    site: str
    counts: Counter[str] = field(default_factory=Counter)
    unavailable: str | None = None


class Tester:
    def __init__(
        self,
        store: AccountStore,
        adapters: Mapping[str, SiteAdapter],
        client: httpx.AsyncClient,
        *,
        concurrency: int,
    ) -> None:
        self.store = store
        self.adapters = adapters
        self.client = client
        self.concurrency = concurrency

    async def run_once(self) -> list[TestResult]:
        return [await self.run_site(site) for site in self.adapters]

    async def run_site(self, site: str) -> TestResult:
        adapter = self.adapters[site]
        result = TestResult(site)
        now = time.time()
        to_check: list[tuple[str, CredentialRecord]] = []
        async for batch in self.store.scan_credentials(site):
            for user, record in batch:
                if record is None or record.expires_at <= now:
                    if await self.store.remove_credential(
                        site, user, record.token if record else None
                    ):
                        result.counts["checks_expired"] += 1
                else:
                    to_check.append((user, record))
        if to_check:
            pending = iter(to_check)

            async def worker() -> None:
                for user, record in pending:  # shared iterator: each worker takes the next one
                    if result.unavailable is not None:
                        return
                    await self._check(site, adapter, user, record, result)

            await asyncio.gather(*(worker() for _ in range(min(self.concurrency, len(to_check)))))
        await self.store.incr_many(site, result.counts)
        await self.store.set_status(site, "test", result.unavailable)
        log.log(
            logging.INFO if to_check or result.counts else logging.DEBUG,
            "test %s: %d checked, %d valid, %d rejected, %d expired%s",
            site,
            result.counts["checks_valid"] + result.counts["checks_rejected"],
            result.counts["checks_valid"],
            result.counts["checks_rejected"],
            result.counts["checks_expired"],
            f", stopped: site unavailable ({result.unavailable})" if result.unavailable else "",
            extra={"event": "test_cycle", "site": site, **dict(result.counts)},
        )
        return result

    async def _check(
        self,
        site: str,
        adapter: SiteAdapter,
        user: str,
        record: CredentialRecord,
        result: TestResult,
    ) -> None:
        try:
            verdict = await adapter.check(self.client, record.token)
        except SiteUnavailable as exc:
            result.unavailable = str(exc)
            result.counts["checks_unavailable"] += 1
            return
        except Exception as exc:  # a plug-in's bug must not stop the loop; keep the credential
            result.counts["checks_error"] += 1
            log.warning(
                "check of %s/%s failed: %s in adapter",
                site,
                user,
                type(exc).__name__,
                extra={"event": "check_error", "site": site, "user": user},
            )
            return
        if verdict is CheckResult.VALID:
            result.counts["checks_valid"] += 1
            return
        # Only the credential that was checked: a fresh one stored meanwhile stays.
        if await self.store.remove_credential(site, user, record.token):
            result.counts["checks_rejected"] += 1
            log.info(
                "credential of %s/%s rejected by the site; removed",
                site,
                user,
                extra={"event": "credential_rejected", "site": site, "user": user},
            )
