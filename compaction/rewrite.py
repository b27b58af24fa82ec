"""Rewrite one segment group on an executor, from the decisions already made.

Input: the group (which segments, its base offset and modification time, the aborted
transactions its .txnindex must list), the batch plans of its batches, and the offset
map's entries for the keys of its records that a later record supersedes. The segments
are read once, in order, a chunk of batches at a time: the chunk's keys and offsets are
decoded at once (``readers.columns``), each record gets its fate (Kafka's
shouldRetainRecord), and every batch is copied, rebuilt, emptied or dropped; the
``.cleaned`` files are written. Nothing is renamed here: the driver alone commits.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import storage
from compaction.decisions import BatchPlan, Outcome, batch_outcome
from compaction.model import BatchInfo
from readers.batch import Batch
from readers.columns import batch_columns
from readers.errors import FormatError
from readers.indexes import AbortedTxn
from readers.logdir import segment_name
from readers.segment import iter_batches
from writers.chunks import BufferSizes
from operations.cleaned import WrittenGroup, output_path, write_group

PLAN_FLAGS = ("delete", "discard_records", "retain_empty", "retain_deletes", "marker_for_empty_txn")
DISCARD, RETAIN_DELETES = PLAN_FLAGS.index("discard_records"), PLAN_FLAGS.index("retain_deletes")
# Each record's fate, one code per record: kept (a tombstone kept apart, since a kept tombstone
# needs a delete horizon), or removed and why.
KEPT, KEPT_TOMBSTONE, SUPERSEDED, TOMBSTONE, ABORTED, KEYLESS, MARKER = range(7)
REASON_OF_CODE = ("kept", "kept", "superseded", "tombstone", "aborted", "keyless", "marker")
CHUNK_BYTES = 4 << 20  # stored bytes of batches decoded at once


@dataclass(frozen=True, slots=True)
class GroupJob:
    """What the driver knows of one output segment group."""

    path: str  # the partition dir
    group: int
    base_offset: int
    segments: tuple[int, ...]
    mtime_ms: int
    aborted: tuple[AbortedTxn, ...]
    index_interval_bytes: int
    buffers: BufferSizes  # the cleaner's I/O buffers: where its appends end
    delete_retention_ms: int
    now: int
    latest_offset: int  # the offset map's latest offset: records past it are kept
    owner: str | None = None  # the job's lease owner: names the staged files on an object store


@dataclass(frozen=True, slots=True)
class GroupPlans:
    """The batch plans of one group, in file order."""

    segment: np.ndarray
    position: np.ndarray
    flags: np.ndarray  # (batches, len(PLAN_FLAGS)) bool


def undecided(discard: np.ndarray, control: np.ndarray, offset: np.ndarray, latest: int,
              has_key: np.ndarray) -> np.ndarray:
    """Records whose fate waits on the offset map: kept unless a later record of their key supersedes them."""
    return ~discard & ~control & (offset <= latest) & has_key


def fate_codes(discard: np.ndarray, retain_deletes: np.ndarray, control: np.ndarray, offset: np.ndarray,
               has_key: np.ndarray, tombstone: np.ndarray, latest: int, mapped: np.ndarray) -> np.ndarray:
    """Kafka's shouldRetainRecord after the batch's discard decision, as a code per record
    (``compaction.decisions.keep_record``); ``mapped`` is the map's offset for the key, -1 if none."""
    kept = np.where(tombstone, KEPT_TOMBSTONE, KEPT)
    removed_or_kept = [discard & control, discard, control | (offset > latest), ~has_key, offset < mapped,
                       tombstone & ~retain_deletes]
    return np.select(removed_or_kept, [MARKER, ABORTED, kept, KEYLESS, SUPERSEDED, TOMBSTONE], kept).astype(np.int8)


class OffsetLookup:
    """The offset map's entries a group needs: (key, latest offset) for keys superseded later."""

    def __init__(self, entries: pa.Table):
        found = entries.filter(pc.is_valid(entries.column("key")))
        self.keys = found.column("key").combine_chunks()
        self.offsets = found.column("mapped").to_numpy()

    def mapped(self, keys: pa.Array) -> np.ndarray:
        """The map's offset for each key, -1 when it has none (null keys have none)."""
        at = pc.index_in(keys, value_set=self.keys)
        valid = at.is_valid().to_numpy(zero_copy_only=False)
        out = np.full(len(keys), -1, np.int64)
        out[valid] = self.offsets[at.filter(at.is_valid()).to_numpy()]
        return out


def _chunks(batches: Iterator[Batch]) -> Iterator[list[Batch]]:
    chunk, size = [], 0
    for batch in batches:
        chunk.append(batch)
        size += batch.size
        if size >= CHUNK_BYTES:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk


