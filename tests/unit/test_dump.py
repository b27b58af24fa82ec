"""dump_path against independent readers: every batch line is rebuilt here, in
DumpLogSegments' field order, from what kafka-python (or struct) reads in the same
bytes; the fixture log dir's dump is compared with Kafka's own batch listing."""

from __future__ import annotations

import io
import json
import shutil
import struct
import zlib
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatch
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from kcompact import errors, storage
from kcompact.jobs import cli
from kcompact.readers.records import COMMIT, Record
from kcompact.tools.dump import dump_path
from tests.support import FIXTURE_DIR, FIXTURE_INPUT, TS0, hand_control_batch, kp_build

KP_CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
HORIZON = 0x40
KP_CONTROL = {0: "ABORT", 1: "COMMIT"}


def recs(first: int, n: int, **overrides) -> list[Record]:
    out = [Record(o, TS0 + 10 * o, b"key-%d" % o, b"value %d " % o * 8, (("h1", b"x"), ("h2", None)))
           for o in range(first, first + n)]
    return [Record(r.offset, r.timestamp, **{"key": r.key, "value": r.value, "headers": r.headers, **overrides})
            for r in out]


def v2_segment() -> bytes:
    """Every header variant DumpLogSegments distinguishes, each codec, a marker, nulls."""
    return b"".join(
        [
            kp_build(recs(0, 5), base_offset=0, leader_epoch=3, producer_id=1000, producer_epoch=2, base_sequence=0),
            kp_build(recs(5, 5), codec=1, base_offset=5),
            kp_build(
                recs(10, 3),
                codec=2,
                base_offset=10,
                producer_id=7,
                producer_epoch=0,
                base_sequence=5,
                transactional=True,
            ),
            hand_control_batch(
                COMMIT, offset=13, timestamp=TS0 + 130, producer_id=7, producer_epoch=0, coordinator_epoch=4
            ),
            kp_build(recs(14, 5), codec=3, base_offset=14, log_append_time=TS0 + 999),
            kp_build(recs(19, 3, key=None), codec=4, base_offset=19),
            kp_build(recs(22, 2, value=None, headers=()), base_offset=22, extra_attributes=HORIZON),
        ]
    )


def java(flag: bool) -> str:
    return "true" if flag else "false"


def kafka_batch_line(kb: DefaultRecordBatch, position: int) -> str:
    """DumpLogSegments' v2 batch line, every value from kafka-python's reading of the batch."""
    horizon = f"OptionalLong[{kb.first_timestamp}]" if kb.attributes & HORIZON else "OptionalLong.empty"
    ts_type = "LogAppendTime" if kb.timestamp_type == 1 else "CreateTime"
    return (f"baseOffset: {kb.base_offset} lastOffset: {kb.last_offset} count: {kb.records_count} "
            f"baseSequence: {kb.base_sequence} lastSequence: {kb.last_sequence} producerId: {kb.producer_id} "
            f"producerEpoch: {kb.producer_epoch} partitionLeaderEpoch: {kb.leader_epoch} "
            f"isTransactional: {java(kb.is_transactional)} isControl: {java(kb.is_control_batch)} "
            f"deleteHorizonMs: {horizon} position: {position} {ts_type}: {kb.max_timestamp} "
            f"size: {kb.size_in_bytes} magic: 2 compresscodec: {KP_CODECS[kb.compression_type]} crc: {kb.crc} "
            f"isvalid: {java(kb.validate_crc())}")


def kafka_record_line(kb: DefaultRecordBatch, r) -> str:
    ts_type = "LogAppendTime" if kb.timestamp_type == 1 else "CreateTime"
    seq = -1 if kb.base_sequence < 0 else kb.base_sequence + r.offset - kb.base_offset
    line = (f"| offset: {r.offset} {ts_type}: {r.timestamp} keySize: {-1 if r.key is None else len(r.key)} "
            f"valueSize: {-1 if r.value is None else len(r.value)} sequence: {seq} "
            f"headerKeys: [{','.join(k for k, _ in r.headers)}]")
    if r.key is not None:
        line += f" key: {r.key.decode()}"
    if r.value is not None:
        line += f" payload: {r.value.decode()}"
    return line


