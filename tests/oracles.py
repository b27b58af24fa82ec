"""Test-only oracles: plain, one-at-a-time forms of rules the product runs in another form.

The product holds one implementation of each rule; these are its readable twins, kept here so
that tests can state expectations in Kafka's terms and property tests can hold the product's
form against them:

- ``keep_record``: Kafka's Cleaner.shouldRetainRecord for one record (with the batch's discard
  decision first), as a bool; the product decides every record of a chunk at once
  (``compaction.cleaning.rewrite.fate_codes``).
- ``encode_like``: a v2 batch re-encoded record by record around the kept records, as Kafka's
  MemoryRecordsBuilder writes it; the product splices the kept records' bytes
  (``writers.rebuild.rebuild`` and the compiled kernels it shares with ``compaction.cleaning.rewrite``).

Unlike ``tests/reference`` (which shares no rule with the product), these build on the product's
values (``BatchPlan``) and its plain v2 encoder (``writers.batch.encode_batch``).
"""

from __future__ import annotations

from collections.abc import Sequence

from kcompact.compaction.rules.decisions import BatchPlan
from kcompact.readers import codecs
from kcompact.readers.batch import LOG_APPEND_TIME, NO_TIMESTAMP, Batch
from kcompact.readers.records import Record
from kcompact.writers.batch import encode_batch


def keep_record(plan: BatchPlan, latest_offset: int, offset: int, has_key: bool, tombstone: bool,
                mapped_offset: int | None) -> bool:
    """Kafka's shouldRetainRecord (with the batch's discard decision first)."""
    if plan.discard_records:
        return False
    if plan.batch.is_control or offset > latest_offset:
        return True
    if not has_key:
        return False
    latest_for_key = offset >= (mapped_offset if mapped_offset is not None else -1)
    return latest_for_key and (not tombstone or plan.retain_deletes)


def encode_like(batch: Batch, records: Sequence[Record], delete_horizon_ms: int | None = None) -> bytes:
    """Re-encode ``batch`` keeping only ``records``, as Kafka's cleaner rebuilds a batch.

    Kept: base and last offset, codec, producer fields, timestamp type, leader
    epoch, an existing delete horizon (``delete_horizon_ms`` stamps a new one).
    The max timestamp is recomputed from the kept records (LogAppendTime keeps
    the append time). With no record left, the result is Kafka's empty batch
    header: uncompressed, no first timestamp, the original max timestamp.
    """
    if batch.magic != 2:
        raise ValueError("only magic-v2 batches are re-encoded here; legacy wrappers: writers.legacy")
    fields = dict(
        base_offset=batch.base_offset_field,
        timestamp_type=batch.timestamp_type,
        partition_leader_epoch=batch.partition_leader_epoch,
        producer_id=batch.producer_id,
        producer_epoch=batch.producer_epoch,
        base_sequence=batch.base_sequence,
        transactional=batch.is_transactional,
        control=batch.is_control,
        last_offset_delta=batch.last_offset_delta,
    )
    if not records:
        return encode_batch(
            (), codec=codecs.NONE, first_timestamp=NO_TIMESTAMP, max_timestamp=batch.max_timestamp, **fields
        )
    if delete_horizon_ms is None and batch.has_delete_horizon:
        delete_horizon_ms = batch.delete_horizon_ms
    append_time = batch.max_timestamp if batch.timestamp_type == LOG_APPEND_TIME else None
    return encode_batch(
        records, codec=batch.codec, delete_horizon_ms=delete_horizon_ms, max_timestamp=append_time, **fields
    )
