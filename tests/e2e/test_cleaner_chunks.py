"""Kafka's cleaner appends a cleaned segment one read chunk at a time (Cleaner.cleanInto); before
KAFKA-806 (3.9.0, 4.0.0, the release these tests clean as) a cleaned segment's index entries sit
at chunk starts, not at batch starts.

The facts, from Kafka's sources (LogCleaner.scala, MemoryRecords.java, LogSegment.java): the read
buffer holds log.cleaner.io.buffer.size / log.cleaner.threads / 2 bytes and is restored for every
source segment; filterTo works on the complete batches it holds; a first batch larger than the
buffer grows it (doubling, up to max(topic max.message.bytes, broker message.max.bytes), or to
the batch once the buffer reached the topic's limit); filterTo returns early after a batch whose
output makes the write buffer grow (KAFKA-5316); each chunk is ONE LogSegment.append whose
largest offset is FilterResult.maxOffset (a rebuilt batch counts its last kept record) and whose
max timestamp's offset is the batch's last offset (a rebuilt v2 batch keeps the original's).
Expected entries below are worked out by hand from those rules and the input sizes.
"""

from __future__ import annotations

import io
import os
import struct
from pathlib import Path

import numpy as np
import pytest
from kafka.record.memory_records import MemoryRecords

from kcompact.jobs.cli import main
from kcompact.readers.records import Record
from kcompact.writers.chunks import BufferSizes, ReadChunks, grown
from kcompact.writers.segment import SegmentWriter
from tests.support import OFFSET_ENTRY, TIME_ENTRY, broker_indexes, kp_build, seg_path

NOW = 1_720_300_000_000
OLD = NOW - 30 * 86_400_000  # far before NOW: a delete horizon makes timestamp deltas 5-byte varints
MTIME = NOW - 86_400_000
BUFFER = 4096  # per read: --broker-config log.cleaner.io.buffer.size=8192 (/ 1 thread / 2)
# Kafka's defaults: log.cleaner.io.buffer.size, log.cleaner.threads, max.message.bytes, message.max.bytes
DEFAULTS = {"io_buffer_size": 524_288, "threads": 1, "max_message_bytes": 1_048_588, "message_max_bytes": 1_048_588}


# -- the buffer arithmetic ------------------------------------------------------------------------------
def test_buffer_sizes_follow_kafkas_settings():
    assert BufferSizes.of(**DEFAULTS) == BufferSizes(262_144, 1_048_588, 1_048_588)  # 512 KiB: a read, a write buffer
    assert BufferSizes.of(**DEFAULTS | {"threads": 2}).initial == 131_072
    assert BufferSizes.of(**DEFAULTS | {"io_buffer_size": 3}).initial == 1
    assert BufferSizes.of(**DEFAULTS | {"max_message_bytes": 100, "message_max_bytes": 200}) \
        == BufferSizes(262_144, 100, 200)  # the topic's limit, then the broker's


@pytest.mark.parametrize(("topic_max", "broker_max", "batch", "to"), [
    (1_048_588, 1_048_588, 600_000, 1_048_576),  # 256 KiB -> 512 KiB -> 1 MiB
    (1_048_588, 1_048_588, 1_200_000, 1_200_000),  # -> 1 MiB -> 1048588 (the limit) -> the batch itself
    (100_000, 1_048_588, 300_000, 524_288),  # past the topic's limit: doubling, bounded by the broker's
    (100_000, 100_000, 300_000, 300_000),  # both limits below the batch: the batch
])
def test_growth_doubles_up_to_the_limits(topic_max, broker_max, batch, to):
    assert grown(262_144, batch, topic_max, broker_max) == to


def ends(chunks: ReadChunks, segment: str, batches: list[tuple[int, int, int | None]]) -> list[int]:
    """The largest offsets of the appends that end among ``batches`` (offset, input size, output
    size or None: dropped), fed as one buffer of them."""
    offset, in_size = (np.array([b[k] for b in batches], np.int64) for k in (0, 1))
    size = np.array([b[2] or 0 for b in batches], np.int64)
    at = np.where([b[2] is not None for b in batches], np.cumsum(size) - size, -1)
    rows, end = chunks.appends(segment, in_size, at, size, offset, offset, offset)
    assert end == size.sum()
    return rows[:, 1].tolist()


