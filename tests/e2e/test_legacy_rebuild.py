"""Compressed magic-0/1 wrappers that lose some inner messages are rebuilt as Kafka's cleaner
rebuilds them (MemoryRecords.buildRetainedRecordsInto with MemoryRecordsBuilder): same magic,
codec and timestamp type; wrapper offset = last kept offset; inner offsets relative to the first
kept one (magic 1) or absolute (magic 0); wrapper timestamp = largest kept timestamp, or the append
time with LogAppendTime; inner messages rewritten uncompressed in the wrapper's magic.

Inputs come from kafka-python's LegacyRecordBatchBuilder (``tests.unit.test_legacy.legacy_message_set``)
or struct/zlib by hand; outputs are read back with kafka-python (wrapper and inner CRCs) and, for
the raw inner fields kafka-python does not show (inner offsets, attributes), decompressed with
kafka-python's codecs and parsed with struct here. Expected offsets are worked out by hand.
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import lz4.frame
import numpy as np
import pytest
import xxhash
from kafka.codec import gzip_decode, gzip_encode, lz4_decode, lz4_decode_old_kafka, snappy_decode
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from kcompact.compaction.rules.decisions import COPY, REWRITE, BatchPlan, Outcome, batch_outcome
from kcompact.compaction.rules.model import BatchInfo
from kcompact.jobs.cli import main
from kcompact.readers import codecs
from kcompact.readers.records import Record
from kcompact.tools.verify import verify_log_dir
from kcompact.writers.codecs import compress_legacy
from kcompact.writers.legacy import rebuild_wrapper
from tests.support import OFFSET_ENTRY, TIME_ENTRY, broker_indexes, checkpoint_text, kp_keyed, read_one, seg_path
from tests.unit.test_legacy import legacy_message_set

DAY = 86_400_000
RET = 600_000  # delete.retention.ms of the lg-* topics
NOW = 1_720_300_000_000
T = NOW - 2 * DAY  # record timestamps
LAT = T + 1000  # a broker's append time
MTIME = NOW - DAY
WRAPPER_CODECS = [codecs.GZIP, codecs.SNAPPY, codecs.LZ4]
CODEC_IDS = [codecs.name(c) for c in WRAPPER_CODECS]
ATTR_LAT = 0x08


# -- an independent reader of legacy message sets (struct, zlib and kafka-python's codecs) ------------------
@dataclass(frozen=True)
class Msg:
    """One v0/v1 message as stored: offset field, magic, attributes, timestamp (None for v0)."""

    offset: int
    magic: int
    attributes: int
    timestamp: int | None
    key: bytes | None
    value: bytes | None
    crc_ok: bool


def parse_messages(buf: bytes) -> list[Msg]:
    out, pos = [], 0
    while pos < len(buf):
        offset, size = struct.unpack_from(">qi", buf, pos)
        crc, magic, attributes = struct.unpack_from(">IBB", buf, pos + 12)
        p, ts = pos + 18, None
        if magic == 1:
            (ts,) = struct.unpack_from(">q", buf, p)
            p += 8
        fields = []
        for _ in range(2):
            (n,) = struct.unpack_from(">i", buf, p)
            p += 4
            fields.append(None if n < 0 else buf[p:p + n])
            p += max(n, 0)
        end = pos + 12 + size
        assert p == end, "message size does not cover its fields"
        out.append(Msg(offset, magic, attributes, ts, fields[0], fields[1], zlib.crc32(buf[pos + 16:end]) == crc))
        pos = end
    return out


def inner_messages(wrapper: Msg) -> list[Msg]:
    """Decompressed with kafka-python's codec functions (magic 0 lz4: its old-Kafka variant)."""
    codec = wrapper.attributes & 0x07
    if codec == codecs.GZIP:
        raw = gzip_decode(wrapper.value)
    elif codec == codecs.SNAPPY:
        raw = snappy_decode(wrapper.value)
    elif wrapper.magic == 0:
        raw = lz4_decode_old_kafka(wrapper.value)
    else:
        raw = lz4_decode(wrapper.value)
    return parse_messages(raw)


