"""The offset map, from the records themselves: Kafka's buildOffsetMap, and its distributed form.

A partition read whole by one task makes its map while it is rewritten, from its end back
(``compaction.cleaning.backward.clean_partition``). A partition larger than a task is read by many tasks,
split by byte ranges (``read_keys``): each keeps, per (segment group, key), the largest offset of
a record that feeds the map and the smallest of one whose fate waits on it, and ships them in
blobs by the key's hash bucket (``packed``). The task of a bucket (``reduce_bucket``) joins every
blob of its bucket, sorts the entries by key hash to make the map's offset of each (partition,
key), and sends each group only the keys that supersede one of its records. No task ever holds more
than its share of a key set, and Spark moves a few large blobs instead of a row per key.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
from numba import njit

from kcompact import storage
from kcompact.compaction.cleaning.offset_map import Entries, KeyTable, gathered, key_hashes
from kcompact.compaction.cleaning.rewrite import Records, feeding, undecided
from kcompact.readers import walk

NO_OFFSET, NO_WAIT = -1, np.iinfo(np.int64).max  # a key that feeds nothing / that nothing waits on
T = TypeVar("T")
BLOB_BYTES = 8 << 20  # largest blob a task ships
TABLE_BYTES = (
    256 << 20
)  # the largest table a map task fills before it ships it (at most: see compaction.pipeline.shared)


@dataclass(frozen=True, slots=True)
class Planned:
    """The batch plans of one segment of a partition, as the map pass reads them: position of
    each batch, whether it feeds the map, whether its records are discarded, its group's tag and
    how many records it holds."""

    position: np.ndarray
    feeds: np.ndarray
    discard: np.ndarray
    tag: np.ndarray  # per batch: the key space its records go to (the group's gid)
    records: np.ndarray  # per batch: its record count

    def rows(self, positions: np.ndarray) -> np.ndarray:
        """The plan row of each batch at ``positions``, -1 for a batch without a plan."""
        at = np.searchsorted(self.position, positions)
        found = at < len(self.position)
        found[found] = self.position[at[found]] == positions[found]
        return np.where(found, at, -1)


def read_keys(path: str, start: int, end: int, plans: Planned, first_dirty: int, latest: int,
              ship: Callable[[Entries], T], table_bytes: int = TABLE_BYTES, size: int | None = None) -> Iterator[T]:
    """Per (group tag, key) of the batches starting in bytes [start, end) of the segment file
    ``path``: the largest offset of a record feeding the map (``NO_OFFSET``: none) and the
    smallest of one whose fate waits on the map (``NO_WAIT``: none), as ``ship`` makes them into
    what travels. In pieces: one table of at most ``table_bytes`` (it never grows: a doubling held
    both copies), shipped whenever it is full. ``ship`` is called with the table let go, and
    nothing here holds its entries after: a capped worker's address space holds what it needs.
    ``size``: the file's size as listed (an object store is then not asked)."""
    at = (plans.position >= start) & (plans.position < end)
    keys = min(int(plans.records[at].sum()), KeyTable.keys_within(table_bytes))
    table = KeyTable.for_keys(keys)

    def shipped() -> T:
        nonlocal table
        entries, table = table.entries(), None
        return ship(entries)

    with storage.open_read(path, size) as f:
        for chunk in walk.read_chunks(f, path, start, end, check=False):
            for args in _chunk_keys(chunk, plans, first_dirty, latest):
                done = table.fill(*args)
                while done < len(args[1]):
                    yield shipped()
                    table = KeyTable.for_keys(keys)
                    done = table.fill(*args, done)
    if len(table):
        yield shipped()


def _chunk_keys(chunk: walk.Chunk, plans: Planned, first_dirty: int, latest: int) -> Iterator[tuple]:
    """A chunk's keys as ``KeyTable.fill`` takes them, a buffer at a time: (buffer, key positions
    (-1: not for the map), lengths, group tags, feeding offsets, waiting offsets)."""
    rows = plans.rows(chunk.file_position + chunk.entries[:, walk.POSITION])
    records = Records.of(chunk, np.flatnonzero(rows >= 0))
    row, offset, has_key = rows[records.entry], records.offset, records.key_pos >= 0
    feeds = feeding(plans.feeds[row], records.control, offset, first_dirty) & has_key
    waits = undecided(plans.discard[row], records.control, offset, latest, has_key)
    key_pos = np.where(feeds | waits, records.key_pos, -1)
    high, low = np.where(feeds, offset, NO_OFFSET), np.where(waits, offset, NO_WAIT)
    bufs = records.bufs(chunk)
    for which in np.unique(records.which).tolist():  # the buffer holding the keys
        sel = np.flatnonzero(records.which == which)
        yield bufs[which], key_pos[sel], records.key_len[sel], plans.tag[row[sel]], high[sel], low[sel]


