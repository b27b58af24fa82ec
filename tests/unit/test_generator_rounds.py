"""The generator's features for the cleaning-round property tests (test_reference_properties.py):
legacy magic-0/1 messages before the v2 batches, producer epoch bumps, keys of many sizes,
rolls when an index is full, cleaner checkpoints anywhere with a moved log start, and records
appended between two rounds. Checked with kafka-python's reader and Kafka's rules restated here."""

from __future__ import annotations

import copy
import re
import struct
from pathlib import Path

import pytest
from kafka.record.memory_records import MemoryRecords

from kcompact.readers import checkpoint
from kcompact.readers.indexes import parse_offset_index, parse_time_index
from kcompact.tools import generator
from tests.unit.test_generator import expected_indexes, read_segment

T0 = 1_720_000_000_000
HOUR = 3_600_000


def topic(**fields) -> dict:
    base = {"name": "t", "partitions": 1, "config": {"cleanup.policy": "compact", "segment.bytes": 3000,
                                                     "index.interval.bytes": 200},
            "records": 300, "keys": 40, "value_size": [5, 40], "codecs": {"none": 1, "gzip": 1, "lz4": 1}}
    return base | fields


def spec(*topics: dict) -> dict:
    return {"start_ms": T0, "topics": list(topics)}


def entries(path: Path) -> list:
    """Every entry of a .log as kafka-python reads it (legacy message sets and v2 batches), CRC checked."""
    out, records = [], MemoryRecords(path.read_bytes())
    while (batch := records.next_batch()) is not None:
        assert batch.validate_crc(), path
        out.append(batch)
    return out


def logs(root: Path, name: str = "t-0") -> list[Path]:
    return sorted((root / name).glob("*.log"))


# -- legacy message sets --------------------------------------------------------------------------

def test_legacy_messages_come_before_the_v2_batches(tmp_path: Path) -> None:
    legacy = {"magic0": 40, "magic1": 40, "codecs": {"none": 1, "gzip": 1, "snappy": 1, "lz4": 1},
              "wrapper_records": [2, 6]}
    result = generator.generate(str(tmp_path), spec(topic(legacy=legacy, tombstone_fraction=0.1,
                                                          keyless_fraction=0.05)), seed=4)
    truth = result.partitions["t", 0]
    batches = [b for path in logs(tmp_path) for b in entries(path)]
    magics = [b.magic for b in batches]
    assert magics == sorted(magics) and set(magics) == {0, 1, 2}, "magic 0, then 1, then v2"
    assert {b.compression_type for b in batches if b.magic < 2} == {0, 1, 2, 3}
    read = [(r.offset, r.timestamp, r.key, r.value) for b in batches for r in b]
    assert [o for o, *_ in read] == list(range(truth.log_end_offset)), "offsets follow each other, wrappers too"
    expected = [(r.offset, None if r.timestamp < 0 else r.timestamp, r.key, r.value) for r in truth.records]
    assert read == expected
    legacy_read = read[:80]
    assert all(ts is None for _, ts, *_ in legacy_read[:40]), "magic 0 has no timestamps"
    assert all(ts == T0 + 100 * o for o, ts, *_ in legacy_read[40:])
    assert any(v is None for *_, v in legacy_read) and any(k is None for _, _, k, _ in legacy_read)
    for path in logs(tmp_path):  # the broker's index rule holds over legacy entries too
        assert path.stat().st_mtime_ns // 1_000_000 >= T0


# -- producers --------------------------------------------------------------------------------------