def test_read_chunks_end_at_the_buffer_a_new_segment_and_an_outgrown_output():
    chunks = ReadChunks(BufferSizes(100, 1000, 1000))
    assert ends(chunks, "a", [(0, 40, 40), (1, 40, 40), (2, 40, 40)]) == [1]  # 120 > 100: not in one read
    # a new source segment ends the chunk (a new cleanInto); the output of 3..5 outgrows the
    # write buffer (60 + 50 > 100; the dropped 4 writes nothing): filterTo returns after 5
    assert ends(chunks, "b", [(3, 10, 60), (4, 10, None), (5, 10, 50), (6, 10, 10)]) == [2, 5]
    # 7 does not fit after 6 and alone not the buffer: 100 -> 200 -> 400, which holds 7 and 8
    # (a chunk spanning two buffers of batches) but not 9 too
    assert ends(chunks, "b", [(7, 250, 250)]) == [6]
    assert ends(chunks, "b", [(8, 150, 10), (9, 10, 10)]) == [8]
    assert ends(chunks, "c", [(10, 50, 50), (11, 60, 60)]) == [9, 10]  # restored to 100 per segment
    assert chunks.close() == (11, 11, 11)
    assert ends(chunks, "d", [(12, 10, None)]) == [11] and chunks.close() is None  # no append of nothing kept


# -- a job on hand-made segments ----------------------------------------------------------------------
def batch(first: int, kvs: list[tuple[bytes, bytes | None]], ts0: int, step: int = 1) -> bytes:
    return kp_build([Record(first + i, ts0 + step * i, k, v) for i, (k, v) in enumerate(kvs)], base_offset=first)


def write_segment(part: Path, base: int, batches: list[bytes], closed: bool) -> None:
    part.mkdir(parents=True, exist_ok=True)
    index, timeindex = broker_indexes(batches, base, closed)
    for kind, data in (("log", b"".join(batches)), ("index", index), ("timeindex", timeindex)):
        seg_path(part, base, kind).write_bytes(data)
        os.utime(seg_path(part, base, kind), ns=(MTIME * 1_000_000,) * 2)


def values(prefix: bytes, first: int, n: int, width: int) -> list[tuple[bytes, bytes]]:
    return [(b"%s%04d" % (prefix, o), bytes(width)) for o in range(first, first + n)]


def ts_of(first: int, i: int) -> int:
    return OLD + 1000 * first + i


