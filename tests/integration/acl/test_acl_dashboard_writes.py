"""The dashboard under the Redis ACL: it reads as the read-only `dashboard` user and writes (and
asks the agents for log lines) as the `operator` user of DASHBOARD_OPERATOR_REDIS_URL, tested
against a real redis-server started with the aclfile `crawlfleet acl render` writes, a real
`crawlfleet agent` (process runner, as the crawler user) and the real dashboard server. Without
that URL the same write is refused in one line naming it; a bad value stops the dashboard at
start in one line."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from acl_helpers import SPIDER, env
from support.crawl import Site
from support.dashboard import KEY, Dashboard, PageClient, start_dashboard
from support.lifecycle import running
from support.net import free_port
from support.secureredis import PASSWORDS, SecureRedis, start_acl_redis
from support.waiting import wait_until

from crawlfleet.hub import acl
from crawlfleet.hub.fleetkeys import JobKeys
from crawlfleet.hub.keys import SpiderKeys
from crawlfleet.jobs import store

__all__ = ["start_dashboard"]  # the fixture
KEYS = JobKeys()
OPERATOR = "operator-password-for-tests"
ADMIN = "admin-password-0123456789"  # the test's own user: it changes the others' rights
FAST = "\n".join(
    (
        "SCHEDULER_LEASE_TIMEOUT=3",
        "SCHEDULER_HEARTBEAT_INTERVAL=0.3",
        "WORKERSTATS_INTERVAL=0.3",
        "BLOOMFILTER_CAPACITY=100000",
        "CONCURRENT_REQUESTS=2",
    )
)


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[SecureRedis]:
    yield from running(
        start_acl_redis(tmp_path / "redis", [SPIDER], f"user admin on >{ADMIN} ~* &* +@all\n")
    )


def admin(hub: SecureRedis) -> redis.Redis:
    return redis.Redis.from_url(f"redis://admin:{ADMIN}@127.0.0.1:{hub.port}/0")


@pytest.fixture
def agent_watcher(hub: SecureRedis) -> redis.Redis:
    """Who watches the agents register (the conftest's ``start_agent``)."""
    return admin(hub)


def one_line(answer: httpx.Response, status: int, *texts: str) -> str:
    assert answer.status_code == status, answer.text
    error = str(answer.json()["error"])
    assert "\n" not in error and all(text in error for text in texts), error
    for password in PASSWORDS.values():
        assert password not in error
    return error


def schedule_body(site: Site) -> dict[str, Any]:
    return {"project": "classic", "spider": SPIDER, "every": "6h", "args": f"site={site.url}"}


def test_the_dashboard_reads_as_dashboard_and_writes_as_operator(
    hub: SecureRedis,
    site: Site,
    start_agent: Callable[[str], None],
    start_dashboard: Callable[..., Dashboard],
) -> None:
    site.pages, site.delay = 200, 0.1
    start_agent("a")
    root = admin(hub)
    dash = start_dashboard(
        hub.url("dashboard"),
        env={
            "DASHBOARD_OPERATOR_PASSWORD": OPERATOR,
            "DASHBOARD_OPERATOR_REDIS_URL": hub.url("operator"),
        },
    )
    assert PASSWORDS["operator"] not in dash.log.read_text()
    page = PageClient(dash, OPERATOR)
    assert page.get("/api/jobs").json()["projects"] == {"classic": {SPIDER: ["a"]}}
    # A reader (no operator session) asks the agents nothing: the dashboard user may not.
    one_line(page.get("/api/jobs/1/logs"), 400, "no job '1'")
    answer = page.login()
    assert answer.status_code == 200, answer.text

    added = page.post("/api/schedules", schedule_body(site))
    assert added.status_code == 200, added.text
    assert added.json()["message"].startswith(f"schedule 1: classic/{SPIDER} every 6h")
    assert root.hexists(KEYS.schedules, "1")
    body = {
        "project": "classic",
        "spider": SPIDER,
        "args": f"site={site.url}\npages={site.pages}",
        "settings": FAST,
        "workers": "all",
    }
    started = page.post("/api/jobs", body)
    assert started.status_code == 200, started.text
    assert started.json()["message"].startswith("job 1: classic/pages running on 1 worker(s) (a)")
    wait_until(lambda: len(site.crawled()) >= 4, "the crawl under way", timeout=60)
    paused = page.post("/api/jobs/1/pause")
    assert paused.json()["message"].startswith("paused job 1"), paused.text
    assert root.exists(SpiderKeys(SPIDER).paused) == 1
    seeded = page.post("/api/seed", {"spider": SPIDER, "urls": f"{site.url}/extra"})
    assert seeded.json()["message"].startswith("added 1 start URL(s)"), seeded.text

    def logs() -> dict[str, Any]:
        answer = page.get("/api/jobs/1/logs?lines=20")
        assert answer.status_code == 200, answer.text
        return dict(answer.json()["workers"])

    wait_until(
        lambda: (reply := logs()["a"])["ok"] and any(reply["units"].values()),
        "log lines of agent a",
        timeout=30,
    )
    # The same log lines for a reader: refused, since asking the agents is an operator's.
    reader = PageClient(dash, OPERATOR)
    one_line(
        reader.get("/api/jobs/1/logs"),
        403,
        "log lines are a command to the agents: log in as an operator",
        "Redis user 'dashboard' (REDIS_URL)",
    )
    assert page.post("/api/jobs/1/resume").json()["message"].startswith("resumed job 1")

    # The reads do not go through the operator user: with its keys taken away they still work,
    # while a write names the setting of the user Redis refused.
    root.execute_command("ACL", "SETUSER", "operator", "resetkeys")
    shown = page.get("/api/jobs")
    assert shown.status_code == 200 and [j["id"] for j in shown.json()["jobs"]] == ["1"]
    assert page.get("/api/jobs/1").json()["job"]["state"] == "running"
    one_line(
        page.post("/api/schedules", schedule_body(site)),
        403,
        "Redis user 'operator' (DASHBOARD_OPERATOR_REDIS_URL) may not",
        "give DASHBOARD_OPERATOR_REDIS_URL a Redis user that may write",
    )
    root.execute_command("ACL", "SETUSER", "operator", "~*")
    # ... and they do go through the dashboard user: without its keys, the reads are refused.
    root.execute_command("ACL", "SETUSER", "dashboard", "resetkeys")
    one_line(page.get("/api/jobs"), 403, "Redis user 'dashboard' (REDIS_URL) may not")
    rules = acl.role_rules("dashboard", [SPIDER])
    root.execute_command("ACL", "SETUSER", "dashboard", *rules.keys)

    stopped = page.post("/api/jobs/1/stop")
    assert stopped.json()["message"].startswith("job 1 stopped"), stopped.text
    history = [(e["action"], e["by"]) for e in page.get("/api/jobs/1").json()["history"]]
    assert history[:5] == [
        ("start", "alice@dashboard"),
        ("pause", "alice@dashboard"),
        ("seed", "alice@dashboard"),
        ("resume", "alice@dashboard"),
        ("stop", "alice@dashboard"),
    ], history
    root.close()


def test_without_the_operator_url_a_write_is_refused_in_one_line_naming_it(
    hub: SecureRedis, site: Site, start_dashboard: Callable[..., Dashboard]
) -> None:
    dash = start_dashboard(hub.url("dashboard"), env={"DASHBOARD_OPERATOR_PASSWORD": OPERATOR})
    page = PageClient(dash, OPERATOR)
    answer = page.login()
    assert answer.status_code == 200, answer.text
    root = admin(hub)
    # an agent's registration (no agent runs: nothing gets as far as asking one)
    store.register_agent(root, "a", {"spiders": {SPIDER: "classic"}}, 60_000, {})
    error = one_line(
        page.post("/api/schedules", schedule_body(site)),
        403,
        "Redis user 'dashboard' (REDIS_URL) may not",
        "set DASHBOARD_OPERATOR_REDIS_URL (--operator-redis-url) to the `operator` ACL user's URL",
    )
    assert error.startswith("Redis user 'dashboard' (REDIS_URL) may not run "), error
    root.hset(KEYS.job("7"), mapping={"id": "7", "state": "running", "spider": SPIDER})
    one_line(page.post("/api/jobs/7/pause"), 403, "set DASHBOARD_OPERATOR_REDIS_URL")
    assert root.hget(KEYS.job("7"), "state") == b"running"
    assert root.exists(KEYS.schedules, SpiderKeys(SPIDER).paused) == 0
    root.close()


def start_failure(redis_url: str, environ: dict[str, str]) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "crawlfleet.cli", "dashboard", "--port", str(free_port())]
    return subprocess.run(
        [*argv, "--redis-url", redis_url],
        capture_output=True,
        text=True,
        env={**env(), "DASHBOARD_API_KEY": KEY, **environ},
        timeout=60,
    )


