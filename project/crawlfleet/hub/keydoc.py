"""The documented table of the hub's keys: docs/reference/redis-keys.md is generated from it.

``KEYS`` lists every key of a crawl (:class:`crawlfleet.hub.keys.SpiderKeys`), ``JOB_KEYS``
every key of the fleet's own (:class:`crawlfleet.hub.fleetkeys.JobKeys`), in the order the page
shows them; scripts/gendocs.py writes the tables and lint fails when the page drifts.
"""

from __future__ import annotations

from dataclasses import dataclass

from crawlfleet.hub.fleetkeys import JobKeys
from crawlfleet.hub.keys import (
    BLOOMFILTER_KEY,
    DUPEFILTER_KEY,
    ITEMS_KEY,
    QUEUE_KEY,
    START_URLS_KEY,
    KeySetting,
    SpiderKeys,
)


@dataclass(frozen=True)
class KeyDoc:
    """One documented key: where :class:`SpiderKeys` builds it, its type, who writes it, what."""

    attribute: str  # SpiderKeys attribute (a method when the key names a worker)
    kind: str
    writer: str
    meaning: str
    setting: KeySetting | None = None
    placeholder: str = "<worker>"  # what the method's argument is called in the docs
    fleet: bool = False  # a key of JobKeys, not of one crawl

    def pattern(self) -> str:
        """The key with placeholders: ``<spider>:leases:<worker>``."""
        keys: object = JobKeys() if self.fleet else SpiderKeys("<spider>")
        value = getattr(keys, self.attribute)
        return value(self.placeholder) if callable(value) else str(value)


