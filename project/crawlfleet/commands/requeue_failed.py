"""`crawlfleet requeue-failed SPIDER`: put requests that failed for good back into the queue.

Workers move a request whose download finally failed to ``SPIDER:failed`` (JSON lines with the
reason and the serialized request). This command pushes those requests back into the crawl's
queue, bypassing the dupefilter (their fingerprints are already recorded), in chunks; each chunk
is taken off the failed list and pushed in one atomic step, so nothing is lost or doubled if the
command is interrupted. The queue key and class (and the site kind a keyed queue files requests
under) come from ``SPIDER:frontier``, which every worker writes at start-up. Entries that cannot
be used (whatever is wrong with them: bad JSON, a payload nested too deep, an out-of-range
priority) go to ``SPIDER:deadletter`` with the reason, so one bad entry never blocks the list.
"""

from __future__ import annotations

import argparse
import base64
import os
from typing import Any

from redis.crc import key_slot
from scrapy.utils.misc import load_object

from crawlfleet.commands.opsargs import check_spider, non_negative_int, run_guarded
from crawlfleet.frontier import scripts
from crawlfleet.frontier.leases import dead_entry
from crawlfleet.frontier.queues import RedisQueue
from crawlfleet.frontier.serialization import loads, one_line, parse_json, priority_problem
from crawlfleet.frontier.shards import crawl_shards
from crawlfleet.hub.connect import check_connection, get_redis
from crawlfleet.hub.keys import SpiderKeys

CHUNK = 500
WORKER = "requeue-failed"


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "requeue-failed", help="put a spider's finally-failed requests back into its queue"
    )
    p.add_argument("spider", help="spider name (reads SPIDER:failed)")
    p.add_argument(
        "--limit", type=non_negative_int, default=0, help="requeue at most this many (0 = all)"
    )
    p.add_argument("--queue-key", help="queue key (default: what the workers recorded)")
    p.add_argument("--queue-class", help="queue class path (default: what the workers recorded)")
    p.add_argument(
        "--redis-url", default=os.environ.get("REDIS_URL", ""), help="hub Redis URL (env REDIS_URL)"
    )
    p.set_defaults(run=run)


def _queue(client: Any, args: argparse.Namespace) -> RedisQueue:
    names = SpiderKeys.for_client(args.spider, client)
    frontier = names.frontier
    meta = {k.decode(): v.decode() for k, v in client.hgetall(frontier).items()}
    key = args.queue_key or meta.get("queue_key")
    path = args.queue_class or meta.get("queue_class")
    if not key or not path:
        raise ValueError(
            f"no frontier metadata at {frontier} (has a worker of {args.spider!r} "
            f"run against this Redis?); pass --queue-key and --queue-class"
        )
    if names.tagged and key_slot(key.encode()) != key_slot(names.prefix.encode()):
        raise ValueError(
            f"--queue-key {key!r} is outside the crawl's hash slot: on a Redis Cluster the "
            f"queue carries the tag {names.prefix} (as {names.requests!r} does)"
        )
    try:
        cls = load_object(path)
    except (ImportError, AttributeError, ValueError, NameError) as exc:
        raise ValueError(f"--queue-class: cannot load {path!r}: {exc}") from None
    if not (isinstance(cls, type) and issubclass(cls, RedisQueue)):
        raise ValueError(f"--queue-class {path!r} is not a crawlfleet queue class")
    queue = cls(client, key, meta.get("politeness_key") or "host")
    problem = queue.type_error()
    if problem:
        raise ValueError(problem)
    return queue


def _entry(raw: bytes | str, queue: RedisQueue) -> list[Any]:
    """(raw, payload, priority, site) for a usable entry, (raw, '', dead-letter JSON, '')
    otherwise."""
    try:
        entry = parse_json(raw)
        if not isinstance(entry, dict):
            raise ValueError("not a JSON object")
        payload = base64.b64decode(entry["payload"], validate=True)
        request = loads(payload)
        site = queue.site(str(request.get("url") or ""))
        priority = entry.get("priority") or 0
        problem = priority_problem(priority)
        if problem:
            raise ValueError(f"'priority' {problem}")
    except Exception as exc:  # whatever is wrong, the entry must not block the list
        reason = f"unusable failed entry: {one_line(exc)}"
        data = raw.encode() if isinstance(raw, str) else raw
        return [raw, b"", dead_entry(data, reason, WORKER, "failed"), ""]
    return [raw, payload, str(priority), site]


def _requeue(
    client: Any, script: Any, queue: RedisQueue, names: SpiderKeys, limit: int
) -> list[int]:
    """Requeue one shard's failed list into its ``queue``: [pushed, dead] (at most ``limit``
    entries, 0 = all)."""
    keys = [queue.key, names.seq, names.start_urls]
    done = [0, 0]
    while True:
        size = CHUNK if not limit else min(CHUNK, limit - sum(done))
        if size <= 0:
            break
        raws = client.lrange(names.failed, 0, size - 1)
        if not raws:
            break
        argv: list[Any] = [names.prefix, WORKER, "0", "0", str(len(raws))]
        for raw in raws:
            argv.extend(_entry(raw, queue))
        result = script(keys=keys, args=argv)
        if result == -1:
            continue  # a worker appended meanwhile; read the head again
        done[0] += int(result[0])
        done[1] += int(result[1])
    return done


def _run(args: argparse.Namespace) -> int:
    check_spider(args.spider)
    client = get_redis(args.redis_url)
    check_connection(client, args.redis_url)
    queue = _queue(client, args)
    script = client.register_script(scripts.build(type(queue).LUA, "", scripts.REQUEUE_FAILED))
    pushed = dead = 0
    # a sharded crawl: each shard's failed requests go back into that shard's queue
    for shard in crawl_shards(client, args.spider):
        home = shard.keys.shard == 0
        into = queue if home else type(queue)(client, shard.queue_key, queue.site_kind)
        limit = args.limit - pushed - dead if args.limit else 0
        if args.limit and limit <= 0:
            break
        got = _requeue(client, script, into, shard.keys, limit)
        pushed, dead = pushed + got[0], dead + got[1]
    names = SpiderKeys.for_client(args.spider, client)
    print(
        f"requeued {pushed} failed request(s) of {args.spider} into {queue.key}"
        + (f"; {dead} unusable entr(ies) moved to {names.deadletter}" if dead else "")
    )
    return 0


def run(args: argparse.Namespace) -> int:
    return run_guarded("requeue-failed", _run, args)
