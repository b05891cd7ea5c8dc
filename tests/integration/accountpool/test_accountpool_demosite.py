"""Generator and tester against the real demo site (``crawlfleet demosite`` on loopback):
logins and token use, refresh before expiry, revocation, reports, wrong passwords backed off,
the site going down and coming back."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from crawlfleet.accountpool.periodic import repeat


async def use_token(site_url: str, token: str) -> int:
    async with httpx.AsyncClient() as client:
        response = await client.get(
            f"{site_url}/api/book/?limit=1&offset=0", headers={"Authorization": f"jwt {token}"}
        )
    return response.status_code


def test_login_and_token_use(
    demosite_factory: Callable[..., Any], pool_factory: Any, password: Callable[[str], str]
) -> None:
    accounts = {"alice": password("alice"), "bob": password("bob")}
    site = demosite_factory(accounts)

    async def main() -> None:
        async with pool_factory(site.url) as pool:
            await pool.store.add_accounts("demosite", accounts.items())
            result = await pool.generator.run_site("demosite")
            assert (result.due, result.counts["logins_ok"]) == (2, 2)
            tokens = set()
            for _ in range(30):
                token = await pool.store.random_token("demosite", time.time() + 5)
                assert token is not None
                tokens.add(token)
                assert await use_token(site.url, token) == 200
            assert len(tokens) == 2
            # Nothing is due any more: a second cycle does not log in again.
            assert (await pool.generator.run_site("demosite")).due == 0
            checked = await pool.tester.run_site("demosite")
            assert checked.counts["checks_valid"] == 2
            assert (await pool.store.counters("demosite"))["logins_ok"] == 2

    asyncio.run(main())


def test_refresh_before_expiry_and_expired_tokens_dropped(
    demosite_factory: Callable[..., Any], pool_factory: Any, password: Callable[[str], str]
) -> None:
    accounts = {"carol": password("carol")}
    site = demosite_factory(accounts, token_ttl=4)

    async def main() -> None:
        async with pool_factory(site.url, refresh_before=1.0) as pool:
            await pool.store.add_accounts("demosite", accounts.items())
            before = time.time()
            await pool.generator.run_site("demosite")
            after = time.time()
            first = await pool.store.credential("demosite", "carol")
            assert first is not None
            # From the JWT's exp, which the site sets to int(its clock + 4) at some moment
            # between before and after (however long the login took on a loaded machine).
            assert before + 4 - 1 < first.expires_at <= after + 4
            assert first.refresh_at < first.expires_at
            assert (await pool.generator.run_site("demosite")).due == 0
            await asyncio.sleep(max(0.0, first.refresh_at - time.time()) + 0.05)
            refreshed = await pool.generator.run_site("demosite")
            assert refreshed.counts["logins_ok"] == 1
            second = await pool.store.credential("demosite", "carol")
            assert second is not None and second.token != first.token
            assert second.expires_at >= first.expires_at
            assert await use_token(site.url, second.token) == 200
            # Without refreshing, the token runs out: /random stops serving it near its end,
            # and the tester drops it once expired, without asking the site.
            assert await pool.store.random_token("demosite", second.expires_at + 0.1) is None
            await asyncio.sleep(max(0.0, second.expires_at - time.time()) + 0.1)
            served = site.requests_served()
            tested = await pool.tester.run_site("demosite")
            assert tested.counts["checks_expired"] == 1
            assert site.requests_served() == served  # no request to the site
            assert await pool.store.credential("demosite", "carol") is None

    asyncio.run(main())


def test_tester_removes_a_revoked_credential(
    demosite_factory: Callable[..., Any], pool_factory: Any, password: Callable[[str], str]
) -> None:
    accounts = {"dave": password("dave"), "erin": password("erin")}
    site = demosite_factory(accounts)

    async def main() -> None:
        async with pool_factory(site.url) as pool:
            await pool.store.add_accounts("demosite", accounts.items())
            await pool.generator.run_site("demosite")
            revoked = await pool.store.credential("demosite", "dave")
            assert revoked is not None
            site.admin("revoke", {"username": "dave"})
            assert await use_token(site.url, revoked.token) == 401
            result = await pool.tester.run_site("demosite")
            assert (result.counts["checks_rejected"], result.counts["checks_valid"]) == (1, 1)
            assert await pool.store.credential("demosite", "dave") is None
            assert await pool.store.credential("demosite", "erin") is not None
            regenerated = await pool.generator.run_site("demosite")
            assert (regenerated.due, regenerated.counts["logins_ok"]) == (1, 1)
            fresh = await pool.store.credential("demosite", "dave")
            assert fresh is not None and await use_token(site.url, fresh.token) == 200

    asyncio.run(main())


def test_wrong_password_is_backed_off_counted_and_not_hammered(
    demosite_factory: Callable[..., Any],
    pool_factory: Any,
    password: Callable[[str], str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    real = password("mallory-real")
    site = demosite_factory({"mallory": real})
    wrong = password("mallory-wrong")

    async def main() -> None:
        async with pool_factory(site.url, backoff_base=2.0, backoff_max=8.0) as pool:
            await pool.store.add_accounts("demosite", [("mallory", wrong)])
            before = site.requests_served()
            first = await pool.generator.run_site("demosite")
            assert first.counts["logins_rejected"] == 1
            for _ in range(10):  # a tight loop of cycles: the parked account is not retried
                assert (await pool.generator.run_site("demosite")).due == 0
            assert site.requests_served() == before + 1  # one login attempt, no more
            assert await pool.store.failures("demosite", "mallory") == (1, "rejected")
            assert (await pool.store.counts("demosite", 0)).parked == 1
            await asyncio.sleep(2.05)
            second = await pool.generator.run_site("demosite")
            assert second.counts["logins_rejected"] == 1
            assert (await pool.store.failures("demosite", "mallory"))[0] == 2
            assert (await pool.store.counters("demosite"))["logins_rejected"] == 2
            # The operator fixes the password: the back-off is reset and the login works.
            await pool.store.add_accounts("demosite", [("mallory", real)])
            fixed = await pool.generator.run_site("demosite")
            assert fixed.counts["logins_ok"] == 1
            assert await pool.store.failures("demosite", "mallory") == (0, None)

    asyncio.run(main())
    rejected = [r for r in caplog.records if getattr(r, "event", "") == "login_rejected"]
    assert len(rejected) == 2 and rejected[0].levelno == logging.WARNING
    assert rejected[0].user == "mallory"  # type: ignore[attr-defined]


def test_site_down_then_up(
    demosite_factory: Callable[..., Any],
    pool_factory: Any,
    password: Callable[[str], str],
    redis_url: str,
) -> None:
    accounts = {"frank": password("frank"), "grace": password("grace")}
    site = demosite_factory(accounts)

    async def main() -> None:
        async with pool_factory(site.url) as pool:
            await pool.store.add_accounts("demosite", [("frank", accounts["frank"])])
            await pool.generator.run_site("demosite")
            await pool.store.add_accounts("demosite", [("grace", accounts["grace"])])
            site.stop()
            down = await pool.generator.run_site("demosite")
            assert down.unavailable is not None and "ConnectError" in down.unavailable
            assert down.counts["logins_unavailable"] == 1
            assert (await pool.store.counts("demosite", 0)).parked == 0  # nobody blamed
            status = await pool.store.status("demosite")
            assert "ConnectError" in str(status["generate"]["error"])
            tested = await pool.tester.run_site("demosite")
            assert tested.unavailable is not None
            assert await pool.store.credential("demosite", "frank") is not None  # kept
            # The loops keep running through the outage.
            loop = asyncio.create_task(
                repeat(
                    "generate",
                    pool.generator.run_once,
                    interval=0.1,
                    log=logging.getLogger("test"),
                    redis_url=redis_url,
                )
            )
            await asyncio.sleep(0.5)
            assert not loop.done()
            site.start()
            deadline = time.monotonic() + 10
            while await pool.store.credential("demosite", "grace") is None:
                assert time.monotonic() < deadline, "grace was never logged in after recovery"
                await asyncio.sleep(0.1)
            loop.cancel()
            await asyncio.gather(loop, return_exceptions=True)
            assert (await pool.store.status("demosite"))["generate"]["error"] is None
            frank = await pool.store.credential("demosite", "frank")
            assert frank is not None and await use_token(site.url, frank.token) == 200

    asyncio.run(main())


def test_tester_treats_bans_as_unavailable_not_as_rejections(
    demosite_factory: Callable[..., Any], pool_factory: Any, password: Callable[[str], str]
) -> None:
    accounts = {f"u{i}": password(f"ban{i}") for i in range(3)}
    site = demosite_factory(accounts)

    async def main() -> None:
        async with pool_factory(site.url) as pool:
            await pool.store.add_accounts("demosite", accounts.items())
            await pool.generator.run_site("demosite")
            # Revoking every token makes the site answer 401; a ban answers 403 and says
            # nothing about a token. Simulate the ban with a check URL that answers 403.
            pool.adapters["demosite"].check_url = f"{site.url}/api/admin/stats"
            result = await pool.tester.run_site("demosite")
            assert result.unavailable == "check answered HTTP 403"
            assert (await pool.store.counts("demosite", 0)).credentials == 3

    asyncio.run(main())
