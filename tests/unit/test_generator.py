"""The generator, checked against readers it does not share code with: kafka-python
reads every batch and record, and Kafka's rules for rolling, indexing, transactions
and checkpoints are restated here rather than taken from the writers."""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import crc32c
import pytest
from kafka.record.memory_records import MemoryRecords

from kcompact.jobs.cli import main
from kcompact.logdir.listing import METADATA_DIR
from kcompact.readers import checkpoint
from kcompact.readers.indexes import AbortedTxn, parse_offset_index, parse_time_index, parse_txn_index
from kcompact.tools import generator
from tests.support import FIXTURE_DIR

FIXTURE_SPEC = FIXTURE_DIR / "generator-spec.json"
COMPACTED = {"orders", "users"}


@dataclass(frozen=True)
class ReadBatch:
    position: int
    size: int
    base_offset: int
    last_offset: int
    codec: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    transactional: bool
    control: bool
    max_timestamp: int
    records: tuple[tuple, ...]  # (offset, timestamp, key, value, headers, control type)


@dataclass(frozen=True)
class ReadSegment:
    base_offset: int
    path: Path
    size: int
    batches: tuple[ReadBatch, ...]

    def sibling(self, kind: str) -> Path:
        return self.path.with_suffix(f".{kind}")


@dataclass(frozen=True)
class Demo:
    path: Path
    spec: dict
    result: generator.GenResult
    logs: dict[tuple[str, int], list[ReadSegment]]

    def topic(self, name: str) -> dict:
        return next(t for t in self.spec["topics"] if t["name"] == name)


def read_segment(path: Path) -> ReadSegment:
    """Every batch of a .log through kafka-python, CRCs checked before decoding."""
    data = path.read_bytes()
    records = MemoryRecords(data)
    batches, position = [], 0
    while (batch := records.next_batch()) is not None:
        assert batch.validate_crc(), f"{path}: bad CRC in the batch at byte {position}"
        rows = tuple(
            (r.offset, r.timestamp, r.key, r.value, tuple(r.headers), getattr(r, "type", None)) for r in batch
        )
        batches.append(ReadBatch(
            position, batch.size_in_bytes, batch.base_offset, batch.last_offset, batch.compression_type,
            batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.is_transactional,
            batch.is_control_batch, batch.max_timestamp, rows,
        ))
        position += batch.size_in_bytes
    assert position == len(data)
    return ReadSegment(int(path.name[:20]), path, len(data), tuple(batches))


def read_log_dir(path: Path) -> dict[tuple[str, int], list[ReadSegment]]:
    logs = {}
    for pdir in sorted(p for p in path.iterdir() if p.is_dir() and p.name != METADATA_DIR):
        topic, _, partition = pdir.name.rpartition("-")
        logs[topic, int(partition)] = [read_segment(f) for f in sorted(pdir.glob("*.log"))]
    return logs


def batches_of(segments: list[ReadSegment]) -> list[ReadBatch]:
    return [b for s in segments for b in s.batches]


def file_hashes(root: Path) -> dict[str, str]:
    return {
        str(f.relative_to(root)): hashlib.sha256(f.read_bytes()).hexdigest() for f in root.rglob("*") if f.is_file()
    }


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Demo:
    path = tmp_path_factory.mktemp("demo") / "logs"
    spec = generator.load_spec(None)
    result = generator.generate(str(path), spec, seed=7)
    return Demo(path, spec, result, read_log_dir(path))


def small_spec() -> dict:
    return generator.override(generator.load_spec(None), records=300, segment_bytes=8192)


# -- records and batches ---------------------------------------------------------------