def kp_entries(data: bytes) -> list[tuple]:
    """kafka-python's view: per entry (magic, codec, timestamp type, wrapper offset, records), CRCs checked."""
    out = []
    for batch in MemoryRecords(bytes(data)):
        assert batch.validate_crc()
        records = []
        for r in batch:
            assert r.validate_crc()
            records.append((r.offset, r.timestamp, r.timestamp_type, r.key, r.value))
        out.append((batch.magic, batch.compression_type, batch.timestamp_type, batch.base_offset, records))
    return out


def lz4_header_checksums(frame: bytes) -> tuple[int, int]:
    """(stored, Kafka's magic-0 one over magic + FLG + BD) for a frame without content size."""
    assert frame[:4] == b"\x04\x22\x4d\x18" and not frame[4] & 0x08
    return frame[6], (xxhash.xxh32(frame[:6]).intdigest() >> 8) & 0xFF


# -- unit: one wrapper rebuilt ------------------------------------------------------------------------------
VALUES = [b"value %d " % i * 20 for i in range(5)]
FIVE_TS = [T + 9, T + 4, T + 1, T + 7, T + 3]  # offset 100 (removed) holds the largest


def five(magic: int) -> list[Record]:
    """Offsets 100..104, keys k0..k4; 103 is a tombstone."""
    return [Record(100 + i, FIVE_TS[i] if magic else -1, b"k%d" % i, None if i == 3 else VALUES[i]) for i in range(5)]


KEEP = np.array([False, True, False, True, True])  # kept: 101, 103, 104


CASES = [(0, c, None) for c in WRAPPER_CODECS] + [(1, c, None) for c in WRAPPER_CODECS] + \
        [(1, c, LAT) for c in WRAPPER_CODECS]


@pytest.mark.parametrize("magic, codec, append_time", CASES,
                         ids=[f"v{m}-{codecs.name(c)}{'-lat' if a else ''}" for m, c, a in CASES])
def test_rebuilt_wrapper_as_kafka_builds_it(magic, codec, append_time):
    source = legacy_message_set(magic, codec, five(magic), log_append_time=append_time)
    out = rebuild_wrapper(read_one(source), KEEP)

    (wrapper,) = parse_messages(out)
    assert wrapper.crc_ok and wrapper.magic == magic and wrapper.key is None
    assert wrapper.offset == 104  # the last kept offset
    assert wrapper.attributes == codec | (ATTR_LAT if append_time else 0)
    if magic == 0:
        assert wrapper.timestamp is None
    else:
        assert wrapper.timestamp == (LAT if append_time else T + 7)  # 101: T+4, 103: T+7, 104: T+3
    inner = inner_messages(wrapper)
    assert [m.offset for m in inner] == ([0, 2, 3] if magic == 1 else [101, 103, 104])
    assert all(m.crc_ok and m.magic == magic for m in inner)
    assert [m.attributes for m in inner] == [ATTR_LAT if append_time else 0] * 3
    assert [(m.key, m.value) for m in inner] == [(b"k1", VALUES[1]), (b"k3", None), (b"k4", VALUES[4])]
    expected_ts = [None] * 3 if magic == 0 else [LAT] * 3 if append_time else [T + 4, T + 7, T + 3]
    assert [m.timestamp for m in inner] == expected_ts

    ts_type = None if magic == 0 else (1 if append_time else 0)
    assert kp_entries(out) == [(magic, codec, ts_type, 104, [
        (101, expected_ts[0], ts_type, b"k1", VALUES[1]),
        (103, expected_ts[1], ts_type, b"k3", None),
        (104, expected_ts[2], ts_type, b"k4", VALUES[4]),
    ])]


def test_magic0_lz4_wrapper_carries_kafkas_broken_header_checksum():
    """KafkaLZ4BlockOutputStream for magic 0: FLG 0x60 (independent blocks), BD 0x40 (64 KiB), and the
    header checksum over the magic bytes too, so that 0.8/0.9 readers accept it."""
    out = rebuild_wrapper(read_one(legacy_message_set(0, codecs.LZ4, five(0))), KEEP)
    (wrapper,) = parse_messages(out)
    frame = wrapper.value
    assert frame[4:6] == b"\x60\x40"
    stored, broken = lz4_header_checksums(frame)
    assert stored == broken != (xxhash.xxh32(frame[4:6]).intdigest() >> 8) & 0xFF
    with pytest.raises(RuntimeError):
        lz4.frame.decompress(frame)  # a standard decoder rejects it; kafka-python's old-Kafka path reads it


