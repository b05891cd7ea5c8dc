"""The proxy and authorization middlewares against the real pool services, the demo site and
forward proxies, inside an asyncio loop as under Scrapy's asyncio reactor. Responses are real
HTTP answers of the demo site (fetched through the chosen proxy with the chosen header)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from book_lab import ACCOUNT_KEY, PROXY_KEY, Lab
from scrapy import Request
from scrapy.http import Response
from scrapy.utils.test import get_crawler
from support.net import free_port

from crawlfleet.middlewares import AuthorizationMiddleware, ProxyMiddleware


async def download(request: Request) -> Response:
    """What Scrapy's downloader does with meta["proxy"] and the headers, done with httpx."""
    headers = {k.decode(): v[0].decode() for k, v in request.headers.items()}
    proxy = request.meta.get("proxy")
    async with httpx.AsyncClient(proxy=proxy, trust_env=False, timeout=5) as client:
        resp = await client.get(request.url, headers=headers)
    return Response(request.url, status=resp.status_code, body=resp.content, request=request)


def stat(mw: Any, name: str) -> int:
    return int(mw.stats.get_value(name, 0))


def pool_that_is_down(pool: str, key: str) -> tuple[int, dict[str, Any]]:
    """A free port the pool starts on later, and a worker's settings for it (short back-off)."""
    port = free_port()
    return port, {
        f"{pool}_URL": f"http://127.0.0.1:{port}",
        f"{pool}_API_KEY": key,
        f"{pool}_BACKOFF_BASE": 0.2,
        f"{pool}_BACKOFF_MAX": 0.4,
    }


def test_proxies_rotate_from_one_batch_and_a_banned_one_is_replaced(lab: Lab) -> None:
    site = lab.start_demosite(
        "--rate-limit", "5", "--rate-window", "30", "--ban-seconds", "30", books=20
    )
    lab.start_proxies()
    pool = lab.start_proxypool()
    settings = {"PROXYPOOL_URL": pool, "PROXYPOOL_API_KEY": PROXY_KEY}

    async def scenario() -> None:
        mw = ProxyMiddleware.from_crawler(get_crawler(settings_dict=settings))
        requests = [Request(f"{site}/api/book/?offset={i}") for i in range(9)]
        for request in requests:
            await mw.process_request(request)
        assert {r.meta["proxy"] for r in requests} == {f"http://{p}" for p in lab.proxies}
        assert stat(mw, "proxy/pool/requests") == 1  # one batch, not one call per request

        victim = requests[0]
        responses = [await download(victim) for _ in range(6)]  # 401s count too
        assert [r.status for r in responses] == [401] * 5 + [403]
        retry = mw.process_response(victim, responses[-1])
        assert isinstance(retry, Request) and retry.dont_filter
        await mw.process_request(retry)
        assert retry.meta["proxy"] != victim.meta["proxy"]
        assert (await download(retry)).status == 401  # the site answers: not banned there
        for _ in range(6):
            await mw.process_request(probe := Request(f"{site}/ip"))
            assert probe.meta["proxy"] != victim.meta["proxy"]  # in quarantine
        # More in-flight answers from the banned proxy: retried, reported only once.
        assert isinstance(mw.process_response(requests[3], responses[-1]), Request)
        await mw.spider_closed()
        assert stat(mw, "proxy/banned") == 2
        assert stat(mw, "proxy/report/banned") == 1
        # The report reached the pool (404 "gone": its tester had already dropped the proxy).
        assert stat(mw, "proxy/report/sent") + stat(mw, "proxy/report/gone") == 1
        assert stat(mw, "proxy/retry/count") == 2

    asyncio.run(scenario())


