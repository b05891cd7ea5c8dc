local user = ARGV[1]
if user == '' then
  user = redis.call('HGET', KEYS[3], ARGV[2])
  if not user then return false end
end
local old = redis.call('HGET', KEYS[1], user)
local th = nil
if old then
  local ok, rec = pcall(cjson.decode, old)
  if ok and type(rec) == 'table' then th = rec['th'] end
end
if ARGV[2] ~= '' and th ~= ARGV[2] then
  if ARGV[1] == '' then redis.call('HDEL', KEYS[3], ARGV[2]) end
  return false
end
if not old then return false end
redis.call('HDEL', KEYS[1], user)
redis.call('ZREM', KEYS[2], user)
if th then redis.call('HDEL', KEYS[3], th) end
return user