def kp_expected(data: bytes, print_data: bool) -> list[str]:
    lines, position = [], 0
    for kb in MemoryRecords(data):
        lines.append(kafka_batch_line(kb, position))
        position += kb.size_in_bytes
        if print_data and kb.is_control_batch:
            (marker,) = list(kb)
            lines.append(f"| offset: {marker.offset} CreateTime: {marker.timestamp} keySize: 4 valueSize: 6 "
                         f"sequence: -1 headerKeys: [] endTxnMarker: {KP_CONTROL[marker.type]} coordinatorEpoch: 4")
        elif print_data:
            lines += [kafka_record_line(kb, r) for r in kb]
    return lines


def dump(path, print_data: bool = False, as_json: bool = False) -> tuple[int, list[str]]:
    out = io.StringIO()
    rc = dump_path(str(path), print_data=print_data, as_json=as_json, out=out)
    return rc, out.getvalue().splitlines()


@pytest.fixture
def segment(tmp_path: Path) -> Path:
    path = tmp_path / "orders-0" / f"{0:020d}.log"
    path.parent.mkdir()
    path.write_bytes(v2_segment())
    return path


# -- .log ------------------------------------------------------------------------------------
@pytest.mark.parametrize("print_data", [False, True])
def test_log_lines_match_kafka_python(segment: Path, print_data: bool):
    rc, lines = dump(segment, print_data=print_data)
    assert rc == 0
    assert lines == [f"Dumping {segment}", "Log starting offset: 0", *kp_expected(segment.read_bytes(), print_data)]


def test_json_has_the_same_fields(segment: Path):
    rc, lines = dump(segment, print_data=True, as_json=True)
    assert rc == 0
    objects = [json.loads(line) for line in lines]
    assert {o["file"] for o in objects} == {str(segment)}
    batches = [o for o in objects if o["type"] == "batch"]
    kbs = list(MemoryRecords(segment.read_bytes()))
    assert [(b["baseOffset"], b["lastOffset"], b["count"], b["producerId"], b["producerEpoch"], b["baseSequence"],
             b["lastSequence"], b["partitionLeaderEpoch"], b["isTransactional"], b["isControl"], b["crc"],
             b["compressCodec"], b["maxTimestamp"], b["size"]) for b in batches] == [
        (k.base_offset, k.last_offset, k.records_count, k.producer_id, k.producer_epoch, k.base_sequence,
         k.last_sequence, k.leader_epoch, k.is_transactional, k.is_control_batch, k.crc,
         KP_CODECS[k.compression_type], k.max_timestamp, k.size_in_bytes) for k in kbs]
    assert [b["deleteHorizonMs"] for b in batches] == [None] * 6 + [kbs[-1].first_timestamp]
    records = [o for o in objects if o["type"] == "record" and "endTxnMarker" not in o]
    expected = [r for k in kbs if not k.is_control_batch for r in k]
    assert [(o["offset"], o["timestamp"], o["key"], o["payload"], o["headerKeys"]) for o in records] == [
        (r.offset, r.timestamp, r.key and r.key.decode(), r.value and r.value.decode(), [k for k, _ in r.headers])
        for r in expected]
    (marker,) = [o for o in objects if "endTxnMarker" in o]
    assert (marker["offset"], marker["endTxnMarker"], marker["coordinatorEpoch"]) == (13, "COMMIT", 4)


def legacy_entry(magic: int, offset: int, codec: int = 0, n: int = 1) -> bytes:
    """kafka-python's message-set builder; the offset patched in as a broker assigns it."""
    builder = LegacyRecordBatchBuilder(magic, codec, 1 << 20)
    for i in range(n):
        builder.append(i, TS0 + i if magic else None, b"k%d" % i, b"legacy value " * 10)
    buf = bytearray(builder.build())
    struct.pack_into(">q", buf, 0, offset)
    return bytes(buf)


