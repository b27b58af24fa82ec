"""A cleaned segment's index entries by release, as Kafka's LogSegmentTest states them
(testIndexForMultipleBatchesInMemoryRecords and estNonMonotonicTimestampForMultipleBatchesInMemoryRecords
of 3.9.1, whose LogSegment.append adds entries per batch: KAFKA-806), and the same appends under
3.9.0/4.0.0's rule (one entry at most per append call). The batches are built by the reference
model's own encoder (tests/reference/encode.py); the expected entries are the test's statements."""

from __future__ import annotations

import io
import struct

import numpy as np
import pytest

from kcompact.conf.releases import resolve
from kcompact.errors import FormatError
from kcompact.readers.records import Record
from kcompact.writers.segment import SegmentWriter
from tests.reference.encode import V2Header, record_bytes, v2_batch


def batch(offset: int, timestamp: int) -> bytes:
    """MemoryRecords.builder(CREATE_TIME, offset).append(timestamp, "key1", "value1"), uncompressed."""
    h = V2Header(offset, offset, 0, 0, 0, -1, -1, -1, False, False)
    record = Record(offset, timestamp, b"key1", b"value1", ())
    return v2_batch(h, 0, timestamp, timestamp, False, 1, record_bytes(0, 0, record))


def entries(writer: SegmentWriter) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(offset index (relative offset, position), time index (timestamp, relative offset)) before close."""
    return ([(e.relative_offset, e.position) for e in writer.offset_entries],
            [(e.timestamp, e.relative_offset) for e in writer.time_entries])


def append(writer: SegmentWriter, release: str, batches: list[bytes], largest: int, max_ts: int, ts_offset: int):
    """One LogSegment.append of ``batches`` by ``release``'s rule."""
    data = b"".join(batches)
    if resolve(release).index_per_batch:
        sizes = np.array([len(b) for b in batches], np.int64)
        writer.append_batches(np.frombuffer(data, np.uint8), np.cumsum(sizes) - sizes, sizes)
    else:
        writer.append(data, largest, max_ts, ts_offset)


def in_two_appends(release: str, timestamps=(0, 1, 2)) -> tuple[SegmentWriter, list[int]]:
    """Two batches (offsets 0, 1) in one append, a third (offset 2) in a second; index.interval.bytes 1."""
    b = [batch(i, ts) for i, ts in enumerate(timestamps)]
    writer = SegmentWriter(io.BytesIO(), 0, index_interval_bytes=1)
    append(writer, release, b[:2], 1, max(timestamps[:2]), timestamps.index(max(timestamps[:2])))
    append(writer, release, b[2:], 2, timestamps[2], 2)
    return writer, [len(x) for x in b]


@pytest.mark.parametrize("release", ["3.9.1", "3.9.2", "4.0.1", "4.1", "4.2", "4.3", "4.4"])
def test_an_entry_per_batch_once_the_interval_has_passed(release):
    writer, (s0, s1, _) = in_two_appends(release)
    offsets, times = entries(writer)
    assert offsets == [(1, s0), (2, s0 + s1)]  # each batch's last offset at its own start
    assert times == [(1, 1), (2, 2)]


@pytest.mark.parametrize("release", ["3.9.0", "4.0.0"])
def test_at_most_one_entry_per_append_before_kafka_806(release):
    writer, (s0, s1, _) = in_two_appends(release)
    offsets, times = entries(writer)
    assert offsets == [(2, s0 + s1)]  # the first append finds nothing appended before it
    assert times == [(2, 2)]


def test_non_monotonic_timestamps_per_batch():
    """estNonMonotonicTimestampForMultipleBatchesInMemoryRecords: timestamps 1, 0, 2 in one append."""
    b = [batch(0, 1), batch(1, 0), batch(2, 2)]
    writer = SegmentWriter(io.BytesIO(), 0, index_interval_bytes=1)
    append(writer, "4.3", b, 2, 2, 2)
    offsets, times = entries(writer)
    assert [o for o, _ in offsets] == [1, 2]
    assert times == [(1, 0), (2, 2)]


