"""The log cleaner's offset map: for each key in the dirty part of a log, the offset of its last record.

Kafka's ``SkimpyOffsetMap``: the map stores a 16-byte hash of each key, never the key, in a table
of fixed-size slots, so its memory is bounded by ``log.cleaner.dedupe.buffer.size`` (divided
among ``log.cleaner.threads``) whatever the keys are. Layout of the table (a bytearray)::

    slot (24 bytes)   hash of the key   16 bytes   SipHash-1-3, 128-bit output, keyed per map
                      offset + 1         8 bytes   native int64; 0 marks an empty slot

A power of two of slots, at most what the memory holds. The table starts small and doubles
(its entries moved over) each time it is ``log.cleaner.io.buffer.load.factor`` full, up to the
memory or to what the pass can need (no more slots than the dirty part has offsets): a small log
does not take the whole buffer, and a map of few keys stays in the processor's caches. It takes
at most ``slots * load factor`` keys: a pass whose dirty part has more stops its map there
(:attr:`OffsetMap.latest_offset`), cleans up to that point and leaves the rest dirty for the next
pass, as in Kafka. Slots are probed by double hashing (odd step over a power of two), so a
lookup never loops.

A record is kept by :meth:`OffsetMap.filter_records` when it is past the map, or it has a key and
its offset is the map's offset for that key (or the key is not in the map: a record of the clean
part whose key has no newer record), and — for a tombstone — tombstones are still retained. A
keyless record inside the map's range goes (it can only be there from before the topic was
compacted). The hash is keyed with random bytes drawn for each map: keys chosen to collide (which
would drop a key's latest record) cannot be computed in advance.

Why 16 bytes of hash. Kafka's map keeps the MD5 digest of each key and compares digests, never
keys: two keys with one digest count as one key, and the older one's latest record is dropped. The
risk is a collision among the keys of one pass, about n²/2^129 for n keys: 2·10^-26 for the 3.8
million keys of a full map of the default 128 MiB. An 8-byte hash (16-byte slots: half again as
many keys a megabyte) would make that n²/2^65, 4·10^-7 for every full pass — over the passes of a
cluster's life, a real chance of a silent loss — so kraftpy keeps Kafka's 16 bytes. Unlike MD5, whose collisions
can be made at will (a producer could write a key that erases another's), SipHash is keyed afresh
for every map.

The superseded bitmap (C map only). Beside the table the map keeps one bit per offset of the
dirty part, from the first offset given to :meth:`OffsetMap.reset` (at most ``memory / 8`` bytes
of them; offsets past that are looked up as before): when the map pass puts a record whose key's
slot holds an older offset, that offset's bit is set. The copy then decides a record of the dirty
part by its bit alone — set: a later record of its key exists — without hashing its key a second
time or reading the table; only records of the clean part are looked up. It answers as the table
would, by construction, for the records the map pass read at those offsets, which are those the
copy reads (nothing rewrites a log's old segments while a pass runs).

The loops over records are in C (:mod:`kraftpy.protocol._record_scan`), and so is the copy's
walk over the batches of a read (:meth:`OffsetMap.clean_batches`); without it, the same map is a
Python dict from BLAKE2b hashes to offsets, with the same capacity and the same answers.
"""

from __future__ import annotations

import hashlib
import math
import os
import struct
from array import array
from typing import NamedTuple

from kraftpy.protocol.batch_header import CODEC_MASK, HEADER_SIZE, CorruptRecordError, read_header
from kraftpy.protocol.compression import decompress
from kraftpy.protocol.records import _encode_record, decode_records

try:
    from kraftpy.protocol._record_scan import clean_batches as _c_clean
    from kraftpy.protocol._record_scan import filter_records as _c_filter
    from kraftpy.protocol._record_scan import grow_table as _c_grow
    from kraftpy.protocol._record_scan import map_batches as _c_map_batches
    from kraftpy.protocol._record_scan import map_records as _c_map
    from kraftpy.protocol._record_scan import rewrite_records as _c_rewrite
except ImportError:  # not compiled: the Python versions below give the same answers
    _c_map = _c_map_batches = _c_filter = _c_rewrite = _c_grow = _c_clean = None