def test_kafka_python_reads_exactly_the_truth(demo: Demo) -> None:
    assert set(demo.logs) == set(demo.result.partitions)
    for tp, segments in demo.logs.items():
        truth = demo.result.partitions[tp]
        batches = batches_of(segments)
        assert [(s.base_offset, s.size) for s in segments] == [(s.base_offset, s.size) for s in truth.segments]
        assert [
            (b.base_offset, b.last_offset, b.codec, b.producer_id, b.producer_epoch, b.base_sequence,
             b.transactional, b.control, b.max_timestamp, b.size)
            for b in batches
        ] == [
            (b.base_offset, b.last_offset, b.codec, b.producer_id, b.producer_epoch, b.base_sequence,
             b.transactional, b.control, b.max_timestamp, b.size)
            for b in truth.batches
        ]
        read = [
            (*row[:5], b.producer_id, b.transactional, row[5]) for b in batches for row in b.records
        ]
        assert read == [
            (r.offset, r.timestamp, r.key, r.value, r.headers, r.producer_id, r.transactional, r.control)
            for r in truth.records
        ]
        assert truth.log_end_offset == batches[-1].last_offset + 1


def test_offsets_timestamps_and_producer_fields_follow_kafka(demo: Demo) -> None:
    for (topic, _), segments in demo.logs.items():
        spec = demo.topic(topic)
        start, step = spec["timestamp_start_ms"], spec["timestamp_step_ms"]
        offsets = [row[0] for b in batches_of(segments) for row in b.records]
        assert offsets == list(range(len(offsets)))
        next_sequence: dict[int, int] = {}
        for b in batches_of(segments):
            assert all(row[1] == start + row[0] * step for row in b.records)
            assert b.max_timestamp == max(row[1] for row in b.records)
            assert b.last_offset - b.base_offset + 1 == len(b.records)
            if b.producer_id == -1:
                assert (b.producer_epoch, b.base_sequence, b.transactional) == (-1, -1, False)
            elif b.transactional:
                assert b.producer_id >= generator.TRANSACTIONAL_PID_BASE and b.producer_epoch >= 1
            else:
                assert generator.IDEMPOTENT_PID_BASE <= b.producer_id < generator.TRANSACTIONAL_PID_BASE
                assert b.producer_epoch == 0
            if b.control:
                assert b.transactional and b.base_sequence == -1 and b.codec == 0 and len(b.records) == 1
                _, _, key, value, headers, kind = b.records[0]
                assert struct.unpack(">hh", key) == (0, kind) and kind in (0, 1)
                assert struct.unpack(">hi", value) == (0, 0) and headers == ()
            elif b.producer_id >= 0:
                assert b.base_sequence == next_sequence.get(b.producer_id, 0)
                next_sequence[b.producer_id] = b.base_sequence + len(b.records)


def test_demo_has_every_codec_and_record_kind(demo: Demo) -> None:
    batches = [b for segs in demo.logs.values() for b in batches_of(segs)]
    rows = [row for b in batches if not b.control for row in b.records]
    assert {b.codec for b in batches} == {0, 1, 2, 3, 4}
    assert any(row[3] is None for row in rows), "tombstones"
    assert any(row[2] is None for row in rows), "keyless records"
    assert any(row[4] for row in rows), "headers"
    assert {b.producer_epoch for b in batches} >= {-1, 0, 1}
    assert any(len(segs) >= 3 for segs in demo.logs.values())
    assert any(topic == "clicks" for topic, _ in demo.logs)


# -- segments and indexes --------------------------------------------------------------


def test_segments_roll_at_segment_bytes(demo: Demo) -> None:
    for (topic, _), segments in demo.logs.items():
        limit = demo.topic(topic)["config"]["segment.bytes"]
        for seg, nxt in zip(segments, segments[1:]):
            assert seg.size <= limit or len(seg.batches) == 1
            assert seg.size + nxt.batches[0].size > limit, "rolled although the next batch fitted"
            assert nxt.base_offset == seg.batches[-1].last_offset + 1
        assert all(s.base_offset == s.batches[0].base_offset for s in segments)
        assert segments[0].base_offset == 0


def expected_indexes(seg: ReadSegment, interval: int) -> tuple[list[tuple], list[tuple]]:
    """Kafka's LogSegment.append, one append per batch: an entry before a batch once more
    than index.interval.bytes went in since the last one; a closing time entry."""
    offsets, times = [], []
    since, max_ts, max_ts_offset = 0, -1, None

    def time_entry() -> None:
        if max_ts_offset is not None and max_ts > (times[-1][0] if times else -1):
            times.append((max_ts, max_ts_offset - seg.base_offset))

    for b in seg.batches:
        if b.max_timestamp > max_ts:
            max_ts, max_ts_offset = b.max_timestamp, b.last_offset
        if since > interval:
            offsets.append((b.last_offset - seg.base_offset, b.position))
            time_entry()
            since = 0
        since += b.size
    time_entry()
    return offsets, times