def test_grouping_into_appends_does_not_change_the_entries():
    """KAFKA-806: the bytes since the last entry carry across appends."""
    b = [batch(i, 10 + i) for i in range(12)]
    whole = SegmentWriter(io.BytesIO(), 0, index_interval_bytes=150)
    append(whole, "4.3", b, 11, 21, 11)
    split = SegmentWriter(io.BytesIO(), 0, index_interval_bytes=150)
    for part in (b[:1], b[1:5], b[5:6], b[6:]):
        append(split, "4.3", part, 0, 0, 0)
    assert entries(whole) == entries(split)
    assert whole.close().offset_index == split.close().offset_index
    size = len(b[0])  # all batches alike: an entry at every batch that finds more than 150 bytes behind it
    every = 150 // size + 1
    expected = [(i, i * size) for i in range(every, 12, every)]
    assert [(e.relative_offset, e.position) for e in whole.offset_entries] == expected


@pytest.mark.parametrize(("index_bytes", "entries_made"), [(24, 1), (36, 2), (8, 0)])
def test_a_full_time_index_fails_naming_the_segment_and_byte(index_bytes, entries_made):
    """TimeIndex.maybeAppend refuses before its last slot (kept for the closing entry): with
    segment.index.bytes N, N // 12 - 1 entries; it fills before the offset index (N // 8)."""
    b = [batch(i, i) for i in range(6)]
    writer = SegmentWriter(io.BytesIO(), 0, index_interval_bytes=1, max_index_bytes=index_bytes)
    at = sum(len(x) for x in b[:entries_made + 1])
    with pytest.raises(ValueError, match=rf"segment 0: the batch at byte {at}: attempt to append to a "
                                         rf"full time index \(segment.index.bytes {index_bytes}\)"):
        append(writer, "4.3", b, 5, 5, 5)
    assert len(writer.time_entries) == entries_made


def test_closed_index_files_hold_the_entries():
    writer, (s0, s1, _) = in_two_appends("4.3")
    files = writer.close()
    assert list(struct.iter_unpack(">ii", files.offset_index)) == [(1, s0), (2, s0 + s1)]
    assert list(struct.iter_unpack(">qi", files.time_index)) == [(1, 1), (2, 2)]
    assert files.next_offset == 3 and files.log_size == writer.size


@pytest.mark.parametrize("release", ["3.9.0", "4.1"])
@pytest.mark.parametrize("offsets", [(0, 1, 1), (0, 2, 1)], ids=["repeated", "back"])
def test_offsets_that_do_not_increase_are_refused_naming_file_and_byte(release, offsets):
    """A segment's offsets only increase (Kafka's offset index throws on one that does not): the
    writer refuses the batch, within one append and across two, whatever the index interval."""
    b = [batch(o, 0) for o in offsets]
    writer = SegmentWriter(io.BytesIO(), 0, index_interval_bytes=1 << 20, path="t-0/0.log.cleaned")
    at = len(b[0]) + len(b[1])
    if resolve(release).index_per_batch:
        with pytest.raises(FormatError) as err:
            append(writer, release, b, offsets[2], 0, offsets[2])
        assert (err.value.path, err.value.position) == ("t-0/0.log.cleaned", at)
        assert err.value.what.startswith(f"refused a batch at offset {offsets[2]} after offset {offsets[1]}")
    append(writer := SegmentWriter(io.BytesIO(), 0, path="t-0/0.log.cleaned"), release, b[:2], offsets[1], 0, 0)
    with pytest.raises(FormatError) as err:
        append(writer, release, b[2:], offsets[2], 0, offsets[2])
    assert (err.value.path, err.value.position) == ("t-0/0.log.cleaned", at)
    assert writer.size == at  # nothing of the refused batch written
