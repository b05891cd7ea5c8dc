"""A Bloom filter in Redis: sized from capacity and error rate, atomic, one round trip per call.

Request fingerprints are already uniform digests (Scrapy's are SHA-1), so the k bit positions come
straight from the fingerprint's own bytes by enhanced double hashing (Kirsch-Mitzenmacher with the
Dillinger-Manolios cubic term): two 64-bit integers ``h1``, ``h2`` read from the digest give
``g_i = h1 + i*h2 + (i^3 - i)/6  (mod block_bits)``. No per-character hashing, so the measured
false-positive rate matches ``(1 - e^(-kn/m))^k``.

The positions travel to Redis as 4-byte big-endian integers; a Lua function ``check_and_add`` sets
them with one BITFIELD call and reports "new" when any old bit was 0, so a check-and-set is one
atomic operation and one round trip (the frontier scheduler pastes the same function into its
enqueue script). A filter larger than one Redis string (2^32 bits) is split into blocks; every bit
of one fingerprint lives in one block, and each block key is its own Redis Cluster hash tag
(``{book:bloomfilter:0}``), so blocks may sit on different shards without losing atomicity. A key
that carries a hash tag already (a crawl's key on a Redis Cluster) names its blocks ``<key>:0``,
``<key>:1`` …: they stay in the crawl's slot, beside the queue.

The parameters (bits, hashes, blocks) are recorded in ``<key>:meta`` when the filter is created
(and its blocks allocated at full size), so a worker configured differently fails loudly instead
of silently missing duplicates, and ``crawlfleet bloom-info`` can read a filter without knowing
its settings.
"""

from __future__ import annotations

import hashlib
import logging
import math
import operator
import struct
from collections.abc import Iterable, Sequence
from typing import Any

import redis
from redis.cluster import RedisCluster
from scrapy.settings import BaseSettings

from crawlfleet.frontier.keys import BLOOMFILTER_KEY, has_hash_tag
from crawlfleet.redisconn import is_cluster_url

logger = logging.getLogger(__name__)

# Defaults of BLOOMFILTER_CAPACITY and BLOOMFILTER_ERROR_RATE (171 MiB, k = 10); the key's is
# in crawlfleet.frontier.keys.
DEFAULT_CAPACITY = 100_000_000
DEFAULT_ERROR_RATE = 0.001
# Redis strings hold at most 512 MB, i.e. 2^32 bits; SETBIT offsets are < 2^32.
MAX_BLOCK_BITS = 1 << 32
# scrapy-redis-bloomfilter's defaults, used when only one of bit/hash_number is given.
COMPAT_BIT = 30
COMPAT_HASH_NUMBER = 6
# Warn when the compatibility sizing gives more than this expected error rate at capacity.
COMPAT_WARN_ERROR_RATE = 0.01
# Fingerprints per Lua call inside one add_many/contains_many round trip: keeps each script short
# so Redis serves other workers between them (atomicity is per fingerprint anyway).
SCRIPT_BATCH = 2000
# Bump when the way bits are derived from a fingerprint changes: old filters then refuse to open.
HASH_SCHEME = "edh-v1"

# One BITFIELD call sets all k bits and returns their old values (faster than k SETBITs in Lua).
LUA_CHECK_AND_ADD = """
local function check_and_add(key, arg)
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
"""

# GETBIT one by one: a non-member usually stops at the first or second bit.
_LUA_CONTAINS = """
local function contains(key, arg)
  for p = 1, #arg, 4 do
    local b1, b2, b3, b4 = string.byte(arg, p, p + 3)
    if redis.call('GETBIT', key, ((b1 * 256 + b2) * 256 + b3) * 256 + b4) == 0 then
      return 0
    end
  end
  return 1
end
"""

