local top = redis.call('ZREVRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if #top == 0 then return {} end
local want = tonumber(ARGV[1])
local window = redis.call('ZCOUNT', KEYS[1], top[2], top[2])
if window < want then
  window = math.min(want, redis.call('ZCARD', KEYS[1]))
end
if want > window then want = window end
local chosen, out = {}, {}
local r = 2
for j = window - want, window - 1 do
  local t = math.floor(tonumber(ARGV[r]) * (j + 1))
  r = r + 1
  if t > j then t = j end
  if chosen[t] then t = j end
  chosen[t] = true
  out[#out + 1] = redis.call('ZREVRANGE', KEYS[1], t, t)[1]
end
return out
