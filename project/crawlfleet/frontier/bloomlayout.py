"""The shape of a Bloom filter in Redis: how big, how many hashes and blocks or layers, and where.

``BloomLayout`` is a fixed filter (bits, hashes, blocks, from capacity and error rate, or
scrapy-redis-bloomfilter's ``BLOOMFILTER_BIT``/``HASH_NUMBER``), ``ScalableLayout`` a scalable
one (layers that grow four times at a time, see ``crawlfleet.frontier.bloom``); each turns a
fingerprint into the argument the Lua functions read and records itself in ``<key>:meta``.
``layout_from_settings`` reads the ``BLOOMFILTER_*`` Scrapy settings, ``layout_from_meta`` a
filter that exists. :class:`crawlfleet.frontier.bloom.BloomFilter` opens a layout in Redis.
"""

from __future__ import annotations

import hashlib
import logging
import math
import operator
import struct
from typing import Any

from scrapy.settings import BaseSettings

from crawlfleet.hub.connect import redis_url
from crawlfleet.hub.keys import BLOOMFILTER_KEY, has_hash_tag
from crawlfleet.hub.urls import is_cluster_url
from crawlfleet.settingtable import default
from crawlfleet.settingtable.values import flag

logger = logging.getLogger("crawlfleet.frontier.bloom")

# Defaults of BLOOMFILTER_CAPACITY and BLOOMFILTER_ERROR_RATE (171 MiB, k = 10), the settings
# table's (crawlfleet.settingtable.frontier).
DEFAULT_CAPACITY: int = default("BLOOMFILTER_CAPACITY")
DEFAULT_ERROR_RATE: float = default("BLOOMFILTER_ERROR_RATE")
# The settings that size a fixed filter (scrapy-redis-bloomfilter's two, and the blocks), by the
# layout's argument they give.
FIXED_SIZE = {
    "bit": "BLOOMFILTER_BIT",
    "hash_number": "BLOOMFILTER_HASH_NUMBER",
    "blocks": "BLOOMFILTER_BLOCKS",
}
# Redis strings hold at most 512 MB, i.e. 2^32 bits; SETBIT offsets are < 2^32.
MAX_BLOCK_BITS = 1 << 32
# scrapy-redis-bloomfilter's defaults, used when only one of bit/hash_number is given.
COMPAT_BIT = 30
COMPAT_HASH_NUMBER = 6
# Warn when the compatibility sizing gives more than this expected error rate at capacity.
COMPAT_WARN_ERROR_RATE = 0.01
# Bump when the way bits are derived from a fingerprint changes: old filters then refuse to open.
HASH_SCHEME = "edh-v1"
SCALABLE_SCHEME = "sbf-v1"
# A scalable filter's first layer holds this many fingerprints (BLOOMFILTER_INITIAL_CAPACITY).
DEFAULT_INITIAL_CAPACITY: int = default("BLOOMFILTER_INITIAL_CAPACITY")
# Each layer of a scalable filter is this many times larger than the one before.
GROWTH = 4
# Each scalable layer starts with a header: u32 fingerprints in it (bit 0), u16 layers (bit 32).
HEADER_BITS = 64
MAX_LAYER_BITS = MAX_BLOCK_BITS - HEADER_BITS
# Layers are numbered by one byte in a fingerprint's argument.
MAX_LAYERS = 255
SCALABLE_ITEM_SIZE = 18

_DIGEST = struct.Struct(">QQI")
_DIGEST_BYTES = _DIGEST.size  # 20, the size of Scrapy's SHA-1 request fingerprints
_LN2 = math.log(2)


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

    # the recorded parameters a worker's settings must agree with
    CHECKED = ("scheme", "bits", "hashes", "blocks")

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


