"""The jobs pages in headless Chromium as an operator clicks through them: log in, start a job on
two real agents, see it running, pause, resume, read its workers' log lines, stop it, add a
schedule, start a second job. Saves the screenshots shown in docs/dashboard.md
(docs/dashboard-jobs.png, docs/dashboard-job.png) when CRAWLFLEET_SCREENSHOTS=docs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import redis
from jobs_helpers import FAST, AgentProcess, job
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from support.crawl import Site
from support.dashboard import KEY, Dashboard, browser, screenshot_path, snapshot, start_dashboard
from support.waiting import wait_until

from crawlfleet.jobs import schedules

__all__ = ["start_dashboard"]  # the fixture
OPERATOR = "operator-password-for-tests"


def _attr(driver: webdriver.Chrome, css: str, name: str) -> str | None:
    """An attribute of the first match (None when there is none)."""
    found = snapshot(driver, css, name)
    return found[0][name] if found else None


def _workers_showing(driver: webdriver.Chrome, css: str, text: str) -> set[str | None]:
    """The workers (``data-worker``) of the matches whose text contains ``text`` (any case)."""
    return {
        e["data-worker"]
        for e in snapshot(driver, css, "data-worker")
        if text.lower() in str(e["text"]).lower()
    }


def _click(driver: webdriver.Chrome, css: str) -> None:
    """Click the first match once it is there and enabled (re-rendered rows are found again)."""

    def clicked() -> bool:
        try:
            found = driver.find_elements(By.CSS_SELECTOR, css)
            if not found or not found[0].is_enabled():
                return False
            found[0].click()
        except StaleElementReferenceException:
            return False
        return True

    wait_until(clicked, f"to click {css}", timeout=30, interval=0.1)


def _message(driver: webdriver.Chrome) -> str:
    return "".join(str(e["text"]) for e in snapshot(driver, "#message"))


def test_an_operator_starts_pauses_resumes_stops_a_job_and_adds_a_schedule(
    site: Site,
    redis_url: str,
    redis_client: redis.Redis,
    start_agent: Callable[..., AgentProcess],
    start_dashboard: Callable[..., Dashboard],
    tmp_path: Path,
) -> None:
    site.pages, site.delay = 400, 0.2
    start_agent("a")
    start_agent("b")
    dash = start_dashboard(redis_url, env={"DASHBOARD_OPERATOR_PASSWORD": OPERATOR})
    driver = browser(tmp_path)
    try:
        driver.get(f"http://ops:{KEY}@127.0.0.1:{dash.port}/jobs")
        assert driver.title == "crawlfleet jobs"
        wait_until(
            lambda: _attr(driver, "#start-spider option", "value") == "pages",
            "the spiders the agents registered",
            timeout=30,
        )
        # Read-only until the operator logs in: the controls are disabled.
        assert not driver.find_element(By.ID, "start-button").is_enabled()
        driver.find_element(By.ID, "login-user").send_keys("alice")
        driver.find_element(By.ID, "login-password").send_keys(OPERATOR)
        driver.find_element(By.ID, "login-button").click()
        wait_until(
            lambda: [e["text"] for e in snapshot(driver, "#role")] == ["operator: alice"],
            "the operator session",
            timeout=15,
        )

        driver.find_element(By.ID, "start-args").send_keys(f"site={site.url}\npages={site.pages}")
        driver.find_element(By.ID, "start-settings").send_keys("\n".join(FAST[1::2]))
        _click(driver, "#start-button")
        row = 'tr.job-row[data-job="1"]'
        wait_until(
            lambda: _attr(driver, row, "data-state") == "running", "job 1 running", timeout=60
        )
        assert _message(driver).startswith("job 1: classic/pages running on 2 worker(s)")
        wait_until(lambda: len(site.crawled()) >= 6, "the crawl under way", timeout=60)

        _click(driver, f'{row} button[data-action="pause"]')
        wait_until(lambda: _attr(driver, row, "data-state") == "paused", "paused", timeout=15)
        assert job(redis_client, "1")["state"] == "paused"
        _click(driver, f'{row} button[data-action="resume"]')
        wait_until(lambda: _attr(driver, row, "data-state") == "running", "resumed", timeout=15)

        # The job's page: its workers' shares, its history, its units' last log lines.
        _click(driver, f'{row} a[href="#job=1"]')
        wait_until(
            lambda: _attr(driver, "#job-state", "data-state") == "running", "job page", timeout=15
        )
        wait_until(
            lambda: len(snapshot(driver, "tr.history-row")) == 3,
            "start, pause and resume in the history",
            timeout=15,
        )
        wait_until(
            lambda: _workers_showing(driver, "pre.log", "scrapy") == {"a", "b"},
            "log lines of both workers",
            timeout=30,
        )
        wait_until(
            lambda: _workers_showing(driver, "tr.worker-row", "%") == {"a", "b"},
            "each worker's share of the pages",
            timeout=30,
        )
        assert driver.save_screenshot(str(screenshot_path("dashboard-job.png", tmp_path)))

        _click(driver, '#job-actions button[data-action="stop"]')
        wait_until(
            lambda: _attr(driver, "#job-state", "data-state") == "finished",
            "job 1 stopped",
            timeout=90,
        )
        record = job(redis_client, "1")
        assert record["stopped_by"] == "alice@dashboard" and record["by"] == "alice@dashboard"
        wait_until(
            lambda: _attr(driver, "tr.history-row:last-child", "data-action") == "end",
            "the end in the history",
            timeout=15,
        )

        # Back to the list: a schedule every 6 hours.
        driver.find_element(By.ID, "to-list").click()
        wait_until(lambda: _attr(driver, row, "data-state") == "finished", "the list", timeout=15)
        driver.find_element(By.CSS_SELECTOR, '#schedule-kind option[value="every"]').click()
        driver.find_element(By.ID, "schedule-when").send_keys("6h")
        driver.find_element(By.ID, "schedule-args").send_keys(f"site={site.url}")
        _click(driver, "#schedule-button")
        wait_until(
            lambda: _attr(driver, 'tr.schedule-row[data-schedule="1"]', "data-paused") == "0",
            "schedule 1 listed",
            timeout=15,
        )
        found = schedules.get_schedule(redis_client, "1")
        assert (found["every_text"], found["by"]) == ("6h", "alice@dashboard")
        # A second job, for the screenshot: one running (live numbers), one finished.
        _click(driver, "#start-button")
        second = 'tr.job-row[data-job="2"]'
        wait_until(
            lambda: _attr(driver, second, "data-state") == "running", "job 2 running", timeout=60
        )
        wait_until(
            lambda: (_attr(driver, f"{second} td.pages", "data-pages") or "0") not in ("0", "-"),
            "job 2's live numbers",
            timeout=30,
        )
        assert driver.save_screenshot(str(screenshot_path("dashboard-jobs.png", tmp_path)))
        # The Content-Security-Policy blocked nothing and the script raised nothing.
        problems = [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
        assert not problems, problems
    finally:
        driver.quit()