def test_magic1_lz4_wrapper_has_a_standard_frame():
    out = rebuild_wrapper(read_one(legacy_message_set(1, codecs.LZ4, five(1))), KEEP)
    (wrapper,) = parse_messages(out)
    assert [m.offset for m in parse_messages(lz4.frame.decompress(wrapper.value))] == [0, 2, 3]


def test_wrapper_losing_everything_is_not_rebuilt():
    """Kafka has no empty form of a legacy entry (MemoryRecords.filterTo throws on RETAIN_EMPTY)."""
    with pytest.raises(ValueError, match="empty batches are only supported for magic v2 and above"):
        rebuild_wrapper(read_one(legacy_message_set(1, codecs.GZIP, five(1))), np.zeros(5, bool))


def mixed_wrapper(inner_offsets: list[int], wrapper_offset: int, keys: list[bytes]) -> bytes:
    """KAFKA-4298: a v1 gzip wrapper around v0 messages, as cleaners before 0.10.1 could write it.
    Inner set built by kafka-python (v0, uncompressed), wrapper by hand."""
    builder = LegacyRecordBatchBuilder(0, 0, 1 << 20)
    for offset, key in zip(inner_offsets, keys):
        builder.append(offset, timestamp=None, key=key, value=b"old format " + key)
    value = gzip_encode(bytes(builder.build()))
    body = struct.pack(">BBq", 1, codecs.GZIP, T) + struct.pack(">i", -1) + struct.pack(">i", len(value)) + value
    message = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", wrapper_offset, len(message)) + message


def test_wrapper_with_inner_messages_of_another_magic_is_rebuilt_in_its_own_magic():
    batch = read_one(mixed_wrapper([0, 1], 11, [b"a", b"b"]))  # relative 0, 1 ending at 11: offsets 10, 11
    assert batch.inner_magic_differs
    assert not read_one(legacy_message_set(1, codecs.GZIP, five(1))).inner_magic_differs
    assert not read_one(legacy_message_set(0, codecs.NONE, five(0)[:1])).inner_magic_differs

    info = BatchInfo.of(batch, 0)
    plan = BatchPlan(info, 0, False, False, False, True, False)
    assert batch_outcome(plan, 2, False, NOW, RET) == Outcome(COPY)
    assert batch_outcome(plan, 2, False, NOW, RET, inner_magic_differs=True) == Outcome(REWRITE, None)

    (wrapper,) = parse_messages(rebuild_wrapper(batch, np.ones(2, bool)))
    assert (wrapper.offset, wrapper.magic, wrapper.attributes, wrapper.timestamp) == (11, 1, codecs.GZIP, -1)
    inner = inner_messages(wrapper)
    # rewritten as v1: relative offsets, no timestamp of their own (-1), CreateTime attributes
    assert [(m.offset, m.magic, m.attributes, m.timestamp, m.key) for m in inner] == [
        (0, 1, 0, -1, b"a"), (1, 1, 0, -1, b"b")]
    assert all(m.crc_ok for m in inner)


# -- end to end: kcompact compact --------------------------------------------------------------------------
def recs(first: int, kv: list, ts: int = T) -> bytes:
    return kp_keyed(first, kv, ts)


def single(magic: int, offset: int, key: bytes | None, value: bytes | None, ts: int = T) -> bytes:
    """One uncompressed v0/v1 message as a broker stores it."""
    builder = LegacyRecordBatchBuilder(magic, 0, 1 << 20)
    builder.append(offset, timestamp=ts if magic else None, key=key, value=value)
    return bytes(builder.build())


def wrapped(magic: int, codec: int, items: list[tuple], append_time: int | None = None) -> bytes:
    """A compressed wrapper of (offset, key, value[, timestamp]) items."""
    records = [Record(o, (rest[0] if rest else T) if magic else -1, k, v) for o, k, v, *rest in items]
    return legacy_message_set(magic, codec, records, log_append_time=append_time)


def entry_fields(data: bytes) -> tuple[int, int]:
    """(last offset, max timestamp) of a stored entry, read with struct."""
    if data[16] == 2:
        base, delta, max_ts = struct.unpack_from(">q", data)[0], struct.unpack_from(">i", data, 23)[0], \
            struct.unpack_from(">q", data, 35)[0]
        return base + delta, max_ts
    return struct.unpack_from(">q", data)[0], struct.unpack_from(">q", data, 18)[0] if data[16] == 1 else -1