#: Whether the C loops are in use.
ACCELERATED = _c_map is not None
SLOT_SIZE = 24
HASH_SIZE = 16
#: Slots of a new table (384 KiB), before it grows.
INITIAL_SLOTS = 1 << 14
#: The states of :meth:`OffsetMap.clean_batches`.
CLEAN_DONE, CLEAN_FOR_PYTHON, CLEAN_OUT_FULL = 0, 1, 2
#: int64 fields per output batch of :meth:`OffsetMap.clean_batches`.
INFO_FIELDS = 7
#: Its counters: bytes read, records read, records kept, keyless records dropped, batches emptied,
#: whether a kept tombstone was seen, and the earliest delete horizon of the kept tombstones.
(COUNT_BYTES_READ, COUNT_RECORDS_READ, COUNT_RECORDS_KEPT, COUNT_KEYLESS_DROPPED, COUNT_BATCHES_EMPTIED,
 COUNT_HORIZON_SEEN, COUNT_EARLIEST_HORIZON) = range(7)
COUNTERS = 7
#: A record's length and timestamp delta varints may grow by this many bytes when it is rewritten.
REWRITE_GROWTH = 15


def copy_room(batch_size: int, record_count: int) -> int:
    """The most bytes a batch may take once cleaned (its records' timestamp deltas moved)."""
    return batch_size + REWRITE_GROWTH * record_count
_SIPHASH_KEY = struct.Struct("<QQ")


class Filtered(NamedTuple):
    """What :meth:`OffsetMap.filter_records` decided for one batch's records (a tuple: one is made
    for every batch a pass reads)."""

    #: One byte per record: 1 keeps it.
    mask: bytes
    kept: int
    #: Tombstones among the kept records.
    tombstones: int
    #: Smallest and largest timestamp delta of the kept records (0 when none is kept).
    min_timestamp_delta: int
    max_timestamp_delta: int
    #: Records dropped because they have no key.
    keyless: int


