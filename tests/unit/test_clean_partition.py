"""One partition cleaned by ``compaction.cleaning.backward.clean_partition`` (no Spark): by one thread or
several (key shards, ranges decoded ahead and rendered behind, a group written while the one
before it is read) the same files, the records Kafka's rule keeps, and a failure that stops the
partition at the failing group with nothing of it left behind."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from kcompact.compaction.cleaning import backward, rewrite
from kcompact.compaction.cleaning.backward import clean_partition
from kcompact.compaction.cleaning.partition_batches import PartitionBatches
from kcompact.compaction.cleaning.results import IO_ERROR, OUT_OF_MEMORY
from kcompact.compaction.pipeline import batch_plans, job
from kcompact.compaction.pipeline.to_clean import PartitionToClean
from kcompact.compaction.rules.cleaner_config import CleanerConfig
from kcompact.conf.resolve import Config
from kcompact.readers import codecs
from kcompact.readers.records import Record
from kcompact.writers import snappy_library
from tests.support import kp_batches, kp_build, kp_keyed, seg_path, write_partition

NOW = 1_700_000_000_000
TS = NOW - 3_600_000
SEGMENTS = 4  # closed segments, each its own group; then the active one
BATCHES, PER_BATCH, KEYS = 12, 10, 30


def _partition(root: Path) -> tuple[Path, list[tuple[int, bytes, bytes]]]:
    """``t-0``: SEGMENTS closed segments of BATCHES batches of PER_BATCH records, keys drawn from
    KEYS, and an active segment; with every record of the closed ones as (offset, key, value)."""
    rng = random.Random(7)
    segments, written, offset = [], [], 0
    for _ in range(SEGMENTS + 1):
        base, batches = offset, []
        for _ in range(BATCHES):
            kv = [(b"key-%d" % rng.randrange(KEYS), b"value-%d" % (offset + i)) for i in range(PER_BATCH)]
            batches.append(kp_keyed(offset, kv, TS))
            written += [(offset + i, k, v) for i, (k, v) in enumerate(kv)]
            offset += PER_BATCH
        segments.append((base, batches))
    part = write_partition(root / "t-0", segments)
    active_base = segments[-1][0]
    return part, [r for r in written if r[0] < active_base]


def _to_clean(part: Path, segment_bytes: int) -> PartitionToClean:
    """The partition as the job takes it from its plan row, everything before the active segment dirty."""
    config = Config()
    config.add_topic("t", "segment.bytes", str(segment_bytes), "test")
    active = SEGMENTS * BATCHES * PER_BATCH
    return PartitionToClean(path=str(part), log_dir=str(part.parent), topic="t", partition=0, log_start_offset=0,
                            first_dirty_offset=0, first_uncleanable_dirty_offset=active,
                            total_bytes=sum(log.stat().st_size for log in part.glob("*.log")),
                            config=CleanerConfig.of_topic(config.for_topic("t").as_strings()),
                            retain_last_empty_at=active)


def _groups(part: Path, segment_bytes: int) -> tuple[list, int]:
    """The segment groups of the partition's cleaning, as the job's driver makes them."""
    planned = batch_plans.plan_one(_to_clean(part, segment_bytes), NOW)
    assert planned.error is None
    ok = PartitionBatches.table([planned])
    batches = job.Batches.of(ok)
    jobs = job._group_jobs(PartitionBatches.read(ok), batches, NOW, "owner", direct=True)
    return [jobs[gid] for gid in sorted(jobs)], batches.map_keys(0)


def _cleaned(part: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(part.glob("*.cleaned"))}


@pytest.fixture
def small_ranges(monkeypatch):
    """Ranges of a few batches, so a group is read as many ranges, several of them ahead."""
    monkeypatch.setattr(backward, "RANGE_BYTES", 2048)


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_same_files_and_kafkas_records_by_any_number_of_threads(tmp_path, small_ranges, threads):
    part, written = _partition(tmp_path)
    groups, keys = _groups(part, segment_bytes=seg_path(part, 0, "log").stat().st_size + 1)
    assert len(groups) == SEGMENTS
    results = clean_partition(groups, render=True, threads=threads, keys=keys)
    assert [r.error for r in results] == [None] * SEGMENTS
    # Kafka's rule, worked here from the records written: the last record of each key stays
    last = {key: offset for offset, key, _ in written}
    kept = [(o, k, v) for o, k, v in written if last[k] == o]
    got = [(r.offset, r.key, r.value) for name, data in _cleaned(part).items() if name.endswith(".log.cleaned")
           for batch in kp_batches(data) for r in batch]
    assert got == kept
    assert sum(r.codes[0] for r in results) == len(kept)


def test_threads_write_the_bytes_one_thread_writes(tmp_path, small_ranges):
    outputs = {}
    for threads in (1, 2, 4):
        part, _ = _partition(tmp_path / str(threads))
        groups, keys = _groups(part, segment_bytes=seg_path(part, 0, "log").stat().st_size + 1)
        clean_partition(groups, render=True, threads=threads, keys=keys)
        outputs[threads] = _cleaned(part)
    assert outputs[1] and outputs[2] == outputs[1] and outputs[4] == outputs[1]


def test_batch_plans_by_any_number_of_threads(tmp_path):
    """Segments read on threads make the same plans; with two corrupt segments, the error names
    the first of them, as reading them in turn does."""
    part, _ = _partition(tmp_path)
    partition = _to_clean(part, segment_bytes=seg_path(part, 0, "log").stat().st_size + 1)
    plans = [batch_plans.plan_one(partition, NOW, threads) for threads in (1, 2, 4)]
    assert plans[0].error is None and plans[0].batches
    assert [p.but(seconds=0.0) for p in plans[1:]] == [plans[0].but(seconds=0.0)] * 2
    for base in (BATCHES * PER_BATCH, 3 * BATCHES * PER_BATCH):  # segments 1 and 3
        log = seg_path(part, base, "log")
        data = bytearray(log.read_bytes())
        data[-5] ^= 0xFF
        log.write_bytes(bytes(data))
    for threads in (1, 2, 4):
        error = batch_plans.plan_one(partition, NOW, threads).error
        assert error.startswith(f"{seg_path(part, BATCHES * PER_BATCH, 'log')}: byte ") and "CRC mismatch" in error


@pytest.mark.parametrize("threads", [1, 2])
def test_a_corrupt_batch_stops_the_partition_at_its_group(tmp_path, small_ranges, threads):
    """Groups are read last first: groups 3, 2 and 1 are written, group 0 holds the corrupt batch
    (its CRC no longer matches): it fails naming file and byte, and leaves no file behind."""
    part, _ = _partition(tmp_path)
    groups, keys = _groups(part, segment_bytes=seg_path(part, 0, "log").stat().st_size + 1)
    log = seg_path(part, 0, "log")
    data = bytearray(log.read_bytes())
    data[-5] ^= 0xFF  # a value byte of the segment's last batch
    log.write_bytes(bytes(data))
    results = clean_partition(groups, render=True, threads=threads, keys=keys)
    assert [r.group for r in results] == [0, 1, 2, 3]
    assert [r.error is None for r in results] == [False, True, True, True]
    assert f"{log}: byte " in results[0].error and "CRC mismatch" in results[0].error
    assert not [p for p in part.glob(f"{0:020d}.*") if p.name.endswith(".cleaned")]


@pytest.mark.parametrize(("threads", "failure", "reason", "says"), [
    (1, OSError(28, "No space left on device"), IO_ERROR, "no space left on "),
    (2, OSError(28, "No space left on device"), IO_ERROR, "no space left on "),
    (2, OSError(12, "Cannot allocate memory"), OUT_OF_MEMORY, "Cannot allocate memory"),
    (1, MemoryError("Unable to allocate 10.9 MiB"), OUT_OF_MEMORY, "Unable to allocate"),
    (2, MemoryError(), OUT_OF_MEMORY, "MemoryError"),
    # a thread whose stack a capped address space cannot map (issue 33 item 2): memory too
    (1, RuntimeError("can't start new thread"), OUT_OF_MEMORY, "can't start new thread"),
    (2, RuntimeError("can't start new thread"), OUT_OF_MEMORY, "can't start new thread"),
])
def test_a_failed_write_stops_the_partition_before_the_groups_below(tmp_path, small_ranges, monkeypatch, threads,
                                                                    failure, reason, says):
    """Group 2's files cannot be written (the disk fails, or the worker's memory): groups 1 and 0,
    below it in the log, are not written, whether or not their reading had begun; group 3 was
    written before. The error says which: an I/O error is transient, memory the operator's to give."""
    part, _ = _partition(tmp_path)
    groups, keys = _groups(part, segment_bytes=seg_path(part, 0, "log").stat().st_size + 1)
    real = rewrite.write_group
    failing_base = groups[2][0].base_offset

    def write_group(path, base_offset, *args):
        if base_offset == failing_base:
            (part / f"{base_offset:020d}.log.cleaned").write_bytes(b"begun")  # what it wrote before it failed
            raise failure
        return real(path, base_offset, *args)

    monkeypatch.setattr(rewrite, "write_group", write_group)
    results = clean_partition(groups, render=True, threads=threads, keys=keys)
    assert [r.group for r in results] == [2, 3]
    assert results[0].error.startswith(reason) and says in results[0].error
    if getattr(failure, "errno", None) == 28:  # a full disk: the file being written and the room needed
        needed = sum(seg_path(part, base, "log").stat().st_size for base in groups[2][0].segments)
        assert f"(writing {part.name}/{failing_base:020d}.log.cleaned, up to {needed / 2**20:.2g} MB needed)" in \
            results[0].error, results[0].error
    assert results[1].error is None
    bases = {int(p.name[:20]) for p in part.glob("*.cleaned")}
    assert bases == {groups[3][0].base_offset}


