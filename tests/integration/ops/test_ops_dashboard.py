"""The dashboard service for real: HTTP API, auth, /metrics, and its page in headless Chromium.

The browser test drives Debian's ``chromium`` through ``chromium-driver`` (selenium) during a
real two-worker crawl, and saves the screenshot shown in docs/dashboard.md (docs/dashboard.png) when
CRAWLFLEET_SCREENSHOTS=docs.
"""

from __future__ import annotations

import base64
import time
from pathlib import Path

from ops_helpers import assert_one_line_error, cli, cli_process, crawl_settings
from selenium import webdriver
from support.dashboard import KEY, browser, screenshot_path, snapshot, start_dashboard
from support.net import free_port
from support.waiting import wait_until

import redis_server

__all__ = ["start_dashboard"]  # the fixture


def _points(driver: webdriver.Chrome, chart: str) -> int:
    css = f'section[data-spider="site"] svg[data-chart="{chart}"]'
    return sum(int(svg["data-points"] or 0) for svg in snapshot(driver, css, "data-points"))


def _alive_rows(driver: webdriver.Chrome) -> set[str]:
    css = 'section[data-spider="site"] tr.worker-row:has(td.alive)'
    return {str(r["data-worker"]) for r in snapshot(driver, css, "data-worker")}


def test_page_shows_both_workers_and_growing_charts(
    site, redis_url: str, start_worker, start_dashboard, tmp_path: Path
) -> None:
    # Long enough to outlast the checks (about 25 s); the workers are killed at teardown.
    site.pages, site.delay = 400, 0.25
    dash = start_dashboard(redis_url)
    # with the politeness budget: the site's key learns, and the page charts its rate
    polite = {"crawlfleet.politeness.middleware.PolitenessMiddleware": 750}
    settings = crawl_settings(redis_url, DOWNLOADER_MIDDLEWARES=polite)
    workers = [start_worker(site.url, settings, name) for name in ("one", "two")]
    wait_until(lambda: all(len(w.parsed()) >= 2 for w in workers), what="both workers to crawl")

    driver = browser(tmp_path)
    try:
        # Basic auth as a browser does it: the key is the password, the user name is free.
        driver.get(f"http://ops:{KEY}@127.0.0.1:{dash.port}/")
        assert driver.title == "crawlfleet dashboard"
        wait_until(lambda: len(_alive_rows(driver)) == 2, timeout=30, what="two alive workers")
        wait_until(
            lambda: _points(driver, "throughput") >= 4 and _points(driver, "queue") >= 2,
            timeout=30,
            what="first chart points",
        )
        before = (_points(driver, "throughput"), _points(driver, "queue"))
        wait_until(
            lambda: (
                _points(driver, "throughput") > before[0] and _points(driver, "queue") > before[1]
            ),
            timeout=30,
            what="the charts to gain points without a reload",
        )
        assert len(_alive_rows(driver)) == 2
        # the key's rate: its start and each window that grew it (slow start: no ban here)
        wait_until(lambda: _points(driver, "rates") >= 4, timeout=30, what="the rate chart")
        cells = snapshot(driver, 'section[data-spider="site"] tr.key-row td')
        assert any(c["text"] == "growing" for c in cells), cells
        state = snapshot(driver, "#state", "class")
        assert [s["class"] for s in state] == ["live"], state
        time.sleep(2)  # a few more points for a readable screenshot
        assert driver.save_screenshot(str(screenshot_path("dashboard.png", tmp_path)))
        # The Content-Security-Policy blocked nothing and the script raised nothing.
        problems = [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
        assert not problems, problems
    finally:
        driver.quit()

    metrics = dash.get("/metrics", headers={"X-API-Key": KEY})
    assert metrics.status_code == 200
    text = metrics.text
    assert "crawlfleet_redis_up 1.0" in text
    assert 'crawlfleet_queued{spider="site"}' in text
    worker_up = [line for line in text.splitlines() if line.startswith("crawlfleet_worker_up{")]
    assert len(worker_up) == 2
    assert 'stat="response_received_count"' in text
    assert 'crawlfleet_worker_frontier_events_total{event="acked",spider="site"' in text


def test_api_auth_health_and_a_redis_outage(own_redis, start_dashboard) -> None:
    dash = start_dashboard(own_redis.url)
    assert dash.get("/health").json()["status"] == "ok"
    for path in ("/", "/api/status", "/metrics"):
        refused = dash.get(path)
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"].startswith("Basic")
        assert dash.get(path, headers={"X-API-Key": "wrong"}).status_code == 401
        assert dash.get(path, headers={"X-API-Key": KEY}).status_code == 200
    basic = base64.b64encode(f"anyone:{KEY}".encode()).decode()
    page = dash.get("/", headers={"Authorization": f"Basic {basic}"})
    assert page.status_code == 200
    assert page.headers["content-security-policy"].startswith("default-src 'none'")
    bad_basic = base64.b64encode(b"anyone:nope").decode()
    assert dash.get("/", headers={"Authorization": f"Basic {bad_basic}"}).status_code == 401
    assert dash.get("/", headers={"Authorization": "Basic %%%"}).status_code == 401
    view = dash.get("/api/status", headers={"X-API-Key": KEY}).json()
    assert view["schema"] == 1 and view["spiders"] == [] and view["refresh"] == 0.5

    own_redis.stop()
    health = dash.get("/health")
    assert health.status_code == 503 and "error" in health.json()["redis"]
    # A view read less than half a refresh period ago may still be served once.
    time.sleep(0.5)
    down = dash.get("/api/status", headers={"X-API-Key": KEY})
    assert down.status_code == 503 and "Redis unreachable" in down.json()["error"]
    metrics = dash.get("/metrics", headers={"X-API-Key": KEY})
    assert metrics.status_code == 200 and "crawlfleet_redis_up 0.0" in metrics.text
    own_redis.start()
    wait_until(lambda: dash.get("/health").status_code == 200, what="recovery")
    assert dash.proc.poll() is None


def test_bad_configuration_stops_the_service(redis_url: str, tmp_path: Path) -> None:
    exposed = cli_process("dashboard", "--host", "192.0.2.1", "--redis-url", redis_url)
    assert_one_line_error(exposed, 2, "refusing", "non-loopback", "--allow-no-api-key")
    bad_port = cli("dashboard", "--port", "http", "--redis-url", redis_url)
    assert_one_line_error(bad_port, 2, "--port")
    bad_url = cli("dashboard", "--redis-url", "http://nope")
    assert_one_line_error(bad_url, 2, "--redis-url")
    down = f"redis://127.0.0.1:{free_port()}/0"
    assert_one_line_error(cli("dashboard", "--redis-url", down), 1, "cannot reach Redis")
    server = redis_server.start_redis(tmp_path, password="right")
    try:
        wrong = cli("dashboard", "--redis-url", f"redis://:bad@127.0.0.1:{server.port}/0")
        assert_one_line_error(wrong, 2, "password")  # configuration: a restart would not help
        assert "bad" not in wrong.err
    finally:
        server.stop()
