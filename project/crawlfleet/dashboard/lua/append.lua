local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local last = redis.call('LINDEX', KEYS[1], -1)
if last then
  local lt = tonumber(string.match(last, '^(%d+)'))
  if lt and now - lt < tonumber(ARGV[1]) then return 0 end
end
redis.call('RPUSH', KEYS[1], now .. ' ' .. ARGV[3])
redis.call('LTRIM', KEYS[1], -tonumber(ARGV[2]), -1)
redis.call('PEXPIRE', KEYS[1], 86400000)
return 1
