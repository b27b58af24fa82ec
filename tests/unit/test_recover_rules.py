"""The broker's load-time recovery (``operations.recover``), one test per rule of Kafka's
LogLoader (``removeTempFilesAndCollectSwapFiles`` and the swap completion in ``load``):
file-name lists in, deletions and renames out, every expectation worked out by hand.
Then ``recover_partition`` on real partitions: idempotent, and indexes rebuilt byte for
byte as the broker's append rule (tests/support.broker_indexes) and Kafka itself (the
Kafka-written fixture) lay them out."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pytest
from kafka.record.memory_records import MemoryRecords

from kcompact import errors, storage
from kcompact.operations import states
from kcompact.operations.recover import plan_recovery, recover_log_dirs, recover_partition
from tests.support import FIXTURE_INPUT, broker_indexes, make_batches, seg_path, write_partition


def n(offset: int, suffix: str) -> str:
    return f"{offset:020d}.{suffix}"


def seg(offset: int, *suffixes: str, kinds=("log", "index", "timeindex")) -> list[str]:
    """A segment's files, each with one more suffix (``""`` for the live file)."""
    return [n(offset, kind + s) for s in suffixes for kind in kinds]


def next_offsets(table: dict[str, int]):
    """A ``next_offset_of_swap`` that knows only ``table`` and records what it was asked."""
    asked = []

    def next_offset(name: str) -> int:
        asked.append(name)
        return table[name]

    return next_offset, asked


def never(name: str) -> int:
    raise AssertionError(f"next offset of {name} asked, with no .log.swap to complete")


# -- removeTempFilesAndCollectSwapFiles -----------------------------------------------------------


def test_deleted_files_are_removed():
    names = [*seg(0, ""), *seg(100, ".deleted"), n(100, "txnindex.deleted"), n(100, "snapshot.deleted")]
    actions = plan_recovery(names, never)
    assert sorted(actions.delete) == sorted([*seg(100, ".deleted"), n(100, "txnindex.deleted"),
                                             n(100, "snapshot.deleted")])
    assert actions.rename == []


def test_cleaned_files_are_removed():
    names = [*seg(0, ""), *seg(100, ""), *seg(0, ".cleaned"), n(0, "txnindex.cleaned")]
    actions = plan_recovery(names, never)
    assert sorted(actions.delete) == sorted([*seg(0, ".cleaned"), n(0, "txnindex.cleaned")])
    assert actions.rename == []


def test_swaps_at_or_above_the_smallest_cleaned_base_are_removed_first():
    # A crash in step 1 of a commit (highest base first): groups 500 and 300 became .swap, group 200
    # is .cleaned. A .swap at 150, below 200, is an earlier, finished operation and stays valid.
    names = [*seg(0, ""), *seg(150, ""), *seg(300, ""), *seg(500, ""),
             *seg(500, ".swap"), *seg(300, ".swap"), *seg(200, ".cleaned"),
             n(200, "log.swap"),  # the group at the smallest .cleaned base: at, not above: removed too
             n(150, "log.swap")]
    next_offset, asked = next_offsets({n(150, "log.swap"): 180})
    actions = plan_recovery(names, next_offset)
    unfinished = [*seg(500, ".swap"), *seg(300, ".swap"), n(200, "log.swap")]
    assert sorted(actions.delete[:len(unfinished)]) == sorted(unfinished)
    # KAFKA-6264: .cleaned files only after the invalid swaps, so that a crash in between still
    # finds the .cleaned files that invalidate the remaining ones
    assert sorted(actions.delete[len(unfinished):len(unfinished) + 3]) == sorted(seg(200, ".cleaned"))
    # the valid swap at 150 replaces what lies in [150, 180): the old segment 150
    assert sorted(actions.delete[len(unfinished) + 3:]) == sorted(seg(150, ""))
    assert actions.rename == [(n(150, "log.swap"), n(150, "log"))]
    assert asked == [n(150, "log.swap")]  # only a valid .log.swap is read