def test_legacy_entries(tmp_path: Path):
    """v0, v1 and a v1 gzip wrapper (its offset is its last inner offset) per DumpLogSegments."""
    entries = [legacy_entry(0, 0), legacy_entry(1, 1), legacy_entry(1, 6, codec=1, n=5)]
    path = tmp_path / f"{0:020d}.log"
    path.write_bytes(b"".join(entries))
    rc, lines = dump(path, print_data=True)
    assert rc == 0
    expected, position = [f"Dumping {path}", "Log starting offset: 0"], 0
    for data, kb in zip(entries, MemoryRecords(path.read_bytes())):
        (crc,), magic, attributes = struct.unpack_from(">I", data, 12), data[16], data[17]
        assert crc == zlib.crc32(data[16:])
        ts_type, ts = ("CreateTime", struct.unpack_from(">q", data, 18)[0]) if magic else ("NoTimestampType", -1)
        expected.append(f"offset: {kb.base_offset} position: {position} {ts_type}: {ts} size: {len(data)} "
                        f"magic: {magic} compresscodec: {KP_CODECS[attributes & 7]} crc: {crc} isvalid: true")
        for r in kb:
            own_crc = f" isValid: true crc: {r.checksum}" if attributes & 7 == 0 else ""
            r_ts = -1 if r.timestamp is None else r.timestamp  # kafka-python: None for v0; Kafka: -1
            expected.append(f"| offset: {r.offset} {ts_type}: {r_ts} keySize: {len(r.key)} "
                            f"valueSize: {len(r.value)}{own_crc} key: {r.key.decode()} payload: {r.value.decode()}")
        position += len(data)
    assert lines == expected
    assert [line.split()[2] for line in lines if line.startswith("| offset: ")][-5:] == ["2", "3", "4", "5", "6"]


def test_legacy_wrapper_offsets_as_kafka_reads_them(tmp_path: Path):
    """A v1 wrapper whose offset is below its last inner relative offset: Kafka (and
    kafka-python) then leave the inner offsets as they are, never make them negative."""
    path = tmp_path / f"{0:020d}.log"
    path.write_bytes(legacy_entry(1, 0, codec=1, n=3))
    _, lines = dump(path, print_data=True)
    assert [line.split()[2] for line in lines if line.startswith("| ")] == [
        str(r.offset) for kb in MemoryRecords(path.read_bytes()) for r in kb] == ["0", "1", "2"]


# -- index files -------------------------------------------------------------------------------
def test_index_files(tmp_path: Path):
    base = 100
    index = tmp_path / f"{base:020d}.index"
    index.write_bytes(struct.pack(">iiii", 3, 4200, 9, 8400) + bytes(8 * 16))  # with preallocated zeros
    timeindex = tmp_path / f"{base:020d}.timeindex"
    timeindex.write_bytes(struct.pack(">qiqi", TS0 + 30, 3, TS0 + 90, 9) + bytes(12 * 4))
    txnindex = tmp_path / f"{base:020d}.txnindex"
    txnindex.write_bytes(struct.pack(">hqqqq", 0, 7, 101, 105, 101) + struct.pack(">hqqqq", 0, 8, 90, 109, 101))
    assert dump(index) == (0, [f"Dumping {index}", "offset: 103 position: 4200", "offset: 109 position: 8400"])
    assert dump(timeindex) == (0, [f"Dumping {timeindex}", f"timestamp: {TS0 + 30} offset: 103",
                                   f"timestamp: {TS0 + 90} offset: 109"])
    assert dump(txnindex) == (0, [
        f"Dumping {txnindex}",
        "version: 0 producerId: 7 firstOffset: 101 lastOffset: 105 lastStableOffset: 101",
        "version: 0 producerId: 8 firstOffset: 90 lastOffset: 109 lastStableOffset: 101",
    ])
    _, lines = dump(timeindex, as_json=True)
    assert [json.loads(line) for line in lines] == [
        {"type": "timeindex", "file": str(timeindex), "timestamp": TS0 + 30, "offset": 103},
        {"type": "timeindex", "file": str(timeindex), "timestamp": TS0 + 90, "offset": 109},
    ]


