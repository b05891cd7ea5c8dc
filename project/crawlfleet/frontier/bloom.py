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

A scalable filter (``scalable=True``; a crawl's default, ``BLOOMFILTER_SCALABLE``) is Almeida et
al.'s: it starts with one small layer sized for ``initial_capacity`` fingerprints and adds a layer
four times larger each time the newest is full, up to ``capacity`` in all (the last layer holds
the remainder). Layer i has k0 + i hashes and is full at half its bits set, so its
false-positive rate is 2^-(k0+i) and the filter's is below 2^-(k0-1) <= ``error_rate`` at any
load up to ``capacity``. Layers are Redis strings ``<key>``, ``<key>:1``, ``<key>:2`` … (on a
Redis Cluster the key must carry a hash tag, as a crawl's does, so they share its slot); each
starts with a 64-bit header (u32 fingerprints added to it; in layer 0 also u16 layers in use at
bit 32). A fingerprint's argument is 18 bytes (h1, h2, the first and last layers' bits, k0, the
number of layers), a length no fixed filter's argument has (4 bytes per hash), so the one
``check_and_add`` serves both kinds: the Lua function computes each layer's bits from h1 and h2,
checks every layer in use, and adds the fingerprint to the newest one, all in one script.
Creating a scalable filter allocates only its first layer (about 2 MB for a million fingerprints
at 0.001, against 171 MiB for a fixed filter of 100,000,000); each later layer is allocated
inside the enqueue call that fills the one before it. An existing fixed filter (its
``<key>:meta`` says so) is opened as it was recorded, whatever the settings say about scaling.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence
from typing import Any

import redis
from redis.cluster import RedisCluster

from crawlfleet.frontier.bloomlayout import (
    DEFAULT_CAPACITY,
    DEFAULT_ERROR_RATE,
    DEFAULT_INITIAL_CAPACITY,
    GROWTH,
    HASH_SCHEME,
    HEADER_BITS,
    MAX_LAYER_BITS,
    SCALABLE_SCHEME,
    BloomConfigError,
    BloomLayout,
    Layout,
    ScalableLayout,
    expected_error_rate,
    layout_from_meta,
)
from crawlfleet.hub.keys import has_hash_tag
from crawlfleet.hub.lua import read_lua

logger = logging.getLogger(__name__)

# Fingerprints per Lua call inside one add_many/contains_many round trip: keeps each script short
# so Redis serves other workers between them (atomicity is per fingerprint anyway).
SCRIPT_BATCH = 2000

# A scalable filter's layers (see the module docstring). sbf_layers(key, arg, add) reads the
# argument, checks every layer in use and, when ``add`` and the fingerprint is in none of them, sets
# its bits in the newest layer and counts it there, adding the next layer when that one is full.
# Returns 1 when the fingerprint is in no layer (new), else 0. Bit j of layer i (m bits, k0 + i
# hashes) is HEADER + (h1 + j*h2 + (j^3 - j)/6) mod m, exact in Lua's doubles (all below 2^40).
_LUA_SCALABLE = (
    f"local SBF_HEADER, SBF_GROWTH, SBF_MAX_BITS, SBF_LN2 = {HEADER_BITS}, {GROWTH}, "
    f"{MAX_LAYER_BITS}, {math.log(2)!r}\n" + read_lua("crawlfleet.frontier", "bloom_layers.lua")
)

# One BITFIELD call sets all k bits and returns their old values (faster than k SETBITs in Lua). An
# argument whose length is not a multiple of 4 is a scalable filter's.
LUA_CHECK_AND_ADD = _LUA_SCALABLE + read_lua("crawlfleet.frontier", "bloom_check_and_add.lua")

# GETBIT one by one: a non-member usually stops at the first or second bit.
_LUA_CONTAINS = read_lua("crawlfleet.frontier", "bloom_contains.lua")

# KEYS[1]: block key; ARGV[1]: concatenated per-fingerprint items; ARGV[2]: bytes per item.
# Returns one '1' (new / present) or '0' per fingerprint, in order.
_LUA_BATCH = read_lua("crawlfleet.frontier", "bloom_batch.lua")
_ADD_SCRIPT = LUA_CHECK_AND_ADD + _LUA_BATCH % "check_and_add"
_CONTAINS_SCRIPT = _LUA_SCALABLE + _LUA_CONTAINS + _LUA_BATCH % "contains"

# Creates the metadata hash unless it exists, then returns it (one key: cluster-safe).
_META_SCRIPT = read_lua("crawlfleet.frontier", "bloom_meta.lua")

# Creates a block at its full size in one allocation (SETRANGE on a missing key allocates exactly;
# growing a string bit by bit would over-allocate up to 2x, Redis's greedy string growth).
# ARGV[1]: index of the last byte; ARGV[2]: '1' to empty an existing block first.
_ALLOCATE_SCRIPT = read_lua("crawlfleet.frontier", "bloom_allocate.lua")

# A scalable filter's layers (KEYS, all of them): deletes them when ARGV[2] is '1', then creates
# layer 0 at its full size (ARGV[1]: index of its last byte) with "1 layer in use" in its header.
_ALLOCATE_LAYERS_SCRIPT = read_lua("crawlfleet.frontier", "bloom_allocate_layers.lua")


class BloomFilter:
    """A Bloom filter in Redis under ``key`` (see the module docstring for the layout).

    Takes the same sizing arguments as :class:`BloomLayout`, or with ``scalable=True`` those of
    :class:`ScalableLayout` (or a ready ``layout``). Creating the object checks that the keys are
    free or hold this filter, and records (or verifies) its parameters in Redis; a scalable layout
    finding a fixed filter recorded under ``key`` opens that filter instead.
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
        scalable: bool = False,
        initial_capacity: int = DEFAULT_INITIAL_CAPACITY,
        layout: Layout | None = None,
    ) -> None:
        self.redis = redis_client
        if layout is None and scalable:
            layout = ScalableLayout(key, capacity, error_rate, initial_capacity=initial_capacity)
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
        if isinstance(self.layout, ScalableLayout):
            try:
                stored = _decode_pairs(self.redis.hgetall(self.layout.meta_key))
            except redis.ResponseError:
                stored = {}  # another type: reported below
            if stored.get("scheme") == HASH_SCHEME:
                # a fixed filter made before scaling was the default: it keeps working as it is
                self.layout = BloomLayout.from_meta(self.key, stored)
                logger.info(
                    "Bloom filter %s is a fixed filter of %d bits (recorded in %s): used as it is",
                    self.key,
                    self.layout.bits,
                    self.layout.meta_key,
                )
        layout = self.layout
        if (
            isinstance(layout, ScalableLayout)
            and isinstance(self.redis, RedisCluster)
            and not has_hash_tag(layout.key)
        ):
            raise BloomConfigError(
                f"BLOOMFILTER_KEY {layout.key!r} has no hash tag: on a Redis Cluster a scalable "
                f"filter's layers ({layout.key}:1 …) must share its slot (a key like '{{book}}:bf')"
            )
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
        wanted = {name: fresh[name] for name in layout.CHECKED}
        kind = ScalableLayout if stored.get("scheme") == SCALABLE_SCHEME else BloomLayout
        found = {name: stored.get(name, "?") for name in kind.CHECKED}
        if found != wanted:
            raise BloomConfigError(
                f"Bloom filter {layout.key!r} was created with {_describe(found)} but the settings "
                f"(BLOOMFILTER_CAPACITY/ERROR_RATE/BIT/HASH_NUMBER/BLOCKS/SCALABLE/"
                f"INITIAL_CAPACITY) now give {_describe(wanted)}: restore them, or delete the "
                f"filter (crawlfleet bloom-info shows it; SCHEDULER_FLUSH_ON_START=True clears it)"
            )
        self._allocate(reset=False)

    def _allocate(self, reset: bool) -> None:
        """Create missing blocks at full size (emptying them first when ``reset``); a scalable
        filter's first layer (``reset`` deletes every layer first)."""
        if isinstance(self.layout, ScalableLayout):
            keys = self.layout.layer_keys
            size = -(-(HEADER_BITS + self.layout.layer_bits[0]) // 8)
            self.redis.eval(_ALLOCATE_LAYERS_SCRIPT, len(keys), *keys, size - 1, int(reset))
            return
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
        return cls(redis_client, key, layout=layout_from_meta(key, stored))

    @staticmethod
    def destroy(redis_client: redis.Redis, layout: Layout) -> None:
        """Delete the filter at ``layout.key``, whatever its recorded parameters, and its meta."""
        keys = set(_all_keys(layout))
        try:
            stored = _decode_pairs(redis_client.hgetall(layout.meta_key))
            if stored:
                keys.update(_all_keys(layout_from_meta(layout.key, stored)))
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
            groups = [(self.block_keys[0], range(len(items)))]
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
        for position, bit in zip(order, b"".join(self._evalsha_many(script, calls)), strict=True):
            result[position] = bit == 49  # b"1"
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
        if isinstance(self.layout, ScalableLayout):
            return self._scalable_info(self.layout)
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
            "scalable": False,
            "layers": 1,
            "max_layers": 1,
        }

    def _scalable_info(self, layout: ScalableLayout) -> dict[str, Any]:
        """:meth:`info` of a scalable filter: the layers in use, their counts (in their headers)
        and set bits (without the headers)."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.execute_command("BITFIELD", layout.layer_keys[0], "GET", "u16", 32)
        for key in layout.layer_keys:
            pipe.execute_command("BITFIELD", key, "GET", "u32", 0)
            pipe.bitcount(key, HEADER_BITS // 8, -1)
            pipe.strlen(key)
        first, *replies = pipe.execute()
        layers = max(1, int(first[0]))
        counts = [int(r[0]) for r in replies[0::3]][:layers]
        set_bits = [int(n) for n in replies[1::3]][:layers]
        allocated = sum(int(n) for n in replies[2::3])
        shape = list(zip(layout.layer_bits, layout.layer_hashes, strict=True))
        in_use = shape[:layers]
        count = sum(counts)
        # a lookup is a false positive when any layer answers yes
        error_now = 1 - math.prod(
            1 - (x / m) ** k for x, (m, k) in zip(set_bits, in_use, strict=True)
        )
        design = 1 - math.prod(
            1 - expected_error_rate(m, k, n)
            for (m, k), n in zip(shape, layout.layer_capacity, strict=True)
        )
        bits = sum(m for m, _ in in_use)
        over = count > self.capacity
        warning = (
            f"{self.key} is past its design load ({self.capacity:,} fingerprints) in its last "
            f"layer: its false-positive rate is now about {error_now:.3g}, above the "
            f"{layout.error_rate:g} it was sized for; size a larger filter for the next crawl"
            if over
            else None
        )
        return {
            "key": self.key,
            "keys": layout.layer_keys[:layers],
            "bits": bits,
            "size_bytes": sum(-(-(HEADER_BITS + m) // 8) for m, _ in in_use),
            "allocated_bytes": allocated,
            "hashes": in_use[-1][1],
            "blocks": 1,
            "capacity": self.capacity,
            "error_rate": layout.error_rate,
            "design_error_rate": design,
            "bits_set": sum(set_bits),
            "fill_ratio": sum(set_bits) / bits,
            "count_estimate": count,
            "estimated_error_rate": error_now,
            "over_capacity": over,
            "warning": warning,
            "scalable": True,
            "layers": layers,
            "max_layers": len(layout.layer_bits),
        }


def _all_keys(layout: Layout) -> list[str]:
    """Every key a filter of ``layout`` may hold bits in (a scalable filter's unused layers too)."""
    if isinstance(layout, ScalableLayout):
        return layout.layer_keys
    return layout.block_keys


def _decode_pairs(reply: Any) -> dict[str, str]:
    def text(v: Any) -> str:
        return v.decode() if isinstance(v, bytes) else str(v)

    if isinstance(reply, dict):
        return {text(k): text(v) for k, v in reply.items()}
    items = list(reply or [])
    return {text(items[i]): text(items[i + 1]) for i in range(0, len(items) - 1, 2)}


def _describe(params: dict[str, str]) -> str:
    return ", ".join(f"{name}={value}" for name, value in params.items())