#: Every key of a crawl, in the order of docs/reference/redis-keys.md.
KEYS: tuple[KeyDoc, ...] = (
    KeyDoc(
        "requests",
        "list / sorted set / hash",
        "workers",
        "the queue; priority members are a 16-hex-digit sequence number + the payload, "
        "score `-priority`. `KeyedPriorityQueue` (the default with politeness on): a hash "
        "(`len`: entries queued), `<key>:ready` (sorted set: every site with entries queued, "
        "scored by `<spider>:seq` when it was last served or came in, 0 for requeued ones) and "
        "`<key>:site:<site>` (sorted set: that politeness key's entries, as `PriorityQueue` "
        "keeps them)",
        QUEUE_KEY,
    ),
    KeyDoc(
        "dupefilter",
        "set",
        "workers",
        "hex request fingerprints (`SetDupeFilter`)",
        DUPEFILTER_KEY,
    ),
    KeyDoc(
        "bloomfilter",
        "string",
        "workers",
        "Bloom filter bits (`BloomDupeFilter`); parameters in `<key>:meta`; a scalable filter's "
        "later layers in `<key>:1`, `<key>:2`, …; a fixed filter over 2^32 bits split into "
        "blocks `{<key>:0}`, `{<key>:1}`, …",
        BLOOMFILTER_KEY,
    ),
    KeyDoc(
        "start_urls",
        "list / set",
        "`crawlfleet seed`, anyone",
        "start URLs waiting to be consumed",
        START_URLS_KEY,
    ),
    KeyDoc("workers", "sorted set", "workers", "worker id → lease deadline"),
    KeyDoc(
        "leases",
        "hash",
        "workers",
        "lease id → queue entry, for every request the worker holds",
    ),
    KeyDoc(
        "worker",
        "hash",
        "workers",
        "`info` (JSON: host, pid, spider), `started`, `heartbeat`, `leases`, `stopped`; "
        "`alive_ms`, `alive_sharded`, `alive_since` (its liveness subscription: the bound, "
        "sharded or not, held since); `waiting`, `waiting_since` (what it waits for and why, "
        "from when: `crawlfleet status`); expires 24 h after the last heartbeat",
    ),
    KeyDoc(
        "stats",
        "hash",
        "workers",
        "cluster totals: `scheduler/enqueued`, `scheduler/dequeued`, `scheduler/acked`, "
        "`scheduler/requeued`, `scheduler/failed`, `scheduler/deadletter`, "
        "`scheduler/requeued_failed`, `dupefilter/filtered`",
    ),
    KeyDoc(
        "worker_stats",
        "hash",
        "workers",
        "the same counters for one worker (expires 24 h after its last heartbeat)",
    ),
    KeyDoc(
        "alive",
        "pub/sub channel",
        "workers",
        "not a key: each live worker holds a subscription to it on a connection of its own "
        "(sharded, `SSUBSCRIBE`, on a Redis Cluster); a registered worker with no subscriber "
        "and no heartbeat for 1.5 heartbeat intervals is dead, and its leases are returned "
        "(`SCHEDULER_LIVENESS`)",
    ),
    KeyDoc(
        "seeding",
        "string",
        "workers",
        "id of the worker running the start requests, while it does",
    ),
    KeyDoc(
        "seeded",
        "string",
        "workers",
        "id of the worker that ran the start requests to their end: no worker runs them again "
        "until a worker finishes the crawl (closes it as `finished`), `SCHEDULER_FLUSH_ON_START` "
        "or `crawlfleet purge`",
    ),
    KeyDoc(
        "paused",
        "string",
        "`crawlfleet pause`",
        "JSON `by`, `time`; present = paused (the workers hand out nothing)",
    ),
    KeyDoc(
        "failed",
        "list",
        "workers",
        "JSON: `reason`, `url`, `method`, `priority`, `payload` (base64 queue entry), `worker`, "
        "`time` (`crawlfleet requeue-failed` puts them back)",
    ),
    KeyDoc(
        "deadletter",
        "list",
        "workers, `crawlfleet requeue-failed`",
        "JSON: `reason`, `source` (`queue`, `enqueue`, `start_urls`, `failed`), `entry` (base64), "
        "`worker`, `time`",
    ),
    KeyDoc(
        "frontier",
        "hash",
        "workers",
        "`queue_key`, `queue_class`, `serializer`, `dupefilter_class`, `start_urls_key`, "
        "`start_urls_as_set`, `politeness_namespace` (`POLITENESS_NAMESPACE`: the politeness "
        "keys' prefix), `politeness_key` (`POLITENESS_KEY`: the site a keyed queue files a "
        "request under), and in a sharded crawl `shard_queue_keys` and `shard_dupefilter_keys` "
        "(JSON lists, every shard's, home shard first) (written at start; read by the CLI and "
        "the dashboard)",
    ),
    KeyDoc("seq", "string", "workers", "counter for lease ids and priority-queue order"),
    KeyDoc(
        "shard_count",
        "string",
        "workers",
        "`SCHEDULER_SHARDS` of the crawl (absent: 1), in the home shard; a worker with another "
        "count refuses to start. Shards 1, 2, … have every frontier key above (queue, "
        "dupefilter or Bloom filter, seq, workers, leases, worker, stats, failed, deadletter) "
        "under their own prefix `<spider>~<j>` (docs/design.md, Sharding a crawl); so a "
        "spider's name may not contain `~` (a worker refuses it in one line)",
    ),
    KeyDoc(
        "items",
        "stream",
        "`RedisItemsPipeline`",
        "scraped items: fields `id`, `item` (JSON); read by `crawlfleet export`",
        ITEMS_KEY,
    ),
    KeyDoc("total", "string", "the spider", "the number of items the spider announced"),
    KeyDoc(
        "rabbitmq_workers",
        "sorted set",
        "workers (RabbitMQ)",
        "worker id → heartbeat deadline",
    ),
    KeyDoc(
        "rabbitmq_busy",
        "hash",
        "workers (RabbitMQ)",
        "worker id → messages it holds",
    ),
    KeyDoc(
        "rabbitmq_outbox",
        "hash",
        "workers (RabbitMQ)",
        "outbox id → request recorded as new, until the broker committed its publish",
    ),
    KeyDoc(
        "ops_series",
        "list",
        "`WorkerStats`",
        '`"<ms> <pages> <items>"`, one per interval, capped to the history',
    ),
    KeyDoc(
        "ops_scrapy",
        "hash",
        "`WorkerStats`",
        "numeric Scrapy stats, replaced at every sample",
    ),
    KeyDoc(
        "ops_workers",
        "sorted set",
        "`WorkerStats`",
        "worker → time of its last sample (ms)",
    ),
    KeyDoc(
        "ops_queue",
        "list",
        "dashboard sampler",
        '`"<ms> <queued> <leased> <acked> <items>"`, one per `--sample-interval`, an hour kept',
    ),
    KeyDoc(
        "politeness",
        "hash",
        "workers (`crawlfleet.politeness`)",
        "the rate budget of one politeness key (`host`, or `host@proxy`; `<spider>` is "
        "`POLITENESS_NAMESPACE`): `tat` (ms, next free slot), `rate`, `cap` (robots.txt "
        "Crawl-delay), `cool` (ms, cool-down end), `window`, `oks`, `pok`, `pwin`, `bans`, "
        "`banned` (ms), and what it learned: `good` (highest clean rate), `bad` (ceiling), "
        "`probe` (ms), `gap` (ms), `lat`, `latn`, `base` (ms), `learned` (ms), `why` (code); "
        "expires `POLITENESS_MEMORY` (a week) after its last use; `crawlfleet purge` keeps "
        "every `<spider>:politeness:*` key (`crawlfleet politeness --reset` forgets them)",
        placeholder="<key>",
    ),
    KeyDoc(
        "politeness_index",
        "sorted set",
        "workers (`crawlfleet.politeness`)",
        "state hash (`<spider>:politeness:key:<key>`) → time of its last lease or ban (ms): "
        "the keys status and the dashboard will show; keys unused for `POLITENESS_MEMORY` are "
        "trimmed, and above `POLITENESS_MAX_KEYS` the least recently used go with their state",
    ),
    KeyDoc(
        "politeness_bans",
        "sorted set",
        "workers (`crawlfleet.politeness`)",
        "recent ban signals: `<n> <state hash>` (`n`: the key's ban count) → time (ms); "
        "kept ten minutes, at most 1000 entries: `status` counts each key's bans of the last "
        "five minutes from it",
    ),
    KeyDoc(
        "politeness_history",
        "list",
        "workers (`crawlfleet.politeness`)",
        "how the keys' rates moved: `<ms> <rate> <why> <key>` appended at each change (a "
        "learning window that moved the rate, a ban, a slow-down; `why` as the state hash's), "
        "the last 5000 kept: the dashboard's chart of each key's rate",
    ),
)


