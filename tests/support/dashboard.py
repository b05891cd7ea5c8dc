"""The dashboard service for tests: a real `crawlfleet dashboard` process on a free loopback port
(``start_dashboard``, a pytest fixture to import where it is used) and Debian's headless Chromium
driven by selenium (``browser``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from support.crawl import ROOT
from support.net import free_port
from support.services import start_process, stop_process, wait_healthy

KEY = "s3cret-dashboard-key"
#: where the browser tests save the screenshots docs/dashboard.md shows: unset, under the test's
#: tmp_path (a test run leaves the work tree alone); ``CRAWLFLEET_SCREENSHOTS=docs`` refreshes them
SCREENSHOTS_ENV = "CRAWLFLEET_SCREENSHOTS"


def screenshot_path(name: str, tmp_path: Path) -> Path:
    """Where a browser test saves the screenshot ``name`` (see :data:`SCREENSHOTS_ENV`)."""
    folder = os.environ.get(SCREENSHOTS_ENV)
    path = (ROOT / folder if folder else tmp_path) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


class Dashboard:
    def __init__(self, proc: subprocess.Popen[bytes], port: int, log: Path) -> None:
        self.proc, self.port, self.log = proc, port, log
        self.url = f"http://127.0.0.1:{port}"

    def get(self, path: str, **kwargs: object) -> httpx.Response:
        return httpx.get(self.url + path, timeout=10, trust_env=False, **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def start_dashboard(tmp_path: Path) -> Iterator[Callable[..., Dashboard]]:
    """``start(redis_url, *flags, env={...})``: a dashboard with the API key ``KEY``."""
    started: list[Dashboard] = []

    def start(redis_url: str, *extra: str, env: dict[str, str] | None = None) -> Dashboard:
        port = free_port()
        log = tmp_path / f"dashboard{len(started)}.log"
        environ = {
            **os.environ,
            "PYTHONPATH": str(ROOT / "project"),
            "DASHBOARD_API_KEY": KEY,
            **(env or {}),
        }
        proc = start_process(
            [sys.executable, "-m", "crawlfleet.cli", "dashboard", "--port", str(port),
             "--redis-url", redis_url, "--sample-interval", "0.5", "--refresh", "0.5", *extra],
            log, env=environ,
        )  # fmt: skip
        dash = Dashboard(proc, port, log)
        started.append(dash)
        wait_healthy(
            proc, f"{dash.url}/health", log, accept=lambda answer: answer.status_code in (200, 503)
        )
        return dash

    yield start
    for dash in started:
        stop_process(dash.proc, 15)


def browser(tmp_path: Path) -> webdriver.Chrome:
    """Headless Chromium (Debian's ``chromium`` and ``chromium-driver``), its console logged."""
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--disable-dev-shm-usage",
        "--window-size=1280,1100",
        f"--user-data-dir={tmp_path / 'chromium'}",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)


_SNAPSHOT = """
const [css, names] = arguments;
return Array.from(document.querySelectorAll(css), (e) => {
    const found = {text: e.innerText};
    for (const name of names) found[name] = e.getAttribute(name);
    return found;
});
"""


def snapshot(driver: webdriver.Chrome, css: str, *attributes: str) -> list[dict[str, str | None]]:
    """The text (``"text"``) and the named attributes of every element matching ``css``, read in
    one script. The pages re-render often, so an element found by one WebDriver call may be
    stale by the next; one script sees one version of the page."""
    found = driver.execute_script(_SNAPSHOT, css, list(attributes))
    return list(found or [])


class PageClient:
    """An HTTP client that behaves as the jobs page does: the key, cookies, Origin, the CSRF
    token (once ``login`` with the dashboard's ``operator_password`` succeeded)."""

    def __init__(self, dash: Dashboard, operator_password: str) -> None:
        self.dash = dash
        self.operator_password = operator_password
        self.http = httpx.Client(
            base_url=dash.url, headers={"X-API-Key": KEY}, timeout=60, trust_env=False
        )
        self.csrf = ""

    def get(self, path: str) -> httpx.Response:
        return self.http.get(path)

    def post(
        self, path: str, body: dict[str, Any] | None = None, *, origin: str | None = "same",
        csrf: str | None = None, method: str = "POST",
    ) -> httpx.Response:  # fmt: skip
        headers = {"Content-Type": "application/json"}
        if origin is not None:
            headers["Origin"] = self.dash.url if origin == "same" else origin
        token = self.csrf if csrf is None else csrf
        if token:
            headers["X-CSRF-Token"] = token
        return self.http.request(method, path, content=json.dumps(body or {}), headers=headers)

    def login(self, user: str = "alice", password: str | None = None) -> httpx.Response:
        password = self.operator_password if password is None else password
        answer = self.post("/api/session", {"user": user, "password": password})
        if answer.status_code == 200:
            self.csrf = answer.json()["csrf"]
        return answer
