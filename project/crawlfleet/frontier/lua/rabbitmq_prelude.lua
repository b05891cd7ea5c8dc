local P, W, LEASE_MS = ARGV[1], ARGV[2], tonumber(ARGV[3])
local WORKERS = P .. ':rabbitmq:workers'
local BUSY = P .. ':rabbitmq:busy'
local SEEDING = P .. ':seeding'
local function outbox(w) return P .. ':rabbitmq:outbox:' .. w end