def reduce_bucket(e: Entries, partition_of: np.ndarray) -> Entries:
    """Every (group tag, key) of one hash bucket's entries (its blobs joined) whose map offset (the
    largest feeding offset of the key in its partition, ``partition_of[tag]``) supersedes one of
    the group's records: those entries with their map offset as ``high`` (a key that came from two
    map tasks may come twice). The entries are sorted by the hash of their (partition, key), so
    that those of one key lie side by side: no table, and the bytes of a key are read only where
    its hash comes more than once: faster than filling a hash table, and no memory for one."""
    tags = partition_of[e.tags]
    hashes = key_hashes(e.keys, e.offsets, tags)
    order = np.argsort(hashes)
    mapped = np.empty(len(e), np.int64)
    mapped[order] = _largest_of_each_key(order, hashes[order], e.high[order], e.keys, e.offsets, tags)
    superseded = np.flatnonzero(e.low < mapped)
    out = select(e, superseded)
    return Entries(out.tags, mapped[superseded], out.low, out.offsets, out.keys)


@njit(cache=True, nogil=True, boundscheck=False)
def _largest_of_each_key(order, hashes, high, keys, offsets, tags):
    """For entries in hash order (``order``; ``hashes`` and ``high`` in that order), the largest
    ``high`` of the entries of the same (tag, key), in that order. Entries of one hash are almost
    always one key: each is compared with the first; only where that fails (a collision) are all
    compared with all."""
    n = order.shape[0]
    out = np.empty(n, np.int64)
    i = 0
    while i < n:
        j = i + 1
        while j < n and hashes[j] == hashes[i]:
            j += 1
        largest, one_key = high[i], True
        for a in range(i + 1, j):
            if not _same_key(keys, offsets, tags, order[a], order[i]):
                one_key = False
                break
            largest = max(largest, high[a])
        for a in range(i, j):
            if not one_key:
                largest = -1
                for b in range(i, j):
                    if high[b] > largest and _same_key(keys, offsets, tags, order[a], order[b]):
                        largest = high[b]
            out[a] = largest
        i = j
    return out


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _same_key(keys, offsets, tags, a, b):
    n = offsets[a + 1] - offsets[a]
    if tags[a] != tags[b] or offsets[b + 1] - offsets[b] != n:
        return False
    for c in range(n):  # noqa: SIM110 - a loop numba compiles; all() of a generator it does not
        if keys[offsets[a] + c] != keys[offsets[b] + c]:
            return False
    return True


# -- blobs: entries as bytes, to travel through Spark -----------------------------------------------
# A blob: int64 words [n, key bytes], then n tags, n high, n low, n + 1 key offsets, then the keys,
# padded to a multiple of 8 bytes, so that blobs laid end to end (a column's buffer) unpack to
# aligned int64 arrays, as the compiled kernels take them.
HEAD_WORDS = 2
ENTRY_BYTES = 32  # an entry's tag, high, low and key offset (beside its key bytes)


