-- Every Redis key a frontier script names besides its KEYS, derived from ARGV[1] (the prefix: the
-- spider name) and ARGV[2] (this worker): the Lua side of crawlfleet.hub.keys.SpiderKeys. A
-- key is a local named after its SpiderKeys attribute in capitals, a worker's key a function
-- <attribute>_of(w); tests/unit/frontier/test_frontier_keys.py evaluates each one in Redis against
-- SpiderKeys. Both preludes start with this part; no other part spells a key.
local P, W = ARGV[1], ARGV[2]
local WORKERS = P .. ':workers'
local SEEDING = P .. ':seeding'
local SEEDED = P .. ':seeded'
local PAUSED = P .. ':paused'
local STATS = P .. ':stats'
local FAILED = P .. ':failed'
local DEADLETTER = P .. ':deadletter'
local RABBITMQ_WORKERS = P .. ':rabbitmq:workers'
local RABBITMQ_BUSY = P .. ':rabbitmq:busy'
local function leases_of(w) return P .. ':leases:' .. w end
local function worker_of(w) return P .. ':worker:' .. w end
local function worker_stats_of(w) return P .. ':stats:' .. w end
local function alive_of(w) return P .. ':alive:' .. w end
local function rabbitmq_outbox_of(w) return P .. ':rabbitmq:outbox:' .. w end
