"""Hub throughput on 1 vs 3 shards, on a Redis Cluster whose every node is capped (issue 19).

A loopback Redis Cluster of three primaries (no replicas: ``SCHEDULER_WAIT_REPLICAS=0``) is
started with ``support.rediscluster``; each primary's process goes into its own cgroup v1 ``cpu``
group capped by CFS bandwidth at ``CAP`` of one core (``support.cpucap``), so that on this
two-core machine, shared with the clients, Redis is what saturates. bench_hub's simulated workers
(real ``Scheduler`` objects, no HTTP; its ``worker_main``, ``SimulatedWorker`` and
``measure_window``) crawl a synthetic site of ``HOSTS`` hosts on ``redis+cluster://``: page i of
host h links to pages 10i+1..10i+10, page c on host (h + c) mod HOSTS (links across hosts), to
its parent and to its host's first page (10 new links, 2 duplicates, as bench_hub's site), the
keyed queue (a priority queue per host) and the set dupefilter, politeness pacer off.

Runs with ``SCHEDULER_SHARDS`` 1 and 3 alternate on the same cluster (flushed in between), a few
each, after one run of each with the caps lifted (the clients' ceiling). Per run: pages/s, Redis
CPU and commands per page per node (``INFO`` used_cpu_sys + used_cpu_user and commandstats deltas
÷ all pages), each node's busy (CPU s ÷ wall s, at most the cap), the share of its CFS periods
the kernel throttled (the proof that the cap bites), the hosts and the share of pages each node
served (the window's pages per host, each host mapped to the primary holding its queue keys) and
the latency of ``next_request``. ``SCHEDULER_SHARDS`` is only run at 3 when
``crawlfleet.frontier.config`` knows that setting; otherwise the table says so.

Run alone: ``scripts/bench.sh --only shards``; ``bench_shards.py worker …`` is what the bench
runs in its subprocesses.
"""

from __future__ import annotations

import inspect
import os
import re
import shutil
import statistics
import sys
from collections import Counter
from typing import Any

import bench_hub
from benchrow import Section

SECTION = "hub shards on a CPU-capped Redis Cluster (issue 19)"
row = Section(SECTION).row
HOSTS = 30
# of one core, per primary: low enough that three capped primaries stay under what the clients
# can drive on this machine (the uncapped "client ceiling" run of the table shows it)
CAP = 0.03
WORKERS = 32
SHARDS = (1, 3)
KEYED = "crawlfleet.frontier.queues.KeyedPriorityQueue"
DOMAIN = "shards.test"
_HOST = re.compile(rf"h\d\d\.{re.escape(DOMAIN)}")


# -- the synthetic site and the workers (run in subprocesses) ----------------------------------


def url_of(host: int, page: int) -> str:
    return f"https://h{host:02d}.{DOMAIN}/p/{page}"