def test_requests_wait_for_a_proxy_pool_that_is_down(lab: Lab) -> None:
    site = lab.start_demosite(books=20)
    lab.start_proxies(("127.0.0.2",))
    port, settings = pool_that_is_down("PROXYPOOL", PROXY_KEY)
    settings["PROXYPOOL_REFRESH_INTERVAL"] = 0.2

    async def scenario() -> None:
        mw = ProxyMiddleware.from_crawler(get_crawler(settings_dict=settings))
        own = Request(f"{site}/ip", meta={"proxy": f"http://{lab.proxies[0]}"})
        await asyncio.wait_for(mw.process_request(own), 1)  # the spider's own choice: kept
        assert own.meta["proxy"] == f"http://{lab.proxies[0]}"
        request = Request(f"{site}/ip")
        waiting = asyncio.ensure_future(mw.process_request(request))
        await asyncio.sleep(1.5)
        assert not waiting.done()  # no proxy: the request waits, it is not sent directly
        assert "proxy" not in request.meta
        assert stat(mw, "proxy/backoff/count") >= 2
        await asyncio.to_thread(lab.start_proxypool, port)
        await asyncio.wait_for(waiting, 10)
        assert request.meta["proxy"] == f"http://{lab.proxies[0]}"
        assert (await download(request)).body == b'{"origin":"127.0.0.2"}'

        # The pool goes away again: the cached batch keeps the crawl going meanwhile.
        assert lab.proxypool is not None
        await asyncio.to_thread(lab.proxypool.stop)
        errors = stat(mw, "proxy/pool/error")
        await asyncio.sleep(1.2)  # stale now: past the refresh interval and the 1 s refetch floor
        for _ in range(3):
            await asyncio.wait_for(mw.process_request(Request(f"{site}/ip")), 1)
            await asyncio.sleep(0.1)
        assert stat(mw, "proxy/pool/error") > errors
        await mw.spider_closed()

    asyncio.run(scenario())


def test_a_revoked_token_is_reported_and_replaced(lab: Lab) -> None:
    site = lab.start_demosite(books=20)
    accounts = lab.start_accountpool()
    settings = {"ACCOUNTPOOL_URL": accounts, "ACCOUNTPOOL_API_KEY": ACCOUNT_KEY}

    async def scenario() -> None:
        mw = AuthorizationMiddleware.from_crawler(get_crawler(settings_dict=settings))
        first = Request(f"{site}/api/book/")
        await mw.process_request(first)
        scheme, token = first.headers[b"Authorization"].decode().split()
        assert scheme == "jwt"
        assert (await download(first)).status == 200
        second = Request(f"{site}/api/book/?offset=18")
        await mw.process_request(second)
        assert stat(mw, "auth/pool/requests") == 1  # cached per site

        await asyncio.to_thread(lab.admin, "/api/admin/revoke", {"token": token})
        rejected = await download(second)
        assert rejected.status == 401
        retry = mw.process_response(second, rejected)
        assert isinstance(retry, Request) and retry.dont_filter
        await mw.process_request(retry)
        new_token = retry.headers[b"Authorization"].decode().split()[1]
        assert new_token != token
        assert (await download(retry)).status == 200
        # A late answer for the old token: retried, but not reported a second time.
        assert isinstance(mw.process_response(first, rejected), Request)
        await mw.spider_closed()
        assert stat(mw, "auth/rejected") == 2
        assert stat(mw, "auth/report/rejected") == 1
        assert stat(mw, "auth/report/sent") == 1

    asyncio.run(scenario())
    headers = {"X-API-Key": ACCOUNT_KEY}
    served = {httpx.get(f"{accounts}/demosite/random", headers=headers).text for _ in range(10)}
    assert served and all(t.count(".") == 2 for t in served)


def test_requests_wait_for_an_account_pool_that_is_down(lab: Lab) -> None:
    site = lab.start_demosite(books=20)
    port, settings = pool_that_is_down("ACCOUNTPOOL", ACCOUNT_KEY)

    async def scenario() -> None:
        mw = AuthorizationMiddleware.from_crawler(get_crawler(settings_dict=settings))
        anonymous = Request(f"{site}/ip", meta={"dont_authorize": True})
        await asyncio.wait_for(mw.process_request(anonymous), 1)
        assert b"Authorization" not in anonymous.headers
        request = Request(f"{site}/api/book/")
        waiting = asyncio.ensure_future(mw.process_request(request))
        await asyncio.sleep(1.5)
        assert not waiting.done()
        assert b"Authorization" not in request.headers
        assert stat(mw, "auth/backoff/count") >= 2
        await asyncio.to_thread(lab.start_accountpool, port=port)
        await asyncio.wait_for(waiting, 10)
        assert (await download(request)).status == 200
        await mw.spider_closed()

    asyncio.run(scenario())