def test_offset_and_time_indexes(demo: Demo) -> None:
    entries = 0
    for (topic, _), segments in demo.logs.items():
        interval = demo.topic(topic)["config"].get("index.interval.bytes", 4096)
        for seg in segments:
            index = parse_offset_index("index", seg.sibling("index").read_bytes())
            times = parse_time_index("timeindex", seg.sibling("timeindex").read_bytes())
            expected_offsets, expected_times = expected_indexes(seg, interval)
            assert [(e.relative_offset, e.position) for e in index] == expected_offsets
            assert [(e.timestamp, e.relative_offset) for e in times] == expected_times
            starts = {b.position: b for b in seg.batches}
            for prev, e in zip(index, index[1:]):
                assert e.relative_offset > prev.relative_offset and e.position > prev.position
            for e in index:
                assert starts[e.position].base_offset <= seg.base_offset + e.relative_offset
            for prev, e in zip(times, times[1:]):
                assert e.timestamp > prev.timestamp and e.relative_offset >= prev.relative_offset
            assert times[-1].timestamp == max(b.max_timestamp for b in seg.batches)
            assert seg.sibling("index").stat().st_size == 8 * len(index), "closed indexes are trimmed"
            entries += len(index)
    assert entries > 0


def test_segment_files_carry_the_segment_max_timestamp_as_mtime(demo: Demo) -> None:
    for segments in demo.logs.values():
        for seg in segments:
            max_ts = max(b.max_timestamp for b in seg.batches)
            for f in seg.path.parent.glob(f"{seg.path.stem}.*"):
                if f.suffix != ".snapshot":  # taken at the previous roll: see the snapshot test
                    assert f.stat().st_mtime_ns // 1_000_000 == max_ts, f


def test_producer_snapshots_at_every_roll_and_the_log_end(demo: Demo) -> None:
    """As a broker: `<offset>.snapshot` at each segment roll and at shutdown, listing each
    producer's last data batch and open transaction as of that offset (parsed by hand here)."""
    header, entry = struct.Struct(">hIi"), struct.Struct(">qhiqiqiq")
    for (topic, partition), truth in demo.result.partitions.items():
        pdir = demo.path / f"{topic}-{partition}"
        expected = [s.base_offset for s in truth.segments[1:]] + [truth.log_end_offset]
        assert sorted(int(p.stem) for p in pdir.glob("*.snapshot")) == expected
        for offset in expected:
            data = (pdir / f"{offset:020d}.snapshot").read_bytes()
            version, crc, count = header.unpack_from(data)
            assert version == 1 and crc == crc32c.crc32c(data[6:]) and len(data) == 10 + 46 * count
            entries = {e[0]: e for e in entry.iter_unpack(data[10:])}
            below = [b for b in truth.batches if b.last_offset < offset]
            assert set(entries) == {b.producer_id for b in below if b.producer_id >= 0}
            for pid, (_, epoch, last_seq, last_offset, _, _, _, txn_first) in entries.items():
                data_batches = [b for b in below if b.producer_id == pid and not b.control]
                last = data_batches[-1]
                assert (last_offset, epoch) == (last.last_offset, last.producer_epoch)
                assert last_seq == last.base_sequence + last.last_offset - last.base_offset
                markers = [b.base_offset for b in below if b.producer_id == pid and b.control]
                open_from = [b.base_offset for b in data_batches if b.transactional
                             and all(m < b.base_offset for m in markers)]
                assert txn_first == (open_from[0] if open_from else -1)
        open_at_end = [e for e in entry.iter_unpack((pdir / f"{truth.log_end_offset:020d}.snapshot").read_bytes()[10:])
                       if e[7] >= 0]
        assert [e[7] for e in open_at_end] == ([truth.open_txn_first_offset] if truth.open_txn_first_offset is not None
                                               else [])


