"""The worker's RabbitMQ connection: pika's BlockingConnection, owned by one background thread.

Why a thread and not pika's Twisted adapter: the blocking adapter is pika's most used and tested
one, and a thread that owns the connection keeps every broker wait — connecting, publishing,
reconnecting with back-off — off the reactor. The reactor only appends commands to a list and
takes deliveries from a deque; it never waits on the broker (except, once, at start-up, to fail
early with a one-line error).

Publishes go through a channel in transaction mode: each turn of the thread publishes every
waiting message and commits them together (one round trip; the broker writes persistent messages
before it answers), and only then sends the acks that were waiting, on the consuming channel
(outside the transaction, so an ack costs no round trip). An ack queued after the publishes of the
requests its page produced therefore never reaches the broker before them. Publishes stay queued
until their commit succeeds; if the connection drops they are sent again on the next connection.
Acks of deliveries from a dropped connection are discarded: the broker has put those messages back.
"""

from __future__ import annotations

import contextlib
import itertools
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pika
import pika.exceptions
from pika.adapters.blocking_connection import BlockingChannel

from crawlfleet.frontier.config import FrontierConfigError

PRECONDITION_FAILED = 406
NOT_FOUND = 404
ACCESS_REFUSED = 403
_BATCH = 1000  # commands per transaction


class BrokerConfigError(FrontierConfigError):
    """A RabbitMQ URL, credential or queue declaration that cannot work (one line, no password)."""


@dataclass(frozen=True)
class Delivery:
    """One message handed to this worker: ack it (or not) on the connection it came from."""

    generation: int
    tag: int
    body: bytes
    priority: int
    redelivered: bool


@dataclass(frozen=True)
class QueueSpec:
    """What the queue is declared with; a different existing declaration is a config error."""

    name: str
    max_priority: int
    prefetch: int
    flush: bool = False  # SCHEDULER_FLUSH_ON_START: delete and re-declare (drops its messages)

    @property
    def arguments(self) -> dict[str, Any]:
        return {"x-max-priority": self.max_priority}


def mask_amqp(url: str) -> str:
    """``url`` with any password replaced by ``***`` (also in URLs that do not parse)."""
    return re.sub(r"(//[^:/@]*:)[^@/]*@", r"\1***@", url)


def parameters(url: str, connect_timeout: float) -> pika.URLParameters:
    """pika parameters from ``RABBITMQ_URL``; a bad URL is a one-line error."""
    if not url.startswith(("amqp://", "amqps://")):
        raise BrokerConfigError(
            f"RABBITMQ_URL must look like amqp://user:password@host:5672/vhost, "
            f"got {mask_amqp(url)!r}"
        )
    try:
        params = pika.URLParameters(url)
    except (ValueError, TypeError, AttributeError) as exc:
        raise BrokerConfigError(f"invalid RABBITMQ_URL {mask_amqp(url)!r}: {exc}") from None
    # One attempt per connect: the thread does its own retries with back-off.
    params.connection_attempts = 1
    params.socket_timeout = connect_timeout
    params.blocked_connection_timeout = max(connect_timeout, 30.0)
    return params


