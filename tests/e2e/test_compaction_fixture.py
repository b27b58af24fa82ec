"""Acceptance: ``kcompact compact`` run twice on Kafka's own log dir gives what Kafka's cleaner gave.

The fixture's README states the two rounds (settings, ``now``); Kafka's result after each is
listed record by record and batch by batch, with the cleaner checkpoint. Our job (planner,
Spark pipeline, rewrite, swap, checkpoint) must reproduce every line, every field: offsets,
timestamps, keys, values, headers, kept empty batches, codecs, producer fields, delete horizons.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import stat
from pathlib import Path

import pytest

from kcompact.jobs.cli import main
from kcompact.tools.verify import verify_log_dir
from tests.support import (
    FIXTURE_DIR,
    FIXTURE_INPUT,
    JOB_PATHS,
    assert_same_lines,
    batch_lines,
    log_segments,
    pages_in_cache,
    record_lines,
    use_job_path,
)

ACCOUNTS = (
    "accounts:cleanup.policy=compact,segment.bytes=131072,delete.retention.ms=600000,min.cleanable.dirty.ratio=0.5"
)
CLICKS = "clicks:cleanup.policy=delete,segment.bytes=65536"
KAFKA_VERSION = "3.9.2"  # the fixture's rounds follow 3.9's cleaner (README), which takes these segment.bytes
ROUNDS = {
    1: ["--now", "1720000420000", "--topic-config", ACCOUNTS + ",min.compaction.lag.ms=260000"],
    2: ["--now", "1720087421000", "--topic-config", ACCOUNTS + ",min.compaction.lag.ms=0"],
}


def _writable_copy(dest: Path) -> Path:
    shutil.copytree(FIXTURE_INPUT, dest)  # copy2: modification times come along
    for path in [dest, *dest.rglob("*")]:
        path.chmod(path.stat().st_mode | stat.S_IWUSR)
    return dest


# the "shared" path takes more than 20 s to set up (make test-fast leaves it out)
@pytest.fixture(scope="module", params=[*(pytest.param(path, marks=pytest.mark.slow) if path == "shared" else path
                                          for path in JOB_PATHS), "page cache"])
def rounds(request, spark, tmp_path_factory) -> dict:
    """Both rounds, by each path of the job (``tests.support.use_job_path``), and once with the
    .log files written through the page cache rather than past it."""
    use_job_path(request, spark)
    work = _writable_copy(tmp_path_factory.mktemp("fixture") / "logs")
    mtimes = {p.name: p.stat().st_mtime_ns // 1_000_000 for p in (work / "accounts-0").glob("*.log")}
    out = {"work": work, "input_mtimes": mtimes, "path": request.param}
    for n, args in ROUNDS.items():
        report = work.parent / f"report{n}.json"
        code = main(["compact", str(work), *args, "--topic-config", CLICKS, "--report", str(report),
                     "--kafka-version", KAFKA_VERSION])
        cached = {p.name: pages_in_cache(str(p)) for p in (work / "accounts-0").glob("*.log")}  # before any read
        segments = log_segments(work)
        out[n] = {
            "code": code,
            "records": [line for seg in segments for line in record_lines(seg)],
            "batches": [line for seg in segments for line in batch_lines(seg)],
            "checkpoint": (work / "cleaner-offset-checkpoint").read_bytes(),
            "report": json.loads(report.read_text()),
            "verify": verify_log_dir(str(work)),
            "mtimes": {p.name: p.stat().st_mtime_ns // 1_000_000 for p in (work / "accounts-0").glob("*.log")},
            "cached": cached,
        }
    return out


@pytest.mark.parametrize("n", [1, 2])
def test_records_equal_kafkas(rounds, n):
    assert rounds[n]["code"] == 0
    assert_same_lines(rounds[n]["records"], (FIXTURE_DIR / f"after-round{n}.records.tsv").read_text().splitlines())


@pytest.mark.parametrize("n", [1, 2])
def test_batches_equal_kafkas(rounds, n):
    assert_same_lines(rounds[n]["batches"], (FIXTURE_DIR / f"after-round{n}.batches.tsv").read_text().splitlines())


@pytest.mark.parametrize("n", [1, 2])
def test_cleaner_checkpoint_equals_kafkas(rounds, n):
    assert rounds[n]["checkpoint"] == (FIXTURE_DIR / f"after-round{n}.cleaner-offset-checkpoint").read_bytes()


@pytest.mark.parametrize("n", [1, 2])
def test_result_verifies(rounds, n):
    assert rounds[n]["verify"] == []


def test_round_one_cleans_accounts_0_only(rounds):
    """README: accounts-1 is skipped in round 1 (ratio 0.334 <= 0.5); clicks is not compacted."""
    cleaned = [(p["topic"], p["partition"]) for p in rounds[1]["report"]["partitions"] if p["committed"]]
    assert cleaned == [("accounts", 0)]
    part = rounds[1]["report"]["partitions"][0]
    assert (part["dirty_start"], part["dirty_end"]) == (0, 3583)
    assert part["records_read"] == part["records_kept"] + sum(part["removed"].values())
    assert part["removed"]["superseded"] > 0 and part["removed"]["aborted"] > 0 and part["removed"]["keyless"] > 0


def test_cleaned_segments_keep_the_last_input_modification_time(rounds):
    """Round 1 rewrote groups [0] and [1735] of accounts-0 (131072-byte segments do not merge):
    each output keeps its input segment's modification time (Kafka keeps milliseconds)."""
    before, after = rounds["input_mtimes"], rounds[1]["mtimes"]
    for name in ("00000000000000000000.log", "00000000000000001735.log"):
        assert after[name] == before[name]


