"""Every divergence from Kafka's cleaner that the reference model found (or that issue 14 names),
as a named case: the product and the model clean the same generated log dir and must agree.

Where a case depends on one rule, a model variant without it shows that the case really
exercises that rule.
"""

from __future__ import annotations

import io
import shutil
from pathlib import Path

from kcompact.conf import releases
from kcompact.conf.releases import Release
from kcompact.readers import checkpoint
from kcompact.readers.indexes import parse_offset_index
from kcompact.readers.segment import iter_batches
from kcompact.tools import generator
from tests.reference.cleaner import Cleaner, LogFilter, filter_to
from tests.reference.log import CleanedSegment, LogSegment
from tests.reference.manager import Broker
from tests.reference.producers import LastRecord
from tests.reference_rounds import Rounds

T0 = 1_720_000_000_000
MINUTE, HOUR, DAY = 60_000, 3_600_000, 86_400_000
TAIL_SEED = 1


def run(tmp_path, topics: list[dict], nows: list[int], seed: int = 1, stray=None,
        release: Release = releases.DEFAULT) -> tuple[Rounds, list[str]]:
    """Rounds at ``nows`` (records appended before each later one) as ``release`` cleans: the rounds
    and what differed, by round."""
    rounds = Rounds.generate(tmp_path, {"start_ms": T0, "topics": topics}, seed, stray_entries=stray, release=release)
    found = []
    for n, now in enumerate(nows):
        if n:
            rounds.append()
        found += [f"round {n + 1}: {line}" for line in rounds.clean(now)]
    return rounds, found


def clean(tmp_path, topics: list[dict], nows: list[int], seed: int = 1, stray=None,
          release: Release = releases.DEFAULT) -> Rounds:
    rounds, found = run(tmp_path, topics, nows, seed, stray, release)
    assert not found, "\n".join(found[:10])
    return rounds


def variant(rounds: Rounds, tmp_path, cleaner_class, nows: list[int]) -> Path:
    """The model again on the same input and appends, ``cleaner_class`` standing in for Kafka's
    Cleaner: shows that a test's case depends on the rule it names."""
    root = tmp_path / f"variant-{cleaner_class.__name__}"
    shutil.copytree(rounds.root / "before-0", root)
    broker = Broker(str(root), rounds.config, rounds.release)
    broker.cleaner_class = cleaner_class
    for n, now in enumerate(nows):
        if n:
            generator.append(str(root), rounds.spec, rounds.seed)
            broker.observe_appends()
        broker.clean_round(now)
    return root


def segment_files(pdir: Path, kind: str) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(pdir.glob(f"*.{kind}"))}


def model_checkpoint(rounds: Rounds) -> dict:
    path = rounds.model / "cleaner-offset-checkpoint"
    return checkpoint.parse(str(path), path.read_bytes())


# -- issue 14 item 1 -------------------------------------------------------------------------------

HELD = {"cleanup.policy": "compact", "segment.bytes": 1500, "min.compaction.lag.ms": 10 * DAY}


def test_checkpoint_past_the_log_end_is_reset_although_nothing_is_cleaned(spark, tmp_path):
    """Kafka's grabFilthiestCompactedLog resets a checkpoint above the log end offset to the log
    start and writes it (forceUpdateCheckpoint) for every compacted log it looks at, before it
    drops the logs with nothing to clean (here min.compaction.lag.ms holds everything back)."""
    topic = {"name": "held", "config": HELD, "records": 200, "checkpoint": {"0": {"past_end": 10**9}}}
    clean(tmp_path, [topic], [T0 + HOUR])


def test_checkpoint_below_the_log_start_is_reset_although_nothing_is_cleaned(spark, tmp_path):
    """The same reset for an entry below the log start (DeleteRecords moved it; compact,delete
    topics reset silently)."""
    topic = {"name": "held", "config": HELD | {"cleanup.policy": "compact,delete"}, "records": 200,
             "log_start": 0.5, "checkpoint": {"0": {"below_start": 2}}}
    clean(tmp_path, [topic], [T0 + HOUR])


