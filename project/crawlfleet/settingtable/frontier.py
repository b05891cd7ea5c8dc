"""The frontier's settings (the Redis queues, the start URLs, the duplicate filters) and the
Bloom filter's."""

from __future__ import annotations

from crawlfleet.hub.connect import DEFAULT_REDIS_PARAMS
from crawlfleet.hub.keys import BLOOMFILTER_KEY, DUPEFILTER_KEY, QUEUE_KEY, START_URLS_KEY
from crawlfleet.hub.urls import DEFAULT_REDIS_URL
from crawlfleet.settingtable.row import Also, Setting

FRONTIER = (
    Setting(
        "SCHEDULER",
        None,
        '`"crawlfleet.frontier.scheduler.Scheduler"` to use the frontier',
        shown="—",
    ),
    Setting(
        "DUPEFILTER_CLASS",
        None,
        (
            "`crawlfleet.frontier.dupefilter.SetDupeFilter` or `.BloomDupeFilter`; any other class"
            " is an error"
        ),
        shown="`SetDupeFilter` when left at Scrapy's default",
    ),
    Setting(
        "REDIS_URL",
        DEFAULT_REDIS_URL,
        (
            "the hub's Redis; the password is masked in every log and error. "
            "`redis://[:password@]host:port/db` (`rediss://` with TLS, `unix:///path?db=`), or "
            "through Sentinel "
            "`redis+sentinel://[:password@]host:port[,host:port…]/<service>[/<db>]` — the "
            "Sentinels' addresses (port 26379 when left out), the monitored service's name and the"
            " database (0 when left out); the password is the primary's, a Sentinel's own password"
            " is the query parameter `?sentinel_password=` (masked like the other; "
            "`?sentinel_username=` names the Sentinels' ACL user, as the playbooks write it with "
            "the ACL users on), redis-py's `socket_*` parameters apply to both; `ssl_*` is refused"
            " there. `rediss+sentinel://…` (same shape) is Sentinel over TLS: the Sentinels and "
            "the primary/replicas they name are reached with TLS and verified as with `rediss://`,"
            " taking the same `ssl_*` options (`ssl_ca_certs`, `ssl_certfile`, `ssl_keyfile`, "
            "`ssl_cert_reqs` …), e.g. "
            "`rediss+sentinel://:pw@s1:26379,s2:26379,s3:26379/crawl/0?sentinel_password=spw&ssl_ca_certs=/etc/crawlfleet/tls/ca.crt`."
            " With `rediss://host:port/db?ssl_ca_certs=/etc/crawlfleet/ca.crt` the client verifies"
            " the server's certificate against that CA and its name against the URL's host "
            "(`ssl_cert_reqs=required`, `ssl_check_hostname` by default; a certificate that does "
            "not verify is one line naming the host and the cause, see "
            "[security.md](../security.md#encryption-on-the-wire)). With per-role ACL users the "
            "URL names the user: `redis://crawler:password@hub:6379/0`. The same URL works for "
            "every client (workers, pools, dashboard, CLI); see [how a failover "
            "behaves](../security.md#how-a-failover-behaves). On a Redis Cluster: "
            "`redis+cluster://[:password@|user:password@]host:port[,host:port…]/0` — start-up "
            "nodes (port 6379 when left out; one answering is enough), database 0 only; "
            "`rediss+cluster://` is the same over TLS with the `ssl_*` options of `rediss://`. "
            "There the crawl workers (scheduler, dupefilters, items, `WorkerStats`, politeness), "
            "the CLI, the dashboard, the pools and the job agents work; every key of a crawl is "
            "tagged `{<spider>}`, the jobs' and agents' `{crawlfleet}`, the pools' `{<key>}` and "
            "`{<site>}`: one crawl lives in one slot (one node) until the frontier is sharded "
            "([design](../design.md#on-a-redis-cluster))"
        ),
    ),
    Setting(
        "REDIS_HOST",
        None,
        "scrapy-redis style alternative to `REDIS_URL` (used only when `REDIS_URL` is unset)",
        shown="unset",
    ),
    Setting(
        "REDIS_PORT",
        None,
        "scrapy-redis style alternative to `REDIS_URL` (used only when `REDIS_URL` is unset)",
        shown="unset",
    ),
    Setting(
        "REDIS_PARAMS",
        DEFAULT_REDIS_PARAMS,
        (
            "extra `redis.Redis.from_url` arguments (through Sentinel: the primary's connections',"
            " the `socket_*` ones also the Sentinels'), merged over the defaults; `socket_timeout`"
            " bounds every blocking wait of a frontier call on the reactor (the connect timeout is"
            " clamped to it; calls are not retried inside, a failed one is retried later from the "
            "reactor)"
        ),
    ),
    Setting(
        "SCHEDULER_QUEUE_CLASS",
        None,
        (
            "`FifoQueue` (list, breadth first), `LifoQueue` (list, depth first), `PriorityQueue` "
            "(sorted set: higher `priority` first, FIFO among equals, identical `dont_filter` "
            "requests kept) or `KeyedPriorityQueue` (one such sorted set per politeness key — "
            "`POLITENESS_KEY`'s host, domain or IP — the sites served least recently served first,"
            " so one slow site's backlog does not hold up the others). A crawl queued by another "
            "class is refused at start with one line (a `PriorityQueue` crawl from before this "
            "default: set `PriorityQueue` to finish it, or `crawlfleet purge` it)"
        ),
        shown=(
            "`crawlfleet.frontier.queues.KeyedPriorityQueue` with politeness on (the "
            "PolitenessMiddleware enabled), else `crawlfleet.frontier.queues.PriorityQueue`"
        ),
    ),
    Setting(
        "SCHEDULER_QUEUE_KEY",
        QUEUE_KEY.default,
        "key of the queue",
    ),
    Setting(
        "SCHEDULER_DUPEFILTER_KEY",
        DUPEFILTER_KEY.default,
        "key of `SetDupeFilter`'s set of hex fingerprints",
    ),
    Setting(
        "SCHEDULER_SERIALIZER",
        "msgpack",
        ("`msgpack` or `json` for new entries; either is read back regardless (pickle is refused)"),
    ),
    Setting(
        "SCHEDULER_REQUEST_CLASSES",
        (),
        (
            "class paths (a list, or comma-separated) of the project's `Request` subclasses that "
            "queue entries may name, besides Scrapy's `Request`, `FormRequest`, `JsonRequest` and "
            "`XmlRpcRequest`; classes are looked up by name, never imported from an entry, and an "
            "entry naming any other class goes to the dead-letter list"
        ),
    ),
    Setting(
        "SCHEDULER_URL_SCHEMES",
        ("http", "https"),
        (
            "URL schemes (a list, or comma-separated, lower case) a queue or start-URL entry may "
            "use; checked where entries are decoded, other entries go to the dead-letter list; "
            "give `crawlfleet seed` the same list (`--schemes` or `$SCHEDULER_URL_SCHEMES`, "
            "[cli.md](cli.md#crawlfleet-seed))"
        ),
    ),
    Setting(
        "SCHEDULER_PERSIST",
        True,
        (
            "keep queue and fingerprints when a worker closes; `False`: the last worker to leave "
            "clears them"
        ),
    ),
    Setting(
        "SCHEDULER_FLUSH_ON_START",
        False,
        "clear queue, fingerprints and seeding flag when the worker opens",
    ),
    Setting(
        "SCHEDULER_IDLE_BEFORE_CLOSE",
        0,
        "seconds the whole cluster must stay idle before a worker closes",
    ),
    Setting(
        "SCHEDULER_LEASE_TIMEOUT",
        60,
        (
            "at most this many seconds after its last heartbeat, a silent worker's leased requests"
            " are back in the queue"
        ),
    ),
    Setting(
        "SCHEDULER_HEARTBEAT_INTERVAL",
        None,
        (
            "seconds between heartbeats (each also reaps dead workers and writes worker info); at "
            "most a third of the lease timeout"
        ),
        shown="`SCHEDULER_LEASE_TIMEOUT / 6` (10)",
    ),
    Setting(
        "SCHEDULER_LIVENESS",
        True,
        (
            "each worker holds a subscription to `<spider>:alive:<worker>` on a connection of its "
            "own (sharded on a Redis Cluster), and a worker whose subscription is gone and whose "
            "last heartbeat is older than 1.5 heartbeat intervals is reaped then, not at its lease"
            " deadline (a SIGKILLed worker's requests are back 15–30 s after its last heartbeat "
            "instead of 50 s with the defaults; a frozen one keeps them until the deadline). "
            "`False`: reaped at the deadline only "
            "([design](../design.md#leases-heartbeats-and-dying-workers)); the Redis backend only"
        ),
    ),
    Setting(
        "SCHEDULER_PREFETCH",
        8,
        "requests popped (and leased) per round trip",
    ),
    Setting(
        "SCHEDULER_SEEN_CACHE",
        100_000,
        (
            "fingerprints this worker has seen Redis record, kept in memory (least recently used "
            "dropped first; `0` = off): a request known to be a duplicate is filtered without a "
            "round trip, with the same result Redis would give (fingerprints are only removed by a"
            " deliberate flush). About 200 B of memory each (the default: some 20 MiB once full);"
            " the stat `scheduler/seen_cache` says how many it holds"
        ),
    ),
    Setting(
        "SCHEDULER_ENQUEUE_BATCH",
        False,
        (
            "buffer `enqueue_request` calls and send them in one round trip at the next reactor "
            "turn (always before the acknowledgement of the request that produced them). Cuts "
            "round trips per page several-fold — worth it when the hub is across a network — but "
            "`enqueue_request` then returns `True` for duplicates too (they are still filtered and"
            " counted in `dupefilter/filtered`; Scrapy's `request_dropped` signal is not sent for "
            "them)"
        ),
    ),
    Setting(
        "SCHEDULER_WAIT_REPLICAS",
        None,
        (
            "after each enqueue, `WAIT` in the same round trip until this many replicas hold it: "
            "an enqueue Scrapy was told about survives a failover to any replica that confirmed it"
            " (Sentinel promotes the most up-to-date one). Fewer replicas within "
            "`SCHEDULER_WAIT_TIMEOUT` count as a failed enqueue: the requests stay in the worker "
            "and are sent again, so with every replica down the crawl waits instead of writing "
            "what a failover could lose. A number set here is a requirement: fewer replicas online"
            " at start are said once in the log, and enqueues wait until enough confirm. Costs "
            "about one replication round trip per enqueue ([benchmarks](../benchmarks.md))"
        ),
        shown=(
            "with a `redis+sentinel://` or `redis+cluster://` `REDIS_URL`, the replicas that "
            "exist: `1` when every primary holding the crawl has a replica online at the worker's "
            "start, else `0`, said once in its log (a failover can then lose the last enqueues); "
            "else `0` (off)"
        ),
    ),
    Setting(
        "SCHEDULER_WAIT_TIMEOUT",
        1.0,
        "seconds one `WAIT` may block the worker",
    ),
    Setting(
        "SCHEDULER_IDLE_POLL_INTERVAL",
        0.2,
        (
            "seconds between looks at the cluster while this worker has nothing to do; the wait "
            "doubles after every look that finds nothing (nothing to pop, nothing queued, no start"
            " URLs) up to `SCHEDULER_IDLE_POLL_MAX`, and is back to this as soon as a look finds "
            "work or the worker enqueues something"
        ),
    ),
    Setting(
        "SCHEDULER_IDLE_POLL_MAX",
        2.0,
        (
            "the longest wait (seconds) between an idle worker's looks, never less than "
            "`SCHEDULER_IDLE_POLL_INTERVAL`: what an idle worker costs the hub (about one small "
            "script per this many seconds) against how late it notices work that another worker "
            "enqueued. A hub that refuses writes at `maxmemory` is retried the same way (from "
            "`SCHEDULER_IDLE_POLL_INTERVAL`, doubling up to this): [the hub is "
            "full](../operating.md#1530--the-hub-is-full)"
        ),
    ),
    Setting(
        "SCHEDULER_SHARDS",
        1,
        (
            "split one crawl into this many shards (1 to 256) by politeness key, each under its "
            "own key prefix and, on a Redis Cluster, its own slot range, so a crawl spreads over "
            "that many primaries ([sharding a crawl](../design.md#sharding-a-crawl)); 1 keeps "
            "every key name of an unsharded crawl. A crawl keeps its count: a worker started with "
            "another one than the crawl's data refuses in one line (purge to change it). The Redis"
            " queues only: with the RabbitMQ queue a count above 1 is refused in one line"
        ),
    ),
    Setting(
        "SCHEDULER_WORKER_ID",
        None,
        "this worker's name in Redis keys and logs (must be unique per process)",
        shown="`host:pid:random`",
    ),
    Setting(
        "REDIS_START_URLS_KEY",
        START_URLS_KEY.default,
        "key read for start URLs",
    ),
    Setting(
        "REDIS_START_URLS_AS_SET",
        False,
        "the start key is a set (`SADD`) instead of a list",
    ),
    Setting(
        "REDIS_START_URLS_BATCH_SIZE",
        None,
        "start URL entries consumed per batch",
        shown="`CONCURRENT_REQUESTS`",
    ),
    Setting(
        "DUPEFILTER_DEBUG",
        False,
        "log every filtered duplicate (otherwise only the first)",
    ),
)