def write_part(part: Path, segments: dict[int, list[bytes]], mtimes: dict[int, int] | None = None) -> None:
    part.mkdir(parents=True)
    bases = sorted(segments)
    for base in bases:
        index, timeindex = broker_indexes(segments[base], base, closed=base != bases[-1], interval=4096,
                                          fields=entry_fields)
        for kind, data in (("log", b"".join(segments[base])), ("index", index), ("timeindex", timeindex)):
            path = seg_path(part, base, kind)
            path.write_bytes(data)
            ms = (mtimes or {}).get(base, MTIME)
            os.utime(path, ns=(ms * 1_000_000,) * 2)


def out_entries(part: Path, base: int = 0) -> list[tuple]:
    return kp_entries(seg_path(part, base, "log").read_bytes())


def entry_sizes(data: bytes) -> list[int]:
    return [b.size_in_bytes for b in MemoryRecords(data)]


def cleaner_checkpoint(log_dir: Path) -> dict[tuple[str, int], int]:
    lines = (log_dir / "cleaner-offset-checkpoint").read_text().splitlines()
    return {(t, int(p)): int(o) for t, p, o in (line.split(" ") for line in lines[2:])}


TOPIC_ARGS = ["lg-*:cleanup.policy=compact,delete.retention.ms=600000,min.cleanable.dirty.ratio=0.01",
              "lg-lat1:index.interval.bytes=0"]
# segment.bytes under 1 MiB: accepted by 3.9; from 4.1 only as the internal override (KAFKA-19080)
END_SEGMENTS = {"3.9.2": "lg-end:segment.bytes=100", "4.3": "lg-end:internal.segment.bytes=100"}
X = b"compressible " * 8


def build(a: Path) -> dict:
    inputs = {
        # v1 gzip, CreateTime: 0 a, 1 b, 2 c, 3 d | v2 4 a, 5 c | active 6. Map a->4, b->1, c->5, d->3.
        "gzip1": {0: [wrapped(1, codecs.GZIP, [(0, b"a", X, T + 9), (1, b"b", X, T + 2), (2, b"c", X, T + 1),
                                              (3, b"d", X, T + 5)]),
                      recs(4, [b"a", b"c"])],
                  6: [recs(6, [b"e"])]},
        # v0 snappy: 0 a, 1 b, 2 a, 3 c | v0 4 keyless | v0 5 b | v2 6 d | active 7. Map a->2, b->5, c->3, d->6.
        "snappy0": {0: [wrapped(0, codecs.SNAPPY, [(0, b"a", X), (1, b"b", X), (2, b"a", X), (3, b"c", X)]),
                        single(0, 4, None, b"keyless"), single(0, 5, b"b", b"v5"), recs(6, [b"d"])],
                    7: [recs(7, [b"e"])]},
        # v2 0 x | v1 lz4 LogAppendTime: 1 a, 2 b, 3 c | v2 4 b | active 5. Map x->0, a->1, b->4, c->3.
        "lat1": {0: [recs(0, [b"x"]), wrapped(1, codecs.LZ4, [(1, b"a", X), (2, b"b", X), (3, b"c", X)], LAT),
                     recs(4, [b"b"])],
                 5: [recs(5, [b"z"])]},
        # v0 lz4 (broken header checksum): 0 a, 1 b, 2 c | v2 3 a | active 4. Map a->3, b->1, c->2.
        "lz40": {0: [wrapped(0, codecs.LZ4, [(0, b"a", X), (1, b"b", X), (2, b"c", X)]), recs(3, [b"a"])],
                 4: [recs(4, [b"z"])]},
        # v1 snappy 0 k1, 1 k2 (nothing removed) | v1 gzip 2 a, 3 b (both superseded) | v2 4 a, 5 b | active 6
        "whole": {0: [wrapped(1, codecs.SNAPPY, [(0, b"k1", X), (1, b"k2", X)]),
                      wrapped(1, codecs.GZIP, [(2, b"a", X), (3, b"b", X)]), recs(4, [b"a", b"b"])],
                  6: [recs(6, [b"z"])]},
        # legacy horizon: clean segments 0 (old) and 2 (mtime MTIME), dirty 4, active 6; checkpoint 4
        "tomb": {0: [wrapped(1, codecs.GZIP, [(0, b"t1", None), (1, b"k9", X)])],
                 2: [wrapped(1, codecs.GZIP, [(2, b"t2", None), (3, b"k1", X)])],
                 4: [recs(4, [b"k1", b"x"])],
                 6: [recs(6, [b"z"])]},
        # KAFKA-4298: v2 0 p | v1 gzip wrapper of v0 messages, relative 0, 1 ending at 2 (offsets 1 a, 2 b) |
        # v2 3 c | active 4. Nothing superseded.
        "mixed": {0: [recs(0, [b"p"]), mixed_wrapper([0, 1], 2, [b"a", b"b"]), recs(3, [b"c"])],
                  4: [recs(4, [b"z"])]},
    }
    mtimes = {"tomb": {0: MTIME - 2 * RET, 2: MTIME, 4: MTIME + 1000, 6: MTIME + 2000}}
    for name, segments in inputs.items():
        write_part(a / f"lg-{name}-0", segments, mtimes.get(name))
    (a / "cleaner-offset-checkpoint").write_bytes(checkpoint_text([("lg-tomb", 0, 4)]))
    return inputs


