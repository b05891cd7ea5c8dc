local function sbf_u32(b, p)
  return ((b[p] * 256 + b[p + 1]) * 256 + b[p + 2]) * 256 + b[p + 3]
end
local function sbf_bits(cmd, op, h1, h2, m, k)
  local a, s = h1 % m, h2 % m
  if s == 0 then s = 1 end
  for j = 0, k - 1 do
    local n = #cmd
    cmd[n + 1], cmd[n + 2] = op, 'u1'
    cmd[n + 3] = SBF_HEADER + (a + j * s + (j * j * j - j) / 6) % m
    if op == 'SET' then cmd[n + 4] = 1 end
  end
  return cmd
end
local function sbf_all_set(r, from)
  for i = from, #r do
    if r[i] == 0 then return false end
  end
  return true
end
local function sbf_layers(key, arg, add)
  local b = {string.byte(arg, 1, #arg)}
  local h1, h2, m0, mlast = sbf_u32(b, 1), sbf_u32(b, 5), sbf_u32(b, 9), sbf_u32(b, 13)
  local k0, maxl = b[17], b[18]
  local function layer(i)
    if i == 0 then return key end
    return key .. ':' .. i
  end
  local function bits_of(i)
    if i == maxl - 1 then return mlast end
    return math.min(m0 * SBF_GROWTH ^ i, SBF_MAX_BITS)
  end
  local r = redis.call(unpack(sbf_bits({'BITFIELD', key, 'GET', 'u16', 32}, 'GET', h1, h2,
                                       bits_of(0), k0)))
  if sbf_all_set(r, 2) then return 0 end
  local layers = math.max(r[1], 1)
  for i = 1, layers - 1 do
    local lr = redis.call(unpack(sbf_bits({'BITFIELD', layer(i)}, 'GET', h1, h2, bits_of(i),
                                          k0 + i)))
    if sbf_all_set(lr, 1) then return 0 end
  end
  if not add then return 1 end
  local last, k = layers - 1, k0 + layers - 1
  local m = bits_of(last)
  local cmd = sbf_bits({'BITFIELD', layer(last), 'INCRBY', 'u32', 0, 1}, 'SET', h1, h2, m, k)
  local count = redis.call(unpack(cmd))[1]
  if layers < maxl and count >= math.floor(m * SBF_LN2 / k) then
    -- the newest layer is full: allocate the next one at its full size in one step
    local size = math.ceil((SBF_HEADER + bits_of(layers)) / 8)
    redis.call('SETRANGE', layer(layers), size - 1, '\0')
    redis.call('BITFIELD', key, 'SET', 'u16', 32, layers + 1)
  end
  return 1
end