# -- transactions ----------------------------------------------------------------------


def test_txnindex_holds_exactly_the_aborted_transactions(demo: Demo) -> None:
    """Restates the broker rule: an entry in the marker's segment; last stable offset =
    first offset of the earliest other open transaction, else the marker's offset + 1."""
    outcomes = {0: 0, 1: 0}
    still_open = {}
    waited_on_another = 0
    for tp, segments in demo.logs.items():
        open_txns: dict[int, int] = {}
        found_all = []
        for seg in segments:
            expected = []
            for b in seg.batches:
                if b.transactional and not b.control:
                    open_txns.setdefault(b.producer_id, b.base_offset)
                elif b.control:
                    kind = b.records[0][5]
                    outcomes[kind] += 1
                    first = open_txns.pop(b.producer_id)
                    if kind == 0:
                        stable = min(open_txns.values(), default=b.last_offset + 1)
                        expected.append(AbortedTxn(b.producer_id, first, b.last_offset, stable))
                        waited_on_another += stable != b.last_offset + 1
            txnindex = seg.sibling("txnindex")
            found = parse_txn_index("txnindex", txnindex.read_bytes()) if txnindex.exists() else []
            assert found == expected, f"{txnindex}"
            assert txnindex.exists() == bool(expected)
            found_all += found
        assert found_all == demo.result.partitions[tp].aborted
        assert demo.result.partitions[tp].open_txn_first_offset == min(open_txns.values(), default=None)
        still_open.update({(tp, pid): first for pid, first in open_txns.items()})
    assert outcomes[0] > 0 and outcomes[1] > 0 and waited_on_another > 0
    assert [tp for tp, _ in still_open] == [("orders", 0)], "exactly one open transaction, in orders-0"


# -- checkpoints and partition metadata ------------------------------------------------


def test_checkpoints_are_what_a_broker_leaves(demo: Demo) -> None:
    ends = {tp: batches_of(segs)[-1].last_offset + 1 for tp, segs in demo.logs.items()}
    files = {
        name: checkpoint.parse(name, (demo.path / name).read_bytes()) for name in generator.ROOT_CHECKPOINTS
    }
    assert files == demo.result.checkpoints
    assert files["recovery-point-offset-checkpoint"] == ends
    assert files["replication-offset-checkpoint"] == ends
    assert files["log-start-offset-checkpoint"] == {}
    cleaner = files["cleaner-offset-checkpoint"]
    wanted = {(t["name"], p): f for t in demo.spec["topics"] for p, f in t["checkpoint"].items()}
    assert set(cleaner) == set(wanted) and {topic for topic, _ in cleaner} <= COMPACTED
    for tp, offset in cleaner.items():
        batches = batches_of(demo.logs[tp])
        holding = next(b for b in batches if b.last_offset >= int(wanted[tp] * ends[tp]))
        assert offset == holding.base_offset


def _compact_string(data: bytes, pos: int) -> tuple[str | None, int]:
    n, shift, length = 0, 0, 0
    while True:
        b = data[pos + n]
        length |= (b & 0x7F) << shift
        n, shift = n + 1, shift + 7
        if b < 0x80:
            break
    pos += n
    return (None, pos) if length == 0 else (data[pos : pos + length - 1].decode(), pos + length - 1)


def test_metadata_log_carries_the_topic_configs(demo: Demo) -> None:
    """A KRaft controller's records, decoded here by hand (kafka-python reads the batches):
    frame 1, TopicRecord (api key 2) and one ConfigRecord (api key 4, resource type 2 = topic)
    per configured key, so the log dir needs no hand-written configuration."""
    data = (demo.path / METADATA_DIR / "00000000000000000000.log").read_bytes()
    topics, configs = {}, {}
    for batch in iter(MemoryRecords(data).next_batch, None):
        for record in batch:
            value = record.value
            assert record.key is None and value[0] == 1 and value[2] == 0  # frame 1, version 0
            if value[1] == 2:
                name, pos = _compact_string(value, 3)
                topics[name] = base64.urlsafe_b64encode(value[pos : pos + 16]).rstrip(b"=").decode()
            else:
                assert value[1] == 4 and value[3] == 2
                topic, pos = _compact_string(value, 4)
                key, pos = _compact_string(value, pos)
                text, pos = _compact_string(value, pos)
                configs.setdefault(topic, {})[key] = text
    assert topics == demo.result.topic_ids
    assert configs == {t["name"]: {k: str(v) for k, v in t["config"].items()} for t in demo.spec["topics"]}