def test_epoch_bumps_restart_the_sequence(tmp_path: Path) -> None:
    """A bumped producer epoch never goes back; the first data batch of a new epoch starts at
    sequence 0; a transaction may end with a marker carrying the new epoch."""
    t = topic(records=1500, idempotent_fraction=0.3, idempotent_producers=2, transactional_fraction=0.4,
              transactional_producers=2, abort_ratio=0.4, epoch_bump_ratio=0.25)
    generator.generate(str(tmp_path), spec(t), seed=8)
    batches = [b for path in logs(tmp_path) for b in entries(path)]
    epoch: dict[int, int] = {}
    data_bumps = marker_bumps = 0
    for b in batches:
        if b.producer_id < 0:
            continue
        before = epoch.get(b.producer_id, b.producer_epoch)
        assert b.producer_epoch >= before
        if b.producer_epoch > before:
            if b.is_control_batch:
                marker_bumps += 1
            else:
                data_bumps += 1
                assert b.base_sequence == 0
        epoch[b.producer_id] = b.producer_epoch
    assert data_bumps and marker_bumps


def test_keys_of_many_sizes_keep_one_size_per_key(tmp_path: Path) -> None:
    result = generator.generate(str(tmp_path), spec(topic(key_size=[1, 64], keys=200, records=600)), seed=2)
    keys = [r.key for r in result.partitions["t", 0].records if r.key is not None]
    sizes = {len(k) for k in keys}
    assert min(sizes) >= 1 and max(sizes) <= 64 and len(sizes) > 20
    by_number: dict[bytes, set[int]] = {}
    for k in keys:
        by_number.setdefault(k.rstrip(b"."), set()).add(len(k))
    assert all(len(s) == 1 or min(s) < 6 for s in by_number.values()), "a key keeps its size"


def test_log_append_time_batches_read_as_their_append_time(tmp_path: Path) -> None:
    """A LogAppendTime topic: the broker sets the timestamp-type bit and the max timestamp (the
    append time, here 5 ms after the last record) and leaves the records' create-time deltas; a
    reader gives every record the append time."""
    result = generator.generate(str(tmp_path), spec(topic(log_append_time=True, transactional_fraction=0.3,
                                                          abort_ratio=0.5)), seed=5)
    truth = result.partitions["t", 0]
    read = []
    for path in logs(tmp_path):
        data, position = path.read_bytes(), 0
        for b in entries(path):
            records = [(r.offset, r.timestamp) for r in b]
            first_timestamp = struct.unpack_from(">q", data, position + 27)[0]  # the header's baseTimestamp
            assert b.timestamp_type == 1
            assert first_timestamp == T0 + 100 * records[0][0], "the first record's create time stays in the header"
            assert b.max_timestamp == T0 + 100 * records[-1][0] + 5
            assert all(ts == b.max_timestamp for _, ts in records)
            read += records
            position += b.size_in_bytes
    assert read == [(r.offset, r.timestamp) for r in truth.records]


def test_leader_changes_and_skewed_clocks(tmp_path: Path) -> None:
    """``leader_change_ratio``: the partition leader epoch of the batches grows at leader changes
    and leader-epoch-checkpoint lists each epoch's first offset; ``timestamp_jitter_ms``: record
    timestamps wander around their nominal time, back and forth, and each batch's max timestamp
    is its records' largest."""
    legacy = {"magic0": 5, "magic1": 0, "codecs": {"none": 1}}
    s = spec(topic(records=600, leader_change_ratio=0.1, timestamp_jitter_ms=500, legacy=legacy))
    truth = generator.generate(str(tmp_path), s, seed=4).partitions["t", 0]
    batches = [b for path in logs(tmp_path) for b in entries(path) if b.magic == 2]
    epochs = [b.leader_epoch for b in batches]
    assert epochs == sorted(epochs) and epochs[0] == 0 and epochs[-1] >= 2
    firsts: dict[int, int] = {}
    for b in batches:
        firsts.setdefault(b.leader_epoch, b.base_offset)
    text = (tmp_path / "t-0" / "leader-epoch-checkpoint").read_text()
    assert text == f"0\n{len(firsts)}\n" + "".join(f"{e} {o}\n" for e, o in firsts.items())
    assert firsts[0] == 5, "legacy messages have no leader epoch: epoch 0 starts at the first v2 batch"
    stamps = [r.timestamp for r in truth.records if r.offset >= 5]
    assert any(a > b for a, b in zip(stamps, stamps[1:])), "timestamps go back"
    assert all(abs(r.timestamp - (T0 + 100 * r.offset)) <= 500 for r in truth.records if r.offset >= 5)
    for b in batches:
        assert b.max_timestamp == max(r.timestamp for r in b)


