"""Write one cleaned segment group: ``<base>.log.cleaned`` and its three indexes (on an object
store, staged names instead: ``writers.s3commit``).

Each input batch arrives with its decided outcome: copied byte for byte, rebuilt
with only its kept records (and perhaps a new delete horizon), written as Kafka's
empty header, or dropped. The indexes follow the broker's append rules; the files
take the modification time of the group's last input segment, as Kafka's cleaner
sets it, and are fsynced before anyone may rename them.
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np

import storage
from compaction.decisions import COPY, DROP, EMPTY, REWRITE, Outcome
from readers.batch import Batch
from readers.indexes import AbortedTxn
from readers.logdir import segment_name
from writers import s3commit
from writers.legacy import rebuild_wrapper
from writers.rebuild import rebuild
from writers.segment import SegmentWriter

CLEANED = ".cleaned"


@dataclass(frozen=True, slots=True)
class WrittenGroup:
    base_offset: int
    size: int
    batches: int
    records: int
    files: tuple[str, ...]  # the .cleaned (or staged) files, full paths


def output_bytes(batch: Batch, outcome: Outcome, keep: np.ndarray | None) -> bytes | None:
    """The bytes a batch becomes, or None when it is dropped. A legacy (v0/v1) entry is
    copied, dropped, or (a compressed wrapper) rebuilt around its kept inner messages; it has
    no empty form, and Kafka's cleaner fails on one it must keep empty."""
    if outcome.kind == DROP:
        return None
    if outcome.kind == COPY:
        return bytes(batch.data)
    if batch.magic != 2:
        if outcome.kind == EMPTY:
            raise ValueError(f"{batch.path}: byte {batch.position}: magic-{batch.magic} entry at offset "
                             f"{batch.base_offset_field} loses every record but must be kept (the last batch of "
                             "the cleaning round): empty batches are only supported for magic v2 and above, "
                             "so Kafka's cleaner fails here too")
        assert outcome.kind == REWRITE and keep is not None
        return rebuild_wrapper(batch, keep)
    if outcome.kind == EMPTY:
        return rebuild(batch, np.zeros(batch.count, dtype=bool))
    assert outcome.kind == REWRITE and keep is not None
    return rebuild(batch, keep, outcome.delete_horizon_ms)


def _records_written(batch: Batch, outcome: Outcome, keep: np.ndarray | None, written: Batch) -> int:
    """Records in a written batch; a legacy wrapper counts its inner messages (known without
    decompressing the output again)."""
    if written.magic == 2:
        return written.records_count
    if outcome.kind == REWRITE:
        return int(np.count_nonzero(keep))
    return batch.count


class _Pieces:
    """Appended batches written in pieces of at least ``size`` bytes: a write call per batch
    costs more than copying the batch once more."""

    def __init__(self, out: BinaryIO, size: int = 1 << 20):
        self.out, self.size = out, size
        self.parts: list[bytes] = []
        self.pending = 0

    def write(self, data: bytes) -> None:
        self.parts.append(data)
        self.pending += len(data)
        if self.pending >= self.size:
            self.flush()

    def flush(self) -> None:
        if self.parts:
            self.out.write(b"".join(self.parts))
            self.parts, self.pending = [], 0


def output_path(partition_dir: str, base_offset: int, kind: str, owner: str | None) -> str:
    """Where a task writes a new segment file: ``.cleaned`` beside the old one for Kafka's swap
    protocol; on an object store a staged name of the job's lease ``owner`` (``writers.s3commit``)."""
    name = segment_name(base_offset, kind)
    if storage.is_local_path(partition_dir):
        return storage.join(partition_dir, name + CLEANED)
    if owner is None:
        raise ValueError(f"{partition_dir}: staging on an object store needs the job's lease owner")
    return storage.join(partition_dir, s3commit.staged_name(name, owner))


def write_group(partition_dir: str, base_offset: int, items: Iterable[tuple[Batch, Outcome, np.ndarray | None]],
                aborted: list[AbortedTxn], mtime_ms: int, index_interval_bytes: int,
                owner: str | None = None) -> WrittenGroup:
    """Write the group's kept batches, in order, as ``.cleaned`` (or staged) files; returns what was
    written. The .log is streamed (a group may be as large as segment.bytes); indexes are small. The
    index files are written (and fsynced) while the .log is fsynced: each fsync waits for the disk."""
    log_path = output_path(partition_dir, base_offset, "log", owner)
    batches = records = 0
    with ThreadPoolExecutor(max_workers=3) as pool:
        with storage.create_durable(log_path) as log:
            out = _Pieces(log)
            writer = SegmentWriter(out, base_offset, index_interval_bytes)
            for batch, outcome, keep in items:
                data = output_bytes(batch, outcome, keep)
                if data is None:
                    continue
                written = Batch(batch.path, data, 0, len(data), writer.size)
                writer.append(data, written.last_offset, written.max_timestamp, written.last_offset)
                batches += 1
                records += _records_written(batch, outcome, keep, written)
            out.flush()
            for txn in aborted:
                writer.add_aborted_txn(txn)
            files = writer.close()
            indexes = {"index": files.offset_index, "timeindex": files.time_index}
            if files.txn_index:
                indexes["txnindex"] = files.txn_index
            paths = {kind: output_path(partition_dir, base_offset, kind, owner) for kind in indexes}
            pending = [pool.submit(storage.write_durable, paths[kind], data) for kind, data in indexes.items()]
        for done in pending:
            done.result()
    paths = [log_path, *paths.values()]
    for path in paths[:3]:  # Kafka's LogSegment.setLastModified: .log, .index, .timeindex
        storage.set_mtime(path, mtime_ms)
    return WrittenGroup(base_offset, files.log_size, batches, records, tuple(paths))
