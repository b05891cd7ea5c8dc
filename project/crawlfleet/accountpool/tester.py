"""The tester: asks each site whether the stored credentials still work, and drops the rest.

Per cycle and site it walks the credentials hash: an expired or unreadable credential is
removed without asking the site; the others are checked against the site's authenticated
check URL with bounded concurrency, and the ones the site rejects are removed (the generator
then logs the account in again). When the site is unreachable or throttling us, the cycle for
that site stops and nothing is removed: an outage says nothing about a credential.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from crawlfleet.accountpool.adapters import CheckResult, SiteAdapter, SiteUnavailable
from crawlfleet.accountpool.siteloop import SiteLoop, SiteResult
from crawlfleet.accountpool.store import CredentialRecord

log = logging.getLogger("crawlfleet.accountpool.tester")


@dataclass
class TestResult(SiteResult):
    __test__ = False  # not a pytest test class


class Tester(SiteLoop[TestResult]):
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
        await self.each(to_check, lambda item: self._check(site, adapter, *item, result), result)
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
