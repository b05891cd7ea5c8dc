"""RabbitMQ vs Redis as the frontier's queue: enqueue and pop throughput, side by side.

Both drive ``crawlfleet.frontier.scheduler.Scheduler`` directly in a subprocess
(``rabbitmq_bench_ops.py``) with the Redis ``SetDupeFilter``, on a fresh redis-server and a fresh
rabbitmq-server on loopback: N new requests are enqueued (duplicate check and, for RabbitMQ, the
publish committed by the broker), then all are popped and acknowledged. Pops include the
acknowledgement of the previous request (a lease for Redis, a manual ack for RabbitMQ).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from rabbitmq_server import start_rabbitmq

HERE = Path(__file__).resolve().parent

SECTION = "rabbitmq queue"
NAMES = {
    "redis": "crawlfleet PriorityQueue (Redis)",
    "rabbitmq": "crawlfleet rabbitmq.PriorityQueue",
}


def run(ctx: Any) -> list[dict[str, Any]]:
    n = 2_000 if ctx.quick else 20_000
    redis_server = ctx.start_redis()
    broker = start_rabbitmq(ctx.workdir / "rabbitmq")
    rows: list[dict[str, Any]] = []
    try:
        for mode in ("redis", "rabbitmq"):
            out = subprocess.run(
                [
                    sys.executable,
                    str(HERE / "rabbitmq_bench_ops.py"),
                    mode,
                    str(n),
                    redis_server.url,
                    broker.url,
                ],
                capture_output=True,
                text=True,
                timeout=300,
                check=True,
            )
            result = json.loads(out.stdout.strip().splitlines()[-1])
            note = f"{n} requests, SetDupeFilter on Redis, one process, loopback"
            for metric in ("enqueue_per_s", "pop_per_s"):
                rows.append(
                    {
                        "section": SECTION,
                        "scenario": NAMES[mode],
                        "metric": metric.replace("_per_s", " requests/s"),
                        "value": round(float(result[metric]), 1),
                        "unit": "req/s",
                        "note": note
                        if result["popped"] == n
                        else f"{note}; popped {result['popped']}",
                    }
                )
    finally:
        broker.close()
    return rows
