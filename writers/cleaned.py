"""Write one cleaned segment group: ``<base>.log.cleaned`` and its three indexes.

Each input batch arrives with its decided outcome: copied byte for byte, rebuilt
with only its kept records (and perhaps a new delete horizon), written as Kafka's
empty header, or dropped. The indexes follow the broker's append rules; the files
take the modification time of the group's last input segment, as Kafka's cleaner
sets it, and are fsynced before anyone may rename them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

import storage
from compaction.decisions import COPY, DROP, EMPTY, REWRITE, Outcome
from readers.batch import Batch
from readers.indexes import AbortedTxn
from readers.logdir import segment_name
from writers.rebuild import rebuild
from writers.segment import SegmentWriter

CLEANED = ".cleaned"


@dataclass(frozen=True, slots=True)
class WrittenGroup:
    base_offset: int
    size: int
    batches: int
    records: int
    files: tuple[str, ...]  # the .cleaned files, full paths


def output_bytes(batch: Batch, outcome: Outcome, keep: np.ndarray | None) -> bytes | None:
    """The bytes a batch becomes, or None when it is dropped."""
    if outcome.kind == DROP:
        return None
    if outcome.kind == COPY:
        return bytes(batch.data)
    if outcome.kind == EMPTY:
        return rebuild(batch, np.zeros(batch.count, dtype=bool))
    assert outcome.kind == REWRITE and keep is not None
    return rebuild(batch, keep, outcome.delete_horizon_ms)


def write_group(partition_dir: str, base_offset: int, items: Iterable[tuple[Batch, Outcome, np.ndarray | None]],
                aborted: list[AbortedTxn], mtime_ms: int, index_interval_bytes: int) -> WrittenGroup:
    """Write the group's kept batches, in order, as ``.cleaned`` files; returns what was written.
    The .log is streamed (a group may be as large as segment.bytes); indexes are small."""
    log_path = storage.join(partition_dir, segment_name(base_offset, "log") + CLEANED)
    batches = records = 0
    with storage.create_durable(log_path) as log:
        writer = SegmentWriter(log, base_offset, index_interval_bytes)
        for batch, outcome, keep in items:
            data = output_bytes(batch, outcome, keep)
            if data is None:
                continue
            written = Batch(batch.path, data, 0, len(data), writer.size)
            writer.append(data, written.last_offset, written.max_timestamp, written.last_offset)
            batches += 1
            records += written.records_count
        for txn in aborted:
            writer.add_aborted_txn(txn)
        files = writer.close()
    paths = [log_path]
    indexes = {"index": files.offset_index, "timeindex": files.time_index}
    if files.txn_index:
        indexes["txnindex"] = files.txn_index
    for kind, data in indexes.items():
        path = storage.join(partition_dir, segment_name(base_offset, kind) + CLEANED)
        storage.write_durable(path, data)
        paths.append(path)
    for path in paths[:3]:  # Kafka's LogSegment.setLastModified: .log, .index, .timeindex
        storage.set_mtime(path, mtime_ms)
    return WrittenGroup(base_offset, files.log_size, batches, records, tuple(paths))
