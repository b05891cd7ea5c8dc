local LEASE_MS = tonumber(ARGV[3])
