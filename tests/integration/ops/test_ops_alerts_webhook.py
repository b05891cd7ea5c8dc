"""Alerts through the dashboard for real: a crawl worker killed, a job agent killed, dead letters,
bans and a small ``maxmemory`` on a private redis-server fire; the webhook (a real HTTP receiver
on loopback) gets ``firing`` and ``resolved``, a job agent stopped cleanly fires nothing; a
receiver that fails, is down or hangs never stops the dashboard serving; ``/metrics`` exports
every metric the Prometheus rules use, which ``promtool check rules`` accepts."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from ops_helpers import ROOT, assert_one_line_error, cli, crawl_settings
from support.crawl import heartbeats
from support.net import free_port
from support.services import start_process, stop_process, wait_healthy
from support.sites import QuietHandler, serve_http, url_of
from support.waiting import until, wait_until

from crawlfleet.alerts import rules
from crawlfleet.alerts.rules import Alert
from crawlfleet.alerts.store import load_notified
from crawlfleet.alerts.store import webhook_id as store_webhook_id
from crawlfleet.alerts.webhook import Notifier
from crawlfleet.hub.fleetkeys import JobKeys
from crawlfleet.hub.keys import SpiderKeys
from crawlfleet.jobs import store

KEY = "s3cret-dashboard-key"
K = SpiderKeys("site")
RULES = resources.files("crawlfleet.alerts").joinpath("prometheus-rules.yml")


class Receiver:
    """What the webhook receiver got; ``codes`` are answered first, ``hold`` cleared: it hangs."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.arrived = 0
        self.codes: list[int] = []
        self.hold = threading.Event()
        self.hold.set()
        self.lock = threading.Lock()

    def handler(self) -> type[QuietHandler]:
        receiver = self

        class Handler(QuietHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with receiver.lock:
                    receiver.arrived += 1
                receiver.hold.wait(60)
                with receiver.lock:
                    code = receiver.codes.pop(0) if receiver.codes else 200
                    if code < 300:
                        receiver.events.append(json.loads(body))
                self.reply(code, b"ok", "text/plain")

        return Handler

    def got(self, status: str, name: str) -> bool:
        with self.lock:
            return any(e["status"] == status and e["alert"]["name"] == name for e in self.events)


@pytest.fixture
def receiver() -> Iterator[tuple[Receiver, str]]:
    got = Receiver()
    with serve_http(got.handler()) as server:
        yield got, url_of(server) + "/hook?token=t0ps3cret"
    got.hold.set()


class Dashboard:
    def __init__(self, proc: subprocess.Popen[bytes], port: int, log: Path) -> None:
        self.proc, self.log = proc, log
        self.url = f"http://127.0.0.1:{port}"

    def get(self, path: str) -> httpx.Response:
        return httpx.get(self.url + path, headers={"X-API-Key": KEY}, timeout=10, trust_env=False)


@pytest.fixture
def start_dashboard(tmp_path: Path) -> Iterator[Callable[..., Dashboard]]:
    started: list[Dashboard] = []

    def start(redis_url: str, webhook: str) -> Dashboard:
        port = free_port()
        log = tmp_path / f"dashboard{len(started)}.log"
        env = {**os.environ, "PYTHONPATH": str(ROOT / "project"), "DASHBOARD_API_KEY": KEY}
        proc = start_process(
            [sys.executable, "-m", "crawlfleet.cli", "dashboard", "--port", str(port),
             "--redis-url", redis_url, "--sample-interval", "0.3", "--alert-webhook", webhook],
            log, env=env,
        )  # fmt: skip
        dash = Dashboard(proc, port, log)
        started.append(dash)
        wait_healthy(proc, f"{dash.url}/health", log)
        return dash

    yield start
    for dash in started:
        stop_process(dash.proc, 15)


def _near_maxmemory(client: Any) -> bool:
    """Set maxmemory just above what Redis uses now (used ÷ 0.95, the alert fires at 0.9).

    Called in every poll: Redis's memory moves by a client's buffers as connections come and
    go, so a limit set once may leave the ratio below the threshold on a loaded machine."""
    used = int(client.info("memory")["used_memory"])
    client.config_set("maxmemory", str(int(used / 0.95)))
    return True


def _names(redis_url: str) -> set[str]:
    shown = cli("status", "--json", "--redis-url", redis_url)
    assert shown.code == 0, shown.err
    return {a["name"] for a in json.loads(shown.out)["alerts"]}


def test_a_killed_worker_dead_letters_bans_and_memory_fire_and_resolve(
    own_redis: Any, site: Any, start_worker: Any, start_dashboard: Any, receiver: Any
) -> None:
    got, hook = receiver
    site.chain, site.chain_delay = 500, 0.2  # a crawl that runs until it is killed
    client = own_redis.client()
    dash = start_dashboard(own_redis.url, hook)
    worker = start_worker(site.url, crawl_settings(own_redis.url))
    wait_until(lambda: heartbeats(client) and client.exists(K.ops_workers), what="a live worker")
    (wid,) = heartbeats(client)
    wait_until(lambda: client.exists(K.ops_scrapy(wid)), what="its Scrapy stats")
    assert _names(own_redis.url) == set()
    worker.proc.kill()  # SIGKILL: no clean stop, the lease deadline (3 s) passes
    wait_until(lambda: got.got("firing", rules.WORKER_GONE), what="WorkerGone", timeout=20)
    client.rpush(K.deadletter, "not json")
    wait_until(lambda: got.got("firing", rules.DEADLETTER_GROWING), what="DeadLettersGrowing")
    client.hset(K.ops_scrapy(wid), "proxy/banned", rules.BAN_STORM_BANS + 10)
    wait_until(lambda: got.got("firing", rules.BAN_STORM), what="BanStorm")
    wait_until(
        lambda: _near_maxmemory(client) and got.got("firing", rules.HUB_MEMORY),
        what="HubNearMaxmemory",
    )

    fired = {e["alert"]["name"]: e for e in got.events if e["status"] == "firing"}
    gone = fired[rules.WORKER_GONE]
    assert gone["version"] == 1 and gone["source"] == "crawlfleet dashboard"
    assert gone["alert"]["labels"]["worker"] == wid and gone["alert"]["severity"] == "warning"
    assert fired[rules.HUB_MEMORY]["alert"]["severity"] == "critical"
    # The state is shared: a one-shot status sees the same alerts as the dashboard.
    assert _names(own_redis.url) == set(fired)
    metrics = dash.get("/metrics").text
    assert re.search(rf'crawlfleet_worker_lost{{.*worker="{re.escape(wid)}".*}} 1.0', metrics)
    assert "crawlfleet_redis_maxmemory_bytes" in metrics

    client.config_set("maxmemory", "0")
    wait_until(lambda: got.got("resolved", rules.HUB_MEMORY), what="memory resolved")
    # The crawl purged: its alerts resolve once the dashboard stops listing the spider.
    client.delete(*client.keys("site:*"))
    for name in (rules.WORKER_GONE, rules.BAN_STORM, rules.DEADLETTER_GROWING):
        wait_until(lambda n=name: got.got("resolved", n), what=f"{name} resolved", timeout=40)
    assert [e["status"] for e in got.events if e["alert"]["name"] == rules.WORKER_GONE] == [
        "firing",
        "resolved",
    ]
    assert dash.proc.poll() is None
    client.close()


def test_a_killed_job_agent_fires_through_the_webhook_and_metrics_and_a_stopped_one_does_not(
    own_redis: Any, start_dashboard: Any, receiver: Any, run_agent: Any
) -> None:
    got, hook = receiver
    dash = start_dashboard(own_redis.url, hook)
    gone, retired = run_agent(own_redis.url, "gone"), run_agent(own_redis.url, "retired")
    host = socket.gethostname()
    labels = {name: f'agent="{name}",host="{host}"' for name in ("gone", "retired")}
    metrics = dash.get("/metrics").text
    for both in labels.values():
        assert f"crawlfleet_agent_up{{{both}}} 1.0" in metrics
        assert f"crawlfleet_agent_lost{{{both}}} 0.0" in metrics
    gone.kill()  # SIGKILL
    assert stop_process(retired) == 0  # SIGTERM: a clean stop
    wait_until(lambda: got.got("firing", rules.AGENT_DOWN), what="AgentDown", timeout=20)
    (fired,) = [e["alert"] for e in got.events if e["alert"]["name"] == rules.AGENT_DOWN]
    assert fired["labels"] == {"agent": "gone", "host": host}
    assert fired["severity"] == "warning" and f"job agent gone on {host}" in fired["summary"]
    metrics = dash.get("/metrics").text
    assert f"crawlfleet_agent_up{{{labels['gone']}}} 0.0" in metrics
    assert f"crawlfleet_agent_lost{{{labels['gone']}}} 1.0" in metrics
    since = re.search(
        rf"crawlfleet_agent_deadline_timestamp_seconds{{{labels['gone']}}} (\S+)", metrics
    )
    assert since is not None and abs(float(since.group(1)) - fired["since"]) < 0.01
    assert f"crawlfleet_agent_up{{{labels['retired']}}} 0.0" in metrics
    assert f"crawlfleet_agent_lost{{{labels['retired']}}} 0.0" in metrics
    assert f"crawlfleet_agent_deadline_timestamp_seconds{{{labels['retired']}}}" not in metrics
    run_agent(own_redis.url, "gone")  # back
    wait_until(lambda: got.got("resolved", rules.AGENT_DOWN), what="AgentDown resolved")
    statuses = [e["status"] for e in got.events if e["alert"]["name"] == rules.AGENT_DOWN]
    assert statuses == ["firing", "resolved"]
    assert dash.proc.poll() is None


def _health_is_quick(dash: Dashboard) -> bool:
    began = time.monotonic()
    ok = dash.get("/health").status_code == 200 and dash.get("/api/status").status_code == 200
    return ok and time.monotonic() - began < 2.0


def test_a_slow_or_down_receiver_never_stops_the_dashboard(
    own_redis: Any, start_dashboard: Any, receiver: Any
) -> None:
    got, _ = receiver
    port = free_port()
    down = f"http://127.0.0.1:{port}/hook"
    client = own_redis.client()
    dash = start_dashboard(own_redis.url, down)
    wait_until(
        lambda: _near_maxmemory(client) and "CrawlfleetHubNearMaxmemory" in _names(own_redis.url),
        what="the alert",
    )
    assert all(_health_is_quick(dash) for _ in range(3))
    # The receiver comes up on that port: a retry delivers the event.
    late = Receiver()
    server = ThreadingHTTPServer(("127.0.0.1", port), late.handler())
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        wait_until(lambda: late.got("firing", rules.HUB_MEMORY), what="the retried POST")
    finally:
        server.shutdown()
        server.server_close()
    client.config_set("maxmemory", "0")
    stop_process(dash.proc, 15)

    # A receiver that hangs: pages and the API keep answering while the POST waits.
    got.hold.clear()
    slow = start_dashboard(own_redis.url, receiver[1])
    wait_until(
        lambda: _near_maxmemory(client) and got.arrived >= 1, what="a POST to the hanging receiver"
    )
    assert all(_health_is_quick(slow) for _ in range(3))
    got.hold.set()
    wait_until(lambda: got.got("firing", rules.HUB_MEMORY), what="the POST after the timeout")
    client.config_set("maxmemory", "0")
    assert slow.proc.poll() is None
    client.close()


def test_a_webhook_url_that_is_not_http_is_refused(redis_url: str) -> None:
    for bad in ("ftp://hooks.example/alerts", "hooks.example/alerts", "http://"):
        refused = cli("dashboard", "--redis-url", redis_url, "--alert-webhook", bad)
        assert_one_line_error(refused, 2, "--alert-webhook")
    secret = cli("dashboard", "--redis-url", redis_url, "--alert-webhook", "gopher://u:pw99@x/")
    assert_one_line_error(secret, 2, "DASHBOARD_ALERT_WEBHOOK")
    assert "pw99" not in secret.err


def _alert(name: str = rules.WORKER_GONE) -> Alert:
    return Alert(name, (("spider", "site"),), "warning", "a test alert", 1.0, 2.0)


def test_notifier_retries_with_back_off_and_gives_up_on_client_errors(receiver: Any) -> None:
    got, hook = receiver
    got.codes = [503, 429]

    async def scenario() -> Notifier:
        notifier = Notifier(hook, timeout=2.0, attempts=3, backoff=0.05)
        sender = asyncio.ensure_future(notifier.run())
        notifier.update([_alert()], 10.0)  # firing, after a 503 and a 429
        notifier.update([], 11.0)  # resolved
        await until(lambda: notifier.delivered >= 2, "the firing and the resolved event")
        got.codes = [400]
        notifier.update([_alert(rules.BAN_STORM)], 12.0)  # refused for good: not retried
        await until(lambda: notifier.dropped >= 1, "the refused event dropped")
        sender.cancel()
        return notifier

    notifier = asyncio.run(scenario())
    assert notifier.delivered == 2 and notifier.dropped == 1
    assert [(e["status"], e["time"]) for e in got.events] == [("firing", 10.0), ("resolved", 11.0)]
    assert got.events[0]["alert"]["key"] == "CrawlfleetWorkerGone{spider=site}"
    assert got.arrived == 5  # 503, 429, 200 (firing), 200 (resolved), 400 (once)
    assert got.codes == []


def test_notifier_drops_an_event_after_its_attempts_when_the_receiver_is_down() -> None:
    down = f"http://127.0.0.1:{free_port()}/hook"

    async def scenario() -> Notifier:
        notifier = Notifier(down, timeout=1.0, attempts=3, backoff=0.05)
        sender = asyncio.ensure_future(notifier.run())
        notifier.update([_alert()], 1.0)
        await until(lambda: notifier.dropped >= 1, "the event dropped after its attempts")
        sender.cancel()
        return notifier

    notifier = asyncio.run(scenario())
    assert notifier.dropped == 1 and notifier.delivered == 0


def test_the_prometheus_rules_pass_promtool_and_use_only_exported_metrics(
    own_redis: Any, start_dashboard: Any, receiver: Any, tmp_path: Path
) -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool missing: scripts/install-deps.sh installs Debian's prometheus"
    path = tmp_path / "rules.yml"
    path.write_text(RULES.read_text("utf-8"))
    checked = subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True
    )
    assert checked.returncode == 0 and "SUCCESS: 6 rules found" in checked.stdout, checked
    text = RULES.read_text("utf-8")
    assert set(re.findall(r"- alert: (\w+)", text)) == set(rules.NAMES)
    used = set(re.findall(r"\b(crawlfleet_\w+)", text))
    # A real /metrics with a worker, a job and Scrapy stats in Redis.
    client = own_redis.client()
    now = int(client.time()[0]) * 1000
    client.hset(K.frontier, "queue_class", "x.FifoQueue")
    client.zadd(K.workers, {"w1": now + 60_000})
    client.zadd(K.ops_workers, {"w1": now})
    client.hset(K.ops_scrapy("w1"), mapping={"proxy/banned": 3, "response_received_count": 9})
    store.register_agent(client, "b", {"host": "hostb"}, 60_000, units={})
    job = store.create_job(client, {"project": "p", "spider": "site", "workers": ["b"]})
    store.transition(client, job, ["pending"], "running", started=now)
    dash = start_dashboard(own_redis.url, receiver[1])
    exported = set(re.findall(r"^(crawlfleet_\w+?)(?:{| )", dash.get("/metrics").text, re.M))
    assert used <= exported, used - exported
    assert 'stat="proxy/banned"' in dash.get("/metrics").text
    client.close()