@pytest.mark.parametrize(
    ("case", "code", "message"),
    [
        ("garbage", 2, "--operator-redis-url/DASHBOARD_OPERATOR_REDIS_URL must look like"),
        ("bad port", 2, "--operator-redis-url/DASHBOARD_OPERATOR_REDIS_URL has a port that is"),
        ("unreachable", 1, "cannot reach Redis at redis://operator:***@127.0.0.1:"),
        ("wrong password", 2, "rejected the password (DASHBOARD_OPERATOR_REDIS_URL)"),
        ("no operator password", 2, "DASHBOARD_OPERATOR_REDIS_URL is set but there is no "
         "operator password (DASHBOARD_OPERATOR_PASSWORD or --operator-password-file)"),
        ("wrong REDIS_URL", 2, "rejected the password (REDIS_URL)"),
    ],
)  # fmt: skip
def test_a_bad_operator_url_stops_the_dashboard_at_start_in_one_line(
    hub: SecureRedis, case: str, code: int, message: str
) -> None:
    operator_url = hub.url("operator")
    wrong = "not-the-password-0123456789"
    redis_url = hub.url("dashboard")
    urls = {
        "garbage": "http://operator:secret@hub/0",
        "bad port": f"redis://operator:{PASSWORDS['operator']}@127.0.0.1:99999999/0",
        "unreachable": f"redis://operator:{PASSWORDS['operator']}@127.0.0.1:{free_port()}/0",
        "wrong password": operator_url.replace(PASSWORDS["operator"], wrong),
    }
    environ = {
        "DASHBOARD_OPERATOR_PASSWORD": OPERATOR,
        "DASHBOARD_OPERATOR_REDIS_URL": urls.get(case, operator_url),
    }
    if case == "no operator password":
        del environ["DASHBOARD_OPERATOR_PASSWORD"]
    if case == "wrong REDIS_URL":  # a valid operator URL does not stand in for the reads'
        redis_url = redis_url.replace(PASSWORDS["dashboard"], wrong)
    done = start_failure(redis_url, environ)
    assert done.returncode == code, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], done.stderr
    for secret in (*PASSWORDS.values(), wrong, "secret"):
        assert secret not in done.stderr