# -- segments -------------------------------------------------------------------------------------

def test_segments_roll_when_an_index_is_full(tmp_path: Path) -> None:
    """segment.index.bytes 40: the offset index holds 5 entries, the time index 3 of which the last
    is kept for the closing entry; the broker rolls before an append that finds either full."""
    t = topic(records=1500, config={"cleanup.policy": "compact", "segment.bytes": 100_000,
                                    "segment.index.bytes": 40, "index.interval.bytes": 64})
    generator.generate(str(tmp_path), spec(t), seed=6)
    segments = [read_segment(p) for p in logs(tmp_path)]
    assert len(segments) > 5
    for seg, nxt in zip(segments, segments[1:]):
        index = parse_offset_index("i", seg.sibling("index").read_bytes())
        times = parse_time_index("t", seg.sibling("timeindex").read_bytes())
        offsets, expected_times = expected_indexes(seg, 64)
        assert ([(e.relative_offset, e.position) for e in index], [(e.timestamp, e.relative_offset) for e in times]) \
            == (offsets, expected_times)
        # timestamps grow with offsets here, so every offset-index entry came with a time entry
        full = len(index) >= 40 // 8 or len(index) >= 40 // 12 - 1
        assert full or seg.size + nxt.batches[0].size > 100_000, f"{seg.path.name} rolled early"
        assert len(index) <= 5 and len(times) <= 3


def test_an_empty_active_segment_takes_the_appends(tmp_path: Path) -> None:
    """A broker that rolled before anything more came leaves an empty active segment at the log
    end; the records appended later go into it."""
    s = spec(topic(empty_active=True, append_records=100, append_gap_ms=HOUR))
    truth = generator.generate(str(tmp_path), s, seed=2).partitions["t", 0]
    segments = logs(tmp_path)
    assert segments[-1].stat().st_size == 0 and int(segments[-1].stem) == truth.log_end_offset
    assert all(segments[-1].with_suffix(k).stat().st_size == 0 for k in (".index", ".timeindex"))
    generator.append(str(tmp_path), s, seed=2)
    after = logs(tmp_path)
    assert after[:len(segments) - 1] == segments[:-1]
    assert entries(segments[-1])[0].base_offset == truth.log_end_offset


def test_segments_laid_out_before_a_segment_bytes_change(tmp_path: Path) -> None:
    """``layout_segment_bytes``: the broker rolled at 600 bytes; the topic says 3000 now."""
    generator.generate(str(tmp_path), spec(topic(layout_segment_bytes=600)), seed=2)
    segments = [read_segment(p) for p in logs(tmp_path)]
    for seg, nxt in zip(segments, segments[1:]):
        assert (seg.size <= 600 or len(seg.batches) == 1) and seg.size + nxt.batches[0].size > 600
    assert b"3000" in (tmp_path / "__cluster_metadata-0" / "00000000000000000000.log").read_bytes()


# -- checkpoints -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("position", "expected"), [
    ({"offset": 7}, lambda segs, start, end: 7),
    ({"segment": 2}, lambda segs, start, end: segs[2].base_offset),
    ({"segment": -1}, lambda segs, start, end: segs[-1].base_offset),
    ({"past_end": 5}, lambda segs, start, end: end + 5),
    ({"below_start": 3}, lambda segs, start, end: start - 3),
])
def test_cleaner_checkpoints_anywhere(tmp_path: Path, position, expected) -> None:
    generator.generate(str(tmp_path), spec(topic(checkpoint={"0": position}, log_start=0.5)), seed=3)
    segs = [read_segment(p) for p in logs(tmp_path)]
    end = segs[-1].batches[-1].last_offset + 1
    starts = checkpoint.parse("s", (tmp_path / "log-start-offset-checkpoint").read_bytes())
    start = starts["t", 0]
    first = segs[0]
    assert first.base_offset < start <= first.batches[-1].last_offset, "a log start inside the first segment"
    assert start in {b.base_offset for b in first.batches}
    cleaner = checkpoint.parse("c", (tmp_path / "cleaner-offset-checkpoint").read_bytes())
    assert cleaner == {("t", 0): expected(segs, start, end)}


