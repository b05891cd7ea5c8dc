"""The generator: logs in every account that lacks a valid credential, politely.

Per cycle and site it picks the accounts with no credential or one due for refresh (a JWT is
refreshed before its ``exp``) that are not parked, and logs them in with bounded
concurrency. A rejected password is counted and the account parked with exponential back-off
(``backoff_base`` * 2^(failures-1), at most ``backoff_max``), so it is never retried in a
tight loop; adding the account again resets it. When the site is unreachable or throttling
us, the cycle for that site stops at once without blaming the accounts.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from crawlfleet.accountpool.adapters import LoginError, LoginRejected, SiteAdapter, SiteUnavailable
from crawlfleet.accountpool.crypto import DecryptError
from crawlfleet.accountpool.siteloop import SiteLoop, SiteResult
from crawlfleet.accountpool.store import AccountView, CredentialRecord

log = logging.getLogger("crawlfleet.accountpool.generator")


@dataclass
class GenerateResult(SiteResult):
    due: int = 0


def refresh_time(obtained_at: float, expires_at: float, refresh_before: float) -> float:
    """When to log in again: ``refresh_before`` seconds before expiry, but never before half
    the token's lifetime has passed (so a short-lived token cannot cause a login storm)."""
    return max(obtained_at + (expires_at - obtained_at) / 2, expires_at - refresh_before)


@dataclass(eq=False, kw_only=True)
class Generator(SiteLoop[GenerateResult]):
    refresh_before: float  # log in again this long before a token expires
    backoff_base: float  # first back-off after a rejected login, doubled per failure
    backoff_max: float

    @staticmethod
    def is_due(view: AccountView, now: float) -> bool:
        if view.next_try is not None and view.next_try > now:
            return False
        return view.credential is None or view.credential.refresh_at <= now

    async def run_site(self, site: str) -> GenerateResult:
        adapter = self.adapters[site]
        result = GenerateResult(site)
        now = time.time()
        due: list[AccountView] = []
        async for batch in self.store.scan_accounts(site):
            due.extend(view for view in batch if self.is_due(view, now))
        result.due = len(due)
        if due:
            await self.each(due, lambda view: self._login(site, adapter, view, result), result)
            await self.store.incr_many(site, result.counts)
        await self.store.set_status(site, "generate", result.unavailable)
        level = logging.INFO if due else logging.DEBUG
        log.log(
            level,
            "generate %s: %d due, %d ok, %d rejected, %d errors%s",
            site,
            result.due,
            result.counts["logins_ok"],
            result.counts["logins_rejected"],
            result.counts["logins_error"],
            f", stopped: site unavailable ({result.unavailable})" if result.unavailable else "",
            extra={
                "event": "generate_cycle",
                "site": site,
                "due": result.due,
                **dict(result.counts),
            },
        )
        return result

    async def _login(
        self, site: str, adapter: SiteAdapter, view: AccountView, result: GenerateResult
    ) -> None:
        user = view.username
        try:
            password = self.store.decrypt(view.encrypted_password)
        except DecryptError as exc:
            await self._failed(site, user, "decrypt", str(exc), result)
            return
        started = time.time()
        try:
            credential = await adapter.login(self.client, user, password)
        except LoginRejected as exc:
            await self._failed(site, user, "rejected", str(exc), result)
            return
        except SiteUnavailable as exc:
            result.unavailable = str(exc)
            result.counts["logins_unavailable"] += 1
            return
        except LoginError as exc:
            await self._failed(site, user, "error", str(exc), result)
            return
        except Exception as exc:  # a plug-in's bug must not stop the other accounts
            await self._failed(site, user, "error", f"{type(exc).__name__} in adapter", result)
            log.debug("adapter error", exc_info=exc, extra={"site": site, "user": user})
            return
        record = CredentialRecord(
            credential.token,
            credential.expires_at,
            refresh_time(started, credential.expires_at, self.refresh_before),
            started,
        )
        await self.store.set_credential(site, user, record)
        if view.next_try is not None:
            await self.store.clear_failures(site, user)
        result.counts["logins_ok"] += 1
        log.debug(
            "login ok",
            extra={
                "event": "login_ok",
                "site": site,
                "user": user,
                "expires_in": round(credential.expires_at - started, 1),
            },
        )

    async def _failed(
        self, site: str, user: str, reason: str, detail: str, result: GenerateResult
    ) -> None:
        failures, delay = await self.store.record_failure(
            site, user, reason, self.backoff_base, self.backoff_max
        )
        result.counts[f"logins_{reason}"] += 1
        log.warning(
            "login %s for %s/%s (%s); failure %d, next try in %.0f s",
            reason,
            site,
            user,
            detail,
            failures,
            delay,
            extra={
                "event": f"login_{reason}",
                "site": site,
                "user": user,
                "failures": failures,
                "retry_in": delay,
            },
        )