def test_partition_files(demo: Demo) -> None:
    ids = {}
    for topic, partition in demo.logs:
        pdir = demo.path / f"{topic}-{partition}"
        assert (pdir / "leader-epoch-checkpoint").read_bytes() == b"0\n1\n0 0\n"
        match = re.fullmatch(r"version: 0\ntopic_id: ([A-Za-z0-9_-]{22})\n", (pdir / "partition.metadata").read_text())
        assert match is not None
        assert ids.setdefault(topic, match.group(1)) == match.group(1)
    assert len(set(ids.values())) == len(ids)
    assert ids == demo.result.topic_ids
    assert demo.result.topic_configs == {t["name"]: t["config"] for t in demo.spec["topics"]}


def test_summary_names_the_totals(demo: Demo) -> None:
    text = demo.result.summary()
    assert "3 topics, 8 partitions" in text and "19,000 records" in text
    assert all(name in text for name in ("orders", "clicks", "users"))


def test_the_summary_is_the_same_without_the_records(demo: Demo, tmp_path: Path) -> None:
    """``kcompact gen`` keeps no per-record truth; its summary still counts each data record."""
    counted = sum(1 for p in demo.result.partitions.values() for r in p.records if r.control is None)
    assert f"{counted:,} records" in demo.result.summary()
    lean = generator.generate(str(tmp_path / "lean"), demo.spec, seed=demo.result.seed, keep_records=False)
    assert all(not p.records for p in lean.partitions.values())
    said = lean.summary().replace(str(tmp_path / "lean"), "OUT")
    assert said == demo.result.summary().replace(demo.result.out, "OUT")


# -- determinism, output dir, spec handling, CLI ---------------------------------------


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path: Path) -> None:
    spec = small_spec()
    for name, seed in (("a", 11), ("b", 11), ("c", 12)):
        generator.generate(str(tmp_path / name), spec, seed=seed)
    a, b, c = (file_hashes(tmp_path / n) for n in "abc")
    assert a == b
    logs = [k for k in a if k.endswith(".log")]
    assert all(a[k] != c.get(k) for k in logs)


def test_refuses_a_non_empty_out_dir(tmp_path: Path) -> None:
    (tmp_path / "stray").write_bytes(b"x")
    with pytest.raises(ValueError, match="not an empty directory"):
        generator.generate(str(tmp_path), small_spec(), seed=1)
    empty = tmp_path / "empty"
    empty.mkdir()
    generator.generate(str(empty), small_spec(), seed=1)
    assert (empty / "orders-0").is_dir()


def _set(path: tuple, value: object) -> Callable[[dict], None]:
    def apply(spec: dict) -> None:
        target = spec
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = value
    return apply


