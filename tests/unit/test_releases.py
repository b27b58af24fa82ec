"""The release table (conf/releases.py) against the facts read in Kafka's sources per release
(each release's LogSegment.append, checkBatchRetention, MemoryRecords.filterTo, LogConfig)."""

import pytest

from kcompact.conf import releases
from kcompact.conf.releases import MIB, resolve
from kcompact.errors import UnknownRelease

# (release, per-batch index entries, last emptied batch kept at, v0/v1 converted, topic floor, broker floor)
KAFKA = [
    ("3.9.0", False, None, False, 14, 14),
    ("3.9.1", True, None, False, 14, 14),
    ("3.9.2", True, "first_uncleanable", False, 14, 14),
    ("4.0.0", False, "first_uncleanable", True, 14, MIB),
    ("4.0.1", True, "first_uncleanable", True, 14, MIB),
    ("4.1.0", True, "first_uncleanable", True, MIB, MIB),
    ("4.2.1", True, "first_uncleanable", True, MIB, MIB),
    ("4.3.1", True, "first_uncleanable", True, MIB, MIB),
    ("4.4", True, "high_watermark", True, MIB, MIB),
]


@pytest.mark.parametrize(("version", "per_batch", "keep_last", "to_v2", "topic_floor", "broker_floor"), KAFKA)
def test_each_release_has_its_rules(version, per_batch, keep_last, to_v2, topic_floor, broker_floor):
    r = resolve(version)
    assert (r.index_per_batch, r.keep_last_empty, r.legacy_to_v2, r.message_format_removed) == \
        (per_batch, keep_last, to_v2, to_v2)
    assert (r.topic_segment_bytes_floor, r.broker_segment_bytes_floor) == (topic_floor, broker_floor)
    assert r.internal_segment_bytes == (topic_floor == MIB)


def test_patch_releases_alias_their_line_from_4_1_only():
    assert resolve("4.1.2") is resolve("4.1") is resolve("4.1.0")
    assert len({resolve(v).name for v in ("3.9.0", "3.9.1", "3.9.2", "4.0.0", "4.0.1")}) == 5
    assert resolve("4.0.2") is resolve("4.0.1")
    assert resolve(" 4.3.1 ").name == "4.3"


@pytest.mark.parametrize("version", ["3.8.1", "4.0", "3.9", "5.0", "", "4.1.x"])
def test_unknown_versions_are_refused_naming_the_known_ones(version):
    with pytest.raises(UnknownRelease, match=r"not one kcompact reproduces \(known: 3\.9\.0, .*4\.4"):
        resolve(version)


def test_default_is_the_newest_released_line():
    assert releases.DEFAULT.name == "4.3" and releases.DEFAULT.released
    assert not resolve("4.4").released
    assert releases.NEWEST_OF_LINE["3.9"].name == "3.9.2" and releases.NEWEST_OF_LINE["4.0"].name == "4.0.1"


# Every "Bump version to" commit of confluentinc/kafka's 3.9 to 4.3 branches (4.4 has none yet), and
# the lz4-java each ships (gradle/dependencies.gradle there)
RELEASED = {"3.9.0": "1.8.0", "3.9.1": "1.8.0", "3.9.2": "1.10.1", "4.0.0": "1.8.0", "4.0.1": "1.8.0",
            "4.0.2": "1.10.1", "4.1.0": "1.8.0", "4.1.1": "1.8.0", "4.1.2": "1.10.1", "4.2.0": "1.10.1",
            "4.2.1": "1.10.1", "4.3.0": "1.10.2", "4.3.1": "1.10.2"}


def test_every_released_version_is_accepted_and_says_what_it_changes():
    assert sorted(releases.PATCHES) == sorted(RELEASED)
    for version, (row, _changes) in releases.PATCHES.items():
        assert resolve(version).name == row
    moved = {v for v, lz4 in RELEASED.items() if lz4 == "1.10.1" and RELEASED.get(_previous(v)) == "1.8.0"}
    assert moved == {"3.9.2", "4.0.2", "4.1.2"}
    assert all("KAFKA-19951" in releases.PATCHES[v][1] for v in moved)


def _previous(version: str) -> str:
    major, minor, patch = map(int, version.split("."))
    return f"{major}.{minor}.{patch - 1}"


def test_a_patch_named_is_said_with_the_row_it_cleans_as():
    from kcompact.conf.resolve import build

    said = build(kafka_version="4.0.2", log_dirs=["/x"]).release_for("/x").describe()
    assert said.startswith("Kafka 4.0.2, cleaned as 4.0.1 (4.0.2: lz4-java moved to the at.yawk.lz4 fork")
    assert said.endswith("(option: --kafka-version 4.0.2)")
    assert build(kafka_version="4.0.1", log_dirs=["/x"]).release_for("/x").describe() == \
        "Kafka 4.0.1 (option: --kafka-version 4.0.1)"