class BrokerClient:
    """Publish, consume, ack and count on one durable priority queue, from a background thread."""

    def __init__(
        self,
        url: str,
        spec: QueueSpec,
        *,
        consume: bool = True,
        connect_timeout: float = 10.0,
        reconnect_max: float = 30.0,
        count_interval: float = 0.2,
    ) -> None:
        self.url = url
        self.masked_url = mask_amqp(url)
        self.spec = spec
        self.consume = consume
        self.params = parameters(url, connect_timeout)
        self.connect_timeout = connect_timeout
        self.reconnect_max = reconnect_max
        self.count_interval = count_interval
        self.deliveries: deque[Delivery] = deque()
        # Connection number; a delivery can only be acked on the connection it came from.
        self.generation = 0
        self.connected = threading.Event()
        self.message_count = 0  # ready messages, as of the last look (every count_interval)
        self.consumers = 0
        self.confirmed = 0  # sequence number of the last committed publish
        self.error: str | None = None  # the last connection problem, for logs
        self.fatal: BrokerConfigError | None = None
        self._commands: deque[tuple[Any, ...]] = deque()
        self._lock = threading.Lock()
        self._seq = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_count = 0.0
        self._count_waiters: list[threading.Event] = []
        self._flushed = False
        self._connection: pika.BlockingConnection | None = None
        self._woken = False
        self._consumer: BlockingChannel | None = None

    # -- called from the reactor thread -----------------------------------------------------

    def start(self, wait: bool = True) -> None:
        """Start the thread; with ``wait``, block until connected or raise a one-line error."""
        self._thread = threading.Thread(target=self._run, name="rabbitmq", daemon=True)
        self._thread.start()
        if not wait:
            return
        deadline = time.monotonic() + self.connect_timeout
        while time.monotonic() < deadline and not self.connected.is_set() and not self.fatal:
            self.connected.wait(0.05)
        if self.fatal:
            raise self.fatal
        if not self.connected.is_set():
            self.stop()
            raise BrokerConfigError(
                f"cannot reach RabbitMQ at {self.masked_url} (RABBITMQ_URL): {self.error}"
            )

    def publish(self, body: bytes, priority: int) -> int:
        """Queue a persistent message; returns its sequence number (committed when ``confirmed``
        reaches it)."""
        with self._lock:
            self._seq += 1
            self._commands.append(("publish", self._seq, body, priority))
            seq = self._seq
        self._wake()
        return seq

    def ack(self, delivery: Delivery) -> None:
        with self._lock:
            self._commands.append(("ack", delivery.generation, delivery.tag))
        self._wake()

    def nack(self, delivery: Delivery) -> None:
        """Give a delivery back now (the broker redelivers it, maybe to another worker)."""
        with self._lock:
            self._commands.append(("nack", delivery.generation, delivery.tag))
        self._wake()

    def _wake(self) -> None:
        """Interrupt the thread's wait for broker frames, so a new command goes out at once."""
        connection = self._connection
        if connection is None or self._woken:
            return
        self._woken = True
        # A connection closing meanwhile is fine: the thread reconnects and sees the command.
        with contextlib.suppress(pika.exceptions.AMQPError, OSError, RuntimeError):
            connection.add_callback_threadsafe(_nothing)

    def pending(self) -> int:
        """Commands not committed yet."""
        with self._lock:
            return len(self._commands)

    def published_all(self) -> bool:
        return self.confirmed >= self._seq

    def count(self, timeout: float) -> int:
        """A fresh count of ready messages (one broker round trip, waited for up to ``timeout``)."""
        event = threading.Event()
        with self._lock:
            self._count_waiters.append(event)
        if not event.wait(timeout):
            raise BrokerConfigError(
                f"RabbitMQ at {self.masked_url} did not answer within {timeout:g}s: {self.error}"
            )
        return self.message_count

    def purge(self, timeout: float) -> None:
        done = threading.Event()
        with self._lock:
            self._commands.append(("purge", done))
        self._wake()
        if not done.wait(timeout):
            raise BrokerConfigError(f"RabbitMQ at {self.masked_url}: purge timed out")

    def stop(self, timeout: float = 10.0) -> None:
        """Commit what is queued (waiting up to ``timeout``), then close the connection."""
        deadline = time.monotonic() + timeout
        while self.pending() and self.connected.is_set() and time.monotonic() < deadline:
            time.sleep(0.02)
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=max(1.0, deadline - time.monotonic()))

    # -- the thread -------------------------------------------------------------------------

    def _run(self) -> None:
        delay = 0.5
        while not self._stop.is_set():
            connection: pika.BlockingConnection | None = None
            try:
                connection = pika.BlockingConnection(self.params)
                channel = self._setup(connection)
                self.error = None
                delay = 0.5
                self._connection = connection
                self.connected.set()
                self._loop(connection, channel)
            except BrokerConfigError as exc:
                self.fatal = exc
                self._stop.set()
            except pika.exceptions.ProbableAuthenticationError:
                self.fatal = BrokerConfigError(
                    f"RabbitMQ at {self.masked_url} refused the user or password (RABBITMQ_URL)"
                )
            except pika.exceptions.ProbableAccessDeniedError:
                self.fatal = BrokerConfigError(
                    f"RabbitMQ at {self.masked_url} refused access to the vhost (RABBITMQ_URL)"
                )
            except (pika.exceptions.AMQPError, OSError) as exc:
                self.error = f"{type(exc).__name__}: {exc}".splitlines()[0][:300] or repr(exc)
            finally:
                self._connection = None
                self.connected.clear()
                self.generation += 1  # deliveries of the old connection cannot be acked any more
                if connection is not None and connection.is_open:
                    with contextlib.suppress(pika.exceptions.AMQPError, OSError):
                        connection.close()
            if self.fatal is not None:
                self._stop.set()
                break
            if not self._stop.is_set():
                # back-off in this thread; the reactor keeps running meanwhile
                self._stop.wait(delay)
                delay = min(delay * 2, self.reconnect_max)

    def _setup(self, connection: pika.BlockingConnection) -> BlockingChannel:
        channel = connection.channel()
        spec = self.spec
        if spec.flush and not self._flushed:
            channel.queue_delete(spec.name)
            self._flushed = True
        try:
            result = channel.queue_declare(spec.name, durable=True, arguments=spec.arguments)
        except pika.exceptions.ChannelClosedByBroker as exc:
            if exc.reply_code == PRECONDITION_FAILED:
                raise BrokerConfigError(
                    f"RabbitMQ queue {spec.name!r} exists with another declaration "
                    f"({exc.reply_text}); delete it (rabbitmqctl delete_queue --vhost "
                    f"{self.params.virtual_host!r} {spec.name!r}) or "
                    f"set SCHEDULER_FLUSH_ON_START = True to re-declare it (its messages are lost)"
                ) from None
            if exc.reply_code == ACCESS_REFUSED:
                raise BrokerConfigError(
                    f"RabbitMQ at {self.masked_url} refused to declare queue {spec.name!r}: "
                    f"{exc.reply_text}"
                ) from None
            raise
        self.message_count = int(result.method.message_count)
        self.consumers = int(result.method.consumer_count)
        channel.tx_select()
        if self.consume:
            # A second channel, outside the transaction: acks need no commit round trip.
            consumer = connection.channel()
            consumer.basic_qos(prefetch_count=spec.prefetch)
            consumer.basic_consume(spec.name, self._on_message(self.generation), auto_ack=False)
            self._consumer = consumer
        return channel

    def _on_message(self, generation: int) -> Callable[..., None]:
        def on_message(
            channel: BlockingChannel,
            method: Any,
            properties: pika.BasicProperties,
            body: bytes,
        ) -> None:
            self.deliveries.append(
                Delivery(
                    generation,
                    int(method.delivery_tag),
                    bytes(body),
                    int(properties.priority or 0),
                    bool(method.redelivered),
                )
            )

        return on_message

    def _loop(self, connection: pika.BlockingConnection, channel: BlockingChannel) -> None:
        persistent = pika.DeliveryMode.Persistent
        while not self._stop.is_set():
            connection.process_data_events(time_limit=0 if self._commands else 0.05)
            self._woken = False
            with self._lock:
                # bounded, so one commit never holds the connection for long
                batch = list(itertools.islice(self._commands, _BATCH))
            last_seq = 0
            if batch:
                # Publishes first, committed together; acks after that commit, so a request's
                # ack never reaches the broker before the requests its page produced.
                for command in batch:
                    if command[0] == "publish":
                        _, seq, body, priority = command
                        channel.basic_publish(
                            "",
                            self.spec.name,
                            body,
                            pika.BasicProperties(delivery_mode=persistent, priority=priority),
                        )
                        last_seq = seq
                    elif command[0] == "purge":
                        channel.queue_purge(self.spec.name)
                if last_seq:
                    channel.tx_commit()
                    self.confirmed = last_seq
                # Done with: a lost connection from here on loses only acks, and the broker puts
                # those messages back itself.
                with self._lock:
                    for _ in batch:
                        self._commands.popleft()
                for command in batch:
                    if command[0] == "purge":
                        command[1].set()
                    elif command[0] in ("ack", "nack") and command[1] == self.generation:
                        assert self._consumer is not None
                        if command[0] == "ack":
                            self._consumer.basic_ack(command[2])
                        else:
                            self._consumer.basic_nack(command[2], requeue=True)
            now = time.monotonic()
            if self._count_waiters or now - self._last_count >= self.count_interval:
                with self._lock:
                    waiters = list(self._count_waiters)
                result = channel.queue_declare(self.spec.name, durable=True, passive=True)
                self.message_count = int(result.method.message_count)
                self.consumers = int(result.method.consumer_count)
                self._last_count = now
                with self._lock:
                    del self._count_waiters[: len(waiters)]
                for event in waiters:
                    event.set()


def _nothing() -> None:
    """Scheduled on the connection only to wake its thread."""
