"""The offset map: exact keys to offsets, in compiled hash arrays.

Kafka's cleaner keys its map by the MD5 of each key in a fixed-size buffer; ours compares the
key bytes themselves and grows as needed. A ``KeyTable`` keeps each distinct (tag, key) once: its
bytes in an arena, and one row of five int64s (hash, arena position, length and tag, and two
values: the largest and the smallest offset given for it); an
open-addressing index (linear probing, at most half full) holds each entry's number beside the
high half of its hash, so a probe touches the index, the entry's row and its bytes: three cache
lines, the cost that dominates a map larger than the caches. ``tag`` separates key spaces that
share a table (partitions, segment groups): keys are compared as (tag, bytes). Every operation is
one compiled call over many keys, read straight from the bytes that hold them (a records
section): no key becomes a Python object. The backward pass, the hot one, asks the caches for
those three lines a few records ahead, so their misses overlap instead of following
one another: about twice as fast on a table of a million keys.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from kcompact.readers.c_routines import prefetch

EMPTY = -1  # the value of a key not in the table
HASH, START, LENGTH_TAG, HIGH, LOW = range(5)  # the columns of an entry's row
ROW = 5
KEY_BYTES = 32  # a key's bytes, as a table is first sized for a number of keys (its arena grows past them)
_ENTRY_BYTES = 2 * 8 + ROW * 8  # a table's bytes per entry beside the key: two index slots and a row
_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)
_LOW = np.int64(0xFFFFFFFF)
# how many records ahead of the probe the backward pass asks for an entry's index slot, its row
# and its key bytes (each step reads what the one before brought in; measured on 1 M keys)
_AHEAD_SLOT, _AHEAD_ROW, _AHEAD_KEY = 24, 12, 5
_AHEAD_HASH = 8  # how many records ahead of the one hashed ``record_hashes`` asks for a key
_AHEAD_GATHER = 8  # how many ranges ahead of the one copied ``gathered`` asks for one


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _hash(buf, pos, n, tag):
    """FNV-1a over the key's bytes, the tag mixed in first; as an int64 bit pattern."""
    h = _FNV_OFFSET ^ np.uint64(tag & 0xFFFFFFFF)
    h *= _FNV_PRIME
    for i in range(n):
        h ^= np.uint64(buf[pos + i])
        h *= _FNV_PRIME
    return np.int64(h)


@njit(cache=True, nogil=True, boundscheck=False)
def key_hashes(keys, offsets, tags):
    """The hash of each (tag, key), key i being ``keys[offsets[i]:offsets[i + 1]]``."""
    out = np.empty(tags.shape[0], np.int64)
    for i in range(tags.shape[0]):
        out[i] = _hash(keys, offsets[i], offsets[i + 1] - offsets[i], tags[i])
    return out


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _find(index, rows, arena, h, length_tag, buf, pos, n):
    """(slot of the key in ``index``, its entry or -1 when that slot is free for it). An index
    slot holds (high 32 bits of the hash) << 32 | (entry + 1); 0 is free."""
    mask = index.shape[0] - 1
    high = h >> 32
    slot = h & mask
    while True:
        v = index[slot]
        if v == 0:
            return slot, -1
        if v >> 32 == high:
            e = (v & _LOW) - 1
            if rows[e, HASH] == h and rows[e, LENGTH_TAG] == length_tag:
                start = rows[e, START]
                same = True
                for i in range(n):
                    if arena[start + i] != buf[pos + i]:
                        same = False
                        break
                if same:
                    return slot, e
        slot = (slot + 1) & mask


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _fits(index, rows, arena, n_entries, arena_used, n):
    """Room for one more entry of ``n`` key bytes (rows, arena, and an index at most half full)."""
    return n_entries < rows.shape[0] and arena_used + n <= arena.shape[0] and 2 * (n_entries + 1) <= index.shape[0]


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _insert(index, rows, arena, slot, h, length_tag, high, low, buf, pos, n, entry, arena_used):
    """Entry number ``entry`` at index ``slot``: its row, and its key bytes at ``arena_used``."""
    index[slot] = ((h >> 32) << 32) | (entry + 1)
    rows[entry, HASH] = h
    rows[entry, START] = arena_used
    rows[entry, LENGTH_TAG] = length_tag
    rows[entry, HIGH] = high
    rows[entry, LOW] = low
    for j in range(n):
        arena[arena_used + j] = buf[pos + j]