class OffsetMap:
    """Key hash → offset of the key's last record, in at most ``memory`` bytes (see the module doc).

    Not thread-safe: one per cleaning at a time."""

    def __init__(self, memory: int, load_factor: float = 0.9, *, accelerated: bool | None = None) -> None:
        if not 0.0 < load_factor <= 1.0:
            raise ValueError(f"load factor must lie in (0, 1], got {load_factor}")
        slots = 1 << max(1, (memory // SLOT_SIZE).bit_length() - 1) if memory >= 2 * SLOT_SIZE else 0
        if int(slots * load_factor) < 1:
            raise ValueError(f"an offset map of {memory} bytes holds no key: log.cleaner.dedupe.buffer.size "
                             f"(divided among log.cleaner.threads) must hold at least one {SLOT_SIZE}-byte slot")
        self.max_slots = slots
        self.load_factor = load_factor
        self.accelerated = ACCELERATED if accelerated is None else accelerated and ACCELERATED
        self._slots = 0
        self._table = bytearray()
        #: The superseded bitmap (C map only): bit i is set once offset ``_superseded_base + i`` is
        #: known not to be its key's last (see the module doc); at most an eighth of ``memory``.
        self._superseded = bytearray()
        self._superseded_base = 0
        self._superseded_limit = memory // 8
        self._dict: dict[bytes, int] = {}
        self._k0 = self._k1 = 0
        self._seed = b""
        self._max_entries = 0
        #: Keys at which the table doubles.
        self._grow_at = 0
        #: Keys in the map.
        self.size = 0
        #: The last offset the map covers: records after it are past the map (kept).
        self.latest_offset = -1

    @property
    def capacity(self) -> int:
        """The most keys a map may hold with all of its memory."""
        return int(self.max_slots * self.load_factor)

    @property
    def slots(self) -> int:
        return self._slots

    @property
    def full(self) -> bool:
        return self.size >= self._max_entries

    @property
    def utilization(self) -> float:
        return self.size / self._slots if self._slots else 0.0

    def reset(self, expected_keys: int, first_offset: int = 0) -> None:
        """Empty the map for a pass over at most ``expected_keys`` keys (the dirty offsets), from ``first_offset``
        on (the first dirty offset), with a fresh hash key."""
        wanted = math.ceil(max(expected_keys, 1) / self.load_factor) + 1
        limit = min(self.max_slots, 1 << max(1, (wanted - 1).bit_length()))
        slots = min(limit, INITIAL_SLOTS)
        self._slots = slots
        self._max_entries = max(1, int(limit * self.load_factor))
        self._grow_at = max(1, int(slots * self.load_factor))
        self._seed = os.urandom(HASH_SIZE)
        self._k0, self._k1 = _SIPHASH_KEY.unpack(self._seed)
        self.size = 0
        self.latest_offset = -1
        if self.accelerated:
            self._table = bytearray(slots * SLOT_SIZE)
            self._superseded = bytearray(min(math.ceil(max(expected_keys, 0) / 8), self._superseded_limit))
            self._superseded_base = first_offset
        else:
            self._dict = {}

    def _bitmap(self, min_offset: int) -> tuple[bytearray, int]:
        """The superseded bitmap for puts from ``min_offset`` on. It tells which records are their key's
        last only where every keyed record was put: puts from another offset than the one the map was
        reset with drop it (the map's hashes then answer for every record)."""
        if min_offset != self._superseded_base and self._superseded:
            self._superseded = bytearray()
        return self._superseded, self._superseded_base

    def _hash(self, key: bytes) -> bytes:
        return hashlib.blake2b(key, digest_size=HASH_SIZE, key=self._seed).digest()

    def put_records(self, section: bytes | bytearray | memoryview, start: int, count: int, base_offset: int,
                    min_offset: int) -> tuple[int, int]:
        """Put the keyed records of ``section[start:]`` (``count`` records of a batch at ``base_offset``)
        whose offsets are at least ``min_offset``; returns ``(records taken, offset of the last put or -1)``.

        Fewer than ``count`` are taken when the map is full and the next record brings a new key.
        Raises CorruptRecordError when the records do not parse."""
        if self.accelerated:
            taken = 0
            last_put = -1
            while True:
                answer = _c_map(self._table, *self._bitmap(min_offset), self._k0, self._k1, self.size,
                                min(self._grow_at, self._max_entries),
                                section, start, count - taken, base_offset, min_offset)
                if answer is None:
                    raise CorruptRecordError(f"the records of the batch at offset {base_offset} do not parse")
                self.size, taken_now, put, start = answer
                taken += taken_now
                if put >= 0:
                    last_put = put
                if taken == count or self.size >= self._max_entries:
                    return taken, last_put
                self._grow()
        records = _decode(section, start, count, base_offset)
        last_put = -1
        for taken, record in enumerate(records):
            offset = base_offset + record.offset
            if record.key is None or offset < min_offset:
                continue
            digest = self._hash(record.key)
            if digest not in self._dict:
                if self.size >= self._max_entries:
                    return taken, last_put
                self.size += 1
            self._dict[digest] = offset
            last_put = offset
        return count, last_put

    def put_batches(self, buffer: bytes | bytearray | memoryview, start: int, min_offset: int, latest: int
                    ) -> tuple[int, int, int, int]:
        """:meth:`put_records` over the whole batches of ``buffer`` (a read of a segment) from ``start``:
        the records at or after ``min_offset`` of the data batches; ``latest`` grows to the last
        offset of each batch reaching ``min_offset``.

        Returns ``(position, latest, offset of the last put or -1, state)``: state 0, every whole
        batch is done (``position`` is where the next read starts); 1, ``position`` is a batch
        reaching ``min_offset`` that the caller maps itself: a transactional or control batch (whether
        its records count depends on how its transaction ended), or (C map only) a compressed one;
        2, the map filled inside the batch at ``position``."""
        if not self.accelerated:
            return self._put_batches_py(buffer, start, min_offset, latest)
        while True:
            answer = _c_map_batches(self._table, *self._bitmap(min_offset), self._k0, self._k1, self.size,
                                    min(self._grow_at, self._max_entries),
                                    buffer, start, min_offset, latest)
            if answer is None:
                raise CorruptRecordError("a batch of the segment does not parse", start)
            self.size, position, latest, last_put, state = answer
            if state == 2 and self.size < self._max_entries:
                self._grow()  # and that batch again: its records already put are put again, alike
                start = position
                continue
            return position, latest, last_put, state

    def _put_batches_py(self, buffer, start: int, min_offset: int, latest: int) -> tuple[int, int, int, int]:
        position = start
        last_put = -1
        while len(buffer) - position >= HEADER_SIZE:
            header = read_header(buffer, position)
            if header.size > len(buffer) - position:
                break
            if header.last_offset >= min_offset:
                if header.is_control or header.is_transactional:
                    return position, latest, last_put, 1
                if header.record_count:
                    codec = header.attributes & CODEC_MASK
                    section = memoryview(buffer)[position: position + header.size]
                    records_start = HEADER_SIZE
                    if codec:
                        section, records_start = decompress(codec, bytes(section[HEADER_SIZE:])), 0
                    taken, put = self.put_records(section, records_start, header.record_count, header.base_offset,
                                                  min_offset)
                    if put >= 0:
                        last_put = put
                    if taken < header.record_count:
                        return position, latest, last_put, 2
                latest = max(latest, header.last_offset)
            position += header.size
        return position, latest, last_put, 0

    def _grow(self) -> None:
        """Double the table (the C map only: the dict grows by itself)."""
        slots = self._slots * 2
        table = bytearray(slots * SLOT_SIZE)
        _c_grow(self._table, table)
        self._table, self._slots = table, slots
        self._grow_at = max(1, int(slots * self.load_factor))

    def filter_records(self, section: bytes | bytearray | memoryview, start: int, count: int, base_offset: int,
                       retain_tombstones: bool) -> Filtered:
        """Which records of a batch a cleaned log keeps (see the module doc)."""
        if self.accelerated:
            answer = _c_filter(self._table, self._superseded, self._superseded_base, self._k0, self._k1, section,
                               start, count, base_offset,
                               self.latest_offset, retain_tombstones)
            if answer is None:
                raise CorruptRecordError(f"the records of the batch at offset {base_offset} do not parse")
            return Filtered._make(answer)
        records = _decode(section, start, count, base_offset)
        mask = bytearray(count)
        kept = tombstones = keyless = 0
        low, high = None, None
        for i, record in enumerate(records):
            offset = base_offset + record.offset
            if offset > self.latest_offset:
                retain = True
            elif record.key is None:
                retain = False
                keyless += 1
            else:
                found = self._dict.get(self._hash(record.key), -1)
                retain = offset >= found and (record.value is not None or retain_tombstones)
            if retain:
                mask[i] = 1
                kept += 1
                tombstones += record.value is None
                low = record.timestamp if low is None else min(low, record.timestamp)
                high = record.timestamp if high is None else max(high, record.timestamp)
        return Filtered(bytes(mask), kept, tombstones, low or 0, high or 0, keyless)

    def clean_batches(self, buffer: bytes | bytearray | memoryview, start: int, now: int, delete_retention_ms: int,
                      producers: bytes | array, out: bytearray, infos: array, counters: array
                      ) -> tuple[int, int, int, int, bool]:
        """The copy step of the cleaner over the whole batches of ``buffer`` (a read of a segment) from
        ``start``, in one C call (the C map only; see :meth:`kraftpy.storage.cleaner._Pass.clean_batch`,
        whose decisions it makes): each batch's CRC checked, then dropped, kept as it is, or rewritten
        with the records :meth:`filter_records` keeps, into ``out``.

        ``producers`` holds ``(producer id, last offset of its last batch)`` int64 pairs sorted by id;
        ``infos`` receives :data:`INFO_FIELDS` int64 per output batch (its position in ``out``, size,
        base offset, last offset, max timestamp, leader epoch, record count); ``counters`` (int64,
        :data:`COUNTERS` long) is added to. Returns ``(state, position, bytes in out, output batches,
        whether any batch changed)``: state :data:`CLEAN_DONE`, every whole batch is done (``position``
        is where the next read starts); :data:`CLEAN_FOR_PYTHON`, the batch at ``position`` is left to
        the caller (compressed, damaged, or timestamps past int64); :data:`CLEAN_OUT_FULL`, ``out`` or
        ``infos`` has no room for the batch at ``position`` (write them out and call again; with no
        output batch, ``out`` must grow to :func:`copy_room` of that batch)."""
        state, position, length, batches, changed = _c_clean(
            self._table, self._superseded, self._superseded_base, self._k0, self._k1, self.latest_offset, buffer,
            start, now, delete_retention_ms, producers,
            out, infos, counters)
        return state, position, length, batches, bool(changed)

    def rewrite_records(self, section: bytes | bytearray | memoryview, start: int, count: int, mask: bytes,
                        timestamp_shift: int) -> bytes:
        """The records ``mask`` keeps, back to back, ``timestamp_shift`` added to their timestamp deltas."""
        if self.accelerated:
            out = _c_rewrite(section, start, count, mask, timestamp_shift)
            if out is None:
                raise CorruptRecordError("the records of a batch do not parse")
            return out
        records = _decode(section, start, count, 0)
        return b"".join(
            _encode_record(record.offset, record.timestamp + timestamp_shift, record.key, record.value, record.headers)
            for record, keep in zip(records, mask, strict=True) if keep
        )


def _decode(section: bytes | bytearray | memoryview, start: int, count: int, base_offset: int):
    """The records with their offset deltas as offsets and timestamp deltas as timestamps."""
    try:
        return decode_records(bytes(memoryview(section)[start:]), count)
    except CorruptRecordError as exc:
        raise CorruptRecordError(f"the records of the batch at offset {base_offset} do not parse: {exc}") from None

