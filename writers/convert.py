"""A kept v0/v1 entry rewritten as a v2 batch, as Kafka's cleaner does from 4.0.0 on (KIP-724,
KAFKA-13093); 3.9 keeps such entries as they are (``writers.legacy``).

From 4.0.0, ``MemoryRecords.filterTo`` never copies a legacy entry: its kept records go through
``buildRetainedRecordsInto`` with a magic-2 ``MemoryRecordsBuilder``. Per shallow entry (a
compressed wrapper, or one uncompressed message) that gives one v2 batch:

- codec the entry's (default level; lz4 with the correct header checksum, as magic 2 writes it);
- timestamp type CreateTime for magic 0, else the entry's; under LogAppendTime the entry's
  timestamp is the append time and the batch's max timestamp;
- base offset the first kept record's, last offset delta up to the last kept record (no override:
  a legacy entry has no producer sequence to preserve);
- producer id, epoch, base sequence and partition leader epoch -1, not transactional, not control;
- records as the builder appends them: offset and timestamp deltas (magic 0 timestamps are -1,
  and so is the max timestamp of a batch of them), key and value as stored, no headers;
- a delete horizon (base timestamp, attribute bit) when a tombstone is kept: legacy entries have
  none, so filterTo stamps now + delete.retention.ms.

Byte-format only: no Spark, no fsspec.
"""

from __future__ import annotations

import struct

import numpy as np

from kcompact.readers.batch import CREATE_TIME, LOG_APPEND_TIME, NO_TIMESTAMP, Batch
from kcompact.writers.batch import encode_batch
from kcompact.writers.legacy import kept_records

NO_PARTITION_LEADER_EPOCH = -1


def legacy_as_v2(batch: Batch, keep: np.ndarray, delete_horizon_ms: int | None) -> bytes:
    """The v2 batch that legacy entry ``batch`` becomes, keeping the records where ``keep`` (one
    bool per record, in stored order) is set; ``delete_horizon_ms`` stamps a delete horizon."""
    where = f"{batch.path}: byte {batch.position}: magic-{batch.magic} entry at offset {batch.base_offset_field}"
    if batch.magic not in (0, 1):
        raise ValueError(f"{where}: not a legacy entry")
    kept = kept_records(batch, keep, where, "record")
    log_append = batch.timestamp_type == LOG_APPEND_TIME
    # MemoryRecordsBuilder's max: the append time, else the largest record timestamp (-1 if none)
    max_timestamp = batch.max_timestamp if log_append else max([NO_TIMESTAMP] + [r.timestamp for r in kept])
    try:
        return encode_batch(kept, base_offset=kept[0].offset, codec=batch.codec,
                            timestamp_type=LOG_APPEND_TIME if log_append else CREATE_TIME,
                            partition_leader_epoch=NO_PARTITION_LEADER_EPOCH, delete_horizon_ms=delete_horizon_ms,
                            max_timestamp=max_timestamp)
    except struct.error as exc:  # a field out of range: an offset span past int32
        raise ValueError(f"{where}: cannot be written as a v2 batch: {exc}") from None
