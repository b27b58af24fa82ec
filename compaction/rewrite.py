"""Rewrite one segment group on an executor, from the decisions already made.

Input: the group (which segments, its base offset and modification time, the aborted
transactions its .txnindex must list), the batch plans of its batches, and a ``KeyTable`` that
gives, for each key of its records under the group's tag, the offset map's offset (or nothing).
The segments are read once, a chunk at a time (``readers.walk``): the chunk's headers and the
records of every batch not dropped whole are located by two compiled calls, each record gets its
fate by Kafka's shouldRetainRecord (one vectorised expression over the chunk, the map's offsets
looked up by one compiled call), each batch its outcome by filterTo's rules, and then each batch is
copied, rebuilt (a compiled splice of its kept records), emptied or dropped. The ``.cleaned``
files are written by ``operations.cleaned``. Nothing is renamed here: the driver alone commits.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

import storage
from compaction.decisions import (
    DELETE,
    DISCARD,
    MARKER_FOR_EMPTY_TXN,
    RETAIN_DELETES,
    RETAIN_EMPTY,
    BatchPlan,
    batch_outcome,
)
from compaction.model import BatchInfo
from compaction.offset_map import EMPTY as NOT_MAPPED
from compaction.offset_map import KeyTable
from operations.cleaned import ChunkOut, output_path, write_group
from readers import scan, walk
from readers import codecs
from readers.batch import (
    ATTR_CODEC_MASK,
    ATTR_CONTROL,
    ATTR_DELETE_HORIZON,
    ATTR_TIMESTAMP_TYPE,
    NO_TIMESTAMP,
    V2_HEADER_SIZE,
    Batch,
)
from readers.errors import FormatError
from readers.indexes import AbortedTxn
from readers.logdir import segment_name
from writers.chunks import BufferSizes
from writers.cleaned import output_bytes, records_written, retained_max_offset
from writers.rebuild import EMPTY_ATTRIBUTES, KEPT_ATTRIBUTES, fill_crcs, frame_batches, splice_batches

# Each record's fate, one code per record: kept (a tombstone kept apart, since a kept tombstone
# needs a delete horizon), or removed and why.
KEPT, KEPT_TOMBSTONE, SUPERSEDED, TOMBSTONE, ABORTED, KEYLESS, MARKER = range(7)
REASON_OF_CODE = ("kept", "kept", "superseded", "tombstone", "aborted", "keyless", "marker")
IO_ERROR = "I/O error (transient, retried next run): "
RESULT_SCHEMA = pa.schema([
    ("gid", pa.int32()), ("path", pa.string()), ("group", pa.int32()), ("base_offset", pa.int64()),
    ("size", pa.int64()), ("batches", pa.int64()), ("records", pa.int64()), ("files", pa.list_(pa.string())),
    ("seconds", pa.float64()), ("error", pa.string()), ("codes", pa.list_(pa.int64())),
])
# What becomes of a v2 batch (filterTo), by code.
DROP, COPY, REBUILD, EMPTY_HEADER = range(4)
_NONE = np.empty(0, np.uint8)


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


@dataclass(frozen=True, slots=True)
class Output:
    """What a legacy entry became: its bytes (None: dropped) and FilterResult's metadata."""

    data: bytes | None
    max_offset: int = -1
    max_timestamp: int = -1
    offset_of_max_timestamp: int = -1
    records: int = 0


@dataclass(frozen=True, slots=True)
class Lookup:
    """Where a group finds the offset map's offset of its keys: ``table`` under ``tag``."""

    table: KeyTable
    tag: int

    def mapped(self, buf: np.ndarray, key_pos: np.ndarray, key_len: np.ndarray) -> np.ndarray:
        return self.table.lookup(buf, key_pos, key_len, np.full(len(key_pos), self.tag, np.int64))


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