def packed(e: Entries, target: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """(target, blob) for the entries of each target of ``target`` (one per entry), in blobs of at
    most ``BLOB_BYTES`` (or one entry), a target's entries in their order. Each blob is made as it
    is asked for: a few megabytes at a time, which the allocator hands back and out again, where
    one buffer for them all would be fresh pages every time."""
    order, cuts, bounds = _cut(e.offsets, target, BLOB_BYTES)
    for b in range(len(cuts) - 1):
        words = np.empty((bounds[b + 1] - bounds[b]) // 8, np.int64)
        _write_blob(words, e.tags, e.high, e.low, e.offsets, e.keys, order[cuts[b]:cuts[b + 1]])
        yield int(target[order[cuts[b]]]), words.view(np.uint8)


@njit(cache=True, nogil=True, boundscheck=False)
def _cut(offsets, target, blob_bytes):
    """(the entries in target order, a target's in their order; where each blob begins in that
    order, and where it ends; the byte bounds of the blobs)."""
    n = target.shape[0]
    first = np.zeros((target.max() + 2) if n else 1, np.int64)  # a counting sort: targets are few
    for i in range(n):
        first[target[i] + 1] += 1
    first = np.cumsum(first)
    order = np.empty(n, np.int64)
    for i in range(n):
        order[first[target[i]]] = i
        first[target[i]] += 1
    fixed = 8 * (HEAD_WORDS + 1) + 7  # the head, the last key offset, the padding at most
    cuts = np.zeros(n + 1, np.int64)
    bounds = np.zeros(n + 1, np.int64)
    blobs, weight, key_bytes = 0, fixed, 0
    for i in range(n):
        e = order[i]
        length = offsets[e + 1] - offsets[e]
        if i > cuts[blobs] and (target[e] != target[order[i - 1]] or weight + ENTRY_BYTES + length > blob_bytes):
            bounds[blobs + 1] = bounds[blobs] + _blob_bytes(i - cuts[blobs], key_bytes)
            blobs += 1
            cuts[blobs] = i
            weight, key_bytes = fixed, 0
        weight += ENTRY_BYTES + length
        key_bytes += length
    if n:
        bounds[blobs + 1] = bounds[blobs] + _blob_bytes(n - cuts[blobs], key_bytes)
        blobs += 1
        cuts[blobs] = n
    return order, cuts[:blobs + 1], bounds[:blobs + 1]


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _blob_bytes(entries, key_bytes):
    """The size of a blob of ``entries`` entries and ``key_bytes`` bytes of keys."""
    return 8 * (HEAD_WORDS + 4 * entries + 1) + (key_bytes + 7) // 8 * 8


@njit(cache=True, nogil=True, boundscheck=False)
def _write_blob(words, tags, high, low, offsets, keys, which):
    """The blob of the entries ``which`` into ``words``."""
    m = which.shape[0]
    data = words.view(np.uint8)
    at = 8 * (HEAD_WORDS + 4 * m + 1)  # where the keys go
    k = 0
    for j in range(m):
        e = which[j]
        words[HEAD_WORDS + j] = tags[e]
        words[HEAD_WORDS + m + j] = high[e]
        words[HEAD_WORDS + 2 * m + j] = low[e]
        words[HEAD_WORDS + 3 * m + j] = k
        for c in range(offsets[e], offsets[e + 1]):
            data[at + k] = keys[c]
            k += 1
    words[HEAD_WORDS + 4 * m] = k
    words[0] = m
    words[1] = k
    for c in range(at + k, data.shape[0]):
        data[c] = 0


def unpack(blob) -> Entries:
    """A blob's entries (views of its bytes)."""
    n, size = np.frombuffer(blob, np.int64, HEAD_WORDS).tolist()
    ints = np.frombuffer(blob, np.int64, 4 * n + 1, 8 * HEAD_WORDS)
    keys = np.frombuffer(blob, np.uint8, size, 8 * (HEAD_WORDS + 4 * n + 1))
    return Entries(ints[:n], ints[n:2 * n], ints[2 * n:3 * n], ints[3 * n:], keys)


def select(e: Entries, which: np.ndarray) -> Entries:
    """The entries at the indexes ``which``, keys compacted."""
    lengths = e.offsets[which + 1] - e.offsets[which]
    offsets = np.zeros(len(which) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    keys = gathered(e.keys, e.offsets[:-1][which], lengths, int(offsets[-1]))
    return Entries(e.tags[which], e.high[which], e.low[which], offsets, keys)


def concat(parts: list[Entries]) -> Entries:
    """The entries of ``parts`` (at least one) end to end."""
    lengths = np.concatenate([np.diff(p.offsets) for p in parts])
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return Entries(np.concatenate([p.tags for p in parts]), np.concatenate([p.high for p in parts]),
                   np.concatenate([p.low for p in parts]), offsets, np.concatenate([p.keys for p in parts]))


def bucket_of(e: Entries, partition_of: np.ndarray, buckets: int) -> np.ndarray:
    """The hash bucket of each entry's (partition, key): entries of one key of one partition from
    any group meet in one bucket."""
    hashes = key_hashes(e.keys, e.offsets, partition_of[e.tags])
    return (hashes.view(np.uint64) % np.uint64(buckets)).astype(np.int64)

