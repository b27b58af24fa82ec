"""The broker's producer state of one partition (ProducerStateManager), fed batch by batch as
they are appended.

The broker keeps this state in memory and in snapshots; cleaning never changes it. So the model
feeds it the batches as producers wrote them (the uncleaned input, then each later append), never
a replay of a cleaned log. What the cleaner reads from it: the first unstable offset (an open
transaction's first offset) and ``lastRecordsOfActiveProducers``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kcompact.readers.batch import Batch


@dataclass(slots=True)
class ProducerEntry:
    """ProducerStateEntry, reduced to what cleaning reads."""

    epoch: int
    last_data_offset: int | None = None  # the last BatchMetadata's last offset (None: no batch metadata)
    last_timestamp: int = -1
    current_txn_first_offset: int | None = None

    def maybe_update_epoch(self, epoch: int) -> None:
        """ProducerStateEntry.maybeUpdateProducerEpoch: another epoch drops the batch metadata."""
        if self.epoch != epoch:
            self.last_data_offset = None
            self.epoch = epoch


@dataclass(frozen=True, slots=True)
class LastRecord:
    last_data_offset: int | None
    producer_epoch: int


@dataclass(slots=True)
class ProducerState:
    entries: dict[int, ProducerEntry] = field(default_factory=dict)

    def append(self, batch: Batch) -> None:
        """ProducerAppendInfo.append for one batch with a producer id (v2 only)."""
        if batch.magic < 2 or batch.producer_id < 0:
            return
        pid = batch.producer_id
        if batch.is_control:
            records = batch.records()
            if not records:
                return  # an emptied control batch: its transaction was cleaned away, nothing to append
            entry = self.entries.setdefault(pid, ProducerEntry(batch.producer_epoch))
            # appendEndTxnMarker: a COMMIT or ABORT ends the current transaction
            entry.maybe_update_epoch(batch.producer_epoch)
            entry.current_txn_first_offset = None
            entry.last_timestamp = records[0].timestamp
            return
        # appendDataBatch: addBatch(epoch, lastSeq, lastOffset, offsetDelta, maxTimestamp)
        entry = self.entries.setdefault(pid, ProducerEntry(batch.producer_epoch))
        entry.maybe_update_epoch(batch.producer_epoch)
        entry.last_data_offset = batch.last_offset
        entry.last_timestamp = batch.max_timestamp
        if entry.current_txn_first_offset is None and batch.is_transactional:
            entry.current_txn_first_offset = batch.base_offset_field

    def first_unstable_offset(self) -> int | None:
        """ProducerStateManager.firstUnstableOffset: the earliest open transaction's first offset."""
        return min((e.current_txn_first_offset for e in self.entries.values()
                    if e.current_txn_first_offset is not None), default=None)

    def last_records_of_active_producers(self, now: int, expiration_ms: int) -> dict[int, LastRecord]:
        """UnifiedLog.lastRecordsOfActiveProducers after removeExpiredProducers(now): a producer
        is expired when it has no open transaction and now - its last timestamp >= producer.id.expiration.ms."""
        return {
            pid: LastRecord(e.last_data_offset, e.epoch)
            for pid, e in self.entries.items()
            if e.current_txn_first_offset is not None or now - e.last_timestamp < expiration_ms
        }