@njit(cache=True, nogil=True, boundscheck=False)
def _upsert(index, rows, arena, used, buf, key_pos, key_len, key_tag, high, low, first):
    """Keys ``first``.. (those with ``key_pos`` >= 0) into the table: each entry keeps the largest
    of its ``high`` and the smallest of its ``low`` values. Stops before a key that would not fit
    (rows, arena, or a half-full index). Returns (keys done, entries used, arena bytes used)."""
    n_entries, arena_used = used
    for i in range(first, key_pos.shape[0]):
        p = key_pos[i]
        if p < 0:
            continue
        n = key_len[i]
        length_tag = (np.int64(n) << 32) | (np.int64(key_tag[i]) & _LOW)
        h = _hash(buf, p, n, key_tag[i])
        slot, e = _find(index, rows, arena, h, length_tag, buf, p, n)
        if e >= 0:
            if high[i] > rows[e, HIGH]:
                rows[e, HIGH] = high[i]
            if low[i] < rows[e, LOW]:
                rows[e, LOW] = low[i]
            continue
        if not _fits(index, rows, arena, n_entries, arena_used, n):
            return i, n_entries, arena_used
        _insert(index, rows, arena, slot, h, length_tag, high[i], low[i], buf, p, n, n_entries, arena_used)
        arena_used += n
        n_entries += 1
    return key_pos.shape[0], n_entries, arena_used


@njit(cache=True, nogil=True, boundscheck=False)
def _lookup(index, rows, arena, buf, key_pos, key_len, key_tag, out):
    for i in range(key_pos.shape[0]):
        p = key_pos[i]
        if p < 0:
            out[i] = EMPTY
            continue
        n = key_len[i]
        length_tag = (np.int64(n) << 32) | (np.int64(key_tag[i]) & _LOW)
        _, e = _find(index, rows, arena, _hash(buf, p, n, key_tag[i]), length_tag, buf, p, n)
        out[i] = rows[e, HIGH] if e >= 0 else EMPTY


@njit(cache=True, nogil=True, boundscheck=False)
def record_hashes(bufs, which, key_pos, key_len, tag):
    """The hash of each record's (tag, key), key i lying in ``bufs[which[i]]`` (0 for no key).
    Keys lie a record apart, beyond what the hardware foresees: the key ``_AHEAD_HASH`` records on
    is asked for first, so the memory's latency overlaps the hashing."""
    out = np.zeros(key_pos.shape[0], np.int64)
    m = key_pos.shape[0]
    for i in range(m):
        a = i + _AHEAD_HASH
        if a < m and key_pos[a] >= 0:
            prefetch(bufs[which[a]], key_pos[a])
        if key_pos[i] >= 0:
            out[i] = _hash(bufs[which[i]], key_pos[i], key_len[i], tag)
    return out


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def shard_of(h, shards):
    """The shard of a key hash: bits the index does not place by (it places by the low ones)."""
    return (h >> 40) & (shards - 1)


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _home_entry(index, h):
    """The entry in the home slot of hash ``h`` when its high hash bits match, else -1."""
    v = index[h & (index.shape[0] - 1)]
    return (v & _LOW) - 1 if v != 0 and v >> 32 == h >> 32 else -1


