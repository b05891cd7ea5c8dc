"""The crash drill's Redis cost (issue 19): Redis CPU and commands per crawled page, two workers,
one SIGKILLed, crawlfleet on its defaults beside scrapy-redis 0.9.1.

Each run gets a fresh redis-server and frontier_bench_site.py (421 pages, each linking to ten
children, its parent and the root, after LATENCY_MS). Two workers (frontier_bench_drill.py; for
scrapy-redis the peers' python) crawl it with one item per page; once the victim has parsed
KILL_AFTER pages it gets SIGKILL, and the survivor finishes the crawl (crawlfleet: the victim's
leases come back once its liveness subscription is gone and its last heartbeat is 1.5 intervals
old, SCHEDULER_LIVENESS) and closes by itself. From just before the workers
start to the survivor's exit: Redis CPU (``INFO`` used_cpu_sys + used_cpu_user delta) and Redis
commands (``INFO commandstats`` calls delta, commands inside Lua scripts included, the bench's
own ``INFO`` excluded), each ÷ pages crawled (every page parsed by either worker, re-crawls
included); pages lost (never parsed by either) are reported too. An idle redis-server spends CPU
too (its timers, ``hz 10``), so a drill that lasts longer costs more per page with no more work:
the idle rate is sampled on the fresh server for IDLE_SAMPLE seconds before each run, and the CPU
per page is also given net of it (elapsed times the idle rate subtracted). crawlfleet's default
Bloom dupefilter (scalable, ``BLOOMFILTER_CAPACITY`` 100,000,000 at 0.001) allocates its first
layer when a crawl starts; that one-off cost is measured alone on a fresh server, reported as its
own row, and also subtracted (what the pages themselves cost).
Each scheduler runs RUNS times, alternating; each run is one row, and the ratios are of medians.
A run whose victim exits before it parsed KILL_AFTER pages (scrapy-redis's victim closes after two
idle seconds when the survivor took the only start request) is no drill: it is run again. So is
a run whose survivor closed before crawling half the site (scrapy-redis's survivor can find the
queue empty while the victim's popped requests are gone with it): a few dozen pages at a high
cost each would move the median more than any change of ours. The rows say how many runs were
set aside that way.

Run alone: ``scripts/bench.sh --only drill`` (about 4 minutes; ``--quick``: one run each).
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchrow import Section
from support.net import free_port

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SECTION = "crash drill: Redis cost per page (issue 19)"
row = Section(SECTION).row
PAGES = 421
LATENCY_MS = 200
KILL_AFTER = 40
RUNS = 3
IDLE_SAMPLE = 2.0
CRAWLFLEET = "crawlfleet, defaults"
PEER = "scrapy-redis 0.9.1"


def _cost(server: Any) -> tuple[float, int]:
    """Redis CPU seconds so far and commands run (INFO itself excluded)."""
    client = server.client()
    cpu = client.info("cpu")
    stats = client.info("commandstats")
    client.close()
    calls = sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]), calls


def _lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


class NotGoing(RuntimeError):
    """The victim exited before parsing KILL_AFTER pages: no drill took place (retried)."""


class ClosedEarly(RuntimeError):
    """The survivor closed with less than half the site crawled: not comparable (retried)."""


# attempts per run: scrapy-redis's victim closes after MAX_IDLE_TIME_BEFORE_CLOSE when the
# survivor took the only start request and its children come late (a loaded machine)
ATTEMPTS = 3


def drill(ctx: Any, name: str, python: str, work: Path, run: int) -> dict[str, float]:
    """One drill: site, fresh Redis, two workers, SIGKILL of one; the costs and counts."""
    port = free_port()
    argv = [str(HERE / "frontier_bench_site.py"), str(port), str(PAGES), str(LATENCY_MS)]
    site = subprocess.Popen([sys.executable, *argv], stdout=subprocess.PIPE)
    server = ctx.start_redis()
    client = server.client()
    client.flushall()
    url = f"http://127.0.0.1:{port}"
    if name == PEER:
        client.lpush("drill:start_urls", url + "/p/0")
    client.close()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "project")}
    mode = "crawlfleet" if name == CRAWLFLEET else "scrapy-redis"
    procs, outs, logs = [], [], []
    try:
        assert site.stdout is not None and site.stdout.readline().strip() == b"ready"
        idle0, _ = _cost(server)
        time.sleep(IDLE_SAMPLE)  # the idle server's own CPU rate, before any worker runs
        cpu0, calls0 = _cost(server)
        idle_rate = (cpu0 - idle0) / IDLE_SAMPLE
        started = time.monotonic()
        for role in ("victim", "survivor"):
            out, log = work / f"{mode}-{run}-{role}.out", work / f"{mode}-{run}-{role}.log"
            out.unlink(missing_ok=True)
            with log.open("wb") as f:
                argv = [python, str(HERE / "frontier_bench_drill.py"), mode, url, server.url]
                procs.append(subprocess.Popen([*argv, str(out)], env=env, stderr=f, cwd=work))
            outs.append(out)
            logs.append(log)
        victim, survivor = procs
        while len(_lines(outs[0])) < KILL_AFTER:
            if victim.poll() is not None or time.monotonic() - started > 120:
                raise NotGoing(f"{name}: the victim did not get going: {logs[0]}")
            time.sleep(0.02)
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        if survivor.wait(timeout=300) != 0:
            raise RuntimeError(f"{name}: the survivor failed: {logs[1].read_text()[-2000:]}")
        elapsed = time.monotonic() - started
        cpu1, calls1 = _cost(server)
    finally:
        for proc in (*procs, site):
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        server.stop()
    parsed = _lines(outs[0]) + _lines(outs[1])
    if len(set(parsed)) < PAGES // 2:
        raise ClosedEarly(f"{name}: the survivor closed after {len(set(parsed))} of {PAGES} pages")
    return {
        "pages": len(parsed),
        "lost": PAGES - len(set(parsed)),
        "cpu": cpu1 - cpu0,
        "net": cpu1 - cpu0 - idle_rate * elapsed,
        "calls": calls1 - calls0,
        "elapsed": elapsed,
    }


def bloom_creation(ctx: Any) -> float:
    """Redis CPU seconds to create a crawl's default Bloom filter and add one fingerprint."""
    from scrapy.settings import Settings

    from crawlfleet.frontier.bloom import BloomFilter
    from crawlfleet.frontier.bloomlayout import layout_from_settings

    server = ctx.start_redis()
    client = server.client()
    client.flushall()
    layout = layout_from_settings(Settings({"REDIS_URL": server.url}), "drill")
    before, _ = _cost(server)
    BloomFilter(client, layout.key, layout=layout).add(b"0" * 20)
    after, _ = _cost(server)
    client.close()
    server.stop()
    return after - before