# KEYS[1]: block key; ARGV[1]: concatenated per-fingerprint items; ARGV[2]: bytes per item.
# Returns one '1' (new / present) or '0' per fingerprint, in order.
_LUA_BATCH = """
local data, step, out = ARGV[1], tonumber(ARGV[2]), {}
for p = 1, #data, step do
  out[#out + 1] = %s(KEYS[1], string.sub(data, p, p + step - 1))
end
return table.concat(out)
"""
_ADD_SCRIPT = LUA_CHECK_AND_ADD + _LUA_BATCH % "check_and_add"
_CONTAINS_SCRIPT = _LUA_CONTAINS + _LUA_BATCH % "contains"

# Creates the metadata hash unless it exists, then returns it (one key: cluster-safe).
_META_SCRIPT = """
local t = redis.call('TYPE', KEYS[1])['ok']
if t == 'none' then
  redis.call('HSET', KEYS[1], unpack(ARGV))
elseif t ~= 'hash' then
  return redis.error_reply('WRONGTYPE')
end
return redis.call('HGETALL', KEYS[1])
"""

# Creates a block at its full size in one allocation (SETRANGE on a missing key allocates exactly;
# growing a string bit by bit would over-allocate up to 2x, Redis's greedy string growth).
# ARGV[1]: index of the last byte; ARGV[2]: '1' to empty an existing block first.
_ALLOCATE_SCRIPT = """
if ARGV[2] == '1' then
  redis.call('DEL', KEYS[1])
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('SETRANGE', KEYS[1], ARGV[1], '\\0')
end
"""

_DIGEST = struct.Struct(">QQI")
_DIGEST_BYTES = _DIGEST.size  # 20, the size of Scrapy's SHA-1 request fingerprints


class BloomConfigError(ValueError):
    """A Bloom filter parameter or Redis key that cannot work; the message names it, on one line."""


def optimal_bits(capacity: int, error_rate: float) -> int:
    """m = ceil(-n ln p / (ln 2)^2): the fewest bits that keep ``error_rate`` at ``capacity``."""
    return math.ceil(-capacity * math.log(error_rate) / (math.log(2) ** 2))


def optimal_hashes(bits: int, capacity: int) -> int:
    """k = round(m/n ln 2), at least 1."""
    return max(1, round(bits / capacity * math.log(2)))


def expected_error_rate(bits: int, hashes: int, count: float) -> float:
    """The false-positive rate of an m-bit, k-hash filter holding ``count`` items."""
    if count <= 0:
        return 0.0
    return float((1.0 - math.exp(-hashes * count / bits)) ** hashes)


def _positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise BloomConfigError(f"{name} must be a positive integer, got {value!r}")
    return value


