"""The offset map, from the records themselves: Kafka's buildOffsetMap, and its distributed form.

A partition read whole by one task makes its map while it is rewritten, from its end back
(``compaction.rewrite.clean_partition``). A partition larger than a task is read by many tasks,
split by byte ranges (``read_keys``): each
keeps, per (segment group, key), the largest offset of a record that feeds the map and the smallest
of one whose fate waits on it, and ships them in blobs by the key's hash bucket. The task of a
bucket (``reduce_bucket``) takes every blob of its bucket, makes the map's offset of each (partition,
key), and sends each group only the keys that supersede one of its records. No task ever holds more
than its share of a key set, and Spark moves a few large blobs instead of a row per key.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

import storage
from compaction.offset_map import Entries, KeyTable, gathered, key_hashes
from compaction.rewrite import Records, feeding, undecided
from readers import walk

NO_OFFSET, NO_WAIT = -1, np.iinfo(np.int64).max  # a key that feeds nothing / that nothing waits on
BLOB_BYTES = 8 << 20  # largest blob a task ships
TABLE_BYTES = 256 << 20  # a map task ships and empties its table beyond this (at most: see compaction.job)


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
              table_bytes: int = TABLE_BYTES) -> Iterator[Entries]:
    """Per (group tag, key) of the batches starting in bytes [start, end) of the segment file
    ``path``: the largest offset of a record feeding the map (``NO_OFFSET``: none) and the
    smallest of one whose fate waits on the map (``NO_WAIT``: none). In pieces: the table is shipped
    and emptied when it holds more than ``table_bytes``."""
    at = (plans.position >= start) & (plans.position < end)
    records = int(plans.records[at].sum())
    table = _table_for(records, table_bytes)
    with storage.open_read(path) as f:
        for chunk in walk.read_chunks(f, path, start, end, check=False):
            _add_chunk(table, chunk, plans, first_dirty, latest)
            if table.nbytes > table_bytes:
                entries, table = table.entries(), None  # the full table goes before its entries are split
                yield entries
                table = _table_for(records, table_bytes)
    if len(table):
        entries, table = table.entries(), None
        yield entries


def _add_chunk(table: KeyTable, chunk: walk.Chunk, plans: Planned, first_dirty: int, latest: int) -> None:
    """A chunk's keys into ``table`` (its record columns are let go on return, before the table
    is emptied: a capped worker's address space is held to what it needs)."""
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
        table.upsert(bufs[which], key_pos[sel], records.key_len[sel], plans.tag[row[sel]], high[sel], low[sel])


def _table_for(records: int, table_bytes: int) -> KeyTable:
    """A table sized for the keys of ``records`` (as many as fit ``table_bytes``), so it does not
    grow by doubling: each doubling copied the table into fresh memory and rebuilt its index."""
    return KeyTable.for_keys(min(records, KeyTable.keys_within(table_bytes)))


def reduce_bucket(blobs: list[Entries], partition_of: np.ndarray) -> Entries:
    """Every (group tag, key) of one hash bucket whose map offset (the largest feeding offset of
    the key in its partition, ``partition_of[tag]``) supersedes one of the group's records: those
    entries with their map offset as ``high``."""
    table = KeyTable()
    for b in blobs:
        feeding = np.where(b.high >= 0, b.offsets[:-1], -1)
        table.upsert(b.keys, feeding, np.diff(b.offsets), partition_of[b.tags], b.high)
    out = KeyTable()
    for b in blobs:
        mapped = table.lookup(b.keys, b.offsets[:-1], np.diff(b.offsets), partition_of[b.tags])
        superseded = b.low < mapped
        out.upsert(b.keys, np.where(superseded, b.offsets[:-1], -1), np.diff(b.offsets), b.tags, mapped)
    return out.entries()


# -- blobs: entries as bytes, to travel through Spark -----------------------------------------------
def pack(e: Entries) -> bytes:
    n = len(e)
    head = np.array([n, len(e.keys)], np.int64)
    return b"".join((head.tobytes(), e.tags.tobytes(), e.high.tobytes(), e.low.tobytes(),
                     e.offsets.tobytes(), e.keys.tobytes()))


def unpack(blob: bytes) -> Entries:
    n, size = np.frombuffer(blob, np.int64, 2).tolist()
    ints = np.frombuffer(blob, np.int64, 4 * n + 1, 16)
    keys = np.frombuffer(blob, np.uint8, size, 16 + 8 * (4 * n + 1))
    return Entries(ints[:n], ints[n:2 * n], ints[2 * n:3 * n], ints[3 * n:], keys)


def select(e: Entries, which: np.ndarray) -> Entries:
    """The entries at the indexes ``which``, keys compacted."""
    lengths = e.offsets[which + 1] - e.offsets[which]
    offsets = np.zeros(len(which) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    keys = gathered(e.keys, e.offsets[:-1][which], lengths, int(offsets[-1]))
    return Entries(e.tags[which], e.high[which], e.low[which], offsets, keys)


def split_by(e: Entries, target: np.ndarray, targets: int) -> Iterator[tuple[int, Entries]]:
    """(target, its entries) for each target of ``target`` (one per entry), in blobs of at most
    about ``BLOB_BYTES``."""
    order = np.argsort(target, kind="stable")
    bounds = np.searchsorted(target[order], np.arange(targets + 1))
    key_bytes = np.diff(e.offsets)
    for t in range(targets):
        mine = order[bounds[t]:bounds[t + 1]]
        while len(mine):
            weight = np.cumsum(key_bytes[mine] + 40)  # an entry packs four int64 and its key offset
            n = max(1, int(np.searchsorted(weight, BLOB_BYTES)))
            yield t, select(e, mine[:n])
            mine = mine[n:]


def bucket_of(e: Entries, partition_of: np.ndarray, buckets: int) -> np.ndarray:
    """The hash bucket of each entry's (partition, key): entries of one key of one partition from
    any group meet in one bucket."""
    hashes = key_hashes(e.keys, e.offsets, partition_of[e.tags])
    return (hashes.view(np.uint64) % np.uint64(buckets)).astype(np.int64)