BLOOM = (
    Setting(
        "BLOOMFILTER_KEY",
        BLOOMFILTER_KEY.default,
        (
            "Redis key of the filter (`%(spider)s` is the spider's name); its parameters are kept "
            "in `<key>:meta`"
        ),
    ),
    Setting(
        "BLOOMFILTER_CAPACITY",
        100_000_000,
        "n: the number of fingerprints the filter is sized for",
    ),
    Setting(
        "BLOOMFILTER_ERROR_RATE",
        0.001,
        (
            "p: the false-positive rate at `BLOOMFILTER_CAPACITY` (0 < p < 1); a scalable filter "
            "stays below it at every load up to n"
        ),
    ),
    Setting(
        "BLOOMFILTER_SCALABLE",
        None,
        (
            "a filter that starts small and adds layers four times larger as it fills, up to "
            "`BLOOMFILTER_CAPACITY` "
            "([design](../design.md#scalable-by-default-start-small-add-layers)); `False`: one "
            "filter allocated in full at the start. `True` with BIT, HASH_NUMBER or BLOCKS is an "
            "error. An existing filter is used as it was created (a fixed one stays fixed)"
        ),
        shown=(
            "`True` unless `BLOOMFILTER_BIT`, `BLOOMFILTER_HASH_NUMBER` or `BLOOMFILTER_BLOCKS` is"
            " set"
        ),
    ),
    Setting(
        "BLOOMFILTER_INITIAL_CAPACITY",
        1_000_000,
        (
            "a scalable filter's first layer, in fingerprints (at most `BLOOMFILTER_CAPACITY`; 1.9"
            " MiB at p = 0.001)"
        ),
    ),
    Setting(
        "BLOOMFILTER_BIT",
        None,
        (
            "scrapy-redis-bloomfilter compatibility: m = 2^BIT bits (3–48) instead of sizing from "
            "p; if only `BLOOMFILTER_HASH_NUMBER` is set, 30"
        ),
        shown="unset",
    ),
    Setting(
        "BLOOMFILTER_HASH_NUMBER",
        None,
        (
            "scrapy-redis-bloomfilter compatibility: k (1–64); if only `BLOOMFILTER_BIT` is set, "
            "6. A warning is logged when BIT and HASH_NUMBER give more than 1 % expected error at "
            "`BLOOMFILTER_CAPACITY`"
        ),
        shown="unset",
    ),
    Setting(
        "BLOOMFILTER_BLOCKS",
        None,
        (
            "a fixed filter (setting it makes the filter fixed): number of Redis keys it is split "
            "into; by default as few as keep each under Redis's 512 MB (2^32-bit) string limit. "
            "Setting it to 1 with a filter larger than 2^32 bits is an error"
        ),
        shown="unset (automatic)",
    ),
    Also(
        "DUPEFILTER_DEBUG",
        "log every filtered request (otherwise only the first), as Scrapy does",
    ),
    Also(
        "REDIS_URL",
        "the hub's Redis; the filter shares the frontier's connection pool",
        shown="see [the frontier](#frontier)",
    ),
    Also(
        "REDIS_PARAMS",
        "the hub's Redis; the filter shares the frontier's connection pool",
        shown="see [the frontier](#frontier)",
    ),
)
