"""The dashboard's jobs pages over HTTP: the operator role, cross-site protection, bad input, and
a real job started, paused, resumed, seeded and stopped through the real dashboard server, with
real agents (process runner) and real crawls on a real redis-server."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
import redis
from jobs_helpers import FAST, AgentProcess, cli, job, wait_state
from support.crawl import Site
from support.dashboard import KEY, Dashboard, PageClient, start_dashboard
from support.waiting import wait_until

from crawlfleet.hub.fleetkeys import JobKeys
from crawlfleet.hub.keys import SpiderKeys

__all__ = ["start_dashboard"]  # the fixture
OPERATOR = "operator-password-for-tests"
ENV = {"DASHBOARD_OPERATOR_PASSWORD": OPERATOR}


@pytest.fixture
def operator_page(
    redis_url: str,
    start_agent: Callable[..., AgentProcess],
    start_dashboard: Callable[..., Dashboard],
) -> Callable[..., PageClient]:
    """Start these agents and a dashboard with an operator password; its page, not logged in."""

    def open_page(*agents: str) -> PageClient:
        for name in agents:
            start_agent(name)
        return PageClient(start_dashboard(redis_url, env=ENV), OPERATOR)

    return open_page


def refused(answer: httpx.Response, status: int, text: str) -> None:
    """A one-line refusal naming the problem."""
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert "\n" not in error and text in error, error


def start_body(site: Site, **extra: Any) -> dict[str, Any]:
    settings = "\n".join(FAST[1::2])
    return {
        "project": "classic",
        "spider": "pages",
        "args": f"site={site.url}\npages={site.pages}",
        "settings": settings,
        "workers": "all",
        **extra,
    }


def test_writes_need_an_operator_session_a_csrf_token_and_this_origin(
    site: Site, redis_client: redis.Redis, operator_page: Callable[..., PageClient]
) -> None:
    page = operator_page("a")
    dash = page.dash
    view = page.get("/api/jobs").json()
    assert view["projects"] == {"classic": {"pages": ["a"]}} and view["jobs"] == []
    assert page.get("/jobs").headers["content-security-policy"].startswith("default-src 'none'")
    assert httpx.get(dash.url + "/jobs", trust_env=False).status_code == 401
    assert page.get("/api/session").json() == {"operator": None, "csrf": None, "writable": True}

    # The read-only key cannot write, whatever it sends.
    refused(page.post("/api/jobs", start_body(site)), 403, "writes need an operator")
    refused(page.post("/api/seed", {"spider": "pages", "urls": site.url}), 403, "need an operator")
    # Logins: the wrong password, another site's page, a bad name.
    refused(page.login(password="not-the-operator-password"), 403, "wrong operator password")
    refused(page.login(password=KEY), 403, "wrong operator password")
    refused(
        page.post("/api/session", {"user": "x", "password": OPERATOR}, origin="http://evil.test"),
        403,
        "cross-origin request refused",
    )
    refused(
        page.post("/api/session", {"user": "x", "password": OPERATOR}, origin=None),
        403,
        "Origin or Referer must be this page",
    )
    refused(page.login(user="bad name"), 400, "user: 1 to 64 letters")
    logged = page.login()
    assert logged.status_code == 200, logged.text
    cookie = logged.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
    assert page.get("/api/session").json()["operator"] == "alice"

    # A session without its token, with another token, or from another origin cannot write.
    body = start_body(site)
    refused(page.post("/api/jobs", body, csrf="0" * 64), 403, "missing or invalid CSRF token")
    token, page.csrf = page.csrf, ""
    refused(page.post("/api/jobs", body), 403, "missing or invalid CSRF token")
    page.csrf = token
    refused(page.post("/api/jobs", body, origin=None), 403, "Origin or Referer must be this page")
    refused(page.post("/api/jobs", body, origin="http://evil.test"), 403, "cross-origin request")
    form = page.http.post(
        "/api/jobs",
        data={"project": "classic"},
        headers={"Origin": dash.url, "X-CSRF-Token": token},
    )
    refused(form, 415, "send the body as application/json")
    # The token is bound to the session: another operator's session does not take it.
    other = PageClient(dash, OPERATOR)
    assert other.login("bob").status_code == 200
    refused(other.post("/api/jobs", body, csrf=token), 403, "missing or invalid CSRF token")
    assert redis_client.exists(JobKeys().jobs, JobKeys().job_seq) == 0

    # Logged out: the session and its token are gone.
    assert other.post("/api/session", method="DELETE").status_code == 200
    refused(other.post("/api/jobs", body), 403, "writes need an operator")
    assert redis_client.exists(JobKeys().jobs, JobKeys().job_seq) == 0


def test_bad_input_is_one_line_and_changes_nothing(
    site: Site, redis_client: redis.Redis, operator_page: Callable[..., PageClient]
) -> None:
    page = operator_page("a")
    assert page.login().status_code == 200
    cases = [
        ("/api/jobs", start_body(site, project="nope"), "unknown project 'nope' (known: classic)"),
        ("/api/jobs", start_body(site, spider="books"), "project 'classic' has no spider 'books'"),
        ("/api/jobs", start_body(site, spider="pa*"), "not a spider name: 'pa*'"),
        ("/api/jobs", start_body(site, args="site"), "args line 1: -a takes NAME=VALUE"),
        ("/api/jobs", start_body(site, workers="0"), "workers must be a number >= 1 or all"),
        ("/api/jobs", start_body(site, workers="2"), "pages needs 2 live worker(s), 1 live (a)"),
        ("/api/jobs/99/stop", {}, "no job '99'"),
        ("/api/jobs/99/pause", {}, "no job '99'"),
        ("/api/jobs/99/resume", {}, "no job '99'"),
        ("/api/schedules", start_body(site, cron="61 * * * *"),
         "--cron '61 * * * *' does not parse: Bad minute"),
        ("/api/schedules", start_body(site, every="6x"), "--every '6x' is not a duration"),
        ("/api/schedules", start_body(site), "give cron or every (one of them)"),
        ("/api/schedules", start_body(site, spider="books", every="6h"), "has no spider 'books'"),
        ("/api/schedules/9/pause", {}, "no schedule '9'"),
        ("/api/schedules/9/remove", {}, "no schedule '9'"),
        ("/api/seed", {"spider": "books", "urls": site.url},
         "unknown spider 'books' (known: pages)"),
        ("/api/seed", {"spider": "pages", "urls": f"{site.url}\nftp://x/"},
         "urls line 2: "),
        ("/api/seed", {"spider": "pages", "urls": ""}, "urls: give at least one URL"),
    ]  # fmt: skip
    for path, body, text in cases:
        answer = page.post(path, body)
        assert answer.status_code == 400, (path, body, answer.text)
        refused(answer, 400, text)
    refused(page.post("/api/jobs/1/restart"), 404, "no job action 'restart'")
    big = page.post("/api/seed", {"spider": "pages", "urls": f"{site.url}/x\n" * 3000})
    refused(big, 413, "body larger than 65536 bytes")
    refused(page.get("/api/jobs/99"), 400, "no job '99'")
    refused(page.get("/api/jobs/99/logs"), 400, "no job '99'")
    refused(page.get("/api/jobs/1/logs?lines=0"), 400, "lines must be a number from 1 to 500")
    fleet = JobKeys()
    assert redis_client.exists(fleet.jobs, fleet.job_seq, fleet.schedules) == 0
    assert redis_client.exists(SpiderKeys("pages").start_urls) == 0


def test_an_operator_runs_a_job_from_the_dashboard_and_the_cli_sees_the_same_job(
    site: Site,
    redis_url: str,
    redis_client: redis.Redis,
    operator_page: Callable[..., PageClient],
) -> None:
    site.pages, site.delay = 200, 0.1
    page = operator_page("a", "b")
    dash = page.dash
    assert page.login().status_code == 200
    started = page.post("/api/jobs", start_body(site))
    assert started.status_code == 200, started.text
    assert started.json()["message"].startswith("job 1: classic/pages running on 2 worker(s)")
    record = job(redis_client, "1")
    assert record["state"] == "running" and record["by"] == "alice@dashboard"
    wait_until(lambda: len(site.crawled()) >= 4, "the crawl under way", timeout=60)

    paused = page.post("/api/jobs/1/pause")
    assert paused.json()["message"].startswith("paused job 1"), paused.text
    assert page.post("/api/jobs/1/pause").json()["message"] == "job 1 was already paused"
    assert job(redis_client, "1")["state"] == "paused"
    assert page.post("/api/jobs/1/resume").json()["message"].startswith("resumed job 1")

    seeded = page.post("/api/seed", {"spider": "pages", "urls": f"{site.url}/extra"})
    assert seeded.json()["message"].startswith("added 1 start URL(s) to pages:start_urls")

    def logs() -> dict[str, Any]:
        answer = page.get("/api/jobs/1/logs?lines=20")
        assert answer.status_code == 200, answer.text
        return dict(answer.json()["workers"])

    wait_until(
        lambda: all(
            reply["ok"] and any(lines for lines in reply["units"].values())
            for reply in logs().values()
        ),
        "log lines of both workers",
        timeout=30,
    )
    found = logs()
    assert set(found) == {"a", "b"}
    for reply in found.values():
        assert list(reply["units"]) == ["pages-1"]
        assert 0 < len(reply["units"]["pages-1"]) <= 20
        assert any("scrapy" in line.lower() for line in reply["units"]["pages-1"])

    stopped = page.post("/api/jobs/1/stop")
    assert stopped.json()["message"].startswith("job 1 stopped (finished)"), stopped.text
    record = wait_state(redis_client, "1", "finished", "failed")
    assert record["state"] == "finished" and record["stopped_by"] == "alice@dashboard"
    shown = page.get("/api/jobs/1").json()
    history = [(e["action"], e["by"]) for e in shown["history"]]
    assert history == [
        ("start", "alice@dashboard"),
        ("pause", "alice@dashboard"),
        ("resume", "alice@dashboard"),
        ("seed", "alice@dashboard"),
        ("stop", "alice@dashboard"),
        ("end", "alice@dashboard"),
    ], history
    assert set(shown["job"]["stats"]["per_worker"]) == {"a", "b"}
    # The CLI shows the job the dashboard started (one store, one piece of code).
    listed = cli("job", "list", "--redis-url", redis_url)
    assert listed.out.splitlines()[1].split()[:3] == ["1", "finished", "classic/pages"]
    assert listed.out.splitlines()[1].endswith("alice@dashboard")
    # The logs of an ended job are still there (the process runner's log files), in the CLI too.
    assert all(r["ok"] and r["units"]["pages-1"] for r in logs().values())
    tail = cli("job", "logs", "1", "-n", "3", "--redis-url", redis_url)
    assert tail.code == 0, tail.err
    heads = [line for line in tail.out.splitlines() if line.startswith("== ")]
    assert heads == ["== a pages-1", "== b pages-1"], tail.out
    assert len(tail.out.splitlines()) <= 2 + 2 * 3
    shown = cli("job", "show", "1", "--redis-url", redis_url)
    assert "alice@dashboard  pause: workers stop taking requests" in shown.out, shown.out

    added = page.post("/api/schedules", start_body(site, every="6h", dupefilter="keep"))
    assert added.json()["message"] == (
        "schedule 1: classic/pages every 6h, keep duplicate filter"
    ), added.text
    assert page.post("/api/schedules/1/pause").json()["message"] == "paused schedule 1"
    listed = cli("schedule", "list", "--redis-url", redis_url)
    assert listed.out.split()[:5] == ["1", "classic/pages", "every", "6h", "paused"]
    schedules = page.get("/api/jobs").json()["schedules"]
    assert schedules[0]["paused"] and schedules[0]["changed_by"] == "alice@dashboard"
    assert page.post("/api/schedules/1/resume").json()["message"] == "resumed schedule 1"
    assert page.post("/api/schedules/1/remove").json()["message"] == "removed schedule 1"
    assert page.get("/api/jobs").json()["schedules"] == []
    # Every write is in the dashboard's log with who did it.
    log = dash.log.read_text()
    assert log.count("by=alice@dashboard") >= 9, log[-2000:]


def test_without_an_operator_password_the_dashboard_is_read_only(
    redis_url: str, start_dashboard: Callable[..., Dashboard]
) -> None:
    dash = start_dashboard(redis_url)
    page = PageClient(dash, OPERATOR)
    assert page.get("/api/session").json() == {"operator": None, "csrf": None, "writable": False}
    refused(page.login(), 403, "writes are disabled: this dashboard has no operator password")
    refused(page.post("/api/jobs", {}), 403, "writes are disabled")
