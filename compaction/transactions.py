"""Transaction state met while a cleaner walks batches in offset order (Kafka's
CleanedTransactionMetadata), and which producers are still active at the log end.

Both are sequential over batch headers of one partition; nothing here reads records.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from compaction.model import BatchInfo, SegmentInfo
from readers.indexes import AbortedTxn
from readers.records import ABORT, COMMIT


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


@dataclass(frozen=True, slots=True)
class LastRecord:
    """What the broker remembers of an active producer: its last data offset and epoch."""

    last_data_offset: int | None
    producer_epoch: int


def active_producers(batches: Iterable[BatchInfo], now: int, expiration_ms: int) -> dict[int, LastRecord]:
    """Producers still active at the log end: an open transaction, or a last batch (data or
    marker) whose max timestamp is within ``producer.id.expiration.ms`` of ``now``."""
    last_ts: dict[int, int] = {}
    last_data: dict[int, int] = {}
    epoch: dict[int, int] = {}
    open_txn: set[int] = set()
    for b in batches:
        pid = b.producer_id
        if pid < 0:
            continue
        last_ts[pid] = b.max_timestamp
        if epoch.get(pid, b.producer_epoch) != b.producer_epoch:
            # ProducerStateEntry.maybeUpdateProducerEpoch: a new epoch (e.g. a marker written by the
            # coordinator with a bumped epoch) clears the batch metadata: no last data offset
            last_data.pop(pid, None)
        epoch[pid] = b.producer_epoch
        if b.is_control:
            open_txn.discard(pid)
        else:
            last_data[pid] = b.last_offset
            if b.is_transactional:
                open_txn.add(pid)
    return {
        pid: LastRecord(last_data.get(pid), epoch[pid])
        for pid, ts in last_ts.items()
        if pid in open_txn or now - ts < expiration_ms
    }


def is_last_of_active_producer(batch: BatchInfo, active: dict[int, LastRecord]) -> bool:
    """The batch holding an active producer's last sequence (or, with no data offset
    known, its last marker of the current epoch): kept even when emptied."""
    last = active.get(batch.producer_id)
    if last is None:
        return False
    if last.last_data_offset is not None:
        return batch.last_offset == last.last_data_offset
    return batch.is_control and batch.producer_epoch == last.producer_epoch