def test_map_shards_split_keys_evenly_enough():
    """The shard of a key is bits of its hash the index does not place by: every shard gets keys."""
    from kcompact.compaction.cleaning.offset_map import shard_of

    hashes = np.random.default_rng(1).integers(-(1 << 63), (1 << 63) - 1, 4096, dtype=np.int64)
    counts = np.bincount([shard_of(int(h), 4) for h in hashes], minlength=4)
    assert counts.min() > 800


def _snappy_partition(root: Path) -> Path:
    """``t-0``: one closed segment of snappy batches (kafka-python's), each with superseded keys
    (so it is compressed anew), then a copied one whose keys all stay, then the active segment."""
    offset, segments = 0, []
    for keys in ([b"a", b"b"] * 140, [b"c%d" % i for i in range(200)]):  # 480 records: _to_clean's active base
        records = [Record(offset + i, TS, k, b"value-%d" % i * 4) for i, k in enumerate(keys)]
        segments.append((offset, [kp_build(records, codec=codecs.SNAPPY, base_offset=offset)]))
        offset += len(keys)
    segments.append((offset, [kp_keyed(offset, [b"z"], TS)]))
    return write_partition(root / "t-0", segments)


@pytest.mark.parametrize("without", [False, True])
def test_snappy_batches_compressed_without_googles_snappy_are_counted(tmp_path, monkeypatch, without):
    """An executor without libsnappy compresses with cramjam (valid, not Kafka's bytes): each group
    counts the snappy batches it compressed anew, none when the library was there or a batch is
    copied, for the driver's report to say which partitions are not byte-exact."""
    if without:
        monkeypatch.setattr(snappy_library, "missing", lambda: snappy_library.NOT_EXACT)
    part = _snappy_partition(tmp_path)
    groups, keys = _groups(part, segment_bytes=1 << 30)
    results = clean_partition(groups, render=True, threads=1, keys=keys)
    assert [r.error for r in results] == [None]
    assert [r.inexact_snappy for r in results] == [1 if without else 0]
    got = [(r.key, r.value) for name, data in _cleaned(part).items() if name.endswith(".log.cleaned")
           for batch in kp_batches(data) for r in batch]
    assert [k for k, _ in got] == [b"a", b"b"] + [b"c%d" % i for i in range(200)]
