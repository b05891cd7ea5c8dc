local function contains(key, arg)
  if #arg % 4 ~= 0 then return 1 - sbf_layers(key, arg, false) end
  for p = 1, #arg, 4 do
    local b1, b2, b3, b4 = string.byte(arg, p, p + 3)
    if redis.call('GETBIT', key, ((b1 * 256 + b2) * 256 + b3) * 256 + b4) == 0 then
      return 0
    end
  end
  return 1
end
