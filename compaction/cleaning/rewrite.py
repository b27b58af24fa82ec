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
A partition read whole makes its map while it reads its groups from the end back
(``compaction.cleaning.backward``), with the same per-chunk steps.
"""

from __future__ import annotations

import errno
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from kcompact import storage
from kcompact.compaction.cleaning.offset_map import EMPTY as NOT_MAPPED
from kcompact.compaction.cleaning.offset_map import KeyTable
from kcompact.compaction.cleaning.results import (
    ABORTED,
    KEPT,
    KEPT_TOMBSTONE,
    KEYLESS,
    MARKER,
    REASON_OF_CODE,
    SUPERSEDED,
    TOMBSTONE,
    GroupResult,
    failure_of,
    no_space,
    reason,
    task_failure,
)
from kcompact.compaction.rules.decisions import (
    DELETE,
    DISCARD,
    MARKER_FOR_EMPTY_TXN,
    RETAIN_DELETES,
    RETAIN_EMPTY,
    BatchPlan,
    batch_outcome,
)
from kcompact.compaction.rules.model import BatchInfo
from kcompact.errors import FormatError
from kcompact.errors.failure import Failure
from kcompact.logdir.listing import segment_name
from kcompact.operations.cleaned import ChunkOut, WrittenGroup, output_path, write_group
from kcompact.readers import codecs, scan, walk
from kcompact.readers.batch import (
    ATTR_CODEC_MASK,
    ATTR_CONTROL,
    ATTR_DELETE_HORIZON,
    ATTR_TIMESTAMP_TYPE,
    NO_TIMESTAMP,
    V2_HEADER_SIZE,
    Batch,
)
from kcompact.readers.indexes import AbortedTxn
from kcompact.writers import snappy_library
from kcompact.writers.chunks import BufferSizes
from kcompact.writers.cleaned import REWRITE, output_bytes, records_written
from kcompact.writers.codecs import GZIP_OS_JAVA_16
from kcompact.writers.compiled_codecs import compress_many
from kcompact.writers.rebuild import EMPTY_ATTRIBUTES, KEPT_ATTRIBUTES, fill_crcs, frame_batches, splice_batches

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
    max_index_bytes: int  # segment.index.bytes: a cleaned segment's index capacity
    buffers: BufferSizes  # the cleaner's I/O buffers: where its appends end
    delete_retention_ms: int
    now: int
    latest_offset: int  # the offset map's latest offset: records past it are kept
    first_dirty: int  # records feed the map from this offset on
    owner: str | None = None  # the job's lease owner: names the staged files on an object store
    direct: bool = True  # the .log written past the page cache (``storage.DirectFile``) where it can be
    sizes: tuple[int, ...] = ()  # of the segments' .log files, as listed (an object store is not asked)
    index_per_batch: bool = True  # the Kafka release's index rule (``conf.releases``: KAFKA-806)
    legacy_to_v2: bool = True  # the Kafka release rewrites kept v0/v1 entries as v2 (``writers.convert``)
    gzip_os: int = GZIP_OS_JAVA_16  # the broker JVM's gzip header OS byte (``writers.codecs``)

    def size_of(self, base: int) -> int | None:
        """The listed size of segment ``base``'s .log, if known."""
        return dict(zip(self.segments, self.sizes)).get(base)


@dataclass(frozen=True, slots=True)
class GroupPlans:
    """The batch plans of one group, in file order."""

    segment: np.ndarray
    position: np.ndarray
    size: np.ndarray
    flags: np.ndarray  # (batches, len(PLAN_FLAGS)) bool
    feeds: np.ndarray  # bool: the batch's records feed the offset map

    def __reduce__(self):
        """Pickled as one buffer: a group's plans travel with it to its task, and five small arrays
        pickled one by one cost several times their few hundred bytes, on the driver and again in
        the task."""
        n, width = self.flags.shape
        parts = (np.asarray(self.segment, "<i8"), np.asarray(self.position, "<i8"), np.asarray(self.size, "<i8"),
                 np.asarray(self.flags, bool), np.asarray(self.feeds, bool))
        return _group_plans, (n, width, b"".join(a.tobytes() for a in parts))