def test_empty_and_broken_index(tmp_path: Path):
    empty = tmp_path / f"{0:020d}.index"
    empty.write_bytes(bytes(80))
    assert dump(empty) == (0, [f"Dumping {empty}", f"{empty} is empty."])
    broken = tmp_path / f"{5:020d}.index"
    broken.write_bytes(struct.pack(">ii", 2, 4100) + b"\x00\x00\x00")
    assert dump(broken) == (1, [f"Dumping {broken}", "offset: 7 position: 4100",
                                f"Error: {broken}: byte 8: file size 11 is not a multiple of the 8-byte entry size"])


# -- directories ---------------------------------------------------------------------------------
def fixture_batches() -> dict[str, list[tuple]]:
    """Kafka's own listing of the fixture's batches, per partition dir name."""
    out: dict[str, list[tuple]] = {}
    for line in (FIXTURE_DIR / "input.batches.tsv").read_text().splitlines():
        topic, partition, base, _, *fields = line.split("\t")
        f = dict(field.split("=", 1) for field in fields)
        flags = f["flags"].split(":")[0]
        horizon = None if f["deleteHorizon"] == "-1" else int(f["deleteHorizon"])
        out.setdefault(f"{topic}-{partition}", []).append((
            int(base), int(f["last"]), int(f["count"]), f["codec"], flags.startswith("c"), "T" in flags,
            int(f["pid"]), int(f["epoch"]), int(f["seq"]), int(f["maxTs"]), horizon, int(f["leaderEpoch"]),
        ))
    return out


def test_log_dir_dump_covers_every_partition(tmp_path: Path):
    root = tmp_path / "input"
    shutil.copytree(FIXTURE_INPUT, root)
    rc, lines = dump(root, as_json=True)
    assert rc == 0
    got: dict[str, list[tuple]] = {}
    for o in map(json.loads, lines):
        if o["type"] == "batch":
            got.setdefault(Path(o["file"]).parent.name, []).append((
                o["baseOffset"], o["lastOffset"], o["count"], o["compressCodec"], o["isControl"], o["isTransactional"],
                o["producerId"], o["producerEpoch"], o["baseSequence"], o["maxTimestamp"], o["deleteHorizonMs"],
                o["partitionLeaderEpoch"],
            ))
    assert got == fixture_batches()
    rc, lines = dump(root)
    segment_files = sorted(
        str(p) for p in root.glob("*/*") if p.suffix in (".log", ".index", ".timeindex", ".txnindex")
    )
    assert sorted(line.removeprefix("Dumping ") for line in lines if line.startswith("Dumping ")) == segment_files


def test_partition_dir_dumps_segments_in_offset_order(tmp_path: Path):
    part = tmp_path / "accounts-0"
    shutil.copytree(FIXTURE_INPUT / "accounts-0", part)
    rc, lines = dump(part)
    names = [Path(line.removeprefix("Dumping ")).name for line in lines if line.startswith("Dumping ")]
    bases = sorted({p.name.split(".")[0] for p in part.glob("*.log")})
    assert rc == 0 and names == [f"{b}.{kind}" for b in bases for kind in ("log", "index", "timeindex", "txnindex")]


def test_not_a_segment_file(tmp_path: Path, capsys):
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_bytes(b"0\n0\n")
    assert cli.main(["dump", str(path)]) == errors.EXIT_USAGE
    assert "not a .log, .index, .timeindex or .txnindex file" in capsys.readouterr().err


def test_dump_from_s3(s3_endpoint, segment: Path):
    fs, _ = storage.resolve("s3://dump-bucket")
    fs.call_s3("create_bucket", Bucket="dump-bucket")  # mkdir would send us-east-1 as a location constraint
    fs.put(str(segment), f"dump-bucket/logs/orders-0/{segment.name}")
    remote = f"s3://dump-bucket/logs/orders-0/{segment.name}"
    rc, lines = dump(remote, print_data=True)
    assert rc == 0 and lines == [
        f"Dumping {remote}",
        "Log starting offset: 0",
        *kp_expected(segment.read_bytes(), True),
    ]
    rc, dir_lines = dump("s3://dump-bucket/logs/orders-0", print_data=True)
    assert rc == 0 and dir_lines == lines


