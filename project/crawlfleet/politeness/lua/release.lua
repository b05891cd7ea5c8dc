-- Give back the unused tail of a lease: only when no lease was taken after it (the slots are
-- the last ones handed out), so giving back never lets two workers hold the same time.
-- ARGV[7..] = {lease end (ms, the tat it left), first unused slot (ms)}. Returns 1 if taken back.
local LEASE_END, FIRST = tonumber(ARGV[7]), tonumber(ARGV[8])
if math.abs(S.tat - LEASE_END) < 0.01 then
  S.tat = math.max(FIRST, NOW)
  save()
  return 1
end
return 0