@njit(cache=True, nogil=True, boundscheck=False)
def _backward(index, rows, arena, used, bufs, which, key_pos, key_len, hashes, tag, offsets, feeds, waits, mapped,
              first, shard, shards):
    """Records ``first``, ``first - 1``, ... 0, read in that order (offsets falling): a record that
    waits on the map gets, in ``mapped``, the largest offset of its key among the feeding records
    after it (those already read; EMPTY if none); then a feeding one puts its offset in. Key i
    lies in ``bufs[which[i]]``, its hash is ``hashes[i]``; only keys of ``shard`` (of ``shards``)
    are read. Stops before a key that would not fit; returns (the record to go on from, -1 when
    done, entries used, arena bytes used)."""
    n_entries, arena_used = used
    mask = index.shape[0] - 1
    for i in range(first, -1, -1):
        # the caches asked, a few records ahead, for the index slot, then the row, then the key
        # bytes that record will read (each step finds the line the step before brought in).
        # Written out here on purpose: behind a helper function (even inline="always") most of
        # the gain was lost, and filtering the lookahead by key shard gained nothing (measured).
        j = i - _AHEAD_SLOT
        if j >= 0 and key_pos[j] >= 0:
            prefetch(index, hashes[j] & mask)
        j = i - _AHEAD_ROW
        if j >= 0 and key_pos[j] >= 0:
            e = _home_entry(index, hashes[j])
            if e >= 0:
                prefetch(rows, e * ROW)
        j = i - _AHEAD_KEY
        if j >= 0 and key_pos[j] >= 0:
            e = _home_entry(index, hashes[j])
            if e >= 0:
                prefetch(arena, rows[e, START])
        p = key_pos[i]
        if p < 0 or not (feeds[i] or waits[i]):
            continue
        h = hashes[i]
        if shards > 1 and shard_of(h, shards) != shard:
            continue
        buf = bufs[which[i]]
        n = key_len[i]
        length_tag = (np.int64(n) << 32) | (np.int64(tag) & _LOW)
        slot, e = _find(index, rows, arena, h, length_tag, buf, p, n)
        if waits[i]:
            mapped[i] = rows[e, HIGH] if e >= 0 else EMPTY
        if not feeds[i]:
            continue
        if e >= 0:
            if offsets[i] > rows[e, HIGH]:
                rows[e, HIGH] = offsets[i]
            continue
        if not _fits(index, rows, arena, n_entries, arena_used, n):
            if waits[i]:
                mapped[i] = EMPTY  # read again when the table has grown
            return i, n_entries, arena_used
        _insert(index, rows, arena, slot, h, length_tag, offsets[i], offsets[i], buf, p, n, n_entries, arena_used)
        arena_used += n
        n_entries += 1
    return -1, n_entries, arena_used


@njit(cache=True, nogil=True, boundscheck=False)
def _reindex(index, rows, n_entries):
    mask = index.shape[0] - 1
    index[:] = 0
    for e in range(n_entries):
        h = rows[e, HASH]
        slot = h & mask
        while index[slot] != 0:
            slot = (slot + 1) & mask
        index[slot] = ((h >> 32) << 32) | (e + 1)


@njit(cache=True, nogil=True, boundscheck=False)
def gathered(arena, starts, lengths, total):
    """The byte ranges (starts[i], lengths[i]) of ``arena`` end to end (``total`` bytes in all).
    The range ``_AHEAD_GATHER`` on is asked for first: ranges in a random order gather much
    faster so."""
    out = np.empty(total, np.uint8)
    d = 0
    m = starts.shape[0]
    for e in range(m):
        if e + _AHEAD_GATHER < m:
            prefetch(arena, starts[e + _AHEAD_GATHER])
        for j in range(lengths[e]):
            out[d + j] = arena[starts[e] + j]
        d += lengths[e]
    return out


def _entries_for(keys: int) -> int:
    """The rows of a table sized for ``keys`` keys: a power of two."""
    return 1 << (max(keys, 1) - 1).bit_length()


@dataclass(frozen=True, slots=True)
class Entries:
    """A table's entries as columns: entry i's key is ``keys[offsets[i]:offsets[i + 1]]``."""

    tags: np.ndarray
    high: np.ndarray
    low: np.ndarray
    offsets: np.ndarray
    keys: np.ndarray  # uint8

    def __len__(self) -> int:
        return len(self.tags)


