local size = redis.call('ZCARD', KEYS[1])
local cap = tonumber(ARGV[2])
local added, existing, full = 0, 0, 0
for i = 3, #ARGV do
  if redis.call('ZSCORE', KEYS[1], ARGV[i]) then
    existing = existing + 1
  elseif size >= cap then
    full = full + 1
  else
    redis.call('ZADD', KEYS[1], ARGV[1], ARGV[i])
    size = size + 1
    added = added + 1
  end
end
return {added, existing, full}