def site_links(url: str) -> list[str]:
    """The links of the fake response of ``url``: 10 children across hosts, parent, host root."""
    _, _, netloc, path = url.split("/", 3)
    host, page = int(netloc[1:3]), int(path.rsplit("/", 1)[1])
    children = [url_of((host + c) % HOSTS, c) for c in range(10 * page + 1, 10 * page + 11)]
    parent = url_of((host - page) % HOSTS, (page - 1) // 10) if page else url_of(host, 0)
    return [*children, parent, url_of(host, 0)]


def seeds() -> list[str]:
    return [url_of(h, 0) for h in range(HOSTS)]


def crawl_settings(shards: int) -> dict[str, Any]:
    return {
        "SCHEDULER_QUEUE_CLASS": KEYED,
        "SCHEDULER_WAIT_REPLICAS": 0,  # no replicas: WAIT would time out on every enqueue
        "SCHEDULER_SHARDS": shards,
    }


def shards_setting() -> bool:
    """Whether the frontier knows ``SCHEDULER_SHARDS`` (branch ``shards``)."""
    from crawlfleet.frontier import config

    return "SCHEDULER_SHARDS" in inspect.getsource(config)


# -- the bench (run by tests/bench/run.py) ----------------------------------------------------


def _primaries(group: Any) -> list[tuple[int, str]]:
    """The primaries' ports in slot order, each with its slot range(s)."""
    ranges: dict[int, list[str]] = {}
    reply = group.node_client(group.nodes[0].port).execute_command("CLUSTER", "SLOTS")
    for start, end, primary, *_ in sorted(reply, key=lambda r: r[0]):
        ranges.setdefault(int(primary[1]), []).append(f"{start}-{end}")
    return [(port, ",".join(r)) for port, r in ranges.items()]


def _host_nodes(group: Any, ports: list[int]) -> dict[str, int]:
    """Each crawled host's primary: the one whose keys name it (hosts on several: left out)."""
    seen: dict[str, set[int]] = {}
    for port in ports:
        for key in group.node_client(port).scan_iter(count=1000):
            for host in _HOST.findall(key.decode(errors="replace")):
                seen.setdefault(host, set()).add(port)
    return {host: next(iter(p)) for host, p in seen.items() if len(p) == 1}


def _run(
    group: Any, caps: dict[int, Any], shards: int, warmup: float, span: float
) -> dict[str, Any]:
    """One run of ``shards``; ``caps``: each primary's CPU cap, by port."""
    group.flush()
    nodes = _primaries(group)
    clients = [group.node_client(port) for port, _ in nodes]

    def probe() -> tuple[list[Any], list[dict[str, int]]]:
        return [bench_hub.snapshot(c) for c in clients], [caps[port].stat() for port, _ in nodes]

    procs = [
        bench_hub.spawn(
            sys.executable,
            [
                "worker",
                group.url(),
                str(WORKERS // bench_hub.PROCESSES),
                str(int(i == 0)),
                str(shards),
            ],
            __file__,
        )
        for i in range(bench_hub.PROCESSES)
    ]
    what = f"SCHEDULER_SHARDS={shards}"
    results, (snap0, stat0), (snap1, stat1) = bench_hub.measure_window(
        procs, probe, warmup, span, what
    )
    hosts = _host_nodes(group, [port for port, _ in nodes])
    for client in clients:
        client.close()
    pages = sum(r["pages"] for r in results)
    served: Counter[str] = Counter()
    for r in results:
        served.update(r["served"])
    wall = (snap1[0][2] - snap0[0][2]) / 1e9
    per_node = []
    for i, (port, slots) in enumerate(nodes):
        cpu, calls = snap1[i][0] - snap0[i][0], snap1[i][1] - snap0[i][1]
        periods = stat1[i]["nr_periods"] - stat0[i]["nr_periods"]
        throttled = stat1[i]["nr_throttled"] - stat0[i]["nr_throttled"]
        per_node.append(
            {
                "slots": slots,
                "cpu_us": cpu / pages * 1e6,
                "busy": cpu / wall,
                "throttled": throttled / periods if periods else 0.0,
                "commands": calls / pages,
                "hosts": sum(p == port for p in hosts.values()),
                "share": sum(n for h, n in served.items() if hosts.get(h) == port) / pages,
            }
        )
    p50, p99 = bench_hub.latency_ms(results)
    return {
        "pages": pages,
        "rate": pages / wall,
        "cpu_us": sum(n["cpu_us"] for n in per_node),
        "unmapped": sum(n for h, n in served.items() if h not in hosts) / pages,
        "nodes": per_node,
        "p50_ms": p50,
        "p99_ms": p99,
    }


def _med(runs: list[dict[str, Any]], get: Any) -> float:
    return statistics.median(get(r) for r in runs)


def _rows(shards: int, runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    scenario = f"SCHEDULER_SHARDS={shards}, {WORKERS} workers"
    rates = ", ".join(f"{r['rate']:.0f}" for r in runs)
    cpu = _med(runs, lambda r: r["cpu_us"])
    rows = [
        row(scenario, "pages/s", _med(runs, lambda r: r["rate"]), "pages/s", f"runs: {rates}"),
        row(scenario, "Redis CPU per page, all nodes", cpu, "µs", f"median of {len(runs)} runs"),
        row(scenario, "pages/s one full core serves", 1e6 / cpu, "pages/s", "1 s ÷ CPU per page"),
        row(scenario, "next_request p50", _med(runs, lambda r: r["p50_ms"]), "ms"),
        row(scenario, "next_request p99", _med(runs, lambda r: r["p99_ms"]), "ms"),
    ]
    unmapped = _med(runs, lambda r: r["unmapped"])
    if unmapped:
        rows.append(
            row(scenario, "pages of hosts on no single node", unmapped * 100, "%", "share unknown")
        )
    for i, node in enumerate(runs[0]["nodes"]):
        name = f"{scenario}, node {i + 1} (slots {node['slots']})"

        def med(field: str, i: int = i) -> float:
            return _med(runs, lambda r: r["nodes"][i][field])

        rows += [
            row(name, "hosts whose queue it holds", med("hosts"), "hosts"),
            row(name, "share of pages", med("share") * 100, "%", "pages of the hosts it holds"),
            row(name, "Redis CPU per page", med("cpu_us"), "µs", "÷ all pages of the run"),
            row(name, "Redis commands per page", med("commands"), "commands", "inside Lua too"),
            row(name, "Redis busy", med("busy"), "cores", f"cap {CAP:g}"),
            row(name, "CFS periods throttled", med("throttled") * 100, "%", "cpu.stat"),
        ]
    return rows


def run(ctx: Any) -> list[dict[str, Any]]:
    from support.cpucap import cpu_cap
    from support.rediscluster import start_redis_cluster

    # a long warm-up: a worker pops a batch every few seconds at these rates, and its pops only
    # take turns over the shards after several of them (the first pops all start at shard 0)
    warmup, span, repeats = (15.0, 6.0, 1) if ctx.quick else (20.0, 10.0, 3)
    shards = SHARDS if shards_setting() else (1,)
    workdir = ctx.workdir / "shards-cluster"
    shutil.rmtree(workdir, ignore_errors=True)
    group = start_redis_cluster(workdir, replicas=0)
    caps: dict[int, Any] = {}
    try:
        for i, node in enumerate(group.nodes):
            caps[node.port] = cpu_cap(f"crawlfleet-bench-node{i}", CAP)
            caps[node.port].add(node.process.pid)
        for i in range(len(caps)):  # the client ceiling: one run each with the caps lifted
            cpu_cap(f"crawlfleet-bench-node{i}", os.cpu_count() or 1)
        ceilings = {n: _run(group, caps, n, warmup, span) for n in shards}
        print(f"   client ceiling, uncapped: {ceilings}", flush=True)
        for i in range(len(caps)):
            cpu_cap(f"crawlfleet-bench-node{i}", CAP)
        runs: dict[int, list[dict[str, Any]]] = {n: [] for n in shards}
        for _ in range(repeats):
            for n in shards:  # side by side: the settings alternate
                r = _run(group, caps, n, warmup, span)
                print(f"   SCHEDULER_SHARDS={n}: {r}", flush=True)
                runs[n].append(r)
    finally:
        group.stop()
        for cap in caps.values():
            cap.remove()
    rows = [
        row(
            "cluster",
            "CPU cap per primary",
            CAP,
            "cores",
            f"{next(iter(caps.values())).describe()}; 3 primaries, no replicas, {HOSTS} hosts, "
            f"{bench_hub.PROCESSES} processes of threads, {span:g} s window after {warmup:g} s",
        )
    ]
    for n, ceiling in ceilings.items():
        scenario = f"client ceiling: SCHEDULER_SHARDS={n}, caps lifted"
        busiest = max(node["busy"] for node in ceiling["nodes"])
        rows += [
            row(scenario, "pages/s", ceiling["rate"], "pages/s", "the clients' limit, one run"),
            row(scenario, "Redis busy, busiest node", busiest, "cores", "well under 1 core"),
        ]
    for n in shards:
        rows += _rows(n, runs[n])
    if 3 in runs:
        pairs = [b["rate"] / a["rate"] for a, b in zip(runs[1], runs[3], strict=True)]
        rows.append(
            row(
                "3 shards ÷ 1 shard",
                "pages/s ratio",
                statistics.median(pairs),
                "times",
                "pairs run side by side: " + ", ".join(f"{p:.2f}" for p in pairs),
            )
        )
    else:
        print("   SCHEDULER_SHARDS is not a frontier setting here: 3 shards not run", flush=True)
        rows.append(
            row(
                "SCHEDULER_SHARDS=3",
                "not run",
                0,
                "",
                "crawlfleet.frontier.config has no SCHEDULER_SHARDS (branch shards not merged)",
            )
        )
    return rows


if __name__ == "__main__":
    if sys.argv[1] != "worker":
        raise SystemExit(f"usage: {sys.argv[0]} worker URL THREADS SEED SHARDS")
    started = seeds() if sys.argv[4] == "1" else []
    bench_hub.worker_main(
        "crawlfleet",
        sys.argv[2],
        int(sys.argv[3]),
        started,
        site_links,
        crawl_settings(int(sys.argv[5])),
    )
