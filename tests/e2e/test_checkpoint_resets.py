"""Kafka's LogCleanerManager.grabFilthiestCompactedLog resets a cleaner-offset-checkpoint entry that
lies below the log start or past the log end to the log start, and writes it (forceUpdateCheckpoint)
for every compacted partition it considers, BEFORE it drops the logs with nothing to clean; a
missing entry is not written, and partitions being cleaned, paused or aborted, or marked
uncleanable, are not considered. Our jobs (compact, run, on local disk and s3://) must leave the
same checkpoint file. Expected files are written out by hand from those rules.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kcompact.jobs.cli import main
from kcompact.readers.records import Record
from tests.support import checkpoint_text, kp_build, write_partition

NOW = 1_720_300_000_000
TS = NOW - 3_600_000  # every record: an hour old
LAG = "c:cleanup.policy=compact,min.compaction.lag.ms=86400000"  # a day: nothing is cleanable


def segment(first: int, n: int) -> list[bytes]:
    return [kp_build([Record(first + i, TS, b"k%d" % (i % 3), b"v") for i in range(n)], base_offset=first)]


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """c-0 .. c-3: two closed segments [0, 10), [10, 20) and an active one at 20 (log end 25).
    Entries: c-0 past the log end, c-1 below its log start (10, by log-start-offset-checkpoint),
    c-2 in range, c-3 missing; c-4 past the end but paused; d-0 (a delete topic) past the end."""
    root = tmp_path_factory.mktemp("resets") / "logs"
    for name in ("c-0", "c-1", "c-2", "c-3", "c-4", "d-0"):
        write_partition(root / name, [(0, segment(0, 10)), (10, segment(10, 10)), (20, segment(20, 5))])
    (root / "cleaner-offset-checkpoint").write_bytes(checkpoint_text(
        [("c", 0, 1_000_000_000), ("c", 1, 4), ("c", 2, 10), ("c", 4, 4_611_686_018_427_387_904), ("d", 0, 99)]))
    (root / "log-start-offset-checkpoint").write_bytes(checkpoint_text([("c", 1, 10)]))
    assert main(["pause", str(root), "c-4"]) == 0
    return root


EXPECTED = checkpoint_text([("c", 0, 0), ("c", 1, 10), ("c", 2, 10), ("c", 4, 4_611_686_018_427_387_904), ("d", 0, 99)])


def fresh(source: Path, tmp_path: Path) -> Path:
    root = tmp_path / "logs"
    shutil.copytree(source, root)
    return root


@pytest.mark.parametrize("command", ["compact", "run"])
def test_entries_outside_the_log_are_reset_though_nothing_is_cleaned(spark, source, tmp_path, command):
    root = fresh(source, tmp_path)
    report = tmp_path / "report.json"
    assert main([command, str(root), "--now", str(NOW), "--topic-config", LAG, "--report", str(report)]) == 0
    assert (root / "cleaner-offset-checkpoint").read_bytes() == EXPECTED
    doc = json.loads(report.read_text())
    resets = (doc["compaction"] if command == "run" else doc)["checkpoint_resets"]
    # run: retention first deleted c-1's segment 0 and raised its entry to the new log start 10
    expected = [("c", 0, 1_000_000_000, 0)] + ([("c", 1, 4, 10)] if command == "compact" else [])
    assert [(r["topic"], r["partition"], r["from"], r["offset"]) for r in resets] == expected
    assert "checkpoint 1000000000 above log end 25" in resets[0]["why"]


def test_a_dry_run_writes_no_reset(spark, source, tmp_path):
    root = fresh(source, tmp_path)
    before = (root / "cleaner-offset-checkpoint").read_bytes()
    assert main(["compact", str(root), "--now", str(NOW), "--topic-config", LAG, "--dry-run"]) == 0
    assert (root / "cleaner-offset-checkpoint").read_bytes() == before


def test_a_cleaned_partition_ends_at_its_new_checkpoint(spark, source, tmp_path):
    """Cleaned, c-0's entry is the end of the cleaned range, not the reset (the commit comes after)."""
    root = fresh(source, tmp_path)
    assert main(["compact", str(root), "--now", str(NOW), "--topic-config", "c:cleanup.policy=compact"]) == 0
    entries = (root / "cleaner-offset-checkpoint").read_text().splitlines()[2:]
    assert "c 0 20" in entries and "c 4 4611686018427387904" in entries and "d 0 99" in entries


def test_object_store(spark_s3, source, tmp_path):
    import s3fs

    fs = s3fs.S3FileSystem(use_listings_cache=False)
    fs.mkdir("resets")
    root = fresh(source, tmp_path)
    fs.put(f"{root}/", "resets/logs/", recursive=True)
    assert main(["compact", "s3://resets/logs", "--now", str(NOW), "--topic-config", LAG]) == 0
    assert fs.cat("resets/logs/cleaner-offset-checkpoint") == EXPECTED
