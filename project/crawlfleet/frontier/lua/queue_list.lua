local function q_flush() end

local function q_pop(n)
  local got = redis.call('LPOP', QK, n)
  local out = {}
  if got then
    for i = 1, #got do out[#out + 1] = got[i]; out[#out + 1] = got[i] end
  end
  return out
end
local function q_requeue(v) redis.call('LPUSH', QK, v) end
local function q_len() return redis.call('LLEN', QK) end