def test_model_resets_out_of_range_checkpoints_of_held_back_partitions(tmp_path):
    """What the two tests above expect, from the model alone: both entries become the log start."""
    topics = [{"name": "past", "config": HELD, "records": 200, "checkpoint": {"0": {"past_end": 10**9}}},
              {"name": "below", "config": HELD, "records": 200, "log_start": 0.5,
               "checkpoint": {"0": {"below_start": 2}}}]
    rounds = Rounds.generate(tmp_path, {"start_ms": T0, "topics": topics}, 1)
    result = rounds.broker.clean_round(T0 + HOUR)
    starts = checkpoint.parse("s", (rounds.model / "log-start-offset-checkpoint").read_bytes())
    assert not result.cleaned
    assert model_checkpoint(rounds) == {("past", 0): 0, ("below", 0): starts["below", 0]}


# -- issue 14 item 2: 3.9.0 and 4.0.0 index once per append (before KAFKA-806) ---------------------
PER_APPEND = releases.resolve("4.0.0")


def test_one_index_entry_at_most_per_read_chunk(spark, tmp_path):
    """cleanInto appends each read chunk's retained batches (here a whole 30 KB segment) to the
    cleaned segment in one LogSegment.append, whose index rule fires before the bytes count: a
    one-segment group gets no offset or time index entry at all."""
    topic = {"name": "chunks", "config": {"cleanup.policy": "compact", "segment.bytes": 30_000,
                                          "min.cleanable.dirty.ratio": 0.0},
             "records": 3000, "keys": 2000, "value_size": [20, 40], "batch_records": [1, 5]}
    rounds = Rounds.generate(tmp_path, {"start_ms": T0, "topics": [topic]}, 1, release=PER_APPEND)
    found = rounds.clean(T0 + HOUR)
    cleaned = [p for p in (rounds.model / "chunks-0").glob("*.index") if p.stem != sorted(
        q.stem for q in (rounds.model / "chunks-0").glob("*.log"))[-1]]
    assert cleaned and all(p.stat().st_size == 0 for p in cleaned), "Kafka's cleaned segments: no index entry"
    assert not found, "\n".join(found[:10])


