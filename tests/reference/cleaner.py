"""Kafka 3.9's Cleaner (LogCleaner.scala) and MemoryRecords.filterTo, record by record and batch
by batch, in the order Kafka does the work.

Two deliberate differences from Kafka, which are how the product is specified to differ: the
offset map holds exact keys (no MD5) and has no size limit (it never fills up, so one round maps
the whole cleanable range).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from kcompact.conf import releases
from kcompact.conf.releases import Release
from kcompact.readers.batch import CREATE_TIME, LOG_APPEND_TIME, Batch
from kcompact.readers.indexes import AbortedTxn
from kcompact.readers.records import ABORT, COMMIT, Record, control_type
from tests.reference import encode
from tests.reference.log import CleanedSegment, CleaningFailed, Log, LogSegment
from tests.reference.producers import LastRecord

INT_MAX = 2**31 - 1
DELETE, RETAIN_EMPTY, DELETE_EMPTY = "DELETE", "RETAIN_EMPTY", "DELETE_EMPTY"


@dataclass
class _AbortedTransactionMetadata:
    txn: AbortedTxn
    last_observed_batch_offset: int | None = None


@dataclass
class CleanedTransactionMetadata:
    """CleanedTransactionMetadata: aborted transactions met in offset order, which data batches
    they cover, which markers may go; retained ABORT markers list their transaction in the
    cleaned segment's transaction index."""

    ongoing_committed: set[int] = field(default_factory=set)
    ongoing_aborted: dict[int, _AbortedTransactionMetadata] = field(default_factory=dict)
    aborted: list[tuple[int, int, AbortedTxn]] = field(default_factory=list)  # min-heap by first offset
    cleaned_index: CleanedSegment | None = None
    _seq: int = 0

    def add_aborted_transactions(self, txns: list[AbortedTxn]) -> None:
        for txn in txns:
            heapq.heappush(self.aborted, (txn.first_offset, self._seq, txn))
            self._seq += 1

    def _consume_aborted_txns_up_to(self, offset: int) -> None:
        while self.aborted and self.aborted[0][0] <= offset:
            txn = heapq.heappop(self.aborted)[2]
            self.ongoing_aborted.setdefault(txn.producer_id, _AbortedTransactionMetadata(txn))

    def on_control_batch_read(self, batch: Batch) -> bool:
        """True when the marker may be discarded."""
        self._consume_aborted_txns_up_to(batch.last_offset)
        records = batch.records()
        if not records:
            return True  # an empty control batch was already cleaned
        kind = control_type(records[0])
        if kind == ABORT:
            ongoing = self.ongoing_aborted.pop(batch.producer_id, None)
            if ongoing is not None and ongoing.last_observed_batch_offset is not None:
                if self.cleaned_index is not None:
                    self.cleaned_index.append_aborted(ongoing.txn)
                return False
            return True
        if kind == COMMIT:
            if batch.producer_id in self.ongoing_committed:
                self.ongoing_committed.discard(batch.producer_id)
                return False
            return True
        return False

    def on_batch_read(self, batch: Batch) -> bool:
        """True when the data batch belongs to an aborted transaction."""
        self._consume_aborted_txns_up_to(batch.last_offset)
        if not batch.is_transactional:
            return False
        ongoing = self.ongoing_aborted.get(batch.producer_id)
        if ongoing is not None:
            ongoing.last_observed_batch_offset = batch.last_offset
            return True
        self.ongoing_committed.add(batch.producer_id)
        return False


@dataclass
class OffsetMap:
    """The offset map with exact keys and no capacity (see the module docstring)."""

    offsets: dict[bytes, int] = field(default_factory=dict)
    latest_offset: int = -1

    def put(self, key: bytes, offset: int) -> None:
        self.offsets[key] = offset
        self.latest_offset = offset

    def get(self, key: bytes) -> int:
        return self.offsets.get(key, -1)

    def update_latest_offset(self, offset: int) -> None:
        self.latest_offset = offset