@pytest.mark.parametrize(
    ("change", "key"),
    [
        (_set(("topicz",), []), "topicz"),
        (_set(("topics", 0, "recrods"), 10), "recrods"),
        (_set(("topics", 0, "config", "segment.bites"), 10), "segment.bites"),
        (_set(("topics", 0, "config", "cleanup.policy"), "compress"), "cleanup.policy"),
        (_set(("topics", 0, "config", "segment.bytes"), 10), "segment.bytes"),
        (_set(("topics", 0, "records"), 0), "records"),
        (_set(("topics", 0, "partitions"), True), "partitions"),
        (_set(("topics", 0, "tombstone_fraction"), 1.5), "tombstone_fraction"),
        (_set(("topics", 0, "codecs"), {"brotli": 1}), "codecs"),
        (_set(("topics", 0, "key_distribution"), "zipf"), "key_distribution"),
        (_set(("topics", 0, "value_size"), [10, 5]), "value_size"),
        (_set(("topics", 0, "transactional_fraction"), 0.9), "transactional_fraction"),
        (_set(("topics", 0, "checkpoint"), {"9": 0.5}), "checkpoint"),
        (_set(("topics", 1, "checkpoint"), {"0": 0.5}), "checkpoint"),
        (_set(("topics", 1, "name"), "orders"), "topics"),
        (_set(("topics", 1, "name"), "bad/name"), "name"),
        (_set(("broker_state",), {"empty_checkpoints": ["meta.properties"]}), "broker_state.empty_checkpoints"),
        (_set(("broker_state",), {"quorum": True}), "broker_state.quorum"),
        (_set(("topics", 0, "broker_state"), {"orphan_indexes": [-1]}), "broker_state.orphan_indexes"),
        (_set(("topics", 0, "broker_state"), {"empty_files": ["00.log"]}), "broker_state.empty_files"),
    ],
)
def test_bad_spec_raises_naming_the_key(change: Callable[[dict], None], key: str) -> None:
    spec = copy.deepcopy(generator.DEMO_SPEC)
    change(spec)
    with pytest.raises(ValueError, match=re.escape(key)):
        generator.validate(spec)


def test_load_spec_reads_the_fixture_spec() -> None:
    spec = generator.load_spec(str(FIXTURE_SPEC))
    assert spec["seed"] == 99173
    assert [t["name"] for t in spec["topics"]] == ["accounts", "clicks"]
    assert spec["topics"][0]["checkpoint"] == {1: 0.25}
    assert spec["topics"][1]["timestamp_start_ms"] == spec["start_ms"]


def test_load_spec_rejects_bad_json(tmp_path: Path) -> None:
    bad = tmp_path / "spec.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        generator.load_spec(str(bad))


def test_override_applies_to_every_topic() -> None:
    spec = generator.load_spec(None)
    before = copy.deepcopy(spec)
    out = generator.override(spec, records=50, partitions=2, segment_bytes=4096, start_ms=1000)
    assert spec == before
    assert out["start_ms"] == 1000
    for topic in out["topics"]:
        assert (topic["records"], topic["partitions"], topic["timestamp_start_ms"]) == (50, 2, 1000)
        assert topic["config"]["segment.bytes"] == 4096
        assert all(p < 2 for p in topic["checkpoint"])
    assert generator.override(spec) == spec