def test_remaining_swaps_replace_old_files_in_their_range_including_indexes_and_snapshots():
    # Commit interrupted after step 1: groups [0, 100) -> swap 0 (next offset 180 after cleaning of
    # segments 0 and 100) and [200] -> swap 200 (next offset 260). Range [0, 260).
    old = [*seg(0, ""), *seg(100, ""), n(100, "txnindex"), n(100, "snapshot"), *seg(200, ""),
           n(200, "snapshot"), n(259, "snapshot")]
    kept = [*seg(300, ""), n(300, "snapshot"), n(260, "snapshot")]  # at or above the range's end
    swaps = [*seg(0, ".swap"), n(0, "txnindex.swap"), *seg(200, ".swap")]
    next_offset, asked = next_offsets({n(0, "log.swap"): 180, n(200, "log.swap"): 260})
    actions = plan_recovery([*old, *kept, *swaps], next_offset)
    assert sorted(actions.delete) == sorted(old)
    assert sorted(asked) == [n(0, "log.swap"), n(200, "log.swap")]
    assert sorted(actions.rename) == sorted((s, s.removesuffix(".swap")) for s in swaps)


def test_files_outside_the_swap_range_are_kept():
    # A swap [100, 150): segment 0 below, segment 150 at its end, and the active segment are kept.
    names = [*seg(0, ""), *seg(100, ""), *seg(150, ""), *seg(400, ""), n(100, "log.swap"),
             n(100, "index.swap")]
    next_offset, _ = next_offsets({n(100, "log.swap"): 150})
    actions = plan_recovery(names, next_offset)
    assert sorted(actions.delete) == sorted(seg(100, ""))
    assert sorted(actions.rename) == [(n(100, "index.swap"), n(100, "index")), (n(100, "log.swap"), n(100, "log"))]


def test_an_empty_swap_spans_nothing():
    # readNextOffset of an empty segment is its base offset: the range [100, 100) is empty.
    names = [*seg(100, ""), n(100, "log.swap")]
    next_offset, _ = next_offsets({n(100, "log.swap"): 100})
    actions = plan_recovery(names, next_offset)
    assert actions.delete == []
    assert actions.rename == [(n(100, "log.swap"), n(100, "log"))]


def test_swaps_are_all_renamed_including_index_only_swaps():
    # the third pass renames every remaining .swap file, whatever its kind
    names = [*seg(0, ""), n(0, "index.swap"), n(0, "timeindex.swap")]
    actions = plan_recovery(names, never)
    assert actions.delete == []
    assert sorted(actions.rename) == [(n(0, "index.swap"), n(0, "index")), (n(0, "timeindex.swap"), n(0, "timeindex"))]


def apply(names: list[str], actions, renames: int | None = None) -> list[str]:
    """The file names once ``actions`` ran (its renames only up to ``renames``)."""
    out = [x for x in names if x not in actions.delete]
    for src, dst in actions.rename[:renames]:
        out = [dst if x == src else x for x in out if x != dst]
    return out


def test_a_recovery_stopped_between_two_renames_never_deletes_a_renamed_file():
    # every .cleaned file became .swap (groups 0, 345 and 675 of five old segments), nothing else
    # happened; recovery stops after each of its renames in turn, and runs again
    kinds = ("log", "index", "timeindex", "txnindex")
    bases, next_of = (0, 165, 345, 510, 675), {0: 345, 345: 675, 675: 846}
    names = [*(n(b, k) for b in bases for k in kinds), *seg(846, ""),
             *(n(b, k + ".swap") for b in next_of for k in kinds)]

    def next_offset(name: str) -> int:
        return next_of[int(name.split(".")[0])]

    first = plan_recovery(names, next_offset)
    done = apply(names, first)
    assert sorted(done) == sorted([*(n(b, k) for b in next_of for k in kinds), *seg(846, "")])
    for cut in range(len(first.rename)):
        stopped = apply(names, first, renames=cut)
        renamed = {dst for _, dst in first.rename[:cut]}
        second = plan_recovery(stopped, next_offset)
        assert not renamed & set(second.delete), f"stopped after {cut} renames"
        assert sorted(apply(stopped, second)) == sorted(done), f"stopped after {cut} renames"