def _outcomes(count: np.ndarray, kept: np.ndarray, kept_tombstone: np.ndarray, has_horizon: np.ndarray,
              flags: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``compaction.decisions.batch_outcome`` of v2 batches, vectorised: (what becomes of each,
    whether a delete horizon is stamped)."""
    stamp = (kept_tombstone | flags[:, MARKER_FOR_EMPTY_TXN]) & ~has_horizon
    what = np.where(kept > 0, np.where((kept == count) & ~stamp, COPY, REBUILD),
                    np.where(flags[:, RETAIN_EMPTY], EMPTY_HEADER, DROP))
    return np.where(flags[:, DELETE], DROP, what), stamp & (kept > 0)


def _readonly(a: np.ndarray) -> np.ndarray:
    """A read-only view: compiled code takes a tuple of buffers only when all are alike."""
    v = a.view()
    v.flags.writeable = False
    return v


class _Rewriter:
    """One group's batches, chunk by chunk: fates, counts, and (when ``render``) what they become."""

    def __init__(self, job: GroupJob, plans: GroupPlans, lookup: Lookup, render: bool):
        self.job, self.plans, self.lookup, self.render = job, plans, lookup, render
        self.counts = np.zeros(len(REASON_OF_CODE), np.int64)

    def outputs(self) -> Iterator[ChunkOut]:
        """What every batch of the group becomes, a read chunk at a time, in file order."""
        i = 0
        for base in self.job.segments:
            path = storage.join(self.job.path, segment_name(base, "log"))
            with storage.open_read(path) as f:
                for chunk in walk.read_chunks(f, path):
                    n = len(chunk.entries)
                    self._check_plan(chunk, base, i)
                    out = self._chunk(chunk, self.plans.flags[i:i + n])
                    if out is not None:
                        yield out
                    i += n
            if i < len(self.plans.segment) and self.plans.segment[i] == base:
                raise FormatError(path, int(self.plans.position[i]), "batch not in the file (the segment changed)")

    def _check_plan(self, chunk: walk.Chunk, base: int, i: int) -> None:
        positions = chunk.file_position + chunk.entries[:, walk.POSITION]
        plans = self.plans
        n = min(len(positions), len(plans.segment) - i)
        wrong = np.flatnonzero((plans.segment[i:i + n] != base) | (plans.position[i:i + n] != positions[:n]))
        if len(wrong) or n < len(positions):
            at = int(positions[wrong[0] if len(wrong) else n])
            raise FormatError(chunk.path, at, "batch not in the plan (the segment changed)")

    def _chunk(self, chunk: walk.Chunk, flags: np.ndarray) -> ChunkOut | None:
        job, e = self.job, chunk.entries
        v2 = e[:, walk.MAGIC] == 2
        read = np.flatnonzero(v2 & ~flags[:, DELETE])
        sections = walk.decode(chunk, read)
        cols = sections.cols
        of = sections.record_batches()
        k_of = read[of]
        offset = e[k_of, walk.BASE_OFFSET] + cols[:, scan.OFFSET_DELTA]
        has_key = cols[:, scan.KEY_POS] >= 0
        control = (e[k_of, walk.ATTRIBUTES] & ATTR_CONTROL) != 0
        discard = flags[k_of, DISCARD]
        mapped = np.full(len(offset), NOT_MAPPED, np.int64)
        waits = undecided(discard, control, offset, job.latest_offset, has_key)
        for packed in (False, True):
            sel = np.flatnonzero(waits & (sections.packed[of] == packed))
            if len(sel):
                buf = sections.arena if packed else chunk.buf
                mapped[sel] = self.lookup.mapped(buf, cols[sel, scan.KEY_POS], cols[sel, scan.KEY_LEN])
        codes = fate_codes(discard, flags[k_of, RETAIN_DELETES], control, offset, has_key, cols[:, scan.VALUE_POS] < 0,
                           job.latest_offset, mapped)
        self.counts += np.bincount(codes, minlength=len(REASON_OF_CODE))
        # batches dropped whole are not decoded: every record of one is discarded (aborted, or a marker)
        dropped = v2 & flags[:, DELETE]
        is_control = (e[:, walk.ATTRIBUTES] & ATTR_CONTROL) != 0
        self.counts[ABORTED] += int(e[dropped & ~is_control, walk.RECORDS_COUNT].sum())
        self.counts[MARKER] += int(e[dropped & is_control, walk.RECORDS_COUNT].sum())
        keep = codes <= KEPT_TOMBSTONE
        kept = np.bincount(of, weights=keep, minlength=len(read)).astype(np.int64)
        kept_tombstone = np.bincount(of, weights=codes == KEPT_TOMBSTONE, minlength=len(read)) > 0
        horizon = (e[read, walk.ATTRIBUTES] & ATTR_DELETE_HORIZON) != 0
        what, stamp = _outcomes(e[read, walk.RECORDS_COUNT], kept, kept_tombstone, horizon, flags[read])
        legacy = np.flatnonzero(~v2 & ~flags[:, DELETE])
        made = [self._legacy(chunk, int(k), flags[k]) for k in legacy.tolist()]
        if not self.render:
            return None
        # the last kept record of each batch: a rebuilt batch reports its offset to the segment's index
        last_kept = np.full(len(read), -1, np.int64)
        kept_rows = np.flatnonzero(keep)
        last_kept[of[kept_rows]] = offset[kept_rows]
        return self._render(chunk, read, sections, keep, kept, what, stamp, horizon, last_kept, legacy, made)

    def _render(self, chunk: walk.Chunk, read: np.ndarray, sections: walk.Sections, keep: np.ndarray,
                kept: np.ndarray, what: np.ndarray, stamp: np.ndarray, horizon: np.ndarray, last_kept: np.ndarray,
                legacy: np.ndarray, made: list[Output | None]) -> ChunkOut:
        """The chunk's output in one buffer: rebuilt batches spliced by one compiled call (compressed
        ones then compressed one by one), every batch copied or framed by another."""
        job, e = self.job, chunk.entries
        n = len(e)
        last = e[:, walk.BASE_OFFSET] + e[:, walk.LAST_OFFSET_DELTA]
        source, start, length = np.zeros(n, np.int64), e[:, walk.POSITION].copy(), np.full(n, -1, np.int64)
        header = np.full((n, 6), -1, np.int64)
        attributes, base_ts = e[:, walk.ATTRIBUTES].copy(), e[:, walk.BASE_TIMESTAMP].copy()
        max_ts, count = e[:, walk.MAX_TIMESTAMP].copy(), e[:, walk.RECORDS_COUNT].copy()
        max_offset, records = last.copy(), np.zeros(n, np.int64)
        # copies: their bytes as stored
        copied = read[what == COPY]
        length[copied], records[copied] = e[copied, walk.SIZE], e[copied, walk.RECORDS_COUNT]
        # empty headers (writeEmptyHeader): no body, the original max timestamp and offset span
        emptied = read[what == EMPTY_HEADER]
        length[emptied], count[emptied], base_ts[emptied] = 0, 0, NO_TIMESTAMP
        attributes[emptied] &= EMPTY_ATTRIBUTES
        # rebuilt: the kept records spliced, a delete horizon stamped or kept, the body compressed
        todo = np.flatnonzero(what == REBUILD)
        rebuilt = read[todo]
        new_horizon = np.where(stamp[todo], job.now + job.delete_retention_ms, e[rebuilt, walk.BASE_TIMESTAMP])
        has_horizon = stamp[todo] | horizon[todo]
        log_append = (e[rebuilt, walk.ATTRIBUTES] & ATTR_TIMESTAMP_TYPE) != 0
        spliced, at, bases, maxima, bad = splice_batches(
            chunk.buf, sections.arena, sections.packed, sections.cols, sections.rows, sections.ends, keep, todo,
            e[rebuilt, walk.BASE_TIMESTAMP], log_append, e[rebuilt, walk.MAX_TIMESTAMP], has_horizon, new_horizon)
        if bad >= 0:
            k = int(rebuilt[bad])
            raise ValueError(f"{chunk.path}: byte {chunk.file_position + int(e[k, walk.POSITION])}: batch at offset "
                             f"{int(e[k, walk.BASE_OFFSET])}: records section does not match its scan")
        codec = e[rebuilt, walk.ATTRIBUTES] & ATTR_CODEC_MASK
        sources = [chunk.buf, spliced, _NONE, _NONE]  # what entries are copied from, by ``source``
        source[rebuilt], start[rebuilt], length[rebuilt] = 1, at[:-1], np.diff(at)
        compressed = np.flatnonzero(codec != codecs.NONE)
        if len(compressed):
            packed = [codecs.compress(int(codec[t]), spliced[at[t]:at[t + 1]]) for t in compressed.tolist()]
            sizes = np.fromiter(map(len, packed), np.int64, len(packed))
            sources[2] = np.frombuffer(b"".join(packed), np.uint8)
            source[rebuilt[compressed]], length[rebuilt[compressed]] = 2, sizes
            start[rebuilt[compressed]] = np.cumsum(sizes) - sizes
        attributes[rebuilt] = (attributes[rebuilt] & KEPT_ATTRIBUTES) | np.where(has_horizon, ATTR_DELETE_HORIZON, 0)
        base_ts[rebuilt], max_ts[rebuilt], count[rebuilt] = bases, maxima, kept[todo]
        max_offset[rebuilt], records[rebuilt] = last_kept[todo], kept[todo]
        framed = np.concatenate((emptied, rebuilt))
        header[framed] = e[framed][:, [walk.BASE_OFFSET, walk.LEADER_EPOCH, walk.LAST_OFFSET_DELTA, walk.PRODUCER_ID,
                                       walk.PRODUCER_EPOCH, walk.BASE_SEQUENCE]]
        # legacy entries: made one by one (``_legacy``), copied in place
        done = [(k, m) for k, m in zip(legacy.tolist(), made, strict=True) if m is not None and m.data is not None]
        if done:
            at_k = [k for k, _ in done]
            sizes = np.fromiter((len(m.data) for _, m in done), np.int64, len(done))
            sources[3] = np.frombuffer(b"".join(m.data for _, m in done), np.uint8)
            source[at_k], length[at_k], start[at_k] = 3, sizes, np.cumsum(sizes) - sizes
            max_offset[at_k] = [m.max_offset for _, m in done]
            max_ts[at_k] = [m.max_timestamp for _, m in done]
            last[at_k] = [m.offset_of_max_timestamp for _, m in done]
            records[at_k] = [m.records for _, m in done]
        out, where = frame_batches(tuple(map(_readonly, sources)), source, start, length, header, attributes, base_ts,
                                   max_ts, count)
        fill_crcs(out, where[framed])
        size = np.where(length >= 0, length, 0) + np.where(header[:, 0] >= 0, V2_HEADER_SIZE, 0)
        return ChunkOut(chunk.path, e[:, walk.SIZE], out, where, size, max_offset, max_ts, last, records)

    def _legacy(self, chunk: walk.Chunk, k: int, flags: np.ndarray) -> Output | None:
        """A magic 0/1 entry (rare): its records decoded in Python, then the same rules; what it
        becomes (None when not rendering)."""
        job = self.job
        batch = chunk.batch(k)
        records = batch.records()
        keys = [r.key for r in records]
        data = np.frombuffer(b"".join(key or b"" for key in keys) or b"\0", np.uint8)
        lengths = np.array([len(key or b"") for key in keys], np.int64)
        starts = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)
        has_key = np.array([key is not None for key in keys], bool)
        offset = np.array([r.offset for r in records], np.int64)
        n = len(records)
        codes = fate_codes(np.full(n, flags[DISCARD]), np.full(n, flags[RETAIN_DELETES]), np.zeros(n, bool), offset,
                           has_key, np.array([r.value is None for r in records], bool), job.latest_offset,
                           self.lookup.mapped(data, np.where(has_key, starts, -1), lengths))
        self.counts += np.bincount(codes, minlength=len(REASON_OF_CODE))
        keep = codes <= KEPT_TOMBSTONE
        kept = int(np.count_nonzero(keep))
        plan = BatchPlan(BatchInfo.of(batch, 0), 0, *flags.tolist())
        outcome = batch_outcome(plan, kept, False, job.now, job.delete_retention_ms, kept > 0 and batch.inner_magic_differs)
        if not self.render:
            return None
        out = output_bytes(batch, outcome, keep)
        if out is None:
            return Output(out)
        written = Batch(batch.path, out, 0, len(out), 0)
        return Output(out, retained_max_offset(batch, outcome, keep, written), written.max_timestamp,
                      written.last_offset, records_written(batch, outcome, keep, written))