def test_cli_gen_writes_a_log_dir(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "logs"
    argv = ["gen", "--out", str(out), "--seed", "3", "--records", "200", "--partitions", "1",
            "--segment-bytes", "16384", "--start-ms", "1700000000000"]
    assert main(argv) == 0
    assert "3 topics, 3 partitions" in capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == [METADATA_DIR, "clicks-0", "orders-0", "users-0"]
    first = read_segment(out / "orders-0" / "00000000000000000000.log")
    assert first.batches[0].records[0][1] == 1700000000000
    assert main(argv) == 2, "a second run into the same dir is refused"


def test_writes_to_s3_the_same_bytes(tmp_path: Path, s3_endpoint: str) -> None:
    """Everything goes through the storage seam: an s3:// target gets the local bytes."""
    from kcompact import storage
    storage.resolve("s3://gen")[0].call_s3("create_bucket", Bucket="gen")
    spec = generator.override(small_spec(), partitions=1)
    generator.generate("s3://gen/logs", spec, seed=5)
    generator.generate(str(tmp_path), spec, seed=5)
    for f in sorted(tmp_path.rglob("*")):
        if f.is_file():
            remote = "s3://gen/logs/" + str(f.relative_to(tmp_path))
            assert storage.read_bytes(remote) == f.read_bytes(), remote


# -- gen's help and spec format (issue 13 item 7) ------------------------------------------------------
ROOT = Path(__file__).resolve().parents[2]


def test_gen_help_points_only_at_what_a_clone_has(capsys):
    with pytest.raises(SystemExit):
        main(["gen", "--help"])
    text = capsys.readouterr().out
    assert "shared/" not in text and "fixtures/" not in text
    assert "--print-spec" in text and "docs/generator.md" in text


def test_print_spec_prints_the_built_in_spec(capsys):
    import json

    assert main(["gen", "--print-spec"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert generator.validate(printed) == generator.load_spec(None)


def test_docs_document_every_spec_key():
    section = (ROOT / "docs" / "generator.md").read_text()
    keys = [*generator._SPEC_KEYS, "name", *generator._TOPIC_FIELDS, *generator._CONFIG_CHECKS]
    assert [key for key in keys if f"`{key}`" not in section] == []


# -- issue 33, item 6: gen says what it will write, and how far it is -------------------------------------
def test_gen_says_its_size_up_front_and_its_progress(tmp_path, monkeypatch):
    """Was: silent until the end (17 minutes for 2 M records x 8 partitions x 3 topics). The size
    said up front is within a quarter of the segments' bytes when nothing is compressed."""
    from kcompact.tools.generator import progress

    monkeypatch.setattr(progress, "EVERY_S", 3600.0)  # no tick: the first line alone
    spec = generator.load_spec(None)
    for topic in spec["topics"]:
        topic["codecs"] = {"none": 1}
    lines: list[str] = []
    generator.generate(str(tmp_path / "logs"), spec, seed=1, say=lines.append)
    partitions = sum(t["partitions"] for t in spec["topics"])
    first = re.fullmatch(rf"gen: 3 topics, {partitions} partitions, about ([0-9.]+) MB of records \(before "
                         rf"compression\) into {tmp_path}/logs", lines[0])
    assert first, lines[0]
    written = sum(p.stat().st_size for p in (tmp_path / "logs").rglob("*.log")) / 2**20
    assert 0.75 * written <= float(first.group(1)) <= 1.25 * written, (lines[0], written)
    assert lines[1:] == [], "nothing per partition"


def test_gen_says_a_line_every_interval_while_one_partition_is_made(tmp_path, monkeypatch):
    """Was: a line at most as a partition ended, so one long partition said nothing for minutes.
    Now a line per interval, from records made inside the partition, with an ETA."""
    from kcompact.tools.generator import progress

    monkeypatch.setattr(progress, "EVERY_S", 0.05)
    monkeypatch.setattr(progress, "FLUSH_RECORDS", 100)
    spec = generator.override(small_spec(), records=10_000, partitions=1)
    spec["topics"] = spec["topics"][:1]
    lines: list[str] = []
    generator.generate(str(tmp_path / "logs"), spec, seed=1, say=lines.append)
    ticks = [re.fullmatch(r"gen: ([\d,]+) of 10,000 records, [\d.]+ (?:B|KB|MB) written, ([01])/1 partitions "
                          r"done, \d+ s(, ETA \d+ s)?", line) for line in lines[1:]]
    assert ticks and all(ticks), lines
    assert any(int(m[1].replace(",", "")) > 0 and m[2] == "0" and m[3] for m in ticks), lines


def test_gen_refuses_an_out_whose_parent_is_missing(tmp_path, capsys):
    out = tmp_path / "a" / "b" / "c"
    assert main(["gen", "--out", str(out)]) == 2
    assert capsys.readouterr().err == (f"kcompact: {out}: directory {out.parent} does not exist; gen "
                                       f"creates only {out} itself\n")
    assert list(tmp_path.iterdir()) == []


def test_gen_stopped_part_way_leaves_nothing(tmp_path, monkeypatch):
    """A failure (or a signal) while a partition is written removes the sibling dir gen wrote into."""
    from kcompact.tools.generator import log_dir

    calls = []

    def fail_third(*args, **kwargs):
        calls.append(args)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    real = log_dir._write_partition
    monkeypatch.setattr(log_dir, "_write_partition", fail_third)
    with pytest.raises(KeyboardInterrupt):
        generator.generate(str(tmp_path / "logs"), generator.load_spec(None), seed=1)
    assert list(tmp_path.iterdir()) == []


# -- issue 40: broker states on request ------------------------------------------------------------------
STATES_SPEC = {
    "broker_state": {"empty_checkpoints": ["cleaner-offset-checkpoint"],
                     "missing_checkpoints": ["replication-offset-checkpoint"],
                     "quorum_state": True, "metadata_snapshot": True},
    "topics": [{"name": "orders", "records": 60, "keys": 10, "batch_records": [2, 4],
                "config": {"cleanup.policy": "compact", "segment.bytes": 1000, "index.interval.bytes": 200},
                "broker_state": {"missing_index": [0], "missing_timeindex": [1], "orphan_indexes": [900],
                                 "preallocated_indexes": True, "stale_segment": 0,
                                 "empty_files": ["leader-epoch-checkpoint"], "missing_files": ["partition.metadata"]}}],
}


def kp_read(data: bytes) -> list:
    """kafka-python's batches, each with its records."""
    records, out = MemoryRecords(data), []
    while (batch := records.next_batch()) is not None:
        out.append((batch, list(batch)))
    return out


def test_broker_states_are_left_as_asked(tmp_path: Path) -> None:
    """Each state by Kafka's rules, read back with kafka-python and struct: an empty and a missing
    root checkpoint; a closed segment without .index, another without .timeindex; index files at
    900 without a .log; the active segment's indexes preallocated to 10 MiB in whole entries, the
    entries first; a stale copy of segment 0's second half whose offsets go back; quorum-state's
    JSON; a snapshot holding the metadata log's records between a SnapshotHeader and a Footer."""
    out = tmp_path / "logs"
    result = generator.generate(str(out), STATES_SPEC, seed=2)
    assert (out / "cleaner-offset-checkpoint").read_bytes() == b""
    assert not (out / "replication-offset-checkpoint").exists()
    part, truth = out / "orders-0", result.partitions["orders", 0]
    bases = [s.base_offset for s in truth.segments]
    assert len(bases) >= 3
    assert not (part / f"{bases[0]:020d}.index").exists() and (part / f"{bases[0]:020d}.timeindex").exists()
    assert not (part / f"{bases[1]:020d}.timeindex").exists() and (part / f"{bases[1]:020d}.index").exists()
    assert [(part / f"{900:020d}.{k}").stat().st_size for k in ("index", "timeindex")] == [0, 0]
    assert not (part / f"{900:020d}.log").exists()
    for kind, entry in (("index", 8), ("timeindex", 12)):
        data = (part / f"{bases[-1]:020d}.{kind}").read_bytes()
        assert len(data) == (10 << 20) // entry * entry, kind
        used = len(data.rstrip(b"\0")) + (-len(data.rstrip(b"\0")) % entry)
        assert used and not any(data[used:]), kind
    assert (part / "leader-epoch-checkpoint").read_bytes() == b"" and not (part / "partition.metadata").exists()
    stale = [p for p in part.glob("*.log") if int(p.stem) not in bases]
    assert len(stale) == 1
    first = int(stale[0].stem)
    assert bases[0] < first < bases[1]
    read = [(r.offset, r.key) for _, records in kp_read(stale[0].read_bytes()) for r in records]
    assert read == [(r.offset, r.key) for r in truth.records if first <= r.offset < bases[1]]
    index = (part / f"{first:020d}.index").read_bytes()
    assert all(0 < rel <= bases[1] - 1 - first for rel, _ in struct.iter_unpack(">ii", index))
    mdir = out / METADATA_DIR
    assert json.loads((mdir / "quorum-state").read_bytes())["leaderId"] == 1
    log = [r.value for _, records in kp_read((mdir / f"{0:020d}.log").read_bytes()) for r in records]
    (snapshot,) = mdir.glob("*.checkpoint")
    assert snapshot.name == f"{len(log):020d}-{0:010d}.checkpoint"
    batches = kp_read(snapshot.read_bytes())
    controls = [(b.is_control_batch, struct.unpack(">hh", rs[0].key)[1]) for b, rs in (batches[0], batches[-1])]
    assert controls == [(True, 3), (True, 4)]
    assert [r.value for _, records in batches[1:-1] for r in records] == log
    assert [r.offset for _, records in batches for r in records] == list(range(len(log) + 2))