def test_kraft_snapshot_deleted_files_are_left_alone():
    snapshot = "00000000000000000100-0000000001.checkpoint.deleted"  # KafkaMetadataLog's own business
    names = [*seg(0, ""), snapshot, n(0, "log.swap")]
    next_offset, _ = next_offsets({n(0, "log.swap"): 10_000})
    actions = plan_recovery(names, next_offset)
    assert snapshot not in actions.delete
    assert sorted(actions.delete) == sorted(seg(0, ""))


def test_names_without_an_offset_are_ignored():
    names = ["partition.metadata", "leader-epoch-checkpoint", "leader-epoch-checkpoint.tmp", "notes.txt",
             *seg(0, ""), n(0, "log.swap")]
    next_offset, _ = next_offsets({n(0, "log.swap"): 1 << 62})  # a range over every offset
    actions = plan_recovery(names, next_offset)
    assert sorted(actions.delete) == sorted(seg(0, ""))
    assert actions.rename == [(n(0, "log.swap"), n(0, "log"))]


def test_a_clean_partition_needs_nothing():
    names = [*seg(0, ""), *seg(100, ""), n(100, "snapshot"), "partition.metadata", "leader-epoch-checkpoint"]
    assert not plan_recovery(names, never)


# -- recover_partition on real partitions --------------------------------------------------------------


def offsets(part: Path) -> list[int]:
    """The offset of every record of the partition, read by kafka-python (CRC checked)."""
    out = []
    for log in sorted(part.glob("*.log")):
        for batch in MemoryRecords(log.read_bytes()):
            assert batch.validate_crc()
            out += [r.offset for r in batch]
    return out


def files(part: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(part.iterdir())}


def test_recover_partition_completes_a_swap_and_a_second_run_does_nothing(tmp_path):
    part = tmp_path / "t-0"
    old0, old50, active = make_batches(0, 10), make_batches(50, 10), make_batches(100, 4)
    write_partition(part, [(0, old0), (50, old50), (100, active)])
    (part / n(50, "snapshot")).write_bytes(b"old producer snapshot")
    # the cleaned group [0, 100): batches 0-4, 60-64 and 95-99 kept, next offset 100
    cleaned = [old0[0], old50[2], old50[9]]
    index, timeindex = broker_indexes(cleaned, 0, closed=True)
    for kind, data in (("log", b"".join(cleaned)), ("index", index), ("timeindex", timeindex)):
        (part / n(0, kind + ".swap")).write_bytes(data)
    # the crash came in step 2: segment 0's .log and .index are .deleted already, the rest not
    for kind in ("log", "index"):
        seg_path(part, 0, kind).rename(part / n(0, kind + ".deleted"))

    done = recover_partition(str(part), index_interval_bytes=200)
    assert sorted(done.deleted) == sorted([n(0, "log.deleted"), n(0, "index.deleted"), n(0, "timeindex"),
                                           *seg(50, ""), n(50, "snapshot")])
    assert sorted(done.renamed) == sorted((s, s.removesuffix(".swap")) for s in seg(0, ".swap"))
    assert done.indexes_rebuilt == [] and done.problems == []
    expected = {n(0, "log"): b"".join(cleaned), n(0, "index"): index, n(0, "timeindex"): timeindex,
                **{n(100, k): seg_path(part, 100, k).read_bytes() for k in ("log", "index", "timeindex")}}
    assert files(part) == expected
    assert offsets(part) == [*range(5), *range(60, 65), *range(95, 100), *range(100, 120)]

    again = recover_partition(str(part), index_interval_bytes=200)
    assert not again.changed and again.problems == []
    assert files(part) == expected


