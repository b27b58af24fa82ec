"""Transaction state met while a cleaner walks batches in offset order (Kafka's
CleanedTransactionMetadata), and which batches hold the last state of a producer still active
at the log end.

Both read batch headers of one partition only, never records.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from kcompact.compaction.rules.model import BatchInfo, SegmentInfo
from kcompact.readers.indexes import AbortedTxn
from kcompact.readers.records import ABORT, COMMIT


def collect_aborted(segments: Sequence[SegmentInfo], start: int, log_start: int, upper_bound: int) -> list[AbortedTxn]:
    """Kafka's collectAbortedTransactions: from the segment holding ``start`` onwards, the
    .txnindex entries that end at or after the log start and begin before ``upper_bound``,
    stopping after the first entry whose last stable offset reaches ``upper_bound``."""
    first = max((i for i, s in enumerate(segments) if s.base_offset <= start), default=0)
    found = []
    for seg in segments[first:]:
        for txn in seg.aborted:
            if txn.last_offset >= log_start and txn.first_offset < upper_bound:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound:
                return found
    return found


@dataclass(slots=True)
class _OngoingAbort:
    txn: AbortedTxn
    observed: bool = False  # a batch of this transaction was traversed


@dataclass(slots=True)
class TransactionSweep:
    """Feed it every batch in offset order; it says which data batches belong to aborted
    transactions and which markers may go. ``index`` collects the aborted transactions a
    rewritten segment must list in its .txnindex (those whose batches were still met)."""

    _committed: set[int] = field(default_factory=set)
    _aborted: dict[int, _OngoingAbort] = field(default_factory=dict)
    _pending: list[tuple[int, int, AbortedTxn]] = field(default_factory=list)
    _seq: int = 0
    index: list[AbortedTxn] = field(default_factory=list)

    def add(self, txns: Iterable[AbortedTxn]) -> None:
        for txn in txns:
            heapq.heappush(self._pending, (txn.first_offset, self._seq, txn))
            self._seq += 1

    def _start_up_to(self, offset: int) -> None:
        while self._pending and self._pending[0][0] <= offset:
            txn = heapq.heappop(self._pending)[2]
            self._aborted.setdefault(txn.producer_id, _OngoingAbort(txn))

    def on_data(self, batch: BatchInfo) -> bool:
        """True when the batch belongs to an aborted transaction."""
        self._start_up_to(batch.last_offset)
        if not batch.is_transactional:
            return False
        ongoing = self._aborted.get(batch.producer_id)
        if ongoing is not None:
            ongoing.observed = True
            return True
        self._committed.add(batch.producer_id)
        return False

    def on_control(self, batch: BatchInfo) -> bool:
        """True when the marker's transaction left nothing behind, so the marker may go
        (once its delete horizon has passed)."""
        self._start_up_to(batch.last_offset)
        if batch.control_type is None:
            return True  # an emptied control batch: already cleaned
        if batch.control_type == ABORT:
            ongoing = self._aborted.pop(batch.producer_id, None)
            if ongoing is not None and ongoing.observed:
                self.index.append(ongoing.txn)
                return False
            return True
        if batch.control_type == COMMIT:
            if batch.producer_id in self._committed:
                self._committed.discard(batch.producer_id)
                return False
            return True
        return False


def last_of_active_producers(t: np.ndarray, now: int, expiration_ms: int) -> np.ndarray:
    """Per batch of the batch table ``t`` (``compaction.rules.model.BATCH_TABLE``, log order): it holds
    the last state of a producer still active at the log end, so the cleaner keeps it even when
    emptied (Kafka's lastRecordsOfActiveProducers, then isBatchLastRecordOfProducer).

    A producer is active while its transaction is open (its last marker or transactional batch is
    data) or while ``now`` minus its last batch's max timestamp is below ``producer.id.expiration.ms``.
    Its last state is the last data batch since its epoch last changed (ProducerStateEntry drops
    the batch metadata on an epoch change): the batch ending at that offset is kept; with no such
    batch, its markers of the current epoch are. Columns, not a loop per batch: one sort by
    producer id, then a reduction per producer."""
    rows = np.flatnonzero(t["producer_id"] >= 0)
    order = rows[np.argsort(t["producer_id"][rows], kind="stable")]  # each producer's batches, in log order
    out = np.zeros(len(t), bool)
    if not len(order):
        return out
    pid, epoch, control = t["producer_id"][order], t["producer_epoch"][order], t["control"][order]
    last_offset = t["last_offset"][order]
    at = np.arange(len(order))
    starts = np.flatnonzero(np.r_[True, pid[1:] != pid[:-1]])
    ends = np.r_[starts[1:], len(order)] - 1
    producer = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, len(order)]))
    epoch_now = epoch[ends][producer]
    # where the current epoch began: one past the producer's last batch of another epoch
    epoch_start = np.maximum.reduceat(np.where(epoch != epoch_now, at + 1, starts[producer]), starts)
    last_data = np.maximum.reduceat(np.where(~control & (at >= epoch_start[producer]), at, -1), starts)
    last_txn_state = np.maximum.reduceat(np.where(control | t["transactional"][order], at, -1), starts)
    open_txn = (last_txn_state >= 0) & ~control[last_txn_state]
    active = open_txn | (t["max_timestamp"][order][ends] > now - expiration_ms)
    is_last = np.where((last_data >= 0)[producer], last_offset == last_offset[last_data][producer],
                       control & (epoch == epoch_now))
    out[order] = active[producer] & is_last
    return out
