"""Write one cleaned segment group: ``<base>.log.cleaned`` and its three indexes (on an object
store, staged names instead: ``operations.s3commit``).

Each input batch arrives with what it became (``ChunkOut``, a read chunk at a time). Index
entries follow the chosen Kafka release's append rule: from KAFKA-806 (3.9.1, 4.0.1, 4.1 on) one
per batch once ``index.interval.bytes`` have passed, whatever the appends; before it (3.9.0,
4.0.0) the kept batches of each of the cleaner's read chunks are one append, indexed at most once
(``writers.chunks``). The files take the modification time of the group's
last input segment, as Kafka's cleaner sets it. They are written here, not yet durable: the task
that wrote them makes all of its groups' files durable together (``storage.fsync_files``), before it
reports them written and so before anyone may rename them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from kcompact import storage
from kcompact.logdir.commits import staged_name
from kcompact.logdir.listing import segment_name
from kcompact.readers.indexes import AbortedTxn
from kcompact.writers.chunks import BufferSizes, ReadChunks
from kcompact.writers.segment import SegmentWriter

CLEANED = ".cleaned"


@dataclass(frozen=True, slots=True)
class ChunkOut:
    """What the batches of one read of a source segment became, in file order: batch i's bytes
    are ``data[at[i]:at[i] + size[i]]`` (``at`` -1: dropped), the kept ones one after another
    (``writers.rebuild.frame_batches`` writes them so: a chunk's bytes are one slice), with the
    metadata Kafka's FilterResult reports for it (``writers.chunks.ReadChunks.appends``) and its
    record count."""

    segment: str  # the source segment file: a new one is a new cleanInto, buffers restored
    in_size: np.ndarray  # the input batches' bytes
    data: np.ndarray  # uint8
    at: np.ndarray
    size: np.ndarray
    max_offset: np.ndarray
    max_timestamp: np.ndarray
    offset_of_max_timestamp: np.ndarray
    records: np.ndarray


@dataclass(frozen=True, slots=True)
class WrittenGroup:
    base_offset: int
    size: int
    batches: int
    records: int
    files: tuple[str, ...]  # the .cleaned (or staged) files, full paths


def output_path(partition_dir: str, base_offset: int, kind: str, owner: str | None) -> str:
    """Where a task writes a new segment file: ``.cleaned`` beside the old one for Kafka's swap
    protocol; on an object store a staged name of the job's lease ``owner`` (``operations.s3commit``)."""
    name = segment_name(base_offset, kind)
    if storage.is_local_path(partition_dir):
        return storage.join(partition_dir, name + CLEANED)
    if owner is None:
        raise ValueError(f"{partition_dir}: staging on an object store needs the job's lease owner")
    return storage.join(partition_dir, staged_name(name, owner))


def write_group(partition_dir: str, base_offset: int, outputs: Iterable[ChunkOut], aborted: list[AbortedTxn],
                mtime_ms: int, index_interval_bytes: int, buffers: BufferSizes, max_index_bytes: int | None = None,
                owner: str | None = None, direct: bool = True, index_per_batch: bool = True) -> WrittenGroup:
    """Write the group's kept batches, in order, as ``.cleaned`` (or staged) files; returns what was
    written, with the index entries of the chosen release's rule (``index_per_batch``: KAFKA-806's,
    ``conf.releases.Release.index_per_batch``; else a read chunk per append, ``writers.chunks``). The .log is
    streamed (a group may be
    as large as segment.bytes); indexes are small, at most ``max_index_bytes`` (segment.index.bytes:
    a cleaned segment whose index would outgrow it fails, as Kafka's cleaner fails on a full
    index). Nothing is fsynced here: the caller makes the files durable (``storage.fsync_files``).
    ``direct``: the .log goes past the page cache where it can (``storage.DirectFile``)."""
    log_path = output_path(partition_dir, base_offset, "log", owner)
    batches = records = 0
    with storage.create_file(log_path, direct) as log:
        writer = SegmentWriter(log, base_offset, index_interval_bytes, max_index_bytes, path=log_path)
        if index_per_batch:
            for c in outputs:
                kept = c.at >= 0
                writer.append_batches(c.data, c.at[kept], c.size[kept])
                batches += int(np.count_nonzero(kept))
                records += int(c.records[kept].sum())
        else:
            batches, records = _append_chunks(writer, outputs, buffers)
        for txn in aborted:
            writer.add_aborted_txn(txn)
        files = writer.close()
    indexes = {"index": files.offset_index, "timeindex": files.time_index}
    if files.txn_index:
        indexes["txnindex"] = files.txn_index
    paths = [log_path]
    for kind, data in indexes.items():
        paths.append(output_path(partition_dir, base_offset, kind, owner))
        storage.write_file(paths[-1], data)
    for path in paths[:3]:  # Kafka's LogSegment.setLastModified: .log, .index, .timeindex
        storage.set_mtime(path, mtime_ms)
    return WrittenGroup(base_offset, files.log_size, batches, records, tuple(paths))


def _append_chunks(writer: SegmentWriter, outputs: Iterable[ChunkOut], buffers: BufferSizes) -> tuple[int, int]:
    """Before KAFKA-806: the kept batches of each of the cleaner's read chunks as one append
    (``writers.chunks``). Returns the batches and records written."""
    batches = records = 0
    chunks, parts = ReadChunks(buffers), []  # parts: the open chunk's bytes from earlier ChunkOuts
    for c in outputs:
        rows, size = chunks.appends(c.segment, c.in_size, c.at, c.size, c.max_offset, c.max_timestamp,
                                    c.offset_of_max_timestamp)
        view, start = memoryview(c.data), 0
        for end, max_offset, max_ts, ts_offset in rows.tolist():
            data = view[start:end]
            writer.append(b"".join((*parts, data)) if parts else data, max_offset, max_ts, ts_offset)
            parts, start = [], end
        if size > start:
            parts.append(view[start:size])
        kept = c.at >= 0
        batches += int(np.count_nonzero(kept))
        records += int(c.records[kept].sum())
    last = chunks.close()
    if last is not None:
        writer.append(b"".join(parts), *last)
    return batches, records


def remove_unfinished(partition_dir: str) -> tuple[list[str], str | None]:
    """Remove the ``.cleaned`` files of a local partition dir whose cleaning a stop cut short: the
    files removed, and why some were left (None: none were). Where a ``.swap`` file is there too
    (a swap interrupted), they are the broker's rule to apply (``kcompact recover``), not ours to
    change: without them it would complete a swap it must undo."""
    files, _ = storage.list_dir(partition_dir)
    names = [info.path for info in files]
    cleaned = [path for path in names if path.endswith(CLEANED)]
    if not cleaned:
        return [], None
    if any(path.endswith(".swap") for path in names):
        return [], f"{partition_dir}: an interrupted swap is there too: 'kcompact recover' finishes it"
    removed = []
    for path in cleaned:
        try:
            storage.remove(path)
        except OSError as exc:
            return removed, f"not removed: {storage.describe_error(exc, path)}"
        removed.append(path)
    return removed, None