def _chunk_codes(chunk: list[Batch], flags: np.ndarray, job: GroupJob,
                 lookup: OffsetLookup) -> tuple[np.ndarray, np.ndarray]:
    """The fate codes of the chunk's records in stored order, and where each batch's start
    (batch k's are codes[starts[k]:starts[k + 1]])."""
    cols = batch_columns(chunk)
    positions = np.fromiter((b.position for b in chunk), np.int64, len(chunk))
    row_batch = np.searchsorted(positions, cols.column("batch_position").to_numpy())
    keys = cols.column("key")
    row_flags = flags[row_batch]
    codes = fate_codes(
        row_flags[:, DISCARD], row_flags[:, RETAIN_DELETES], cols.column("is_control").to_numpy(zero_copy_only=False),
        cols.column("offset").to_numpy(), keys.is_valid().to_numpy(zero_copy_only=False),
        cols.column("tombstone").to_numpy(zero_copy_only=False), job.latest_offset, lookup.mapped(keys),
    )
    return codes, np.concatenate(([0], np.cumsum(np.bincount(row_batch, minlength=len(chunk)))))


def _decided(job: GroupJob, plans: GroupPlans, lookup: OffsetLookup,
             counts: np.ndarray) -> Iterator[tuple[Batch, BatchPlan, np.ndarray | None, int, bool]]:
    """Every batch of the group in file order, with its plan, its records' keep flags (None: no
    record), how many are kept and whether a kept one is a tombstone; ``counts`` adds up the
    codes. Every record has a code: they come from decoding these very batches."""
    flags, i = plans.flags.tolist(), 0
    for base in job.segments:
        path = storage.join(job.path, segment_name(base, "log"))
        with storage.open_read(path) as f:
            for chunk in _chunks(iter_batches(f, path)):
                for k, batch in enumerate(chunk):
                    at = i + k
                    if at >= len(flags) or plans.segment[at] != base or plans.position[at] != batch.position:
                        raise FormatError(path, batch.position, "batch not in the plan (the segment changed)")
                codes, starts = _chunk_codes(chunk, plans.flags[i:i + len(chunk)], job, lookup)
                counts += np.bincount(codes, minlength=len(counts))
                keep = codes <= KEPT_TOMBSTONE
                kept = np.diff(np.concatenate(([0], np.cumsum(keep)))[starts]).tolist()
                tombstones = np.diff(np.concatenate(([0], np.cumsum(codes == KEPT_TOMBSTONE)))[starts]).tolist()
                for k, batch in enumerate(chunk):
                    mine = keep[starts[k]:starts[k + 1]] if starts[k + 1] > starts[k] else None
                    plan = BatchPlan(BatchInfo.of(batch, base), job.group, *flags[i])
                    yield batch, plan, mine, kept[k], tombstones[k] > 0
                    i += 1


def _items(job: GroupJob, plans: GroupPlans, lookup: OffsetLookup,
           counts: np.ndarray) -> Iterator[tuple[Batch, Outcome, np.ndarray | None]]:
    for batch, plan, keep, kept, kept_tombstone in _decided(job, plans, lookup, counts):
        legacy = batch.magic != 2
        outcome = batch_outcome(plan, kept, not legacy and kept_tombstone, job.now, job.delete_retention_ms,
                                legacy and kept > 0 and batch.inner_magic_differs)
        yield batch, outcome, keep


IO_ERROR = "I/O error (transient, retried next run): "
RESULT_SCHEMA = pa.schema([
    ("gid", pa.int32()), ("path", pa.string()), ("group", pa.int32()), ("base_offset", pa.int64()),
    ("size", pa.int64()), ("batches", pa.int64()), ("records", pa.int64()), ("files", pa.list_(pa.string())),
    ("seconds", pa.float64()), ("error", pa.string()), ("codes", pa.list_(pa.int64())),
])


def count_group(job: GroupJob, plans: GroupPlans, entries: pa.Table) -> list[int]:
    """Records per fate code, nothing written (a dry run)."""
    counts = np.zeros(len(REASON_OF_CODE), np.int64)
    for _ in _decided(job, plans, OffsetLookup(entries), counts):
        pass
    return counts.tolist()


def rewrite_group(job: GroupJob, plans: GroupPlans, entries: pa.Table) -> dict:
    """Write the group's ``.cleaned`` files; on bad input, remove what was written and say why.
    ``entries``: (key, mapped) rows of the offset map for this group (``OffsetLookup``)."""
    started = time.monotonic()
    counts = np.zeros(len(REASON_OF_CODE), np.int64)
    base = {"path": job.path, "group": job.group, "base_offset": job.base_offset}
    try:
        written: WrittenGroup = write_group(
            job.path, job.base_offset, _items(job, plans, OffsetLookup(entries), counts),
            list(job.aborted), job.mtime_ms, job.index_interval_bytes, job.buffers, job.owner,
        )
    except (FormatError, OSError, ValueError) as exc:  # ValueError: a legacy entry Kafka cannot keep empty
        error = f"{IO_ERROR}{exc}" if isinstance(exc, OSError) else str(exc)
        for kind in ("log", "index", "timeindex", "txnindex"):
            leftover = output_path(job.path, job.base_offset, kind, job.owner)
            if storage.exists(leftover):
                storage.remove(leftover)
        return base | {"size": 0, "batches": 0, "records": 0, "files": [], "seconds": time.monotonic() - started,
                       "error": error, "codes": counts.tolist()}
    return base | {"size": written.size, "batches": written.batches, "records": written.records,
                   "files": list(written.files), "seconds": time.monotonic() - started, "error": None,
                   "codes": counts.tolist()}