def run(ctx: Any) -> list[dict[str, Any]]:
    runs = 1 if ctx.quick else RUNS
    work = Path(ctx.workdir) / "drill"
    work.mkdir(parents=True, exist_ok=True)
    pythons = {CRAWLFLEET: sys.executable, PEER: str(ctx.peer_python)}
    results: dict[str, list[dict[str, float]]] = {CRAWLFLEET: [], PEER: []}
    early = {CRAWLFLEET: 0, PEER: 0}  # runs set aside: the survivor closed early
    for i in range(runs):
        for name, python in pythons.items():
            for attempt in range(ATTEMPTS):
                try:
                    results[name].append(drill(ctx, name, python, work, i))
                    break
                except (NotGoing, ClosedEarly) as exc:
                    early[name] += isinstance(exc, ClosedEarly)
                    if attempt == ATTEMPTS - 1:
                        raise
    created = bloom_creation(ctx)
    for r in results[CRAWLFLEET]:
        r["work"] = r["net"] - created
    for r in results[PEER]:
        r["work"] = r["net"]
    rows: list[dict[str, Any]] = []
    for name, done in results.items():
        for i, r in enumerate(done, 1):
            note = (
                f"run {i} of {runs}: {int(r['pages'])} pages crawled, {int(r['lost'])} of "
                f"{PAGES} lost, {r['elapsed']:.1f} s"
            )
            rows += [
                row(name, "Redis CPU per crawled page", r["cpu"] / r["pages"] * 1e6, "µs", note),
                row(
                    name,
                    "Redis CPU per crawled page, net of idle Redis",
                    r["net"] / r["pages"] * 1e6,
                    "µs",
                    "the idle server's rate times the drill's elapsed time subtracted",
                ),
                row(
                    name,
                    "Redis CPU per crawled page, net of idle Redis and of the Bloom filter's "
                    "creation",
                    r["work"] / r["pages"] * 1e6,
                    "µs",
                    "what the crawl's pages cost, without the one-off filter allocation"
                    if name == CRAWLFLEET
                    else "as net of idle Redis (no Bloom filter)",
                ),
                row(name, "Redis commands per crawled page", r["calls"] / r["pages"], "commands"),
                row(name, "pages lost", r["lost"], "pages"),
            ]
    for metric, field in (
        ("Redis CPU per page ratio", "cpu"),
        ("net of idle ratio", "net"),
        ("net of idle and of the Bloom filter's creation ratio", "work"),
    ):
        ours = statistics.median(r[field] / r["pages"] for r in results[CRAWLFLEET])
        theirs = statistics.median(r[field] / r["pages"] for r in results[PEER])
        rows.append(
            row(
                f"{CRAWLFLEET} / {PEER}",
                metric,
                ours / theirs,
                "x",
                f"medians of {runs} runs each, alternating on one machine; set aside and run "
                f"again because the survivor closed before half the site: {early[CRAWLFLEET]} "
                f"of crawlfleet's, {early[PEER]} of scrapy-redis's; target <= 1.0, aim 0.5",
            )
        )
    rows.append(
        row(
            CRAWLFLEET,
            "Redis CPU to create the default Bloom filter",
            created * 1e3,
            "ms",
            f"once per crawl, inside the drill's figures: {created / PAGES * 1e6:.0f} µs of "
            f"each of {PAGES} pages",
        )
    )
    return rows
