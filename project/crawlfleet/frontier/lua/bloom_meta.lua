local t = redis.call('TYPE', KEYS[1])['ok']
if t == 'none' then
  redis.call('HSET', KEYS[1], unpack(ARGV))
elseif t ~= 'hash' then
  return redis.error_reply('WRONGTYPE')
end
return redis.call('HGETALL', KEYS[1])