# -- issue 40: the broker's text checkpoint files ---------------------------------------------------
def test_dump_of_a_text_checkpoint_file(tmp_path: Path):
    """Hand-made bytes, read as Kafka's CheckpointFile reads them: a CRLF line and a last line
    without its newline are entries; each is shown with its line's byte position."""
    path = tmp_path / "cleaner-offset-checkpoint"
    path.write_bytes(b"0\n2\norders 0 5\r\nclicks 1 7")
    assert dump(path) == (0, [f"Dumping {path}", "topic: orders partition: 0 offset: 5 position: 4",
                              "topic: clicks partition: 1 offset: 7 position: 16"])
    rc, lines = dump(path, as_json=True)
    assert rc == 0 and [json.loads(line) for line in lines][1] == {
        "type": "checkpoint", "file": str(path), "topic": "clicks", "partition": 1, "offset": 7, "position": 16}
    path.write_bytes(b"")
    assert dump(path) == (0, [f"Dumping {path}", f"{path} has no entries."])
    path.write_bytes(b"0\n2\norders 0 5\n")
    assert dump(path) == (1, [f"Dumping {path}",
                              f"Error: {path}: byte 2: entry count 2 does not match the 1 entry lines"])


def test_a_missing_file_is_said_alone(tmp_path: Path, capsys):
    for name in (f"{0:020d}.log", f"{0:020d}.index", f"{5:020d}.snapshot"):
        path = tmp_path / "orders-0" / name
        assert cli.main(["dump", str(path)]) == errors.EXIT_USAGE
        out = capsys.readouterr()
        assert out.out == "" and out.err == f"kcompact: error: {path}: no such file or directory\n"


def hand_snapshot(entries: list[tuple]) -> bytes:
    """A producer-state snapshot as Kafka's ProducerStateManager writes it, packed by hand:
    version 1, CRC-32C of what follows the CRC, the entry count, then per entry producer id,
    epoch, last sequence, last offset, offset delta, timestamp, coordinator epoch, first offset
    of the open transaction (-1: none)."""
    import crc32c

    body = struct.pack(">i", len(entries)) + b"".join(struct.pack(">qhiqiqiq", *e) for e in entries)
    return struct.pack(">hI", 1, crc32c.crc32c(body)) + body


def test_a_producer_snapshot_as_kafka_dump_log_prints_it(tmp_path: Path):
    path = tmp_path / "orders-0" / f"{120:020d}.snapshot"
    path.parent.mkdir()
    path.write_bytes(hand_snapshot([(1000, 0, 41, 119, 9, TS0, -1, -1),
                                    (2000, 3, 2, 110, 4, TS0 + 5, 7, 100),  # wrapped: 2^31 - 2, 2^31 - 1, 0, 1, 2
                                    (3000, 1, -1, -1, 0, TS0 + 9, 2, -1)]))  # no batch metadata left
    assert dump(path) == (0, [
        f"Dumping {path}",
        f"producerId: 1000 producerEpoch: 0 coordinatorEpoch: -1 currentTxnFirstOffset: OptionalLong.empty "
        f"lastTimestamp: {TS0} firstSequence: 32 lastSequence: 41 lastOffset: 119 offsetDelta: 9 timestamp: {TS0}",
        f"producerId: 2000 producerEpoch: 3 coordinatorEpoch: 7 currentTxnFirstOffset: OptionalLong[100] "
        f"lastTimestamp: {TS0 + 5} firstSequence: 2147483646 lastSequence: 2 lastOffset: 110 offsetDelta: 4 "
        f"timestamp: {TS0 + 5}",
        f"producerId: 3000 producerEpoch: 1 coordinatorEpoch: 2 currentTxnFirstOffset: OptionalLong.empty "
        f"lastTimestamp: {TS0 + 9}"])
    rc, lines = dump(path, as_json=True)
    assert rc == 0 and json.loads(lines[1])["currentTxnFirstOffset"] == 100
    path.write_bytes(path.read_bytes()[:-3])
    rc, lines = dump(path)
    assert rc == 1 and lines[1].startswith(f"Error: {path}")