@dataclass
class FilterResult:
    bytes_read: int = 0
    output: bytearray = field(default_factory=bytearray)
    max_offset: int = -1
    max_timestamp: int = -1
    shallow_offset_of_max_timestamp: int = -1

    def update_retained_batch_metadata(self, max_timestamp: int, shallow_offset: int, max_offset: int) -> None:
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
            self.shallow_offset_of_max_timestamp = shallow_offset
        self.max_offset = max(max_offset, self.max_offset)


@dataclass
class LogFilter:
    """cleanInto's RecordFilter: checkBatchRetention, then shouldRetainRecord per record."""

    map: OffsetMap
    retain_legacy_deletes_and_txn_markers: bool
    delete_retention_ms: int
    transaction_metadata: CleanedTransactionMetadata
    last_records_of_active_producers: dict[int, LastRecord]
    # the next offset of the round's last batch kept when emptied: the first uncleanable offset
    # (KAFKA-17076), the high watermark (KAFKA-20452), or None (3.9.0, 3.9.1: no such rule)
    upper_bound_offset_of_cleaning_round: int | None
    current_time: int
    discard_batch_records: bool = False
    legacy_to_v2: bool = False  # Kafka 4.0 on (KIP-724): kept v0/v1 entries are rebuilt as v2

    def check_batch_retention(self, batch: Batch) -> tuple[str, bool]:
        """(BatchRetention, containsMarkerForEmptyTxn)."""
        if batch.is_control:
            can_discard = self.transaction_metadata.on_control_batch_read(batch)
            horizon = batch.delete_horizon_ms if batch.has_delete_horizon else None
            self.discard_batch_records = can_discard and horizon is not None and horizon <= self.current_time
        else:
            can_discard = self.transaction_metadata.on_batch_read(batch)
            self.discard_batch_records = can_discard
        has_producer_id = batch.magic >= 2 and batch.producer_id >= 0
        if has_producer_id and self._is_batch_last_record_of_producer(batch):
            retention = RETAIN_EMPTY
        elif self.upper_bound_offset_of_cleaning_round is not None \
                and batch.next_offset == self.upper_bound_offset_of_cleaning_round:
            retention = RETAIN_EMPTY  # the round's last batch keeps the last offset
        elif self.discard_batch_records:
            retention = DELETE
        else:
            retention = DELETE_EMPTY
        return retention, can_discard and batch.is_control

    def _is_batch_last_record_of_producer(self, batch: Batch) -> bool:
        last = self.last_records_of_active_producers.get(batch.producer_id)
        if last is None:
            return False
        if last.last_data_offset is not None:
            return batch.last_offset == last.last_data_offset
        return batch.is_control and batch.producer_epoch == last.producer_epoch

    def should_retain_record(self, batch: Batch, record: Record) -> bool:
        if self.discard_batch_records:
            return False
        if batch.is_control:
            return True
        # Cleaner.shouldRetainRecord
        if record.offset > self.map.latest_offset:
            return True
        if record.key is None:
            return False  # stats.invalidMessage()
        latest_offset_for_key = record.offset >= self.map.get(record.key)
        if batch.magic >= 2:
            horizon = batch.delete_horizon_ms if batch.has_delete_horizon else None
            retain_deletes = horizon is None or self.current_time < horizon
        else:
            retain_deletes = self.retain_legacy_deletes_and_txn_markers
        return latest_offset_for_key and (record.value is not None or retain_deletes)


