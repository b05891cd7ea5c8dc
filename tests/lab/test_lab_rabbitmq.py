"""The RabbitMQ backend on the lab (`make lab-rabbitmq`, not part of `make test`): site.yml with
crawler_queue_backend=rabbitmq converges and a second run changes nothing; the workers get
RABBITMQ_URL and reach the broker with it, only with the right password (guest is gone); AMQP is
open to the workers and closed to other lab hosts; converging back to Redis puts the lab back."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from labhosts import Lab, changed_tasks, recap, run
from labroles import HUB, OUTSIDER, WORKER, host_python, lab_secret, tcp_probe

# Three converges of the whole lab (the first installs rabbitmq-server), after the lab's own
# bring-up when this test runs first in its session.
pytestmark = [pytest.mark.lab, pytest.mark.rabbitmq, pytest.mark.timeout(3000)]

AMQP = 5672
# epmd and the Erlang distribution port serve rabbitmqctl on the hub only.
ERLANG_PORTS = [4369, 25672]
BACKEND_ENV = ["SCHEDULER_QUEUE_CLASS", "RABBITMQ_URL"]


def converge(
    backend: str | None, timeout: float = 1200
) -> tuple[dict[str, dict[str, int]], list[str]]:
    """site.yml on the whole lab (backend None: the inventory's, redis); fails on any error.
    The recap's counts and the tasks that changed."""
    extra = ["-e", f"crawler_queue_backend={backend}"] if backend else []
    proc = run(["ansible-playbook", "site.yml", "-i", "inventory", *extra], timeout=timeout)
    counts = recap(proc.stdout)
    assert counts, proc.stdout[-3000:]
    for host, count in counts.items():
        assert (count["failed"], count["unreachable"]) == (0, 0), (host, count)
    return counts, changed_tasks(proc.stdout)


@pytest.fixture
def rabbitmq_lab(lab: Lab) -> Iterator[Lab]:
    """The lab, converged back to the default backend (Redis) afterwards, whatever happened."""
    try:
        yield lab
    finally:
        start = time.monotonic()
        converge(None)
        lab.timings["rabbitmq_converge_back_s"] = time.monotonic() - start
        env = f"import json, os; print(json.dumps([n for n in {BACKEND_ENV!r} if n in os.environ]))"
        assert host_python(lab, WORKER, env, worker_env=True) == []
        # The broker stays installed, but the firewall closes AMQP again.
        assert tcp_probe(lab, WORKER, lab.hosts[HUB], [AMQP])[AMQP] != "open"


PROBE = """
import json, os
from urllib.parse import urlsplit
import pika
import pika.exceptions

url = os.environ["RABBITMQ_URL"]
parts = urlsplit(url)


def attempt(target):
    params = pika.URLParameters(target)
    params.connection_attempts = 1
    params.socket_timeout = 5
    try:
        connection = pika.BlockingConnection(params)
    except pika.exceptions.ProbableAuthenticationError:
        return "refused"
    except (pika.exceptions.AMQPError, OSError) as exc:
        return type(exc).__name__
    try:
        channel = connection.channel()
        queue = channel.queue_declare(queue="", exclusive=True).method.queue
        channel.basic_publish("", queue, b"lab-probe")
        _, _, body = channel.basic_get(queue, auto_ack=True)
        return "ok" if body == b"lab-probe" else f"got {body!r}"
    finally:
        connection.close()


print(json.dumps({
    "queue_class": os.environ.get("SCHEDULER_QUEUE_CLASS"),
    "host": parts.hostname,
    "port": parts.port,
    "user": parts.username,
    "vhost": parts.path,
    "right": attempt(url),
    "wrong": attempt(url.replace(f":{parts.password}@", ":not-the-password-0123@")),
    "guest": attempt(f"amqp://guest:guest@{parts.hostname}:{parts.port}/%2F"),
}))
"""


def test_the_lab_converges_on_rabbitmq_and_back(rabbitmq_lab: Lab) -> None:
    lab = rabbitmq_lab
    start = time.monotonic()
    converge("rabbitmq")
    lab.timings["rabbitmq_converge_s"] = time.monotonic() - start

    start = time.monotonic()
    counts, changed = converge("rabbitmq")
    lab.timings["rabbitmq_rerun_s"] = time.monotonic() - start
    assert set(counts) == set(lab.hosts)
    assert {host: count["changed"] for host, count in counts.items()} == dict.fromkeys(counts, 0), (
        changed
    )

    result = host_python(lab, WORKER, PROBE, worker_env=True)
    assert result["queue_class"] == "crawlfleet.frontier.rabbitmq.PriorityQueue"
    assert (result["host"], result["port"]) == (lab.hosts[HUB], AMQP)
    assert (result["user"], result["vhost"]) == ("crawlfleet", "/crawlfleet")
    assert result["right"] == "ok", result
    assert result["wrong"] == "refused", result
    assert result["guest"] == "refused", result
    assert lab_secret("vault_rabbitmq_password") not in str(result)

    # guest is deleted, not only kept to loopback (the configuration does that too)
    users = lab.ssh(HUB, "sudo rabbitmqctl --quiet list_users").stdout.split()
    assert "crawlfleet" in users and "guest" not in users, users

    hub = lab.hosts[HUB]
    from_worker = tcp_probe(lab, WORKER, hub, [AMQP, *ERLANG_PORTS])
    assert from_worker[AMQP] == "open", from_worker
    assert all(from_worker[port] != "open" for port in ERLANG_PORTS), from_worker
    assert tcp_probe(lab, OUTSIDER, hub, [AMQP]) == {AMQP: "timeout"}
