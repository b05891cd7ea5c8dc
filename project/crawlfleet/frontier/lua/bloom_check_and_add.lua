local function check_and_add(key, arg)
  if #arg % 4 ~= 0 then return sbf_layers(key, arg, true) end
  local cmd = {'BITFIELD', key}
  for p = 1, #arg, 4 do
    local b1, b2, b3, b4 = string.byte(arg, p, p + 3)
    local n = #cmd
    cmd[n + 1], cmd[n + 2], cmd[n + 3], cmd[n + 4] =
      'SET', 'u1', ((b1 * 256 + b2) * 256 + b3) * 256 + b4, 1
  end
  local old = redis.call(unpack(cmd))
  for i = 1, #old do
    if old[i] == 0 then
      return 1
    end
  end
  return 0
end