# -- appends between rounds ---------------------------------------------------------------------------

APPENDED = topic(records=400, append_records=300, append_gap_ms=2 * HOUR, transactional_fraction=0.4,
                 transactional_producers=2, abort_ratio=0.5, open_transaction=True, checkpoint={"0": 0.5},
                 idempotent_fraction=0.3)


def test_append_continues_the_active_segment(tmp_path: Path) -> None:
    s = spec(APPENDED)
    first = generator.generate(str(tmp_path), s, seed=9)
    before = {p.name: p.read_bytes() for p in (tmp_path / "t-0").iterdir()}
    cleaner = (tmp_path / "cleaner-offset-checkpoint").read_bytes()
    assert sum(r.control is None for r in first.partitions["t", 0].records) == 400
    active = logs(tmp_path)[-1]

    truth = generator.append(str(tmp_path), s, seed=9)["t", 0]
    assert sum(r.control is None for r in truth.records) == 700
    after = logs(tmp_path)
    for path in after:
        if path.name < active.name:
            assert path.read_bytes() == before[path.name], "segments before the active one are not touched"
    assert after[after.index(active)].read_bytes().startswith(before[active.name])
    read = [(r.offset, r.timestamp, r.key, r.value) for path in after for b in entries(path) for r in b]
    assert read == [(r.offset, r.timestamp, r.key, r.value) for r in truth.records]
    cut = first.partitions["t", 0].log_end_offset
    assert all(ts == T0 + 100 * o + (2 * HOUR if o >= cut else 0) for o, ts, *_ in read)
    for path in after[after.index(active):]:
        seg = read_segment(path)
        index = parse_offset_index("i", seg.sibling("index").read_bytes())
        assert [(e.relative_offset, e.position) for e in index] == expected_indexes(seg, 200)[0]
    snapshots = sorted(int(p.stem) for p in (tmp_path / "t-0").glob("*.snapshot"))
    assert truth.log_end_offset in snapshots and cut in snapshots
    for name in ("recovery-point-offset-checkpoint", "replication-offset-checkpoint"):
        assert checkpoint.parse(name, (tmp_path / name).read_bytes()) == {("t", 0): truth.log_end_offset}
    assert (tmp_path / "cleaner-offset-checkpoint").read_bytes() == cleaner


def test_append_refuses_an_active_segment_it_did_not_write(tmp_path: Path) -> None:
    s = spec(APPENDED)
    generator.generate(str(tmp_path), s, seed=9)
    with open(logs(tmp_path)[-1], "ab") as f:
        f.write(b"\0" * 10)
    with pytest.raises(ValueError, match="not the active segment"):
        generator.append(str(tmp_path), s, seed=9)


@pytest.mark.parametrize(("field", "value"), [
    ("key_size", [0, 4]),
    ("checkpoint", {"0": {"past_end": 0}}),
    ("checkpoint", {"0": {"middle": 1}}),
    ("legacy", {"magic0": 3, "codecs": {"zstd": 1}}),
    ("legacy", {"magic2": 3}),
    ("epoch_bump_ratio", 2),
    ("log_start", -0.5),
    ("append_records", -1),
])
def test_bad_new_spec_keys_raise_naming_the_key(field: str, value: object) -> None:
    bad = copy.deepcopy(spec(topic()))
    bad["topics"][0][field] = value
    with pytest.raises(ValueError, match=re.escape(field)):
        generator.validate(bad)