def _group_plans(n: int, width: int, blob: bytes) -> GroupPlans:
    """``GroupPlans.__reduce__``'s buffer as the plans again (writable arrays, as unpickled ones are)."""
    raw = np.frombuffer(bytearray(blob), np.uint8)
    ints = raw[:24 * n].view("<i8")
    flags = raw[24 * n:24 * n + n * width].view(bool).reshape(n, width)
    return GroupPlans(ints[:n], ints[n:2 * n], ints[2 * n:], flags, raw[24 * n + n * width:].view(bool))


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


def feeding(feeds: np.ndarray, control: np.ndarray, offset: np.ndarray, first_dirty: int) -> np.ndarray:
    """Records that put their offset in the map: of a batch that feeds it, not a marker, from the
    first dirty offset on (a keyless one too: the map passes over it)."""
    return feeds & ~control & (offset >= first_dirty)


def fate_codes(discard: np.ndarray, retain_deletes: np.ndarray, control: np.ndarray, offset: np.ndarray,
               has_key: np.ndarray, tombstone: np.ndarray, latest: int, mapped: np.ndarray) -> np.ndarray:
    """Kafka's shouldRetainRecord after the batch's discard decision, as a code per record (the
    test oracle ``tests/oracles.py`` states it a record at a time); ``mapped`` is the map's offset
    for the key, -1 if none."""
    codes = np.where(tombstone, np.int8(KEPT_TOMBSTONE), np.int8(KEPT))
    retained = codes.copy()
    codes[tombstone & ~retain_deletes] = TOMBSTONE  # the first that holds decides: set from the last up
    codes[offset < mapped] = SUPERSEDED
    codes[~has_key] = KEYLESS
    kept = control | (offset > latest)
    codes[kept] = retained[kept]
    codes[discard] = ABORTED
    codes[discard & control] = MARKER
    return codes