def compact(path: Path, report: Path | None = None, kafka_version: str = "3.9.2") -> int:
    """Kafka 3.9.2's cleaner by default: the tests below are 3.9's (legacy entries kept as they are)."""
    # the same overrides for both log dirs, as one file for a cluster's brokers: some name topics held by the other
    args = ["compact", str(path), "--now", str(NOW), "--kafka-version", kafka_version, "--allow-unknown-topics"]
    args += ["--report", str(report)] if report else []
    for t in [*TOPIC_ARGS, END_SEGMENTS[kafka_version]]:
        args += ["--topic-config", t]
    return main(args)


@pytest.fixture(scope="module")
def lg(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("legacy")
    a, e = root / "a", root / "e"
    inputs = build(a)
    verify_before = verify_log_dir(str(a))
    report = root / "report.json"
    code = compact(a, report)
    # log dir E: the last batch of the round is a legacy wrapper that loses every record (keyless)
    end = e / "lg-end-0"
    end_first = recs(0, [b"a"])
    # (segment.bytes 100: segment 0 and the wrapper's segment 1 are two groups; the first is written)
    write_part(end, {0: [end_first], 1: [wrapped(1, codecs.GZIP, [(1, None, X), (2, None, X)])], 3: [recs(3, [b"z"])]})
    end_before = {p.name: p.read_bytes() for p in end.iterdir()}
    e_report = root / "e-report.json"
    e_code = compact(e, e_report)
    return SimpleNamespace(
        a=a, inputs=inputs, code=code, report=json.loads(report.read_text()), verify_before=verify_before,
        verify_after=verify_log_dir(str(a)), verify_cli=main(["verify", str(a)]),
        e=e, end=end, end_first=end_first, end_before=end_before, e_code=e_code,
        e_report=json.loads(e_report.read_text()),
    )


def part(lg, name: str) -> Path:
    return lg.a / f"lg-{name}-0"


def test_every_partition_cleaned_and_verified(lg):
    assert lg.verify_before == []  # the inputs are sound, indexes included
    assert lg.code == 0
    assert not [p for p in lg.report["partitions"] if p["error"]]
    assert lg.verify_after == [] and lg.verify_cli == 0
    assert cleaner_checkpoint(lg.a) == {("lg-gzip1", 0): 6, ("lg-snappy0", 0): 7, ("lg-lat1", 0): 5,
                                        ("lg-lz40", 0): 4, ("lg-whole", 0): 6, ("lg-tomb", 0): 6,
                                        ("lg-mixed", 0): 4}


def test_v1_gzip_wrapper_rebuilt_around_its_kept_records(lg):
    # W keeps 1 b (T+2) and 3 d (T+5): wrapper offset 3, timestamp T+5 (not the removed 0's T+9)
    entries = out_entries(part(lg, "gzip1"))
    assert entries[0] == (1, codecs.GZIP, 0, 3, [(1, T + 2, 0, b"b", X), (3, T + 5, 0, b"d", X)])
    data = seg_path(part(lg, "gzip1"), 0, "log").read_bytes()
    (wrapper,) = parse_messages(data[:entry_sizes(data)[0]])
    assert (wrapper.timestamp, wrapper.attributes) == (T + 5, codecs.GZIP)
    assert [m.offset for m in inner_messages(wrapper)] == [0, 2]  # relative to 1
    assert data[entry_sizes(data)[0]:] == lg.inputs["gzip1"][0][1]  # v2 4 a, 5 c copied
    # indexes (index.interval.bytes 4096): no offset entry; the closing time entry (T+5 at 3)
    assert seg_path(part(lg, "gzip1"), 0, "index").read_bytes() == b""
    assert seg_path(part(lg, "gzip1"), 0, "timeindex").read_bytes() == TIME_ENTRY.pack(T + 5, 3)


def test_v0_snappy_wrapper_rebuilt_and_uncompressed_messages_kept_or_dropped_whole(lg):
    # W keeps 2 a, 3 c (absolute inner offsets); v0 4 keyless dropped; v0 5 b and v2 6 d copied
    data = seg_path(part(lg, "snappy0"), 0, "log").read_bytes()
    assert [e[:4] for e in kp_entries(data)] == [(0, codecs.SNAPPY, None, 3), (0, 0, None, 5), (2, 0, 0, 6)]
    assert kp_entries(data)[0][4] == [(2, None, None, b"a", X), (3, None, None, b"c", X)]
    size = entry_sizes(data)[0]
    (wrapper,) = parse_messages(data[:size])
    assert [(m.offset, m.magic, m.attributes) for m in inner_messages(wrapper)] == [(2, 0, 0), (3, 0, 0)]
    assert data[size:] == lg.inputs["snappy0"][0][2] + lg.inputs["snappy0"][0][3]
    assert seg_path(part(lg, "snappy0"), 0, "timeindex").read_bytes() == TIME_ENTRY.pack(T, 6)


def test_v1_log_append_time_wrapper_keeps_the_append_time_and_indexes_point_at_it(lg):
    data = seg_path(part(lg, "lat1"), 0, "log").read_bytes()
    entries = kp_entries(data)
    assert entries[1] == (1, codecs.LZ4, 1, 3, [(1, LAT, 1, b"a", X), (3, LAT, 1, b"c", X)])
    sizes = entry_sizes(data)
    (wrapper,) = parse_messages(data[sizes[0]:sizes[0] + sizes[1]])
    assert (wrapper.timestamp, wrapper.attributes) == (LAT, codecs.LZ4 | ATTR_LAT)
    inner = inner_messages(wrapper)
    assert [(m.offset, m.attributes, m.timestamp) for m in inner] == [(0, ATTR_LAT, LAT), (2, ATTR_LAT, LAT)]
    assert data[:sizes[0]] == lg.inputs["lat1"][0][0] and data[sizes[0] + sizes[1]:] == lg.inputs["lat1"][0][2]
    # index.interval.bytes 0 and 3.9.2's per-batch rule (KAFKA-806): an offset entry at every batch
    # after the first (its last offset, its position); the time entry at the wrapper, which brings the
    # max timestamp (LAT, offset 3); the closing one is not larger
    assert seg_path(part(lg, "lat1"), 0, "index").read_bytes() == \
        OFFSET_ENTRY.pack(3, sizes[0]) + OFFSET_ENTRY.pack(4, sizes[0] + sizes[1])
    assert seg_path(part(lg, "lat1"), 0, "timeindex").read_bytes() == TIME_ENTRY.pack(LAT, 3)


def test_v0_lz4_wrapper_rebuilt_with_the_broken_header_checksum(lg):
    data = seg_path(part(lg, "lz40"), 0, "log").read_bytes()
    assert kp_entries(data)[0] == (0, codecs.LZ4, None, 2, [(1, None, None, b"b", X), (2, None, None, b"c", X)])
    (wrapper,) = parse_messages(data[:entry_sizes(data)[0]])
    stored, broken = lz4_header_checksums(wrapper.value)
    assert stored == broken
    assert [m.offset for m in inner_messages(wrapper)] == [1, 2]


def test_wrapper_losing_nothing_copied_and_wrapper_losing_everything_dropped(lg):
    seg = lg.inputs["whole"][0]
    assert seg_path(part(lg, "whole"), 0, "log").read_bytes() == seg[0] + seg[2]


def test_tombstone_in_a_legacy_wrapper_follows_the_legacy_horizon(lg):
    # clean segments 0 and 2; the last, 2, has mtime MTIME: legacy horizon MTIME - RET. Segment 0
    # (MTIME - 2 RET) may lose its tombstones: t1 goes, k9 (not in the map) stays. Segment 2 (MTIME)
    # keeps its tombstone t2; 3 k1 is superseded by 4. Map over [4, 6): k1 -> 4, x -> 5.
    data = seg_path(part(lg, "tomb"), 0, "log").read_bytes()
    assert kp_entries(data) == [
        (1, codecs.GZIP, 0, 1, [(1, T, 0, b"k9", X)]),
        (1, codecs.GZIP, 0, 2, [(2, T, 0, b"t2", None)]),  # a kept tombstone: no delete horizon below v2
        (2, 0, 0, 4, [(4, T, 0, b"k1", b"v4"), (5, T, 0, b"x", b"v5")]),
    ]
    assert [p.name for p in sorted(part(lg, "tomb").glob("*.log"))] == [f"{0:020d}.log", f"{6:020d}.log"]
    assert seg_path(part(lg, "tomb"), 0, "log").stat().st_mtime_ns // 1_000_000 == MTIME + 1000  # segment 4's


def test_wrapper_with_inner_messages_of_another_magic_rebuilt_though_nothing_goes(lg):
    data = seg_path(part(lg, "mixed"), 0, "log").read_bytes()
    sizes = entry_sizes(data)
    assert data[:sizes[0]] == lg.inputs["mixed"][0][0] and data[sizes[0] + sizes[1]:] == lg.inputs["mixed"][0][2]
    (wrapper,) = parse_messages(data[sizes[0]:sizes[0] + sizes[1]])
    assert (wrapper.offset, wrapper.magic, wrapper.timestamp, wrapper.crc_ok) == (2, 1, -1, True)
    assert [(m.offset, m.magic, m.timestamp, m.key, m.crc_ok) for m in inner_messages(wrapper)] == [
        (0, 1, -1, b"a", True), (1, 1, -1, b"b", True)]
    assert kp_entries(data)[1][4] == [(1, -1, 0, b"a", b"old format a"), (2, -1, 0, b"b", b"old format b")]


def test_legacy_last_batch_of_the_round_losing_everything_fails_like_kafka(lg):
    """Kafka keeps the round's last batch even if empty (RETAIN_EMPTY) and throws for magic < 2
    (IllegalStateException "Empty batches are only supported for magic v2 and above"): the partition
    is marked uncleanable and left untouched."""
    assert lg.e_code == 5
    assert {p.name: p.read_bytes() for p in lg.end.iterdir() if not p.name.startswith("kcompact")} == lg.end_before
    state = json.loads((lg.e / "kcompact-state.lg-end-0.json").read_text())
    assert state["state"] == "uncleanable"
    log = lg.end / f"{1:020d}.log"
    assert state["reason"].startswith(f"{log}: byte 0: magic-1 entry at offset 2 ")
    assert "empty batches are only supported for magic v2 and above" in state["reason"]
    # Kafka would have swapped in group 0 before failing on group 1; we leave the whole partition
    # untouched (docs/protocols.md, "A round that fails part-way"), and the report says what became of each:
    # a partition is read from its end back, so group 1 failed before group 0 was read
    (entry,) = lg.e_report["partitions"]
    assert [(g["base_offset"], g["segments"], g["outcome"].split(":")[0]) for g in entry["groups"]] == [
        (0, [0], "not written"), (1, [1], "failed")]


# -- Kafka 4.0 on: every kept legacy entry rewritten as a v2 batch (KIP-724) ------------------------------
@pytest.fixture(scope="module")
def lg4(spark, tmp_path_factory):
    a = tmp_path_factory.mktemp("legacy4") / "a"
    inputs = build(a)
    return SimpleNamespace(
        a=a, inputs=inputs, code=compact(a, kafka_version="4.3"), verify_after=verify_log_dir(str(a))
    )


def v2_batches(part_dir: Path) -> list[tuple]:
    """kafka-python's view of segment 0's v2 batches: (base offset, last offset, codec, timestamp type,
    first timestamp, max timestamp, producer id, leader epoch, delete horizon bit, records)."""
    out = []
    for batch in MemoryRecords(seg_path(part_dir, 0, "log").read_bytes()):
        assert batch.magic == 2 and batch.validate_crc()
        out.append((batch.base_offset, batch.base_offset + batch.last_offset_delta, batch.compression_type,
                    batch.timestamp_type, batch.first_timestamp, batch.max_timestamp, batch.producer_id,
                    batch.leader_epoch, bool(batch.attributes & 0x40),
                    [(r.offset, r.timestamp, r.key, r.value) for r in batch]))
    return out


def test_4_x_converts_every_kept_legacy_entry_to_v2(lg4):
    assert lg4.code == 0 and lg4.verify_after == []
    assert cleaner_checkpoint(lg4.a) == {("lg-gzip1", 0): 6, ("lg-snappy0", 0): 7, ("lg-lat1", 0): 5,
                                         ("lg-lz40", 0): 4, ("lg-whole", 0): 6, ("lg-tomb", 0): 6,
                                         ("lg-mixed", 0): 4}
    p = lambda name: lg4.a / f"lg-{name}-0"  # noqa: E731
    # v1 gzip wrapper keeping 1 b, 3 d: one v2 gzip batch from 1 to 3, CreateTime, no producer, no leader epoch
    gzip1 = v2_batches(p("gzip1"))
    assert gzip1[0] == (1, 3, codecs.GZIP, 0, T + 2, T + 5, -1, -1, False, [(1, T + 2, b"b", X), (3, T + 5, b"d", X)])
    assert seg_path(p("gzip1"), 0, "log").read_bytes().endswith(lg4.inputs["gzip1"][0][1])  # v2 4 a, 5 c copied
    # v0 snappy wrapper keeping 2 a, 3 c; v0 4 keyless dropped; v0 5 b kept whole, still converted: timestamps -1
    assert v2_batches(p("snappy0"))[:2] == [
        (2, 3, codecs.SNAPPY, 0, -1, -1, -1, -1, False, [(2, -1, b"a", X), (3, -1, b"c", X)]),
        (5, 5, 0, 0, -1, -1, -1, -1, False, [(5, -1, b"b", b"v5")]),
    ]
    # v1 lz4 LogAppendTime wrapper keeping 1 a, 3 c: the append time stays the batch's
    assert v2_batches(p("lat1"))[1] == (
        1,
        3,
        codecs.LZ4,
        1,
        LAT,
        LAT,
        -1,
        -1,
        False,
        [(1, LAT, b"a", X), (3, LAT, b"c", X)],
    )
    assert v2_batches(p("lz40"))[0][:3] == (1, 2, codecs.LZ4)  # magic 2's lz4 frame: kafka-python reads it
    # v1 snappy wrapper losing nothing: converted all the same; v1 gzip wrapper losing everything: dropped
    whole = v2_batches(p("whole"))
    assert [b[:3] for b in whole] == [(0, 1, codecs.SNAPPY), (4, 5, 0)]
    # a kept legacy tombstone: its v2 batch gets a delete horizon, now + delete.retention.ms
    tomb = MemoryRecords(seg_path(p("tomb"), 0, "log").read_bytes())
    tomb.next_batch()
    stamped = tomb.next_batch()
    assert (stamped.base_offset, stamped.first_timestamp, bool(stamped.attributes & 0x40)) == (2, NOW + RET, True)
    assert [(r.offset, r.timestamp, r.key, r.value) for r in stamped] == [(2, T, b"t2", None)]
    # KAFKA-4298's mixed wrapper (v0 messages in a v1 wrapper): their timestamps are -1
    assert v2_batches(p("mixed"))[1] == (1, 2, codecs.GZIP, 0, -1, -1, -1, -1, False,
                                         [(1, -1, b"a", b"old format a"), (2, -1, b"b", b"old format b")])


@pytest.mark.parametrize("codec", WRAPPER_CODECS, ids=CODEC_IDS)
@pytest.mark.parametrize("magic", [0, 1])
def test_legacy_codec_framing_read_by_kafka_python(magic, codec):
    data = b"an inner message set " * 50
    value = compress_legacy(magic, codec, data)
    decode = {codecs.GZIP: gzip_decode, codecs.SNAPPY: snappy_decode,
              codecs.LZ4: lz4_decode_old_kafka if magic == 0 else lz4_decode}[codec]
    assert decode(value) == data
    assert codecs.decompress_legacy(magic, codec, value) == data