def test_a_missing_index_is_rebuilt_as_the_broker_lays_it_out(tmp_path):
    part = tmp_path / "t-0"
    closed, active = make_batches(0, 12, codecs=(0, 1)), make_batches(60, 5)
    write_partition(part, [(0, closed), (60, active)])
    seg_path(part, 0, "index").unlink()
    done = recover_partition(str(part), index_interval_bytes=200)
    assert sorted(done.indexes_rebuilt) == [n(0, "index"), n(0, "timeindex")]
    index, timeindex = broker_indexes(closed, 0, closed=True)
    assert index  # the segment is large enough for several entries: the rule is exercised
    assert seg_path(part, 0, "index").read_bytes() == index
    assert seg_path(part, 0, "timeindex").read_bytes() == timeindex


def test_a_corrupt_index_of_the_active_segment_is_rebuilt_with_its_closing_time_entry(tmp_path):
    # LogSegment.recover resets both indexes and, like a closing segment, appends the largest
    # timestamp seen to the time index
    part = tmp_path / "t-0"
    closed, active = make_batches(0, 4), make_batches(20, 9)
    write_partition(part, [(0, closed), (20, active)])
    good = seg_path(part, 20, "index").read_bytes()
    seg_path(part, 20, "index").write_bytes(good + b"\x00\x00\x00")  # not a multiple of 8
    done = recover_partition(str(part), index_interval_bytes=200)
    assert sorted(done.indexes_rebuilt) == [n(20, "index"), n(20, "timeindex")]
    index, timeindex = broker_indexes(active, 20, closed=True)
    assert seg_path(part, 20, "index").read_bytes() == index == good
    assert seg_path(part, 20, "timeindex").read_bytes() == timeindex


@pytest.mark.parametrize("kind, broken", [
    ("timeindex", lambda data: data[12:24] + data[:12]),  # the last timestamp before the first
    ("timeindex", lambda data: data[:-4] + struct.pack(">i", -1)),  # the last entry's offset below the base
    ("index", lambda data: data[:-8] + struct.pack(">ii", -1, 0)),  # the last offset below the base
])
def test_an_index_failing_the_brokers_sanity_check_is_rebuilt(tmp_path, kind, broken):
    """OffsetIndex and TimeIndex sanityCheck read the first and last entries: an index whose last
    entry lies below the segment's base offset, or a time index ending before it starts, is
    rebuilt; a zero-filled preallocated tail is not a broken index."""
    part = tmp_path / "t-0"
    closed, active = make_batches(0, 12, codecs=(0, 1)), make_batches(60, 5)
    write_partition(part, [(0, closed), (60, active)])
    data = seg_path(part, 0, kind).read_bytes()
    assert len(data) >= 24
    seg_path(part, 0, kind).write_bytes(broken(data))
    done = recover_partition(str(part), index_interval_bytes=200)
    assert sorted(done.indexes_rebuilt) == [n(0, "index"), n(0, "timeindex")]
    index, timeindex = broker_indexes(closed, 0, closed=True)
    assert (seg_path(part, 0, "index").read_bytes(), seg_path(part, 0, "timeindex").read_bytes()) == (index, timeindex)
    seg_path(part, 0, kind).write_bytes(seg_path(part, 0, kind).read_bytes() + bytes(240))  # preallocation
    assert recover_partition(str(part), index_interval_bytes=200).indexes_rebuilt == []


def kafka_partition(tmp_path: Path) -> Path:
    part = tmp_path / "accounts-0"
    shutil.copytree(FIXTURE_INPUT / "accounts-0", part)
    for p in [part, *part.iterdir()]:
        p.chmod(0o755 if p.is_dir() else 0o644)  # the fixture is read-only
    return part


FIXTURE_INTERVAL = 4096  # index.interval.bytes of the fixture's topics (generator-spec.json)


def test_kafka_written_indexes_are_rebuilt_byte_for_byte(tmp_path):
    part = kafka_partition(tmp_path)
    missing, corrupt = 1735, 3583  # closed segments: Kafka wrote their indexes, closing entry included
    kafka = {(base, k): seg_path(part, base, k).read_bytes() for base in (missing, corrupt)
             for k in ("index", "timeindex")}
    seg_path(part, missing, "index").unlink()
    seg_path(part, corrupt, "index").write_bytes(kafka[(corrupt, "index")][:-3])
    untouched = files(part)

    done = recover_partition(str(part), index_interval_bytes=FIXTURE_INTERVAL)
    assert sorted(done.indexes_rebuilt) == sorted(n(b, k) for b in (missing, corrupt) for k in ("index", "timeindex"))
    for (base, kind), data in kafka.items():
        assert seg_path(part, base, kind).read_bytes() == data, f"{base} {kind}"
    now = files(part)
    assert {k: v for k, v in now.items() if k not in untouched or untouched[k] != v} == {
        n(missing, "index"): kafka[(missing, "index")], n(corrupt, "index"): kafka[(corrupt, "index")]}