class KeyTable:
    """Distinct (tag, key) -> two int64 values (largest, smallest), growing as keys arrive."""

    def __init__(self, entries: int = 1 << 12, arena: int = 1 << 16):
        self.index = np.zeros(2 * entries, np.int64)
        self.rows = np.empty((entries, ROW), np.int64)
        self.arena = np.empty(arena, np.uint8)
        self.size = 0  # entries used
        self.arena_used = 0

    @classmethod
    def for_keys(cls, keys: int) -> KeyTable:
        """A table sized for up to ``keys`` keys of ``KEY_BYTES`` each, so it need not grow (rows
        and arena are touched only as they fill; the index, at most half full, as keys land)."""
        return cls(_entries_for(keys), max(keys * KEY_BYTES, 1 << 16))

    @staticmethod
    def nbytes_for(keys: int) -> int:
        """The bytes of the table ``for_keys(keys)`` makes (its index, rows and arena)."""
        return _entries_for(keys) * _ENTRY_BYTES + max(keys * KEY_BYTES, 1 << 16)

    @staticmethod
    def keys_within(nbytes: int) -> int:
        """How many keys ``for_keys`` may size a table for within ``nbytes``: an index of two int64
        slots and a row for each of up to twice as many entries (a power of two), and the keys."""
        return nbytes // (2 * _ENTRY_BYTES + KEY_BYTES)

    def __len__(self) -> int:
        return self.size

    def upsert(self, buf: np.ndarray, key_pos: np.ndarray, key_len: np.ndarray, key_tag: np.ndarray,
               high: np.ndarray, low: np.ndarray | None = None) -> None:
        """Each key (``buf[key_pos[i]:key_pos[i] + key_len[i]]``, tagged ``key_tag[i]``; a negative
        position: no key) keeps the largest of the ``high`` and the smallest of the ``low`` values
        it is given, across calls (``low`` None: ``high`` for both); the table grows as needed."""
        done = self.fill(buf, key_pos, key_len, key_tag, high, low)
        while done < len(key_pos):
            self._grow(int(key_len[done]))
            done = self.fill(buf, key_pos, key_len, key_tag, high, low, done)

    def fill(self, buf: np.ndarray, key_pos: np.ndarray, key_len: np.ndarray, key_tag: np.ndarray,
             high: np.ndarray, low: np.ndarray | None = None, first: int = 0) -> int:
        """``upsert`` of keys ``first``.. up to the first that does not fit: the table does not grow
        (but for a key larger than an empty table's arena). Returns where it stopped."""
        low = high if low is None else low
        done, self.size, self.arena_used = _upsert(
            self.index, self.rows, self.arena, (self.size, self.arena_used), buf, key_pos, key_len, key_tag,
            high, low, first)
        if done < len(key_pos) and not self.size:
            self._grow(int(key_len[done]))
            return self.fill(buf, key_pos, key_len, key_tag, high, low, done)
        return done

    def lookup(self, buf: np.ndarray, key_pos: np.ndarray, key_len: np.ndarray, key_tag: np.ndarray) -> np.ndarray:
        """The high value of each key, ``EMPTY`` for a key not in the table (and for no key)."""
        out = np.empty(len(key_pos), np.int64)
        _lookup(self.index, self.rows, self.arena, buf, key_pos, key_len, key_tag, out)
        return out

    def backward(self, bufs: tuple[np.ndarray, ...], which: np.ndarray, key_pos: np.ndarray, key_len: np.ndarray,
                 hashes: np.ndarray, tag: int, offsets: np.ndarray, feeds: np.ndarray, waits: np.ndarray,
                 mapped: np.ndarray, shard: int = 0, shards: int = 1) -> None:
        """Kafka's offset map built and read in one pass, from the last record back: records in
        falling offset order (the rows given, last row first); each that ``waits`` gets, in
        ``mapped``, the largest offset of its key among the ``feeds`` records after it, which is
        the map's offset whenever every record after it has been given before (``EMPTY``: none).
        ``hashes``: ``record_hashes`` of the keys. With ``shards`` > 1 the table holds the keys
        of one ``shard`` (``shard_of`` their hash): as many tables, one per thread, read the same
        records at once, each setting the ``mapped`` of its own."""
        at = len(key_pos) - 1
        while at >= 0:
            at, self.size, self.arena_used = _backward(
                self.index, self.rows, self.arena, (self.size, self.arena_used), bufs, which, key_pos, key_len,
                hashes, tag, offsets, feeds, waits, mapped, at, shard, shards)
            if at >= 0:
                self._grow(int(key_len[at]))

    def entries(self) -> Entries:
        """Every entry, in the order they came (copies)."""
        rows = self.rows[:self.size]
        lengths = (rows[:, LENGTH_TAG] >> 32).astype(np.int64)
        offsets = np.zeros(self.size + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        keys = gathered(self.arena, rows[:, START].copy(), lengths, int(offsets[-1]))
        return Entries((rows[:, LENGTH_TAG] & 0xFFFFFFFF).astype(np.int32).astype(np.int64),
                       rows[:, HIGH].copy(), rows[:, LOW].copy(), offsets, keys)

    def _grow(self, key_bytes: int) -> None:
        if self.size >= len(self.rows):
            rows = np.empty((2 * len(self.rows), ROW), np.int64)
            rows[:self.size] = self.rows[:self.size]
            self.rows = rows
            self.index = np.empty(2 * len(rows), np.int64)
            _reindex(self.index, self.rows, self.size)
        if self.arena_used + key_bytes > len(self.arena):
            arena = np.empty(max(2 * len(self.arena), self.arena_used + key_bytes), np.uint8)
            arena[:self.arena_used] = self.arena[:self.arena_used]
            self.arena = arena