def _outcomes(count: np.ndarray, kept: np.ndarray, kept_tombstone: np.ndarray, has_horizon: np.ndarray,
              flags: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``compaction.rules.decisions.batch_outcome`` of v2 batches, vectorised: (what becomes of each,
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


@dataclass(frozen=True, slots=True)
class Records:
    """Every record of the batches of a chunk that are read (v2 ones located by the compiled
    scanner, legacy ones decoded in Python), in file order: per record its entry, offset, key
    (``bufs[which]`` at ``key_pos``, -1: none), tombstone and control flags; ``row`` maps a v2
    record to its row of ``sections``, -1 for a legacy one."""

    sections: walk.Sections
    legacy: dict[int, list]  # entry -> its decoded records
    entry: np.ndarray
    offset: np.ndarray
    key_pos: np.ndarray
    key_len: np.ndarray
    which: np.ndarray  # 0: the chunk's buffer, 1: the decompressed arena, 2: ``legacy_keys``
    tombstone: np.ndarray
    control: np.ndarray
    row: np.ndarray
    legacy_keys: np.ndarray

    def bufs(self, chunk: walk.Chunk) -> tuple[np.ndarray, ...]:
        return tuple(map(_readonly, (chunk.buf, self.sections.arena, self.legacy_keys)))

    @classmethod
    def of(cls, chunk: walk.Chunk, read: np.ndarray) -> Records:
        e = chunk.entries
        v2 = read[e[read, walk.MAGIC] == 2]
        sections = walk.decode(chunk, v2)
        cols = sections.cols
        of = sections.record_batches()
        legacy = {k: chunk.batch(k).records() for k in read[e[read, walk.MAGIC] != 2].tolist()}
        records = [r for rs in legacy.values() for r in rs]
        keys = [r.key or b"" for r in records]
        lengths = np.fromiter(map(len, keys), np.int64, len(keys))
        starts = np.cumsum(lengths) - lengths
        n_v2 = len(cols)
        entry = np.concatenate((v2[of], np.repeat(list(legacy), [len(rs) for rs in legacy.values()]).astype(np.int64)))
        # v2 rows keep their order; legacy records go in place
        order = np.argsort(entry, kind="stable") if legacy else slice(None)
        cat = np.concatenate
        return cls(
            sections,
            legacy,
            entry[order],
            cat(
                (
                    e[v2[of], walk.BASE_OFFSET] + cols[:, scan.OFFSET_DELTA],
                    np.fromiter((r.offset for r in records), np.int64, len(records)),
                )
            )[order],
            cat((cols[:, scan.KEY_POS], np.where([r.key is not None for r in records], starts, -1).astype(np.int64)))[
                order
            ],
            cat((cols[:, scan.KEY_LEN], lengths))[order],
            cat((sections.packed[of].astype(np.int64), np.full(len(records), 2, np.int64)))[order],
            cat((cols[:, scan.VALUE_POS] < 0, np.array([r.value is None for r in records], bool)))[order],
            cat(((e[v2[of], walk.ATTRIBUTES] & ATTR_CONTROL) != 0, np.zeros(len(records), bool)))[order],
            cat((np.arange(n_v2), np.full(len(records), -1)))[order],
            np.frombuffer(b"".join(keys) or b"\0", np.uint8),
        )


@dataclass(frozen=True, slots=True)
class Decoded:
    """A chunk's records located, and which of them wait on the offset map."""

    chunk: walk.Chunk
    flags: np.ndarray  # the chunk's batch plan flags
    records: Records
    waits: np.ndarray


class Rewriter:
    """A group's batches, chunk by chunk: fates, counts, and (when ``render``) what they become.
    The map's offsets come from ``lookup`` (a map made before, ``outputs``), or are made while
    the partition is read from its end (``compaction.cleaning.backward``)."""

    def __init__(self, job: GroupJob, plans: GroupPlans, render: bool, lookup: Lookup | None = None):
        self.job, self.plans, self.lookup, self.render = job, plans, lookup, render
        self.counts = np.zeros(len(REASON_OF_CODE), np.int64)
        # snappy batches compressed anew, per rendered chunk (copied ones keep the broker's bytes);
        # appended to, as chunks are rendered on several threads (``backward``)
        self.snappy_rebuilt: list[int] = []

    def outputs(self) -> Iterator[ChunkOut]:
        """What every batch of the group becomes, a read chunk at a time, in file order."""
        i = 0
        for base in self.job.segments:
            path = storage.join(self.job.path, segment_name(base, "log"))
            with storage.open_read(path, self.job.size_of(base)) as f:
                for chunk in walk.read_chunks(f, path):
                    n = len(chunk.entries)
                    self._check_plan(chunk, base, i)
                    decoded = self._decode(chunk, self.plans.flags[i:i + n])
                    out, counts = self._finish(decoded, self._looked_up(decoded))
                    self.counts += counts
                    if out is not None:
                        yield out
                    i += n
            if i < len(self.plans.segment) and self.plans.segment[i] == base:
                raise FormatError(path, int(self.plans.position[i]), "batch not in the file (the segment changed)")



    def _looked_up(self, d: Decoded) -> np.ndarray:
        records = d.records
        mapped = np.full(len(records.offset), NOT_MAPPED, np.int64)
        bufs = records.bufs(d.chunk)
        for which in (0, 1, 2):
            sel = np.flatnonzero(d.waits & (records.which == which))
            if len(sel):
                mapped[sel] = self.lookup.mapped(bufs[which], records.key_pos[sel], records.key_len[sel])
        return mapped

    def _check_plan(self, chunk: walk.Chunk, base: int, i: int) -> None:
        positions = chunk.file_position + chunk.entries[:, walk.POSITION]
        plans = self.plans
        n = min(len(positions), len(plans.segment) - i)
        wrong = np.flatnonzero((plans.segment[i:i + n] != base) | (plans.position[i:i + n] != positions[:n]))
        if len(wrong) or n < len(positions):
            at = int(positions[wrong[0] if len(wrong) else n])
            raise FormatError(chunk.path, at, "batch not in the plan (the segment changed)")

    def _decode(self, chunk: walk.Chunk, flags: np.ndarray) -> Decoded:
        """The records of every batch not dropped whole (those are not decoded: every record of
        one is discarded, aborted or a marker), and which wait on the map."""
        records = Records.of(chunk, np.flatnonzero(~flags[:, DELETE]))
        waits = undecided(flags[records.entry, DISCARD], records.control, records.offset, self.job.latest_offset,
                          records.key_pos >= 0)
        return Decoded(chunk, flags, records, waits)

    def _finish(self, d: Decoded, mapped: np.ndarray) -> tuple[ChunkOut | None, np.ndarray]:
        """Every record's fate (``mapped``: the map's offsets), then (rendering) what every batch
        becomes; with the fate counts."""
        job, e, flags, records = self.job, d.chunk.entries, d.flags, d.records
        codes = fate_codes(flags[records.entry, DISCARD], flags[records.entry, RETAIN_DELETES], records.control,
                           records.offset, records.key_pos >= 0, records.tombstone, job.latest_offset, mapped)
        counts = np.bincount(codes, minlength=len(REASON_OF_CODE)).astype(np.int64)
        dropped = flags[:, DELETE]
        is_control = (e[:, walk.ATTRIBUTES] & ATTR_CONTROL) != 0
        counts[ABORTED] += int(e[dropped & ~is_control, walk.RECORDS_COUNT].sum())
        counts[MARKER] += int(e[dropped & is_control, walk.RECORDS_COUNT].sum())
        return (self._render(d.chunk, flags, records, codes) if self.render else None), counts

    def _render(self, chunk: walk.Chunk, flags: np.ndarray, records: Records, codes: np.ndarray) -> ChunkOut:
        """The chunk's output in one buffer: rebuilt batches spliced by one compiled call (compressed
        ones then compressed by another), every batch copied or framed by a third."""
        job, e = self.job, chunk.entries
        n = len(e)
        sections = records.sections
        v2_rows = records.row >= 0
        keep = np.zeros(len(sections.cols), bool)
        keep[records.row[v2_rows]] = codes[v2_rows] <= KEPT_TOMBSTONE
        of = sections.record_batches()
        n_read = len(sections.ks)
        kept = np.bincount(of, weights=keep, minlength=n_read).astype(np.int64)
        kept_tombstone = np.zeros(len(keep), bool)
        kept_tombstone[records.row[v2_rows]] = codes[v2_rows] == KEPT_TOMBSTONE
        kept_tombstone = np.bincount(of, weights=kept_tombstone, minlength=n_read) > 0
        read = sections.ks
        horizon = (e[read, walk.ATTRIBUTES] & ATTR_DELETE_HORIZON) != 0
        what, stamp = _outcomes(e[read, walk.RECORDS_COUNT], kept, kept_tombstone, horizon, flags[read])
        # the last kept record of each batch: a rebuilt batch reports its offset to the segment's index
        offsets = e[read[of], walk.BASE_OFFSET] + sections.cols[:, scan.OFFSET_DELTA]
        last_kept = np.full(n_read, -1, np.int64)
        kept_rows = np.flatnonzero(keep)
        last_kept[of[kept_rows]] = offsets[kept_rows]
        last = e[:, walk.BASE_OFFSET] + e[:, walk.LAST_OFFSET_DELTA]
        source, start, length = np.zeros(n, np.int64), e[:, walk.POSITION].copy(), np.full(n, -1, np.int64)
        header = np.full((n, 6), -1, np.int64)
        attributes, base_ts = e[:, walk.ATTRIBUTES].copy(), e[:, walk.BASE_TIMESTAMP].copy()
        max_ts, count = e[:, walk.MAX_TIMESTAMP].copy(), e[:, walk.RECORDS_COUNT].copy()
        max_offset, written = last.copy(), np.zeros(n, np.int64)
        # copies: their bytes as stored
        copied = read[what == COPY]
        length[copied], written[copied] = e[copied, walk.SIZE], e[copied, walk.RECORDS_COUNT]
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
            raise FormatError(chunk.path, chunk.file_position + int(e[k, walk.POSITION]),
                              f"batch at offset {int(e[k, walk.BASE_OFFSET])}: records section does not match its scan")
        codec = e[rebuilt, walk.ATTRIBUTES] & ATTR_CODEC_MASK
        self.snappy_rebuilt.append(int(np.count_nonzero(codec == codecs.SNAPPY)))
        sources = [chunk.buf, spliced, _NONE, _NONE]  # what entries are copied from, by ``source``
        source[rebuilt], start[rebuilt], length[rebuilt] = 1, at[:-1], np.diff(at)
        compressed = np.flatnonzero(codec != codecs.NONE)
        if len(compressed):
            sources[2], ends = compress_many(spliced, codec[compressed], at[compressed],
                                                             at[compressed + 1])
            sizes = np.diff(ends, prepend=0)
            source[rebuilt[compressed]], length[rebuilt[compressed]] = 2, sizes
            start[rebuilt[compressed]] = ends - sizes
            if job.gzip_os != GZIP_OS_JAVA_16:  # compressed as Java 16 on writes it: the header's byte 9 differs
                gzipped = (ends - sizes)[codec[compressed] == codecs.GZIP]
                sources[2] = sources[2].copy()
                sources[2][gzipped + 9] = job.gzip_os
        attributes[rebuilt] = (attributes[rebuilt] & KEPT_ATTRIBUTES) | np.where(has_horizon, ATTR_DELETE_HORIZON, 0)
        base_ts[rebuilt], max_ts[rebuilt], count[rebuilt] = bases, maxima, kept[todo]
        max_offset[rebuilt], written[rebuilt] = last_kept[todo], kept[todo]
        framed = np.concatenate((emptied, rebuilt))
        header[framed] = e[framed][:, [walk.BASE_OFFSET, walk.LEADER_EPOCH, walk.LAST_OFFSET_DELTA, walk.PRODUCER_ID,
                                       walk.PRODUCER_EPOCH, walk.BASE_SEQUENCE]]
        # legacy entries: made one by one in Python (they are rare), copied in place
        done = [(k, m) for k, m in self._legacy(chunk, flags, records, codes) if m.data is not None]
        if done:
            at_k = [k for k, _ in done]
            sizes = np.fromiter((len(m.data) for _, m in done), np.int64, len(done))
            sources[3] = np.frombuffer(b"".join(m.data for _, m in done), np.uint8)
            source[at_k], length[at_k], start[at_k] = 3, sizes, np.cumsum(sizes) - sizes
            max_offset[at_k] = [m.max_offset for _, m in done]
            max_ts[at_k] = [m.max_timestamp for _, m in done]
            last[at_k] = [m.offset_of_max_timestamp for _, m in done]
            written[at_k] = [m.records for _, m in done]
        out, where = frame_batches(tuple(map(_readonly, sources)), source, start, length, header, attributes, base_ts,
                                   max_ts, count)
        fill_crcs(out, where[framed])
        size = np.where(length >= 0, length, 0) + np.where(header[:, 0] >= 0, V2_HEADER_SIZE, 0)
        return ChunkOut(chunk.path, e[:, walk.SIZE], out, where, size, max_offset, max_ts, last, written)

    def _legacy(self, chunk: walk.Chunk, flags: np.ndarray, records: Records,
                codes: np.ndarray) -> Iterator[tuple[int, Output]]:
        """What each legacy (magic 0/1) entry of the chunk becomes, from its records' fates, by the
        rules of ``compaction.rules.decisions.batch_outcome`` and ``writers.cleaned``."""
        job = self.job
        for k in records.legacy:
            codes_k = codes[records.entry == k]
            keep = codes_k <= KEPT_TOMBSTONE
            batch = chunk.batch(k)
            kept = int(np.count_nonzero(keep))
            plan = BatchPlan(BatchInfo.of(batch, 0), 0, *flags[k].tolist())
            outcome = batch_outcome(plan, kept, bool((codes_k == KEPT_TOMBSTONE).any()), job.now,
                                    job.delete_retention_ms, kept > 0 and batch.inner_magic_differs, job.legacy_to_v2)
            out = output_bytes(batch, outcome, keep, job.legacy_to_v2, job.gzip_os)
            self.snappy_rebuilt.append(int(outcome.kind == REWRITE and batch.codec == codecs.SNAPPY))
            if out is None:
                yield k, Output(None)
                continue
            made = Batch(
                batch.path, out, 0, len(out), 0
            )  # a legacy entry sits at its last kept offset, so does a v2 one
            yield k, Output(out, made.last_offset, made.max_timestamp, made.last_offset,
                            records_written(batch, outcome, keep, made))



def unwritten(job: GroupJob) -> GroupResult:
    """A group's result before anything of it is written."""
    return GroupResult(path=job.path, group=job.group, base_offset=job.base_offset)


def write_outputs(job: GroupJob, outputs: Iterable) -> WrittenGroup:
    return write_group(job.path, job.base_offset, outputs, list(job.aborted), job.mtime_ms, job.index_interval_bytes,
                       job.buffers, job.max_index_bytes, job.owner, job.direct, job.index_per_batch)


def succeeded(base: GroupResult, written: WrittenGroup, started: float, rewriter: Rewriter) -> GroupResult:
    """A group written; its snappy batches compressed anew by a process without Google's snappy
    (an executor whose host lacks it, while the driver has it) counted, for the report to say."""
    inexact = sum(rewriter.snappy_rebuilt) if snappy_library.missing() else 0
    return base.but(size=written.size, batches=written.batches, records=written.records, files=tuple(written.files),
                    seconds=time.monotonic() - started, codes=tuple(rewriter.counts.tolist()), inexact_snappy=inexact)


def failed(job: GroupJob, base: GroupResult, started: float, rewriter: Rewriter, exc: Exception) -> GroupResult:
    """A group's result when reading or writing it failed: whatever it wrote removed, and why."""
    _remove_outputs(job)
    if getattr(exc, "errno", None) == errno.ENOSPC:  # the file system, the file and the room: what a person needs
        error = no_space(exc, output_path(job.path, job.base_offset, "log", job.owner), int(rewriter.plans.size.sum()))
        return base.but(seconds=time.monotonic() - started, error=error, failure=Failure.IO.value,
                        codes=tuple(rewriter.counts.tolist()))
    return base.but(seconds=time.monotonic() - started, error=reason(exc, job.path), failure=failure_of(exc),
                    codes=tuple(rewriter.counts.tolist()))


def made_durable(results: list[GroupResult]) -> list[GroupResult]:
    """The groups a task wrote, their files made durable together (``storage.fsync_files``: one
    ``syncfs`` for many): a group with a file whose fsync failed fails, as if its write had, and
    its files are removed (an ENOSPC that only the sync met, as on file systems that allocate late,
    said as a write's: the mount, the file, the room). A task reports its groups only after this."""
    unsynced = storage.fsync_files([path for r in results if r.error is None for path in r.files])
    if not unsynced:
        return results
    out = []
    for r in results:
        exc = next((unsynced[path] for path in r.files if path in unsynced), None)
        if exc is None:
            out.append(r)
            continue
        storage.remove_many(list(r.files))
        error = no_space(exc, exc.filename, r.size) if exc.errno == errno.ENOSPC else reason(exc, r.path)
        out.append(r.but(size=0, batches=0, records=0, files=(), error=error, failure=failure_of(exc)))
    return out


def _remove_outputs(job: GroupJob) -> None:
    for kind in ("log", "index", "timeindex", "txnindex"):
        leftover = output_path(job.path, job.base_offset, kind, job.owner)
        if storage.exists(leftover):
            storage.remove(leftover)


def count_group(job: GroupJob, plans: GroupPlans, lookup: Lookup) -> list[int]:
    """Records per fate code, nothing written (a dry run)."""
    rewriter = Rewriter(job, plans, render=False, lookup=lookup)
    for _ in rewriter.outputs():
        pass
    return rewriter.counts.tolist()


def rewrite_group(job: GroupJob, plans: GroupPlans, lookup: Lookup) -> GroupResult:
    """Write the group's ``.cleaned`` files; on bad input, remove what was written and say why."""
    started, base = time.monotonic(), unwritten(job)
    rewriter = Rewriter(job, plans, render=True, lookup=lookup)
    try:
        written = write_outputs(job, rewriter.outputs())
    except (FormatError, OSError, ValueError, MemoryError, RuntimeError) as exc:  # ValueError: a legacy entry
        if not task_failure(exc):
            raise
        return failed(job, base, started, rewriter, exc)
    return succeeded(base, written, started, rewriter)
