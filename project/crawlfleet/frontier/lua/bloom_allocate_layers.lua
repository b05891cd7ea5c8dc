if ARGV[2] == '1' then
  redis.call('DEL', unpack(KEYS))
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('SETRANGE', KEYS[1], ARGV[1], '\0')
  redis.call('BITFIELD', KEYS[1], 'SET', 'u16', 32, 1)
end
