"""KRaft metadata: record values decoded by readers.metadata, logs and snapshots replayed by
logdir.kraft, and the result fed to conf.resolve.build.

The values are written by a small encoder here, field by field after Kafka's schemas
(metadata/src/main/resources/common/metadata/{TopicRecord,ConfigRecord,RemoveTopicRecord}.json:
apiKeys 2, 4, 9, flexible from version 0), framed as AbstractApiMessageSerde frames them and
wrapped in v2 batches built by kafka-python. Expected values are written out by hand.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kcompact.conf.resolve import build
from kcompact.errors import FormatError
from kcompact.logdir.kraft import metadata_sources, read_metadata
from kcompact.readers.metadata import (
    ConfigRecord,
    FeatureLevelRecord,
    MetadataError,
    OtherRecord,
    RemoveTopicRecord,
    TopicRecord,
    decode,
)
from kcompact.readers.records import Record
from tests.support import ATTR_CONTROL, TS0, kp_build

METADATA_DIR = "__cluster_metadata-0"
TOPIC, BROKER = 2, 4
ORDERS_ID = bytes(range(16))
ORDERS_ID_TEXT = "AAECAwQFBgcICQoLDA0ODw"  # base64url of 00 01 .. 0f, padding dropped
LOGS_ID = b"\xff" * 16
LOGS_ID_TEXT = "_____________________w"  # 21 x '_' (63) then 0xff's last 2 bits + 4 zero bits


# -- a test-only encoder of metadata record values ------------------------------------------
def uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def compact(text: str | None) -> bytes:
    if text is None:
        return uvarint(0)
    raw = text.encode()
    return uvarint(len(raw) + 1) + raw


def classic(text: str | None) -> bytes:
    if text is None:
        return struct.pack(">h", -1)
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def frame(api_key: int, body: bytes, version: int = 0) -> bytes:
    return uvarint(1) + uvarint(api_key) + uvarint(version) + body


NO_TAGS = uvarint(0)


def topic_value(name: str, topic_id: bytes) -> bytes:
    return frame(2, compact(name) + topic_id + NO_TAGS)


def config_value(kind: int, resource: str, key: str, value: str | None) -> bytes:
    return frame(4, bytes([kind]) + compact(resource) + compact(key) + compact(value) + NO_TAGS)


def classic_config_value(kind: int, resource: str, key: str, value: str | None) -> bytes:
    """ConfigRecord as a schema copy without flexibleVersions would encode it."""
    return frame(4, bytes([kind]) + classic(resource) + classic(key) + classic(value))


def remove_topic_value(topic_id: bytes) -> bytes:
    return frame(9, topic_id + NO_TAGS)


def feature_level_value(level: int = 14, name: str = "metadata.version") -> bytes:
    """FeatureLevelRecord (apiKey 12): Name compact string, FeatureLevel int16, tags."""
    return frame(12, compact(name) + struct.pack(">h", level) + NO_TAGS)


# -- batches and files ---------------------------------------------------------------------
def batch(base: int, *values: bytes) -> bytes:
    records = [Record(base + i, TS0 + base + i, None, v) for i, v in enumerate(values)]
    return kp_build(records, base_offset=base)


def control_batch(base: int, kind: int, value: bytes) -> bytes:
    """A KRaft control batch: key = int16 version 0 + int16 type (2 LeaderChange, 3 SnapshotHeader)."""
    key = struct.pack(">hh", 0, kind)
    return kp_build([Record(base, TS0, key, value)], base_offset=base, extra_attributes=ATTR_CONTROL)


def leader_change(base: int) -> bytes:
    """LeaderChangeMessage v0: Version int16, LeaderId int32, Voters [VoterId, tags],
    GrantingVoters [VoterId, tags], tags. Never decoded as a metadata record."""
    voters = uvarint(2) + struct.pack(">i", 1) + NO_TAGS
    return control_batch(base, 2, struct.pack(">hi", 0, 1) + voters + voters + NO_TAGS)


def snapshot_header() -> bytes:
    """SnapshotHeaderRecord v0: Version int16, LastContainedLogTimestamp int64, tags."""
    return control_batch(0, 3, struct.pack(">hq", 0, TS0) + NO_TAGS)


def write_log(logdir: Path, segments: dict[int, list[bytes]], snapshots: dict[str, list[bytes]] | None = None) -> Path:
    mdir = logdir / METADATA_DIR
    mdir.mkdir(parents=True, exist_ok=True)
    for base, batches in segments.items():
        (mdir / f"{base:020d}.log").write_bytes(b"".join(batches))
    for name, batches in (snapshots or {}).items():
        (mdir / name).write_bytes(b"".join(batches))
    return mdir


def history() -> list[bytes]:
    """Offsets 0..13: topics created, configured, changed, deleted, removed."""
    return [
        leader_change(0),
        batch(1, feature_level_value(), frame(200, b"\x01\x02\x03")),  # unknown apiKey 200
        batch(3, topic_value("orders", ORDERS_ID),
              config_value(TOPIC, "orders", "cleanup.policy", "compact"),
              config_value(TOPIC, "orders", "min.cleanable.dirty.ratio", "0.2")),
        batch(6, config_value(BROKER, "", "log.cleaner.delete.retention.ms", "1000"),
              config_value(BROKER, "1", "log.retention.ms", "5")),
        batch(8, topic_value("logs", LOGS_ID), config_value(TOPIC, "logs", "retention.ms", "3600000")),
        batch(10, config_value(TOPIC, "orders", "min.cleanable.dirty.ratio", "0.7")),
        batch(11, config_value(TOPIC, "orders", "cleanup.policy", None)),
        batch(12, remove_topic_value(LOGS_ID)),
        batch(13, classic_config_value(TOPIC, "orders", "segment.bytes", "1048576")),
    ]


# -- the decoder ------------------------------------------------------------------------------
def test_decode_each_record_type():
    assert decode(topic_value("orders", ORDERS_ID)) == TopicRecord("orders", ORDERS_ID_TEXT)
    assert decode(remove_topic_value(LOGS_ID)) == RemoveTopicRecord(LOGS_ID_TEXT)
    assert decode(config_value(TOPIC, "t", "retention.ms", "10")) == ConfigRecord(2, "t", "retention.ms", "10")
    assert decode(config_value(BROKER, "", "k", None)) == ConfigRecord(4, "", "k", None)
    assert decode(feature_level_value()) == FeatureLevelRecord("metadata.version", 14)
    assert decode(frame(200, b"\x01")) == OtherRecord(200, 0)
    assert decode(frame(3, b"", version=2)) == OtherRecord(3, 2)


def test_tagged_fields_are_skipped():
    tags = uvarint(2) + uvarint(0) + uvarint(3) + b"abc" + uvarint(7) + uvarint(0)
    value = frame(2, compact("t") + ORDERS_ID + tags)
    assert decode(value) == TopicRecord("t", ORDERS_ID_TEXT)


def test_non_flexible_fallback():
    assert decode(classic_config_value(TOPIC, "t", "segment.bytes", "1024")) == ConfigRecord(
        2, "t", "segment.bytes", "1024"
    )
    assert decode(classic_config_value(TOPIC, "t", "retention.ms", None)) == ConfigRecord(2, "t", "retention.ms", None)
    assert decode(frame(9, LOGS_ID)) == RemoveTopicRecord(LOGS_ID_TEXT)


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=40), st.text(max_size=200), st.none() | st.text(max_size=300))
def test_both_encodings_agree(resource, key, value):
    expected = ConfigRecord(TOPIC, resource, key, value)
    assert decode(config_value(TOPIC, resource, key, value)) == expected
    assert decode(classic_config_value(TOPIC, resource, key, value)) == expected


def test_frame_version_zero_names_the_preview_format():
    with pytest.raises(MetadataError, match=r"2\.8") as info:
        decode(uvarint(0) + uvarint(2) + uvarint(0) + compact("t") + ORDERS_ID + NO_TAGS)
    assert info.value.position == 0
    with pytest.raises(MetadataError, match="frame version 2"):
        decode(uvarint(2) + uvarint(2) + uvarint(0))


def test_value_fitting_neither_encoding():
    # 3 header bytes, int8, "t" (2 bytes), "k" (2 bytes), value "v" (2 bytes), tags, then a stray byte at 11
    with pytest.raises(MetadataError, match="fits neither encoding") as info:
        decode(config_value(TOPIC, "t", "k", "v") + b"\x00")
    assert info.value.position == 11
    with pytest.raises(MetadataError, match="TopicId needs 16 bytes"):
        decode(frame(2, compact("t") + b"\x00" * 5))


# -- replaying a log dir ------------------------------------------------------------------------
def test_log_replayed(tmp_path):
    mdir = write_log(tmp_path, {0: history()})
    got = read_metadata(str(mdir))
    assert got.topics == {"orders": {"min.cleanable.dirty.ratio": "0.7", "segment.bytes": "1048576"}}
    assert got.topic_ids == {"orders": ORDERS_ID_TEXT}
    assert got.broker_defaults == {"log.cleaner.delete.retention.ms": "1000"}
    assert got.per_broker == {"1": {"log.retention.ms": "5"}}
    assert got.source == f"kraft-metadata {mdir}"
    assert got.metadata_version == 14
    assert got.as_source(str(tmp_path), str(mdir)) == (got.broker_defaults, got.topics, f"kraft-metadata {mdir}",
                                                        (str(tmp_path), 14, str(mdir)))


def test_broker_default_deleted(tmp_path):
    mdir = write_log(
        tmp_path,
        {
            0: [
                batch(
                    0,
                    config_value(BROKER, "", "log.retention.ms", "7"),
                    config_value(BROKER, "", "log.segment.bytes", "99"),
                ),
                batch(
                    2,
                    config_value(BROKER, "2", "log.segment.bytes", "5"),
                    config_value(BROKER, "2", "message.max.bytes", "6"),
                ),
                batch(
                    4,
                    config_value(BROKER, "", "log.retention.ms", None),
                    config_value(BROKER, "2", "log.segment.bytes", None),
                ),
            ]
        },
    )
    got = read_metadata(str(mdir))
    assert got.broker_defaults == {"log.segment.bytes": "99"}
    assert got.per_broker == {"2": {"message.max.bytes": "6"}}


def snapshot(records_by_batch: list[list[bytes]]) -> list[bytes]:
    """A snapshot file as Kafka writes one: SnapshotHeader control batch, then data from offset 1."""
    out, offset = [snapshot_header()], 1
    for values in records_by_batch:
        out.append(batch(offset, *values))
        offset += len(values)
    return out


def test_snapshot_then_log_from_its_end_offset(tmp_path):
    log = history()
    # Segments 0 and 8 (the first is deleted by a broker once a snapshot covers it; kept here).
    # Offsets 10 and 11 share one batch below, straddling the snapshot's end offset 11.
    tail = [batch(10, config_value(TOPIC, "orders", "min.cleanable.dirty.ratio", "0.7"),
                  config_value(TOPIC, "orders", "retention.bytes", "123")), *log[7:]]
    latest = snapshot([
        [topic_value("orders", ORDERS_ID), config_value(TOPIC, "orders", "min.cleanable.dirty.ratio", "0.3")],
        [topic_value("logs", LOGS_ID), config_value(TOPIC, "logs", "retention.ms", "60000")],
        [config_value(BROKER, "", "log.cleaner.min.compaction.lag.ms", "5000")],
    ])
    older = snapshot([[config_value(TOPIC, "stale", "retention.ms", "1")]])
    mdir = write_log(tmp_path, {0: log[:4], 8: [log[4], tail[0]] + tail[1:]}, {
        "00000000000000000011-0000000002.checkpoint": latest,
        "00000000000000000006-0000000001.checkpoint": older,
    })
    got = read_metadata(str(mdir))
    # offset 10 (ratio 0.7) lies below the end offset: the snapshot's 0.3 stands; 11 applies.
    assert got.topics == {"orders": {"min.cleanable.dirty.ratio": "0.3", "retention.bytes": "123",
                                     "segment.bytes": "1048576"}}
    assert got.topic_ids == {"orders": ORDERS_ID_TEXT}
    assert got.broker_defaults == {"log.cleaner.min.compaction.lag.ms": "5000"}


def test_snapshot_alone(tmp_path):
    mdir = write_log(tmp_path, {}, {"00000000000000000042-0000000003.checkpoint": snapshot([
        [topic_value("orders", ORDERS_ID), config_value(TOPIC, "orders", "cleanup.policy", "compact")]])})
    got = read_metadata(str(mdir))
    assert got.topics == {"orders": {"cleanup.policy": "compact"}}


def test_no_metadata(tmp_path):
    empty = tmp_path / "logs" / METADATA_DIR
    empty.mkdir(parents=True)
    (empty / "quorum-state").write_text("{}")
    assert read_metadata(str(empty)) is None
    plain = tmp_path / "plain"
    (plain / "orders-0").mkdir(parents=True)
    assert [s[:3] for s in metadata_sources([str(plain), str(tmp_path / "logs")])] == [
        ({}, {}, str(plain)), ({}, {}, str(tmp_path / "logs"))]  # nothing recorded: no configs, no release


def test_corrupt_record_names_file_and_batch(tmp_path):
    first = batch(0, topic_value("orders", ORDERS_ID))
    # header 3 bytes, int8 at 3, "orders" at 4..10, the length of "retention.ms" at 11: its bytes are cut
    bad = batch(1, config_value(TOPIC, "orders", "retention.ms", "5")[:-4])
    mdir = write_log(tmp_path, {0: [first, bad]})
    with pytest.raises(FormatError, match="metadata record at offset 1: byte 12 of its value") as info:
        read_metadata(str(mdir))
    assert info.value.path == str(mdir / "00000000000000000000.log")
    assert info.value.position == len(first)


def test_preview_frame_in_log(tmp_path):
    mdir = write_log(tmp_path, {0: [batch(0, b"\x00\x02\x00")]})
    with pytest.raises(FormatError, match=r"2\.8") as info:
        read_metadata(str(mdir))
    assert info.value.position == 0


# -- into the configuration ---------------------------------------------------------------------
def test_metadata_feeds_resolve(tmp_path):
    logdir = tmp_path / "logs"
    (logdir / "orders-0").mkdir(parents=True)
    mdir = write_log(logdir, {0: history()})
    sources = metadata_sources([str(logdir)])
    source = f"kraft-metadata {mdir}"
    assert [s[2] for s in sources] == [source]
    assert sources[0][3] == (str(logdir), 14, str(mdir))

    orders = build(metadata=sources).for_topic("orders")
    assert orders["min.cleanable.dirty.ratio"] == 0.7
    assert orders.sources["min.cleanable.dirty.ratio"] == f"{source} topic[orders]"
    assert orders["segment.bytes"] == 1_048_576
    assert orders["delete.retention.ms"] == 1000
    assert orders.sources["delete.retention.ms"] == f"{source} (cluster default)"
    assert (orders["cleanup.policy"], orders.sources["cleanup.policy"]) == (("delete",), "default")
    assert (orders["retention.ms"], orders.sources["retention.ms"]) == (604_800_000, "default")  # per-broker only
    logs = build(metadata=sources).for_topic("logs")
    assert (logs["retention.ms"], logs.sources["retention.ms"]) == (604_800_000, "default")  # removed topic

    explicit = build(metadata=sources, topic_args=["orders:min.cleanable.dirty.ratio=0.9"]).for_topic("orders")
    assert explicit["min.cleanable.dirty.ratio"] == 0.9
    assert explicit.sources["min.cleanable.dirty.ratio"] == "--topic-config topic[orders]"
    assert explicit["segment.bytes"] == 1_048_576


# -- the release the metadata names ---------------------------------------------------------------
# MetadataVersion's feature levels (server-common MetadataVersion.java, 4.4 branch at 87943b2ff8)
# and the release line each first shipped in
LEVELS = [(21, "3.9.2", "3.9-IV0"), (22, "4.0.1", "4.0-IV0"), (25, "4.0.1", "4.0-IV3"), (26, "4.1", "4.1-IV0"),
          (27, "4.1", "4.1-IV1"), (29, "4.2", "4.2-IV1"), (30, "4.3", "4.3-IV0"), (33, "4.4", "4.4-IV2")]


@pytest.mark.parametrize(("level", "release", "name"), LEVELS)
def test_the_finalized_metadata_version_names_the_release_line(tmp_path, level, release, name):
    logdir = tmp_path / "logs"
    mdir = write_log(logdir, {0: [batch(0, feature_level_value(7)), batch(1, feature_level_value(1, "kraft.version")),
                                  batch(2, feature_level_value(level))]})  # upgraded from 3.3-IV3
    config = build(metadata=metadata_sources([str(logdir)]))
    choice = config.release_for(str(logdir))
    assert (choice.release.name, choice.source) == (release, "detected")
    assert f"metadata.version {name} (level {level}) in {mdir}" in choice.detail
    assert "lower bound" in choice.detail


@pytest.mark.parametrize(("records", "why"), [
    ([], "no finalized metadata.version in"),
    ([feature_level_value(20)], r"metadata.version 3.8-IV0 \(level 20\) in .* names a line before 3.9"),
    ([feature_level_value(34)], "metadata.version level 34 in .* is newer than any release known here"),
    ([feature_level_value(26), feature_level_value(0)], "no finalized metadata.version in"),  # level 0 removes it
])
def test_no_release_detected_takes_the_default_and_says_why(tmp_path, records, why):
    logdir = tmp_path / "logs"
    write_log(logdir, {0: [batch(0, topic_value("orders", ORDERS_ID), *records)]})
    choice = build(metadata=metadata_sources([str(logdir)])).release_for(str(logdir))
    assert (choice.release.name, choice.source) == ("4.3", "default")
    assert re.search(why, choice.detail) and "the newest release, 4.3, taken" in choice.detail


def test_each_log_dir_has_its_own_release(tmp_path):
    old, new, plain = tmp_path / "old", tmp_path / "new", tmp_path / "plain"
    write_log(old, {0: [batch(0, feature_level_value(21))]})
    write_log(new, {0: [batch(0, feature_level_value(27))]})
    (plain / "orders-0").mkdir(parents=True)
    config = build(metadata=metadata_sources([str(old), str(new) + "/", str(plain)]))
    assert [config.release_for(str(d)).release.name for d in (old, new, plain)] == ["3.9.2", "4.1", "4.3"]
    assert config.release_for(str(plain)).detail.startswith(f"{plain} holds no KRaft metadata (no {METADATA_DIR}: a "
                                                            "ZooKeeper-mode log dir")
    assert config.release_for(str(plain)).detail.endswith("(--kafka-version or kafka.version names another)")
