local function q_flush() end

local function q_push(p, prio)
  local seq = redis.call('INCR', SEQ)
  redis.call('ZADD', QK, -tonumber(prio), string.format('%016x', seq) .. p)
end
local function q_pop(n)
  local got = redis.call('ZPOPMIN', QK, n)
  local out = {}
  for i = 1, #got, 2 do
    out[#out + 1] = got[i + 1] .. '|' .. got[i]
    out[#out + 1] = string.sub(got[i], 17)
  end
  return out
end
local function q_requeue(v)
  local bar = string.find(v, '|', 1, true)
  redis.call('ZADD', QK, tonumber(string.sub(v, 1, bar - 1)), string.sub(v, bar + 1))
end
local function q_len() return redis.call('ZCARD', QK) end