def _series(name: str, labels: str, values: str) -> dict[str, str]:
    return {"series": f"{name}{{{labels}}}", "values": values}


def _expect(at: str, alert: str, *labels: dict[str, str]) -> dict[str, Any]:
    return {"eval_time": at, "alertname": alert, "exp_alerts": [{"exp_labels": x} for x in labels]}


def test_each_prometheus_rule_fires_on_its_event_and_only_then(tmp_path: Path) -> None:
    """``promtool test rules``: series shaped like the dashboard's, one case per rule (the
    annotations, checked by ``promtool check rules``, are left out of the comparison)."""
    promtool = shutil.which("promtool")
    assert promtool, "promtool missing: scripts/install-deps.sh installs Debian's prometheus"
    loaded = yaml.safe_load(RULES.read_text("utf-8"))
    for rule in loaded["groups"][0]["rules"]:
        rule.pop("annotations")
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(loaded))
    job = 'job_id="1",project="p",spider="s"'
    growing = 'job_id="2",project="p",spider="g"'
    stat = 'spider="s",worker="a",stat="proxy/banned"'
    series = [
        _series("crawlfleet_worker_lost", 'spider="s",worker="w",host="h"', "0 0 1 1"),
        _series("crawlfleet_worker_lost", 'spider="s",worker="v",host="h"', "0 0 0 0"),
        _series("crawlfleet_agent_lost", 'agent="a",host="h"', "0 0 1 1"),
        _series("crawlfleet_agent_deadline_timestamp_seconds", 'agent="a",host="h"', "60x3"),
        _series("crawlfleet_agent_lost", 'agent="r",host="h"', "0 0 0 0"),  # stopped cleanly:
        _series("crawlfleet_agent_deadline_timestamp_seconds", 'agent="r",host="h"', "60 _ _ _"),
        _series("crawlfleet_agent_lost", 'agent="l",host="h"', "0 0 0 0"),  # alive
        _series("crawlfleet_agent_deadline_timestamp_seconds", 'agent="l",host="h"', "60+60x3"),
        _series("crawlfleet_worker_scrapy_stat", stat, "0+20x30"),
        _series(
            "crawlfleet_worker_scrapy_stat", 'spider="c",worker="b",stat="proxy/banned"', "0+1x30"
        ),
        _series("crawlfleet_redis_used_memory_bytes", "", "950x30"),
        _series("crawlfleet_redis_maxmemory_bytes", "", "1000x5 0x25"),
        _series("crawlfleet_job_running", job, "1x30"),
        _series("crawlfleet_job_started_timestamp_seconds", job, "0x30"),
        _series("crawlfleet_job_pages", job, "5x30"),
        _series("crawlfleet_job_running", growing, "1x30"),
        _series("crawlfleet_job_started_timestamp_seconds", growing, "0x30"),
        _series("crawlfleet_job_pages", growing, "0+1x30"),
        _series("crawlfleet_deadletter", 'spider="s"', "0 0 0 1 2 3x26"),
        _series("crawlfleet_deadletter", 'spider="q"', "4x30"),
    ]
    warn = {"severity": "warning"}
    cases = [
        _expect("1m", "CrawlfleetWorkerGone"),
        _expect("3m", "CrawlfleetWorkerGone", {**warn, "spider": "s", "worker": "w", "host": "h"}),
        _expect("1m", "CrawlfleetAgentDown"),
        _expect("3m", "CrawlfleetAgentDown", {**warn, "agent": "a", "host": "h"}),
        _expect("10m", "CrawlfleetBanStorm", {**warn, "spider": "s"}),
        _expect("0m", "CrawlfleetHubNearMaxmemory"),  # pending for 1 minute
        _expect("2m", "CrawlfleetHubNearMaxmemory", {"severity": "critical"}),
        _expect("7m", "CrawlfleetHubNearMaxmemory"),  # maxmemory 0: no limit
        _expect("10m", "CrawlfleetJobStuck"),  # running for less than 15 minutes
        _expect(
            "20m", "CrawlfleetJobStuck", {**warn, "job_id": "1", "project": "p", "spider": "s"}
        ),
        _expect("5m", "CrawlfleetDeadLettersGrowing", {**warn, "spider": "s"}),
        _expect("25m", "CrawlfleetDeadLettersGrowing"),  # no growth for 15 minutes
    ]
    spec = {
        "rule_files": ["rules.yml"],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series, "alert_rule_test": cases}],
    }
    (tmp_path / "test.yml").write_text(yaml.safe_dump(spec))
    tested = subprocess.run(
        [promtool, "test", "rules", "test.yml"], capture_output=True, text=True, cwd=tmp_path
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr


def told_firing(client: Any, hook: str) -> bool:
    """The hub's record of what ``hook`` was told (read as a restarted dashboard reads it) holds
    the memory alert firing."""
    told = load_notified(client, store_webhook_id(hook))
    return any(alert.get("name") == rules.HUB_MEMORY for alert in told.values())


def test_a_restarted_dashboard_neither_repeats_nor_misses_a_notification(
    own_redis: Any, start_dashboard: Any, receiver: Any
) -> None:
    got, hook = receiver
    client = own_redis.client()
    near = threading.Event()  # while set, the hub's maxmemory follows its use (alert firing)

    def hold_near() -> None:
        while not stop.is_set():
            if near.is_set():
                _near_maxmemory(client)
            stop.wait(0.1)

    stop = threading.Event()
    holder = threading.Thread(target=hold_near, daemon=True)
    holder.start()

    def memory_events() -> list[str]:
        with got.lock:
            return [e["status"] for e in got.events if e["alert"]["name"] == rules.HUB_MEMORY]

    try:
        first = start_dashboard(own_redis.url, hook)
        near.set()
        wait_until(lambda: memory_events() == ["firing"], what="the first firing")
        wait_until(lambda: told_firing(client, hook), what="what was sent, kept")
        first.proc.kill()  # no clean stop
        first.proc.wait(15)
        near.clear()
        client.config_set("maxmemory", "0")  # resolved while no dashboard watched
        second = start_dashboard(own_redis.url, hook)
        wait_until(lambda: memory_events() == ["firing", "resolved"], what="the missed resolved")
        near.set()
        wait_until(lambda: len(memory_events()) == 3, what="firing again")
        # the record is written just after a delivery: a kill between the two sends it again
        # (at least once, docs/alerts.md); the third must start from a record that has it
        wait_until(lambda: told_firing(client, hook), what="the second firing, kept")
        second.proc.kill()
        second.proc.wait(15)
        client.delete(JobKeys().alerts_state)  # written again by the third's first round
        third = start_dashboard(own_redis.url, hook)  # the alert is still firing
        wait_until(lambda: client.exists(JobKeys().alerts_state), what="the third's evaluation")
        near.clear()
        client.config_set("maxmemory", "0")
        wait_until(lambda: len(memory_events()) == 4, what="the second resolved")
        # in order: a firing the third dashboard repeated would have come before the resolved
        assert memory_events() == ["firing", "resolved", "firing", "resolved"]
        assert third.proc.poll() is None
        assert json.loads(client.get(JobKeys().alerts_notified))["alerts"] == {}
    finally:
        stop.set()
        holder.join(5)
        client.config_set("maxmemory", "0")
        client.close()


@pytest.mark.parametrize(
    "stored",
    [
        "not json",
        "[]",
        '{"webhook": "x", "alerts": {"A{}": {"key": "A{}"}}}',  # another receiver's
        '{"alerts": {"A{}": {"key": "A{}"}}}',
        '{"webhook": "%s", "alerts": []}',
        '{"webhook": "%s", "alerts": {"A{}": "firing", "B{}": {"key": "C{}"}}}',
    ],
)
def test_a_record_of_sent_alerts_for_another_receiver_or_unreadable_is_nothing_sent(
    own_redis: Any, stored: str
) -> None:
    hook = "http://127.0.0.1:9/hook?token=t0ps3cret"
    client = own_redis.client()
    try:
        client.set(JobKeys().alerts_notified, stored.replace("%s", store_webhook_id(hook)))
        notifier = Notifier(hook, client=client)
        notifier.load()
        assert notifier.told == {} and notifier.active == {}
        notifier._told({"status": "firing", "alert": _alert().to_json()})
        record = json.loads(client.get(JobKeys().alerts_notified))
        assert record["webhook"] == store_webhook_id(hook) and "t0ps3cret" not in str(record)
        assert list(record["alerts"]) == [_alert().key]
        again = Notifier(hook, client=client)
        again.load()
        assert list(again.active) == [_alert().key]
    finally:
        client.close()
