"""The Redis side of a RabbitMQ crawl: duplicate check + outbox, worker registry, seeding, pause.

RabbitMQ holds the queue, Redis keeps the duplicate filter. The duplicate check is a Redis round
trip of its own before the publish, so a worker that died between the two would have recorded a
fingerprint whose request never reached the queue. The ENQUEUE script therefore records each new
request in the worker's outbox (``<spider>:rabbitmq:outbox:<worker>``) in the same atomic step as
the check; the entry is removed once the broker committed the publish. When a worker stops
heartbeating, the next worker to sync moves its outbox into its own and publishes it again.

Keys: ``<spider>:rabbitmq:workers`` (sorted set: worker → deadline, Redis ms),
``<spider>:rabbitmq:busy`` (hash: worker → messages it holds), the outboxes, and the frontier's
own ``<spider>:seeding``, ``<spider>:paused``, ``<spider>:failed``, ``<spider>:deadletter``.
"""

from __future__ import annotations

from crawlfleet.frontier.scripts import KEY_NAMES, lua
from crawlfleet.hub.clock import NOW_MS

# Lua parts in crawlfleet/frontier/lua/rabbitmq_*.lua; the key names and clock are the frontier's.
PRELUDE = "\n".join((KEY_NAMES, lua("rabbitmq_prelude.lua")))

ENQUEUE = lua("rabbitmq_enqueue.lua")

SYNC = lua("rabbitmq_sync.lua")


def build(dupefilter_lua: str, body: str) -> str:
    """One script: prelude, clock, dupefilter function, body."""
    return "\n".join((PRELUDE, NOW_MS, dupefilter_lua, body))