def count_group(job: GroupJob, plans: GroupPlans, lookup: Lookup) -> list[int]:
    """Records per fate code, nothing written (a dry run)."""
    rewriter = _Rewriter(job, plans, lookup, render=False)
    for _ in rewriter.outputs():
        pass
    return rewriter.counts.tolist()


def rewrite_group(job: GroupJob, plans: GroupPlans, lookup: Lookup) -> dict:
    """Write the group's ``.cleaned`` files; on bad input, remove what was written and say why."""
    started = time.monotonic()
    rewriter = _Rewriter(job, plans, lookup, render=True)
    base = {"path": job.path, "group": job.group, "base_offset": job.base_offset}
    try:
        written = write_group(job.path, job.base_offset, rewriter.outputs(), list(job.aborted), job.mtime_ms,
                              job.index_interval_bytes, job.buffers, job.owner)
    except (FormatError, OSError, ValueError) as exc:  # ValueError: a legacy entry Kafka cannot keep empty
        error = f"{IO_ERROR}{exc}" if isinstance(exc, OSError) else str(exc)
        for kind in ("log", "index", "timeindex", "txnindex"):
            leftover = output_path(job.path, job.base_offset, kind, job.owner)
            if storage.exists(leftover):
                storage.remove(leftover)
        return base | {"size": 0, "batches": 0, "records": 0, "files": [], "seconds": time.monotonic() - started,
                       "error": error, "codes": rewriter.counts.tolist()}
    return base | {"size": written.size, "batches": written.batches, "records": written.records,
                   "files": list(written.files), "seconds": time.monotonic() - started, "error": None,
                   "codes": rewriter.counts.tolist()}