def filter_to(batches: list[Batch], log_filter: LogFilter, write_capacity: int) -> FilterResult:
    """MemoryRecords.filterTo over the complete batches of one read chunk. Returns right after a
    batch whose output made the destination buffer grow past ``write_capacity`` (KAFKA-5316)."""
    result = FilterResult()
    for batch in batches:
        retention, marker_for_empty_txn = log_filter.check_batch_retention(batch)
        result.bytes_read += batch.size
        if retention == DELETE:
            continue
        records = batch.records()
        retained = [r for r in records if log_filter.should_retain_record(batch, r)]
        # filterBatch: the original bytes stay only when every record stays, all of the batch's magic
        # (3.9), or only when every record stays in a v2 batch (4.0 on)
        converts = batch.magic < 2 and log_filter.legacy_to_v2
        write_original = len(retained) == len(records) and not (batch.magic < 2 and batch.inner_magic_differs) \
            and not converts
        contains_tombstones = any(r.value is None for r in retained)
        if retained:
            has_horizon = batch.magic >= 2 and batch.has_delete_horizon
            need_horizon = (batch.magic >= 2 or converts) and (contains_tombstones or marker_for_empty_txn) \
                and not has_horizon
            if write_original and not need_horizon:
                result.output += batch.data
                result.update_retained_batch_metadata(batch.max_timestamp, batch.last_offset, batch.last_offset)
            else:
                built = _build_retained(batch, retained, log_filter, need_horizon)
                result.output += built.data
                result.update_retained_batch_metadata(built.max_timestamp, built.shallow_offset_of_max_timestamp,
                                                      retained[-1].offset)
        elif retention == RETAIN_EMPTY:
            if batch.magic < 2:
                raise CleaningFailed(f"{batch.path}: byte {batch.position}: empty batches are only supported "
                                     "for magic v2 and above")
            result.output += encode.empty_header(encode.V2Header.of(batch), batch.max_timestamp)
            result.update_retained_batch_metadata(batch.max_timestamp, batch.last_offset, batch.last_offset)
        if len(result.output) > write_capacity:  # the output stream allocated a bigger buffer
            return result
    return result


def _build_retained(batch: Batch, retained: list[Record], log_filter: LogFilter, need_horizon: bool) -> encode.Built:
    """buildRetainedRecordsInto: the delete horizon is now + delete.retention.ms when it must be
    set, else the batch's own (or none)."""
    log_append_time = batch.max_timestamp if batch.timestamp_type == LOG_APPEND_TIME else -1
    if batch.magic < 2 and not log_filter.legacy_to_v2:
        return encode.rebuild_legacy_wrapper(batch.magic, batch.codec, batch.timestamp_type, log_append_time, retained)
    if need_horizon:
        horizon = log_filter.current_time + log_filter.delete_retention_ms
    else:
        horizon = batch.delete_horizon_ms if batch.has_delete_horizon else -1
    if batch.magic < 2:  # a magic-2 builder: CreateTime for magic 0, no producer, no leader epoch, no offset override
        timestamp_type = LOG_APPEND_TIME if batch.timestamp_type == LOG_APPEND_TIME else CREATE_TIME
        header = encode.V2Header(retained[0].offset, retained[-1].offset, -1, batch.codec, timestamp_type, -1, -1, -1,
                                 False, False)
        return encode.rebuild_v2(header, retained, horizon, log_append_time)
    return encode.rebuild_v2(encode.V2Header.of(batch), retained, horizon, log_append_time)


