local data, step, out = ARGV[1], tonumber(ARGV[2]), {}
for p = 1, #data, step do
  out[#out + 1] = %s(KEYS[1], string.sub(data, p, p + step - 1))
end
return table.concat(out)