@pytest.fixture(scope="module")
def cleaned(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("chunks")
    # ck-0: eight batches of 10 records (~1 KiB each: three per read), then a segment superseding
    # the last three records of the sixth batch, which is rebuilt.
    ck = [batch(10 * i, values(b"k", 10 * i, 10, 90), ts_of(10 * i, 0)) for i in range(8)]
    write_segment(root / "ck-0", 0, ck, closed=True)
    write_segment(root / "ck-0", 80, [batch(80, values(b"k", 57, 3, 90), ts_of(80, 0))], closed=True)
    write_segment(root / "ck-0", 83, [batch(83, [(b"z", b"z")], ts_of(83, 0))], closed=False)
    # cg-0: a 6 KiB batch after a 1 KiB one: the read buffer grows to 8 KiB for it
    cg = [batch(0, values(b"g", 0, 10, 80), ts_of(0, 0)), batch(10, values(b"g", 10, 10, 580), ts_of(10, 0)),
          batch(20, values(b"g", 20, 10, 80), ts_of(20, 0)), batch(30, values(b"g", 30, 10, 80), ts_of(30, 0))]
    write_segment(root / "cg-0", 0, cg, closed=True)
    write_segment(root / "cg-0", 40, [batch(40, [(b"z", b"z")], ts_of(40, 0))], closed=False)
    # ct-0: four batches of 100 tombstones (2-byte keys, one timestamp) fill one read; stamped with a delete
    # horizon their timestamp deltas grow to 5 bytes, and the output outgrows the write buffer
    # after the third
    ct = [batch(100 * i, [(struct.pack(">H", 100 * i + j), None) for j in range(100)], ts_of(100 * i, 0), step=0)
          for i in range(5)]
    write_segment(root / "ct-0", 0, ct, closed=True)
    write_segment(root / "ct-0", 500, [batch(500, [(b"z", b"z")], ts_of(500, 0))], closed=False)
    inputs = {"ck": ck, "cg": cg, "ct": ct}
    code = main(["compact", str(root), "--now", str(NOW), "--topic-config",
                 "c*:cleanup.policy=compact,index.interval.bytes=0,min.cleanable.dirty.ratio=0.01",
                 "--broker-config", "log.cleaner.io.buffer.size=8192", "--kafka-version", "4.0.0"])
    return root, inputs, code


def out_batches(path: Path) -> list:
    data = path.read_bytes()
    return list(MemoryRecords(data))


def sizes_of(path: Path) -> list[int]:
    data, pos, out = path.read_bytes(), 0, []
    while pos < len(data):
        size = 12 + struct.unpack_from(">i", data, pos + 8)[0]
        out.append(size)
        pos += size
    return out


def test_job_cleaned_every_partition(cleaned):
    assert cleaned[2] == 0


def test_one_index_entry_per_read_chunk(cleaned):
    root, inputs, _ = cleaned
    ck = inputs["ck"]
    assert all(900 < len(b) < 1400 for b in ck) and 3 * max(map(len, ck)) <= BUFFER < 4 * min(map(len, ck))
    out = sizes_of(seg_path(root / "ck-0", 0, "log"))
    assert out[:5] == [len(b) for b in ck[:5]] and out[5] < len(ck[5]) and out[6:8] == [len(b) for b in ck[6:]]
    # reads: [b0 b1 b2] [b3 b4 b5] [b6 b7] from segment 0, then [c0] from segment 80 (a new
    # cleanInto); index.interval.bytes 0: an entry at every append but the first. The second
    # chunk's largest offset is b5's last KEPT record (56), not b5's last offset (59).
    pos = [sum(out[:k]) for k in (3, 6, 8)]
    assert seg_path(root / "ck-0", 0, "index").read_bytes() == b"".join(
        OFFSET_ENTRY.pack(off, p) for off, p in zip((56, 79, 82), pos, strict=True))
    # time entries with them: the max timestamp so far and its batch's last offset; b5 was rebuilt
    # but keeps its last offset 59, and the closing entry adds nothing (no larger timestamp)
    assert seg_path(root / "ck-0", 0, "timeindex").read_bytes() == b"".join((
        TIME_ENTRY.pack(ts_of(50, 6), 59), TIME_ENTRY.pack(ts_of(70, 9), 79), TIME_ENTRY.pack(ts_of(80, 2), 82)))


def test_a_batch_larger_than_the_buffer_grows_it_for_the_rest_of_its_segment(cleaned):
    root, inputs, _ = cleaned
    sizes = [len(b) for b in inputs["cg"]]
    assert sizes[0] + sizes[1] > BUFFER and sizes[1] > BUFFER and sum(sizes[1:]) <= 2 * BUFFER
    # reads: [g0], then g1 alone does not fit: the buffer grows to 8 KiB and holds [g1 g2 g3]
    assert seg_path(root / "cg-0", 0, "index").read_bytes() == OFFSET_ENTRY.pack(39, sizes[0])
    assert seg_path(root / "cg-0", 0, "log").read_bytes() == b"".join(inputs["cg"])


def test_output_outgrowing_the_write_buffer_ends_the_chunk(cleaned):
    root, inputs, _ = cleaned
    sizes = [len(b) for b in inputs["ct"]]
    out = sizes_of(seg_path(root / "ct-0", 0, "log"))
    assert sum(sizes[:4]) <= BUFFER < sum(sizes[:5])  # one read holds t0..t3
    assert sum(out[:2]) <= BUFFER < sum(out[:3]) and sum(out[3:]) <= BUFFER  # outgrows 4 KiB with t2
    assert all(b.attributes & 0x40 for b in out_batches(seg_path(root / "ct-0", 0, "log")))  # horizons set
    # chunks: [t0 t1 t2] (filterTo returned after t2), then the next read from t3: [t3 t4]
    assert seg_path(root / "ct-0", 0, "index").read_bytes() == OFFSET_ENTRY.pack(499, sum(out[:3]))


# -- the indexes' capacity (OffsetIndex.append, TimeIndex.maybeAppend) --------------------------------
def appends(max_index_bytes: int, n: int, interval: int = 0) -> SegmentWriter:
    """``n`` appends of 100 bytes each at offsets 10, 20, ... with growing timestamps."""
    writer = SegmentWriter(io.BytesIO(), 0, interval, max_index_bytes)
    for i in range(1, n + 1):
        writer.append(bytes(100), 10 * i, 1000 + i, 10 * i)
    return writer


def test_a_full_time_index_fails_the_append():
    """segment.index.bytes 36: 4 offset slots, 3 time slots of which the last is kept for the
    closing entry (TimeIndex.isFull: entries >= maxEntries - 1), checked before an entry is
    added, whatever its timestamp. With an entry at every append but the first, the 4th append
    finds the time index full."""
    writer = appends(36, 3)
    assert (len(writer.offset_entries), len(writer.time_entries)) == (2, 2)
    with pytest.raises(ValueError, match="full time index"):
        appends(36, 4)
    with pytest.raises(ValueError, match="full time index"):
        appends(24, 3)  # 24 bytes: 2 time slots, one usable


def test_the_closing_time_entry_takes_the_last_slot():
    writer = appends(36, 6, interval=150)  # entries at the 3rd and 5th appends, none at the 6th
    files = writer.close()
    assert len(files.offset_index) // 8 == 2
    assert files.time_index == TIME_ENTRY.pack(1003, 30) + TIME_ENTRY.pack(1005, 50) + TIME_ENTRY.pack(1006, 60)