@dataclass
class Cleaner:
    """One cleaner thread's Cleaner: its read and write buffers and their growth."""

    io_buffer_size: int  # per buffer
    max_io_buffer_size: int  # the broker's message.max.bytes
    release: Release = releases.DEFAULT  # the Kafka release whose cleaner this is
    read_capacity: int = 0
    write_capacity: int = 0

    def __post_init__(self) -> None:
        self.read_capacity = self.write_capacity = self.io_buffer_size

    # -- buffers ------------------------------------------------------------------------------
    def _complete_batches(self, segment: LogSegment, position: int) -> list[Batch]:
        """MemoryRecords.readableRecords(readInto(readBuffer, position)).batches: the whole
        batches within ``read_capacity`` bytes from ``position``."""
        end = position + self.read_capacity
        return [b for b in segment.batches() if b.position >= position and b.position + b.size <= end]

    def _grow_buffers_or_fail(self, segment: LogSegment, position: int, max_log_message_size: int) -> None:
        if self.read_capacity >= max_log_message_size:
            following = [b for b in segment.batches() if b.position == position]
            if not following:
                raise CleaningFailed(f"could not determine next batch size for {segment.path} at position {position}")
            next_size = following[0].size
            if next_size <= self.read_capacity:
                raise CleaningFailed(f"batch size {next_size} < buffer size {self.read_capacity}, but not processed")
            max_size = next_size
        else:
            max_size = max_log_message_size
        self._grow_buffers(max_size)

    def _grow_buffers(self, max_log_message_size: int) -> None:
        max_buffer_size = max(max_log_message_size, self.max_io_buffer_size)
        if self.read_capacity >= max_buffer_size or self.write_capacity >= max_buffer_size:
            raise CleaningFailed(f"this log contains a message larger than maximum allowable size of {max_buffer_size}")
        self.read_capacity = self.write_capacity = min(self.read_capacity * 2, max_buffer_size)

    def _restore_buffers(self) -> None:
        self.read_capacity = min(self.read_capacity, self.io_buffer_size)
        self.write_capacity = min(self.write_capacity, self.io_buffer_size)

    # -- Cleaner.doClean ----------------------------------------------------------------------
    def clean(self, log: Log, cfg: dict, first_dirty: int, first_uncleanable: int, now: int,
              active: dict[int, LastRecord], high_watermark: int | None = None) -> int:
        """Cleaner.doClean: returns the end offset (the new cleaner checkpoint). ``high_watermark``:
        the log's (4.4 keeps the round's last batch emptied at it; None: the log end offset)."""
        before = log.log_segments(0, first_dirty)
        legacy_delete_horizon = before[-1].last_modified - cfg["delete.retention.ms"] if before else 0
        offset_map = self.build_offset_map(log, first_dirty, first_uncleanable, cfg["max.message.bytes"])
        end_offset = offset_map.latest_offset + 1
        transaction_metadata = CleanedTransactionMetadata()
        groups = group_segments_by_size(log.log_segments(0, end_offset), cfg["segment.bytes"],
                                        cfg["segment.index.bytes"], first_uncleanable)
        keep_empty_at = {None: None, "first_uncleanable": first_uncleanable,
                         "high_watermark": log.log_end_offset() if high_watermark is None else high_watermark,
                         }[self.release.keep_last_empty]
        for group in groups:
            self.clean_segments(log, cfg, group, offset_map, now, transaction_metadata, legacy_delete_horizon,
                                keep_empty_at, active)
        return end_offset

    def build_offset_map(self, log: Log, start: int, end: int, max_log_message_size: int) -> OffsetMap:
        """Cleaner.buildOffsetMap over the dirty segments [start, end)."""
        offset_map = OffsetMap()
        dirty = log.log_segments(start, end)
        next_starts = [s.base_offset for s in dirty[1:]] + [end]
        transaction_metadata = CleanedTransactionMetadata()
        transaction_metadata.add_aborted_transactions(log.collect_aborted_transactions(start, end))
        for segment, next_start in zip(dirty, next_starts):
            self._build_offset_map_for_segment(segment, offset_map, start, next_start, max_log_message_size,
                                               transaction_metadata)
        return offset_map

    def _build_offset_map_for_segment(self, segment: LogSegment, offset_map: OffsetMap, start: int, next_start: int,
                                      max_log_message_size: int, transaction_metadata: CleanedTransactionMetadata):
        """Cleaner.buildOffsetMapForSegment (the map never fills)."""
        position = segment.lookup(start)
        while position < segment.size:
            start_position = position
            batches = self._complete_batches(segment, position)
            for batch in batches:
                if batch.is_control:
                    transaction_metadata.on_control_batch_read(batch)
                elif not transaction_metadata.on_batch_read(batch):
                    for record in batch.records():
                        if record.key is not None and record.offset >= start:
                            offset_map.put(record.key, record.offset)
                if batch.last_offset >= start:
                    offset_map.update_latest_offset(batch.last_offset)
            position += sum(b.size for b in batches)
            if position == start_position:
                self._grow_buffers_or_fail(segment, position, max_log_message_size)
        offset_map.update_latest_offset(next_start - 1)  # fast-forward over an offset gap
        self._restore_buffers()

    def clean_segments(self, log: Log, cfg: dict, segments: list[LogSegment], offset_map: OffsetMap, now: int,
                       transaction_metadata: CleanedTransactionMetadata, legacy_delete_horizon: int,
                       upper_bound_of_round: int | None, active: dict[int, LastRecord]) -> None:
        """Cleaner.cleanSegments: one group into one cleaned segment, swapped in at once."""
        cleaned = CleanedSegment(segments[0].base_offset, cfg["index.interval.bytes"], cfg["segment.index.bytes"],
                                 self.release.index_per_batch)
        transaction_metadata.cleaned_index = cleaned
        for i, segment in enumerate(segments):
            upper = segments[i + 1].base_offset if i + 1 < len(segments) else segment.read_next_offset()
            transaction_metadata.add_aborted_transactions(log.collect_aborted_transactions(segment.base_offset, upper))
            retain = segment.last_modified > legacy_delete_horizon
            self.clean_into(segment, cleaned, offset_map, retain, cfg["delete.retention.ms"], cfg["max.message.bytes"],
                            transaction_metadata, active, upper_bound_of_round, now)
        cleaned.on_become_inactive()
        log.replace_segments(cleaned, segments, segments[-1].last_modified)

    def clean_into(self, source: LogSegment, dest: CleanedSegment, offset_map: OffsetMap, retain_legacy: bool,
                   delete_retention_ms: int, max_log_message_size: int,
                   transaction_metadata: CleanedTransactionMetadata, active: dict[int, LastRecord],
                   upper_bound_of_round: int | None, now: int) -> None:
        """Cleaner.cleanInto: read chunks of the read buffer's size, filter each, append each
        chunk's retained batches to the cleaned segment as one append."""
        log_filter = LogFilter(offset_map, retain_legacy, delete_retention_ms, transaction_metadata, active,
                               upper_bound_of_round, now, legacy_to_v2=self.release.legacy_to_v2)
        position = 0
        while position < source.size:
            result = filter_to(self._complete_batches(source, position), log_filter, self.write_capacity)
            position += result.bytes_read
            if result.output:
                dest.append(result.max_offset, result.max_timestamp, result.shallow_offset_of_max_timestamp,
                            bytes(result.output))
            if result.bytes_read == 0:
                self._grow_buffers_or_fail(source, position, max_log_message_size)
        self._restore_buffers()


def group_segments_by_size(segments: list[LogSegment], max_size: int, max_index_size: int,
                           first_uncleanable: int) -> list[list[LogSegment]]:
    """Cleaner.groupSegmentsBySize: merge while the .log sizes, the offset-index sizes and the
    time-index sizes each fit, and the offsets fit an int relative to the group's first (skipped
    for an empty segment); a segment's last offset is estimated by the next one's base."""
    groups = []
    rest = list(segments)
    while rest:
        group = [rest.pop(0)]
        log_size, index_size, time_size = group[0].size, group[0].offset_index_bytes, group[0].time_index_bytes
        while rest:
            seg = rest[0]
            last_offset = rest[1].base_offset - 1 if len(rest) > 1 else first_uncleanable - 1
            if not (log_size + seg.size <= max_size and index_size + seg.offset_index_bytes <= max_index_size
                    and time_size + seg.time_index_bytes <= max_index_size
                    and (seg.size == 0 or last_offset - group[0].base_offset <= INT_MAX)):
                break
            group.append(rest.pop(0))
            log_size += seg.size
            index_size += seg.offset_index_bytes
            time_size += seg.time_index_bytes
        groups.append(group)
    return groups