def interrupted(tmp_path: Path) -> Path:
    """A log dir whose partition t-0 holds a swap a killed job left: .cleaned and .swap files."""
    part = tmp_path / "logs" / "t-0"
    write_partition(part, [(0, make_batches(0, 4)), (20, make_batches(20, 2))])
    (part / n(0, "log.swap")).write_bytes(seg_path(part, 0, "log").read_bytes())
    (part / n(0, "index.cleaned")).write_bytes(b"")
    return part


def recovered_under_lock(log_dir: Path):
    """``recover_log_dirs`` as a command calls it: under the ``.lock`` it took (storage.held_locks)."""
    with storage.held_locks([str(log_dir)]) as held:
        return recover_log_dirs(held.free, progress=lambda line: None)


def test_a_dead_jobs_lease_does_not_stop_recovery_of_a_local_log_dir(tmp_path):
    # The caller of recover_log_dirs holds the log dir's .lock, which every job holds while it runs:
    # a lease found there, however fresh its heartbeat, is a dead job's.
    part = interrupted(tmp_path)
    assert isinstance(states.acquire(str(part), "killed-job"), states.Lease)
    report = recovered_under_lock(tmp_path / "logs")
    assert report.skipped == {} and report.failed == 0
    assert sorted(p.name for p in part.iterdir()) == sorted([*seg(0, ""), *seg(20, "")])  # rolled back
    assert states.read(str(part))[0].state == states.IDLE  # given back: the next job may clean it


def test_a_pause_asked_of_a_dead_job_is_kept(tmp_path):
    part = interrupted(tmp_path)
    assert isinstance(states.acquire(str(part), "killed-job"), states.Lease)
    states.pause(str(part))  # an operator's pause while the job ran: aborted, the pause pending
    recovered_under_lock(tmp_path / "logs")
    state = states.read(str(part))[0]
    assert (state.state, state.pause_count) == (states.PAUSED, 1)


def test_recovery_of_a_local_log_dir_without_its_lock_is_refused(tmp_path):
    """Without the ``.lock`` a live job's lease cannot be told from a dead one's: no layer below the
    command takes the lock itself (issue 44, item 5), so recovery refuses rather than take over."""
    part = interrupted(tmp_path)
    before = sorted(p.name for p in part.iterdir())
    with pytest.raises(errors.KcompactError, match=r"without its \.lock held"):
        recover_log_dirs([str(tmp_path / "logs")], progress=lambda line: None)
    assert sorted(p.name for p in part.iterdir()) == before


def test_a_log_dirs_recovery_lists_each_partition_dir_once(tmp_path, monkeypatch):
    """Under the ``.lock`` the log dir's own listing of a partition is the one its recovery acts
    on: a dir is listed again only after recovery changed it."""
    from tests.support import patch_storage

    part = interrupted(tmp_path)
    quiet = tmp_path / "logs" / "t-1"
    write_partition(quiet, [(0, make_batches(0, 3))])
    listed, real = [], storage.list_dir

    def counted(path, *args, **kwargs):
        listed.append(Path(path).name)
        return real(path, *args, **kwargs)

    patch_storage(monkeypatch, "list_dir", counted)
    report = recovered_under_lock(tmp_path / "logs")
    assert sorted(p.name for p in part.iterdir()) == sorted([*seg(0, ""), *seg(20, "")])  # the swap rolled back
    assert [p.changed for p in report.partitions] == [True, False]
    assert listed.count("t-1") == 1 and listed.count("t-0") == 2  # t-0 again after its renames