#: The keys of jobs, schedules and agents, in the order of docs/reference/redis-keys.md.
JOB_KEYS: tuple[KeyDoc, ...] = (
    KeyDoc(
        "job",
        "hash",
        "`crawlfleet job`, agents",
        "one job: `id`, `project`, `spider`, `args`, `settings` (JSON), `workers` (JSON list of "
        "agents), `state` (`pending`, `running`, `paused`, `stopping`, `finished`, `failed`), "
        "`by`, `schedule`, `created`, `started`, `ended` (Redis ms), `error`, `stopped_by`, "
        "`host:<agent>` (JSON: `state`, `units`, `pids`, `codes`, `error`) and, once ended, "
        "`stats` (JSON: `pages`, `items`, `errors`, `bans`, `failed`, `deadletter`, `duration`, "
        "`per_worker`); kept after the crawl's keys are purged",
        placeholder="<id>",
        fleet=True,
    ),
    KeyDoc(
        "job_history",
        "list",
        "`crawlfleet job`, the dashboard, the scheduler, agents",
        "one job's operations, oldest first, the newest `HISTORY_LIMIT` (100) kept: JSON "
        "`time` (Redis ms), `by`, `action` (`start`, `pause`, `resume`, `stop`, `seed`, `end`), "
        "`detail`; deleted with the job's record",
        placeholder="<id>",
        fleet=True,
    ),
    KeyDoc(
        "jobs",
        "sorted set",
        "`crawlfleet job start`, agents",
        "job id → creation time (ms): the history, trimmed by the agents to the last "
        "`--job-history` ended jobs",
        fleet=True,
    ),
    KeyDoc(
        "jobs_active",
        "set",
        "`crawlfleet job start`, agents",
        "ids of the jobs that have not ended",
        fleet=True,
    ),
    KeyDoc("job_seq", "string", "`crawlfleet job start`", "counter of job ids", fleet=True),
    KeyDoc(
        "agents",
        "sorted set",
        "agents",
        "agent name → liveness deadline (ms); an agent past it is down, 0 after a clean stop",
        fleet=True,
    ),
    KeyDoc(
        "agent",
        "hash",
        "agents",
        "`info` (JSON: `host`, `pid`, `runner`, `spiders` (spider → project), `started`), "
        "`heartbeat` (ms), `units` (JSON: job id → the units it runs for it)",
        placeholder="<agent>",
        fleet=True,
    ),
    KeyDoc(
        "commands",
        "list",
        "`crawlfleet job`, the scheduler, the dashboard",
        "JSON commands for one agent: `id`, `action` (`start`, `stop`, `logs` with `lines`), `job`",
        placeholder="<agent>",
        fleet=True,
    ),
    KeyDoc(
        "ack",
        "list",
        "agents",
        "the agent's answer to one command (JSON `ok`, `error`, `units`: the units started or "
        "stopped, or for `logs` unit → its last lines); expires after 10 minutes",
        placeholder="<command>",
        fleet=True,
    ),
    KeyDoc(
        "schedules",
        "hash",
        "`crawlfleet schedule`, the scheduler",
        "schedule id → JSON: `project`, `spider`, `cron` or `every`, `args`, `settings`, "
        "`workers`, `overlap`, `dupefilter` (`fresh`, `keep`), `paused`, `next`, `last`, "
        "`last_job`, `last_result`",
        fleet=True,
    ),
    KeyDoc(
        "schedule_seq", "string", "`crawlfleet schedule add`", "counter of schedule ids", fleet=True
    ),
    KeyDoc(
        "scheduler_lock",
        "string",
        "the scheduler",
        "name of the agent running the schedules (expires unless renewed): one scheduler at a time",
        fleet=True,
    ),
    KeyDoc(
        "alerts_state",
        "string",
        "`crawlfleet status`, the dashboard",
        "JSON: what the alert rules remember between evaluations (`crawlfleet.alerts.rules."
        "AlertState`: bans, dead-letter growth, job progress, since when); expires after a day",
        fleet=True,
    ),
    KeyDoc(
        "alerts_notified",
        "string",
        "the dashboard's alert webhook",
        "JSON: the webhook URL's SHA-256 and, by alert key, each alert whose `firing` that "
        "receiver got and whose `resolved` it has not: a restarted dashboard neither repeats "
        "one nor misses one; expires after a day",
        fleet=True,
    ),
)