def test_an_index_entry_per_batch_from_kafka_806(spark, tmp_path):
    """3.9.1, 4.0.1 and 4.1 on (KAFKA-806): the same one-segment groups get an entry each time more
    than index.interval.bytes passed since the last, batch by batch, whatever the read chunks."""
    topic = {"name": "chunks", "config": {"cleanup.policy": "compact", "segment.bytes": 30_000,
                                          "min.cleanable.dirty.ratio": 0.0},
             "records": 3000, "keys": 2000, "value_size": [20, 40], "batch_records": [1, 5]}
    for release in ("3.9.1", "4.3"):
        rounds = Rounds.generate(tmp_path / release, {"start_ms": T0, "topics": [topic]}, 1,
                                 release=releases.resolve(release))
        found = rounds.clean(T0 + HOUR)
        logs = sorted((rounds.model / "chunks-0").glob("*.log"))[:-1]
        sizes = [log.with_suffix(".index").stat().st_size // 8 for log in logs]
        # an entry about every 4 KiB (index.interval.bytes 4096) where 4.0.0 makes none
        assert logs and sum(sizes) >= sum(log.stat().st_size for log in logs) // 8192 > 0, sizes
        assert not found, "\n".join(found[:10])


def test_later_groupings_follow_kafkas_sparser_cleaned_indexes(spark, tmp_path):
    """With a small segment.index.bytes, groupSegmentsBySize in the next round sums the cleaned
    segments' index sizes: Kafka's sparser indexes let more segments merge (the divergence seen
    after round 2 with segments [2878, 3231, ...] against Kafka's [2608, 3098, ...])."""
    topic = {"name": "drift", "config": {"cleanup.policy": "compact", "segment.bytes": 4000,
                                         "segment.index.bytes": 96, "index.interval.bytes": 64,
                                         "min.cleanable.dirty.ratio": 0.0},
             "records": 1500, "keys": 400, "value_size": [10, 30], "batch_records": [1, 3],
             "append_records": 600, "append_gap_ms": HOUR}
    nows = [T0 + HOUR, T0 + 3 * HOUR]
    rounds, found = run(tmp_path, [topic], nows, release=PER_APPEND)
    per_batch = variant(rounds, tmp_path, PerBatchAppendCleaner, nows)
    assert sorted(segment_files(rounds.model / "drift-0", "log")) != sorted(
        segment_files(per_batch / "drift-0", "log")
    ), "with an index entry per batch, round 2 would group the segments otherwise"
    assert not found, "\n".join(found[:10])


def test_read_buffer_grows_for_a_batch_larger_than_it(spark, tmp_path):
    """A batch over the 256 KiB read buffer: cleanInto reads no complete batch, grows both buffers
    (to 512 KiB, then 1 MiB under message.max.bytes) and reads again; the grown chunk covers more
    batches, so one append (and at most one index entry) covers them all until the segment ends."""
    topic = {"name": "big", "config": {"cleanup.policy": "compact", "segment.bytes": 2_000_000,
                                       "min.cleanable.dirty.ratio": 0.0, "index.interval.bytes": 64},
             "records": 24, "keys": 20, "value_size": [60_000, 120_000], "codecs": {"none": 1},
             "batch_records": [1, 5], "append_records": 4, "append_gap_ms": HOUR}
    clean(tmp_path, [topic], [T0 + HOUR], release=PER_APPEND)


def test_index_entry_offset_is_the_chunks_last_retained_record(spark, tmp_path):
    """FilterResult.maxOffset, the offset of an append's index entry, is the last RETAINED record's
    offset for a rebuilt batch, not its header's last offset (which keeps the original's). In round
    2 the shrunk segments merge into groups of several, one append each; a source segment ending
    in a batch that lost its last records puts an entry below that batch's last offset."""
    topic = {"name": "tail", "config": {"cleanup.policy": "compact", "segment.bytes": 700,
                                        "index.interval.bytes": 64, "min.cleanable.dirty.ratio": 0.0},
             "records": 600, "keys": 100, "value_size": [5, 10], "batch_records": [2, 8],
             "append_records": 300, "append_gap_ms": HOUR}
    rounds, found = run(tmp_path, [topic], [T0 + HOUR, T0 + 3 * HOUR], seed=TAIL_SEED, release=PER_APPEND)
    inside = 0
    for log in sorted((rounds.model / "tail-0").glob("*.log")):
        with open(log, "rb") as f:
            batches = list(iter_batches(f, str(log)))
        base = int(log.stem)
        for e in parse_offset_index("i", log.with_suffix(".index").read_bytes()):
            offset = base + e.relative_offset
            inside += any(b.base_offset_field <= offset < b.last_offset for b in batches)
    assert inside, "Kafka's index has an entry below the last offset of the batch that holds it"
    assert not found, "\n".join(found[:10])


class PerBatchAppendCleaner(Cleaner):
    """Kafka's cleaner as if every kept batch were its own ``LogSegment.append`` (what ours did
    before issue 14 item 2), with the written batch's header last offset and max timestamp, and
    no index capacity check."""

    def clean_into(self, source: LogSegment, dest: CleanedSegment, offset_map, retain_legacy: bool,
                   delete_retention_ms: int, max_log_message_size: int, transaction_metadata,
                   active: dict[int, LastRecord], upper_bound_of_round: int, now: int) -> None:
        dest.max_index_size = 1 << 40
        log_filter = LogFilter(offset_map, retain_legacy, delete_retention_ms, transaction_metadata, active,
                               upper_bound_of_round, now)
        for batch in source.batches():
            result = filter_to([batch], log_filter, 1 << 62)
            if result.output:
                (written,) = iter_batches(io.BytesIO(bytes(result.output)), "written")
                dest.append(written.last_offset, written.max_timestamp, written.last_offset, bytes(result.output))


class UnboundedOutputCleaner(Cleaner):
    """A cleaner whose write buffer never fills: no early return from filterTo."""

    def clean_into(self, *args, **kwargs) -> None:
        self.write_capacity = 1 << 62
        super().clean_into(*args, **kwargs)


def test_chunk_whose_output_outgrows_the_write_buffer_ends_early(spark, tmp_path):
    """KAFKA-5316: when the retained batches of a chunk outgrow the 256 KiB write buffer (here
    tombstones rebuilt with a delete horizon: each record's timestamp delta to the far-off horizon
    takes more bytes than before), filterTo returns after that batch; the next chunk starts there,
    so appends and index entries fall where Kafka's do."""
    topic = {"name": "grow", "config": {"cleanup.policy": "compact", "segment.bytes": 400_000,
                                        "min.cleanable.dirty.ratio": 0.0, "index.interval.bytes": 1000},
             "records": 40_000, "keys": 1_000_000, "tombstone_fraction": 1.0, "codecs": {"none": 1},
             "batch_records": [50, 50], "timestamp_step_ms": 1}
    rounds, found = run(tmp_path, [topic], [T0 + HOUR], release=PER_APPEND)
    unbounded = variant(rounds, tmp_path, UnboundedOutputCleaner, [T0 + HOUR])
    assert segment_files(rounds.model / "grow-0", "index") != segment_files(unbounded / "grow-0", "index"), \
        "the early return moves the chunks, so the index entries"
    assert not found, "\n".join(found[:10])


# -- found by the model ----------------------------------------------------------------------------

def test_checkpoint_write_drops_entries_of_partitions_not_in_the_log_dir(spark, tmp_path):
    """LogCleanerManager.updateCheckpoints keeps only the entries of partitions the broker holds
    (``logs``) whenever it writes cleaner-offset-checkpoint: an entry left by a topic deleted or
    moved to another log dir goes with the first write (here the one after cleaning ``kept``)."""
    topic = {"name": "kept", "config": {"cleanup.policy": "compact", "segment.bytes": 1500,
                                        "min.cleanable.dirty.ratio": 0.0}, "records": 300, "keys": 20}
    rounds = clean(tmp_path, [topic], [T0 + HOUR], stray={("gone", 3): 17})
    assert ("gone", 3) not in model_checkpoint(rounds)


# A legacy topic whose round ends with a keyless magic-1 message: Kafka's filterTo must keep the
# round's last batch (RETAIN_EMPTY) but cannot empty a legacy entry, so the cleaning throws.
LEGACY_END = {
    "name": "old",
    "config": {"cleanup.policy": "compact", "segment.bytes": 400, "min.cleanable.dirty.ratio": 0.0},
    "records": 2,
    "keys": 10,
    "keyless_fraction": 0.5,
    "legacy": {"magic0": 20, "magic1": 20, "codecs": {"none": 1}},
}


def test_a_failed_cleaning_leaves_the_partition_untouched_and_uncleanable(spark, tmp_path):
    """Kafka fails the round on the legacy entry; the groups before it stay swapped in Kafka,
    while ours leaves the whole partition as it was (README; issue 14 item 3): the comparison
    expects ours untouched and marked uncleanable, and the model's failure to be that one."""
    rounds, found = run(tmp_path, [LEGACY_END], [T0 + HOUR])
    assert list(rounds.results[0].failed) == [("old", 0)]
    assert "empty batches are only supported for magic v2 and above" in rounds.results[0].failed["old", 0]
    assert not found, "\n".join(found[:10])


def test_a_failed_cleaning_writes_its_first_dirty_offset(spark, tmp_path):
    """LogCleaner.cleanLog calls doneCleaning(endOffset = firstDirtyOffset) in its finally block,
    so a cleaning that throws still writes the partition's checkpoint entry: a partition that had
    none gets one, its log start."""
    rounds, found = run(tmp_path, [LEGACY_END], [T0 + HOUR])
    assert model_checkpoint(rounds) == {("old", 0): 0}
    assert not found, "\n".join(found[:10])