class ScalableLayout:
    """Where a scalable Bloom filter's bits go: its layers' sizes, hashes, keys and capacities.

    Pure computation, no Redis (see the module docstring for the scheme). Layer 0 holds
    ``initial_capacity`` fingerprints (at most ``capacity``) with k0 = ceil(log2(1/p)) + 1 hashes;
    layer i has GROWTH^i times its bits and k0 + i hashes; the last layer holds what is left of
    ``capacity``. Errors name the setting (``BLOOMFILTER_*``) that holds the bad value.
    """

    blocks = 1
    item_size = SCALABLE_ITEM_SIZE
    # the recorded parameters a worker's settings must agree with
    CHECKED = ("scheme", "layer_bits", "first_hashes")

    def __init__(
        self,
        key: str,
        capacity: int = DEFAULT_CAPACITY,
        error_rate: float = DEFAULT_ERROR_RATE,
        *,
        initial_capacity: int = DEFAULT_INITIAL_CAPACITY,
    ) -> None:
        if not isinstance(key, str) or not key:
            raise BloomConfigError(f"BLOOMFILTER_KEY must be a non-empty string, got {key!r}")
        self.key = key
        self.meta_key = f"{key}:meta"
        self.capacity = _positive_int(capacity, "BLOOMFILTER_CAPACITY")
        self.error_rate = _error_rate(error_rate, "BLOOMFILTER_ERROR_RATE")
        initial = _positive_int(initial_capacity, "BLOOMFILTER_INITIAL_CAPACITY")
        self.initial_capacity = min(initial, self.capacity)
        # the layers' rates 2^-k0, 2^-(k0+1) … add up to less than 2^-(k0-1) <= error_rate
        self.first_hashes = math.ceil(-math.log2(self.error_rate)) + 1
        first_bits = math.ceil(self.initial_capacity * self.first_hashes / _LN2)
        if first_bits > MAX_LAYER_BITS:
            raise BloomConfigError(
                f"BLOOMFILTER_INITIAL_CAPACITY={initial} needs a first layer of {first_bits} "
                f"bits, more than one Redis string holds (2^32 bits): lower it"
            )
        self.layer_bits: list[int] = []
        self.layer_capacity: list[int] = []
        total = 0
        while total < self.capacity:
            if len(self.layer_bits) == MAX_LAYERS:
                raise BloomConfigError(
                    f"BLOOMFILTER_CAPACITY={self.capacity} needs more than {MAX_LAYERS} layers "
                    f"of a scalable filter: raise BLOOMFILTER_INITIAL_CAPACITY"
                )
            k = self.first_hashes + len(self.layer_bits)
            bits = min(first_bits * GROWTH ** len(self.layer_bits), MAX_LAYER_BITS)
            if total + _layer_capacity(bits, k) >= self.capacity:
                # the last layer holds the rest
                bits = min(bits, max(k, math.ceil((self.capacity - total) * k / _LN2)))
            self.layer_bits.append(bits)
            self.layer_capacity.append(_layer_capacity(bits, k))
            total += self.layer_capacity[-1]
        self.layer_hashes = [self.first_hashes + i for i in range(len(self.layer_bits))]
        # Layer 0 is the key; on a Redis Cluster the key's hash tag keeps the others in its slot.
        self.layer_keys = [key] + [f"{key}:{i}" for i in range(1, len(self.layer_bits))]
        self.block_keys = self.layer_keys[:1]
        self.hashes = self.first_hashes
        self.bits = sum(self.layer_bits)
        self._shape = struct.pack(
            ">IIBB", first_bits, self.layer_bits[-1], self.first_hashes, len(self.layer_bits)
        )

    @classmethod
    def from_meta(cls, key: str, stored: dict[str, str]) -> ScalableLayout:
        """The layout recorded in a scalable filter's metadata hash."""
        try:
            layout = cls(
                key,
                int(stored["capacity"]),
                float(stored["error_rate"]),
                initial_capacity=int(stored["initial_capacity"]),
            )
            if stored["scheme"] != SCALABLE_SCHEME or layout.meta() != stored:
                raise ValueError(stored["scheme"])
        except (KeyError, ValueError, BloomConfigError):
            raise BloomConfigError(
                f"Redis key {key}:meta is not valid crawlfleet Bloom filter metadata"
            ) from None
        return layout

    def meta(self) -> dict[str, str]:
        """What is recorded in ``<key>:meta`` when the filter is created."""
        return {
            "scheme": SCALABLE_SCHEME,
            "capacity": str(self.capacity),
            "error_rate": repr(self.error_rate),
            "initial_capacity": str(self.initial_capacity),
            "layer_bits": ",".join(map(str, self.layer_bits)),
            "first_hashes": str(self.first_hashes),
        }

    def script_item(self, fp: object) -> tuple[str, bytes]:
        """Layer 0's key and the 18-byte argument ``check_and_add`` reads for ``fp``."""
        if not isinstance(fp, bytes):
            raise TypeError(f"Bloom filter members are bytes fingerprints, not {type(fp).__name__}")
        if len(fp) < _DIGEST_BYTES:
            fp = hashlib.blake2b(fp, digest_size=_DIGEST_BYTES).digest()
        return self.layer_keys[0], fp[0:4] + fp[8:12] + self._shape

    def offsets(self, fp: bytes) -> list[list[int]]:
        """The bit offsets of ``fp`` in each layer, header included; for tests and diagnostics."""
        _, arg = self.script_item(fp)
        h1, h2 = struct.unpack_from(">II", arg)
        out = []
        for m, k in zip(self.layer_bits, self.layer_hashes, strict=True):
            a, s = h1 % m, h2 % m or 1
            out.append([HEADER_BITS + (a + j * s + (j**3 - j) // 6) % m for j in range(k)])
        return out


def _layer_capacity(bits: int, hashes: int) -> int:
    """Fingerprints a layer holds before half its bits are set (rate 2^-hashes)."""
    return math.floor(bits * _LN2 / hashes)


Layout = BloomLayout | ScalableLayout


def _setting(settings: BaseSettings, name: str, kind: type) -> Any:
    """A number setting as ``kind``; strings (``-s NAME=VALUE``) are converted, junk is kept as is
    so that the layout's check reports it by name; unset: the settings table's default."""
    raw = settings.get(name, default(name))
    if isinstance(raw, str):
        try:
            return kind(raw.strip())
        except ValueError:
            return raw
    if kind is int and isinstance(raw, float) and raw.is_integer():
        return int(raw)
    return raw


def layout_from_settings(
    settings: BaseSettings, spider: str, shard: int = 0, shards: int = 1
) -> Layout:
    """The Bloom filter layout for ``spider`` from the ``BLOOMFILTER_*`` Scrapy settings (its
    key tagged ``{<spider>}`` on a Redis Cluster; in shard ``shard`` of ``shards``, that shard's
    filter, each shard sized alike): scalable unless ``BLOOMFILTER_SCALABLE`` is
    False or scrapy-redis-bloomfilter's ``BLOOMFILTER_BIT``/``HASH_NUMBER`` or
    ``BLOOMFILTER_BLOCKS`` fix the size."""
    template = settings.get(BLOOMFILTER_KEY.setting) or default(BLOOMFILTER_KEY.setting)
    tagged = is_cluster_url(redis_url(settings))
    key = BLOOMFILTER_KEY.resolve(
        template, spider, BloomConfigError, tagged=tagged, shard=shard, shards=shards
    )
    capacity = _setting(settings, "BLOOMFILTER_CAPACITY", int)
    error_rate = _setting(settings, "BLOOMFILTER_ERROR_RATE", float)
    fixed = {name: _setting(settings, setting, int) for name, setting in FIXED_SIZE.items()}
    unsized = not any(v is not None for v in fixed.values())
    scalable = flag(settings, "BLOOMFILTER_SCALABLE", unsized, BloomConfigError)
    if scalable:
        given = [FIXED_SIZE[n] for n, v in fixed.items() if v is not None]
        if given:
            raise BloomConfigError(
                f"{given[0]} sizes a fixed filter: set BLOOMFILTER_SCALABLE=False with it, or "
                f"leave it unset"
            )
        initial = _setting(settings, "BLOOMFILTER_INITIAL_CAPACITY", int)
        return ScalableLayout(key, capacity, error_rate, initial_capacity=initial)
    return BloomLayout(key, capacity, error_rate, **fixed)


def layout_from_meta(key: str, stored: dict[str, str]) -> Layout:
    """The layout of the filter recorded in ``stored`` (``<key>:meta``), fixed or scalable."""
    if stored.get("scheme") == SCALABLE_SCHEME:
        return ScalableLayout.from_meta(key, stored)
    return BloomLayout.from_meta(key, stored)
