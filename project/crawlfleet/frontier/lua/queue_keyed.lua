local KQ_READY = QK .. ':ready'
local KQ_CHUNK = 2000  -- arguments per ZADD (unpack's limit is about 8000)
local function kq_of(site) return QK .. ':site:' .. site end
-- q_push records; q_flush numbers the batch in push order (FIFO among equal priorities) and
-- writes it: one ZADD per site, one HINCRBY, one ZADD NX of the sites (each scored by its first
-- entry's number, as single pushes would have).
local kq_batch = {}
local function kq_zadd(key, flag, args)
  for i = 1, #args, KQ_CHUNK do
    local last = math.min(i + KQ_CHUNK - 1, #args)
    if flag then redis.call('ZADD', key, flag, unpack(args, i, last))
    else redis.call('ZADD', key, unpack(args, i, last)) end
  end
end
local function q_push(p, prio, site)
  kq_batch[#kq_batch + 1] = {p, -tonumber(prio), site}
end
local function q_flush()
  local n = #kq_batch
  if n == 0 then return end
  local seq = redis.call('INCRBY', SEQ, n) - n
  local by_site, sites, ready = {}, {}, {}
  for i, e in ipairs(kq_batch) do
    local args = by_site[e[3]]
    if not args then
      args = {}
      by_site[e[3]] = args
      sites[#sites + 1] = e[3]
      ready[#ready + 1] = seq + i
      ready[#ready + 1] = e[3]
    end
    args[#args + 1] = e[2]
    args[#args + 1] = string.format('%016x', seq + i) .. e[1]
  end
  kq_batch = {}
  for _, site in ipairs(sites) do kq_zadd(kq_of(site), nil, by_site[site]) end
  redis.call('HINCRBY', QK, 'len', n)
  kq_zadd(KQ_READY, 'NX', ready)
end
local function q_pop(n, skip, nskip)
  local out = {}
  if n <= 0 then return out end
  local sites = {}
  for _, site in ipairs(redis.call('ZRANGE', KQ_READY, 0, n + (nskip or 0) - 1)) do
    if not (skip and skip[site]) and #sites < n then sites[#sites + 1] = site end
  end
  if #sites == 0 then return out end
  local now = redis.call('INCR', SEQ)
  -- served: site -> whether it may still hold entries (false once a pop got fewer than asked)
  local taken, served = 0, {}
  while taken < n and #sites > 0 do
    local left = {}
    for i, site in ipairs(sites) do
      if taken >= n then break end
      local want = math.ceil((n - taken) / (#sites - i + 1))
      local got = redis.call('ZPOPMIN', kq_of(site), want)
      for j = 1, #got, 2 do
        out[#out + 1] = got[j + 1] .. '|' .. #site .. '|' .. site .. got[j]
        out[#out + 1] = string.sub(got[j], 17)
      end
      taken = taken + #got / 2
      if served[site] == nil then served[site] = true end
      if #got / 2 == want then
        if taken < n then left[#left + 1] = site end
      else
        served[site] = false  -- fewer than asked for: the site is empty
      end
    end
    sites = left
  end
  for site, more in pairs(served) do
    if more and redis.call('EXISTS', kq_of(site)) == 1 then
      redis.call('ZADD', KQ_READY, 'XX', now, site)
    else
      redis.call('ZREM', KQ_READY, site)
    end
  end
  -- an empty queue leaves no key behind (as a list or a sorted set does)
  if redis.call('HINCRBY', QK, 'len', -taken) <= 0 then redis.call('DEL', QK) end
  return out
end
local function q_requeue(v)
  local bar = string.find(v, '|', 1, true)
  local bar2 = string.find(v, '|', bar + 1, true)
  local size = tonumber(string.sub(v, bar + 1, bar2 - 1))
  local site = string.sub(v, bar2 + 1, bar2 + size)
  local member = string.sub(v, bar2 + size + 1)
  if redis.call('ZADD', kq_of(site), tonumber(string.sub(v, 1, bar - 1)), member) == 1 then
    redis.call('HINCRBY', QK, 'len', 1)
  end
  redis.call('ZADD', KQ_READY, 'LT', 0, site)
end
local function q_len() return tonumber(redis.call('HGET', QK, 'len') or '0') end