def test_cleaned_segments_are_written_past_the_page_cache_unless_asked_not_to(rounds):
    """Round 1's two rewritten groups: by default their whole blocks went to the disk alone (the
    last partial block goes through the page cache); ``spark.kcompact.write.direct=false`` leaves
    them all in the cache, as Kafka's cleaner does."""
    for name in ("00000000000000000000.log", "00000000000000001735.log"):
        cached, pages = rounds[1]["cached"][name]
        assert pages >= 2  # 2 and 10 pages
        assert cached == pages if rounds["path"] == "page cache" else cached <= 1, (name, cached, pages)


def _kafkas(listing: Path) -> dict[str, str]:
    """A ``sha256sum`` listing of Kafka's files (``partition/name`` -> digest)."""
    return dict(reversed(line.split()) for line in listing.read_text().splitlines())


def _ours(root: Path, partitions: set[str], leave_out: tuple[str, ...] = ()) -> dict[str, str]:
    """The same of our files in ``partitions``, but those of the suffixes ``leave_out``."""
    return {f"{partition}/{p.name}": hashlib.sha256(p.read_bytes()).hexdigest()
            for partition in partitions for p in (root / partition).iterdir() if p.suffix not in leave_out}


# Kafka's own cleaners, built from their sources (the fixtures' READMEs): 3.9.0 indexes a cleaner's
# append at most once (before KAFKA-806), 4.3.1 a batch; 4.x takes these small segments only as
# internal.segment.bytes (its segment.bytes floor is 1 MiB).
CLEANERS = {"3.9.0": "segment.bytes", "4.3.1": "internal.segment.bytes"}


@pytest.mark.parametrize("release", sorted(CLEANERS))
def test_files_equal_kafkas_cleaner(spark, tmp_path, release):
    """Both rounds as ``release``: every file of each partition a round cleans byte for byte what
    that release's own cleaner wrote (the fixture's README says how its digests were made), snappy
    batches included."""
    work = _writable_copy(tmp_path / "logs")
    clicks = CLICKS.replace("segment.bytes", CLEANERS[release])
    for n, args in ROUNDS.items():
        args = [arg.replace("segment.bytes", CLEANERS[release]) for arg in args]
        assert main(["compact", str(work), *args, "--topic-config", clicks, "--kafka-version", release]) == 0
        kafkas = _kafkas(FIXTURE_DIR / f"kafka-{release}-round{n}.sha256")
        assert _ours(work, {name.split("/")[0] for name in kafkas}) == kafkas, f"round {n}"


@pytest.mark.parametrize("release", sorted(CLEANERS))
def test_snappy_batches_of_every_size_equal_kafkas(spark, tmp_path, release):
    """98 snappy batches of 1 B to 64 KiB, written by Kafka and each half dropped by a cleaning:
    every file byte for byte what ``release``'s own cleaner wrote (tests/fixtures/kafka-snappy)."""
    fixture = FIXTURE_DIR.parent / "kafka-snappy"
    work = tmp_path / "logs"
    shutil.copytree(fixture / "input", work)
    topic = (f"snappy:cleanup.policy=compact,{CLEANERS[release]}=131072,delete.retention.ms=600000,"
             "min.cleanable.dirty.ratio=0.5,min.compaction.lag.ms=0")
    assert main(["compact", str(work), "--now", "1720000500000", "--topic-config", topic,
                 "--kafka-version", release]) == 0
    # the input's producer-state snapshots are the broker's, which Kafka's listing leaves out
    assert _ours(work, {"snappy-0"}, leave_out=(".snapshot",)) == _kafkas(fixture / f"kafka-{release}.sha256")