def _error_rate(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1:
        raise BloomConfigError(
            f"{name} must be a number between 0 and 1 (exclusive), got {value!r}"
        )
    return float(value)


class BloomLayout:
    """Where a Bloom filter's bits go: m, k, blocks, key names and the bits of each fingerprint.

    Pure computation, no Redis. Sized from ``capacity`` and ``error_rate``, or, for
    scrapy-redis-bloomfilter users, from ``bit`` (m = 2^bit) and ``hash_number`` (k). ``blocks``
    forces the number of blocks; by default there are as few as fit the 2^32-bit string limit.
    Errors name the setting (``BLOOMFILTER_*``) that holds the bad value.
    """

    def __init__(
        self,
        key: str,
        capacity: int = DEFAULT_CAPACITY,
        error_rate: float = DEFAULT_ERROR_RATE,
        *,
        bit: int | None = None,
        hash_number: int | None = None,
        blocks: int | None = None,
    ) -> None:
        if not isinstance(key, str) or not key:
            raise BloomConfigError(f"BLOOMFILTER_KEY must be a non-empty string, got {key!r}")
        self.key = key
        self.capacity = _positive_int(capacity, "BLOOMFILTER_CAPACITY")
        self.error_rate = _error_rate(error_rate, "BLOOMFILTER_ERROR_RATE")
        if bit is None and hash_number is None:
            bits = optimal_bits(self.capacity, self.error_rate)
            hashes = optimal_hashes(bits, self.capacity)
        else:
            bits = self._compat_bits(bit)
            hashes = self._compat_hashes(hash_number)
        if blocks is None:
            blocks = -(-bits // MAX_BLOCK_BITS)
        else:
            blocks = _positive_int(blocks, "BLOOMFILTER_BLOCKS")
        block_bits = -(-bits // blocks)
        if block_bits > MAX_BLOCK_BITS:
            source = f"BLOOMFILTER_BIT={bit}" if bit is not None else "BLOOMFILTER_CAPACITY"
            raise BloomConfigError(
                f"{source} needs {bits} bits, more than one Redis string holds (2^32 bits); set "
                f"BLOOMFILTER_BLOCKS to at least {-(-bits // MAX_BLOCK_BITS)} or leave it unset"
            )
        if block_bits < hashes:
            raise BloomConfigError(
                f"BLOOMFILTER_BLOCKS={blocks} leaves {block_bits} bits per block, "
                f"fewer than the {hashes} hashes"
            )
        self._set_shape(hashes, blocks, block_bits)
        if bit is not None or hash_number is not None:
            expected = expected_error_rate(self.bits, self.hashes, self.capacity)
            if expected > COMPAT_WARN_ERROR_RATE:
                logger.warning(
                    "BLOOMFILTER_BIT=%d, BLOOMFILTER_HASH_NUMBER=%d give an expected error rate of "
                    "%.2g at BLOOMFILTER_CAPACITY=%d (more than 1 %%): raise BLOOMFILTER_BIT or "
                    "size by BLOOMFILTER_ERROR_RATE instead",
                    bits.bit_length() - 1,
                    self.hashes,
                    expected,
                    self.capacity,
                )

    def _set_shape(self, hashes: int, blocks: int, block_bits: int) -> None:
        self.hashes = hashes
        self.blocks = blocks
        self.block_bits = block_bits
        # The real size: every block has block_bits bits.
        self.bits = block_bits * blocks
        self.meta_key = f"{self.key}:meta"
        # Each block name is a whole hash tag of its own, so Redis Cluster may spread the blocks;
        # a key that carries a hash tag already (a crawl's key on a cluster) keeps its blocks in
        # its slot, where the enqueue script that sets their bits runs.
        if blocks == 1:
            self.block_keys = [self.key]
        elif has_hash_tag(self.key):
            self.block_keys = [f"{self.key}:{i}" for i in range(blocks)]
        else:
            self.block_keys = [f"{{{self.key}:{i}}}" for i in range(blocks)]
        self._item = struct.Struct(f">{hashes}I")
        self.item_size = self._item.size
        # Enhanced double hashing: g_i = h1 + i*h2 + (i^3 - i)/6.
        self._cubes = [(i * i * i - i) // 6 for i in range(hashes)]
        self._mod = block_bits.__rmod__

    @classmethod
    def from_meta(cls, key: str, stored: dict[str, str]) -> BloomLayout:
        """The layout recorded in a filter's metadata hash (m and k need not be "optimal")."""
        try:
            if stored["scheme"] != HASH_SCHEME:
                raise ValueError(stored["scheme"])
            bits, hashes, blocks = (int(stored[name]) for name in ("bits", "hashes", "blocks"))
            capacity, error_rate = int(stored["capacity"]), float(stored["error_rate"])
            layout = cls(key, capacity, error_rate)
            if blocks <= 0 or bits % blocks or not 0 < hashes <= bits // blocks <= MAX_BLOCK_BITS:
                raise ValueError(bits)
        except (KeyError, ValueError, BloomConfigError):
            raise BloomConfigError(
                f"Redis key {key}:meta is not valid crawlfleet Bloom filter metadata"
            ) from None
        layout._set_shape(hashes, blocks, bits // blocks)
        return layout

    def meta(self) -> dict[str, str]:
        """What is recorded in ``<key>:meta`` when the filter is created."""
        return {
            "scheme": HASH_SCHEME,
            "bits": str(self.bits),
            "hashes": str(self.hashes),
            "blocks": str(self.blocks),
            "capacity": str(self.capacity),
            "error_rate": repr(self.error_rate),
        }

    @staticmethod
    def _compat_bits(bit: int | None) -> int:
        bit = COMPAT_BIT if bit is None else bit
        if isinstance(bit, bool) or not isinstance(bit, int) or not 3 <= bit <= 48:
            raise BloomConfigError(f"BLOOMFILTER_BIT must be an integer from 3 to 48, got {bit!r}")
        return 1 << bit

    @staticmethod
    def _compat_hashes(hash_number: int | None) -> int:
        k = COMPAT_HASH_NUMBER if hash_number is None else hash_number
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= 64:
            raise BloomConfigError(
                f"BLOOMFILTER_HASH_NUMBER must be an integer from 1 to 64, got {hash_number!r}"
            )
        return k

    def script_item(self, fp: object) -> tuple[str, bytes]:
        """The block key and packed bit offsets for ``fp`` (the argument of ``check_and_add``)."""
        if not isinstance(fp, bytes):
            raise TypeError(f"Bloom filter members are bytes fingerprints, not {type(fp).__name__}")
        if len(fp) < _DIGEST_BYTES:
            # Not a digest of Scrapy's size (a custom fingerprinter): make it one.
            fp = hashlib.blake2b(fp, digest_size=_DIGEST_BYTES).digest()
        h1, h2, hb = _DIGEST.unpack_from(fp)
        mb = self.block_bits
        # Reduce first so the arithmetic stays in small ints; a zero step would repeat one bit.
        h1 %= mb
        h2 = h2 % mb or 1
        # g_i = h1 + i*h2 + cube_i (mod mb), computed by C iterators rather than a Python loop.
        offsets = map(
            self._mod, map(operator.add, range(h1, h1 + self.hashes * h2, h2), self._cubes)
        )
        return self.block_keys[hb % self.blocks], self._item.pack(*offsets)

    def offsets(self, fp: bytes) -> tuple[int, list[int]]:
        """(block number, bit offsets inside the block) for ``fp``; for tests and diagnostics."""
        key, packed = self.script_item(fp)
        return self.block_keys.index(key), list(self._item.unpack(packed))


class BloomFilter:
    """A Bloom filter in Redis under ``key`` (see the module docstring for the layout).

    Takes the same sizing arguments as :class:`BloomLayout` (or a ready ``layout``). Creating the
    object checks that the keys are free or hold this filter, and records (or verifies) its
    parameters in Redis.
    """

    def __init__(
        self,
        redis_client: redis.Redis,
        key: str,
        capacity: int = DEFAULT_CAPACITY,
        error_rate: float = DEFAULT_ERROR_RATE,
        *,
        bit: int | None = None,
        hash_number: int | None = None,
        blocks: int | None = None,
        layout: BloomLayout | None = None,
    ) -> None:
        self.redis = redis_client
        self.layout = layout or BloomLayout(
            key, capacity, error_rate, bit=bit, hash_number=hash_number, blocks=blocks
        )
        self._add_script = redis_client.register_script(_ADD_SCRIPT)
        self._contains_script = redis_client.register_script(_CONTAINS_SCRIPT)
        self._open()

    @property
    def key(self) -> str:
        return self.layout.key

    @property
    def bits(self) -> int:
        return self.layout.bits

    @property
    def hashes(self) -> int:
        return self.layout.hashes

    @property
    def blocks(self) -> int:
        return self.layout.blocks

    @property
    def block_keys(self) -> list[str]:
        return self.layout.block_keys

    @property
    def capacity(self) -> int:
        return self.layout.capacity

    def script_item(self, fp: object) -> tuple[str, bytes]:
        """The block key and packed bit offsets for ``fp`` (the argument of ``check_and_add``)."""
        return self.layout.script_item(fp)

    def _open(self) -> None:
        """Check the keys are free or ours; record our parameters or verify the recorded ones."""
        layout = self.layout
        pipe = self.redis.pipeline(transaction=False)
        for block_key in layout.block_keys:
            pipe.type(block_key)
        pipe.exists(layout.meta_key)
        *replies, has_meta = pipe.execute()
        types = [t.decode() if isinstance(t, bytes) else str(t) for t in replies]
        for block_key, key_type in zip(layout.block_keys, types, strict=True):
            if key_type not in ("none", "string") or (key_type == "string" and not has_meta):
                # A string without our metadata is someone else's bitmap (scrapy-redis-bloomfilter
                # uses the same key name); its bits mean nothing to this hashing.
                what = (
                    "a string without Bloom filter metadata"
                    if key_type == "string"
                    else (f"a {key_type}")
                )
                raise BloomConfigError(
                    f"Redis key {block_key!r} holds {what}, not a crawlfleet Bloom filter: "
                    f"delete it or choose another BLOOMFILTER_KEY"
                )
        fresh = layout.meta()
        args = [part for item in fresh.items() for part in item]
        try:
            reply = self.redis.eval(_META_SCRIPT, 1, layout.meta_key, *args)
        except redis.ResponseError:
            raise BloomConfigError(
                f"Redis key {layout.meta_key!r} holds another type, not Bloom filter metadata: "
                f"delete it or choose another BLOOMFILTER_KEY"
            ) from None
        stored = _decode_pairs(reply)
        wanted = {name: fresh[name] for name in ("scheme", "bits", "hashes", "blocks")}
        found = {name: stored.get(name, "?") for name in wanted}
        if found != wanted:
            raise BloomConfigError(
                f"Bloom filter {layout.key!r} was created with {_describe(found)} but the settings "
                f"(BLOOMFILTER_CAPACITY/ERROR_RATE/BIT/HASH_NUMBER/BLOCKS) now give "
                f"{_describe(wanted)}: restore them, or delete the filter (crawlfleet bloom-info "
                f"shows it; SCHEDULER_FLUSH_ON_START=True clears it)"
            )
        self._allocate(reset=False)

    def _allocate(self, reset: bool) -> None:
        """Create missing blocks at full size (emptying them first when ``reset``)."""
        last_byte = -(-self.layout.block_bits // 8) - 1
        if isinstance(self.redis, RedisCluster):  # a cluster pipeline runs no script
            for block_key in self.block_keys:
                self.redis.eval(_ALLOCATE_SCRIPT, 1, block_key, last_byte, "1" if reset else "0")
            return
        pipe = self.redis.pipeline(transaction=False)
        for block_key in self.block_keys:
            pipe.eval(_ALLOCATE_SCRIPT, 1, block_key, last_byte, "1" if reset else "0")
        pipe.execute()

    @classmethod
    def existing(cls, redis_client: redis.Redis, key: str) -> BloomFilter:
        """Open the filter recorded under ``key`` with its stored parameters (``bloom-info``)."""
        meta_key = f"{key}:meta"
        meta_type = redis_client.type(meta_key)
        if meta_type in (b"none", "none"):
            raise BloomConfigError(f"no crawlfleet Bloom filter at key {key!r} (no {meta_key})")
        if meta_type not in (b"hash", "hash"):
            raise BloomConfigError(f"Redis key {meta_key!r} is not Bloom filter metadata")
        stored = _decode_pairs(redis_client.hgetall(meta_key))
        return cls(redis_client, key, layout=BloomLayout.from_meta(key, stored))

    @staticmethod
    def destroy(redis_client: redis.Redis, layout: BloomLayout) -> None:
        """Delete the filter at ``layout.key``, whatever its recorded parameters, and its meta."""
        keys = set(layout.block_keys)
        try:
            stored = _decode_pairs(redis_client.hgetall(layout.meta_key))
            if stored:
                keys.update(BloomLayout.from_meta(layout.key, stored).block_keys)
        except (redis.ResponseError, BloomConfigError):
            pass  # not our metadata: there are no other blocks to find
        pipe = redis_client.pipeline(transaction=False)
        for key in sorted(keys):
            pipe.delete(key)
        pipe.delete(layout.meta_key)
        pipe.execute()

    # -- operations ----------------------------------------------------------------------------

    def add(self, fp: bytes) -> bool:
        """Record ``fp``; True if it was new. Atomic across processes, one round trip."""
        key, item = self.script_item(fp)
        return self._run(self._add_script, key, item, len(item)) == b"1"

    def __contains__(self, fp: object) -> bool:
        key, item = self.script_item(fp)
        return self._run(self._contains_script, key, item, len(item)) == b"1"

    def add_many(self, fps: Iterable[bytes]) -> list[bool]:
        """Record every fingerprint; True for each one that was new (in order). One round trip."""
        return self._batch(self._add_script, fps)

    def contains_many(self, fps: Iterable[bytes]) -> list[bool]:
        """Membership of every fingerprint, in order. One round trip."""
        return self._batch(self._contains_script, fps)

    def _run(self, script: Any, key: str, data: bytes, step: int) -> bytes:
        try:
            return bytes(script(keys=[key], args=[data, step]))
        except redis.ResponseError as exc:
            raise self._key_error(key, exc) from None

    def _batch(self, script: Any, fps: Iterable[bytes]) -> list[bool]:
        items = [self.script_item(fp) for fp in fps]
        groups: Iterable[tuple[str, Sequence[int]]]
        if self.blocks == 1:
            groups = [(self.key, range(len(items)))]
        else:
            by_key: dict[str, list[int]] = {}
            for position, (key, _) in enumerate(items):
                by_key.setdefault(key, []).append(position)
            groups = by_key.items()
        step = self.layout.item_size
        calls: list[tuple[str, bytes, int]] = []
        order: list[int] = []  # input position of each flag, in reply order
        for key, positions in groups:
            for start in range(0, len(positions), SCRIPT_BATCH):
                chunk = positions[start : start + SCRIPT_BATCH]
                calls.append((key, b"".join([items[i][1] for i in chunk]), step))
                order.extend(chunk)
        if not calls:
            return []
        result = [False] * len(items)
        for position, flag in zip(order, b"".join(self._evalsha_many(script, calls)), strict=True):
            result[position] = flag == 49  # b"1"
        return result

    def _evalsha_many(self, script: Any, calls: Sequence[tuple[str, bytes, int]]) -> list[bytes]:
        """Run ``script`` once per call in one pipelined round trip (reloading it if needed)."""
        if len(calls) == 1:
            return [self._run(script, *calls[0])]
        replies = self._pipeline(script, calls)
        missing = [
            i for i, r in enumerate(replies) if isinstance(r, redis.exceptions.NoScriptError)
        ]
        if missing:
            # Redis lost the script (restart, SCRIPT FLUSH); those calls did not run: rerun them.
            self.redis.script_load(script.script)
            again = self._pipeline(script, [calls[i] for i in missing])
            for i, reply in zip(missing, again, strict=True):
                replies[i] = reply
        for (key, _, _), reply in zip(calls, replies, strict=True):
            if isinstance(reply, Exception):
                raise self._key_error(key, reply)
        return [bytes(r) for r in replies]

    def _pipeline(self, script: Any, calls: Sequence[tuple[str, bytes, int]]) -> list[Any]:
        if isinstance(self.redis, RedisCluster):
            # a cluster pipeline runs no script: one call after the other, errors in place
            replies: list[Any] = []
            for key, data, step in calls:
                try:
                    replies.append(self.redis.evalsha(script.sha, 1, key, data, step))
                except redis.ResponseError as exc:
                    replies.append(exc)
            return replies
        pipe = self.redis.pipeline(transaction=False)
        for key, data, step in calls:
            pipe.execute_command("EVALSHA", script.sha, 1, key, data, step)
        return list(pipe.execute(raise_on_error=False))

    def _key_error(self, key: str, exc: Exception) -> Exception:
        if "WRONGTYPE" in str(exc):
            return BloomConfigError(f"Redis key {key!r} no longer holds a Bloom filter block")
        return exc

    # -- maintenance ---------------------------------------------------------------------------

    def clear(self) -> None:
        """Forget every fingerprint (keeps the recorded parameters)."""
        self._allocate(reset=True)

    def info(self) -> dict[str, Any]:
        """Size, k, capacity, estimated count and error rate now, from the bits set in Redis."""
        pipe = self.redis.pipeline(transaction=False)
        for block_key in self.block_keys:
            pipe.bitcount(block_key)
            pipe.strlen(block_key)
        replies = pipe.execute()
        set_bits = [int(n) for n in replies[0::2]]
        allocated = sum(int(n) for n in replies[1::2])
        mb, k = self.layout.block_bits, self.hashes
        # Swamidass-Baldi estimate per block: n = -(m/k) ln(1 - X/m); a full block is unbounded.
        count = sum(-(mb / k) * math.log(1 - x / mb) if x < mb else math.inf for x in set_bits)
        fill = sum(set_bits) / self.bits
        # A lookup lands in one block uniformly at random.
        error_now = sum((x / mb) ** k for x in set_bits) / self.blocks
        design = expected_error_rate(self.bits, k, self.capacity)
        over = not math.isfinite(count) or count > self.capacity
        warning = (
            f"{self.key} is past its design load ({self.capacity:,} fingerprints): its "
            f"false-positive rate is now about {error_now:.3g}, above the "
            f"{self.layout.error_rate:g} it was sized for; size a larger filter for the next crawl"
            if over
            else None
        )
        return {
            "key": self.key,
            "keys": list(self.block_keys),
            "bits": self.bits,
            "size_bytes": -(-self.bits // 8),
            "allocated_bytes": allocated,
            "hashes": k,
            "blocks": self.blocks,
            "capacity": self.capacity,
            "error_rate": self.layout.error_rate,
            "design_error_rate": design,
            "bits_set": sum(set_bits),
            "fill_ratio": fill,
            "count_estimate": round(count) if math.isfinite(count) else None,
            "estimated_error_rate": error_now,
            "over_capacity": over,
            "warning": warning,
        }


def _setting(settings: BaseSettings, name: str, kind: type, default: Any = None) -> Any:
    """A number setting as ``kind``; strings (``-s NAME=VALUE``) are converted, junk is kept as is
    so that the layout's check reports it by name."""
    raw = settings.get(name, default)
    if isinstance(raw, str):
        try:
            return kind(raw.strip())
        except ValueError:
            return raw
    if kind is int and isinstance(raw, float) and raw.is_integer():
        return int(raw)
    return raw


def layout_from_settings(settings: BaseSettings, spider: str) -> BloomLayout:
    """The Bloom filter layout for ``spider`` from the ``BLOOMFILTER_*`` Scrapy settings (its
    key tagged ``{<spider>}`` on a Redis Cluster)."""
    from crawlfleet.frontier.config import redis_url

    template = settings.get(BLOOMFILTER_KEY.setting) or BLOOMFILTER_KEY.default
    tagged = is_cluster_url(redis_url(settings))
    return BloomLayout(
        BLOOMFILTER_KEY.resolve(template, spider, BloomConfigError, tagged=tagged),
        _setting(settings, "BLOOMFILTER_CAPACITY", int, DEFAULT_CAPACITY),
        _setting(settings, "BLOOMFILTER_ERROR_RATE", float, DEFAULT_ERROR_RATE),
        bit=_setting(settings, "BLOOMFILTER_BIT", int),
        hash_number=_setting(settings, "BLOOMFILTER_HASH_NUMBER", int),
        blocks=_setting(settings, "BLOOMFILTER_BLOCKS", int),
    )


def _decode_pairs(reply: Any) -> dict[str, str]:
    def text(v: Any) -> str:
        return v.decode() if isinstance(v, bytes) else str(v)

    if isinstance(reply, dict):
        return {text(k): text(v) for k, v in reply.items()}
    items = list(reply or [])
    return {text(items[i]): text(items[i + 1]) for i in range(0, len(items) - 1, 2)}


def _describe(params: dict[str, str]) -> str:
    return ", ".join(f"{name}={value}" for name, value in params.items())
