local state = redis.call('HGET', KEYS[1], 'state')
if not state then return {0, false} end
local n = tonumber(ARGV[1])
for i = 2, n + 1 do
  if ARGV[i] == state then
    redis.call('HSET', KEYS[1], unpack(ARGV, n + 2, #ARGV))
    return {1, state}
  end
end
return {0, state}
