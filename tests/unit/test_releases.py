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
