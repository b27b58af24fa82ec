"""Stage 5 of the compaction job, on the driver alone: every partition whose groups were all
written is checked (its segments are still those the job read, the job still holds its lease)
and committed (``operations.commit``); on an object store the commits' applies then finish
together per log dir (``operations.commit.Wave``).

On local disk the partitions of a log dir are committed in waves (``operations.commit.commit_wave``):
each step of Kafka's swap done for every partition of the wave, then made durable once, and the
log dir's cleaner checkpoint written once for the wave. On an object store a batch of partitions
is committed at once (``storage.map_in_flight``): each commit is a few requests that wait on the
store, one after another. A signal that stops the command waits for the wave or batch under way
(``operations.critical``), then leaves the rest as they were.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from kcompact import storage
from kcompact.compaction.cleaning.partition_batches import PartitionBatches
from kcompact.compaction.cleaning.results import IO_ERROR, GroupResult
from kcompact.errors import CommitLost
from kcompact.errors.failure import Failure
from kcompact.logdir.listing import Segment, held_partitions, list_log_dir, scan_partition
from kcompact.operations import commit, critical
from kcompact.operations.cleaned import WrittenGroup
from kcompact.operations.recover import recover_partition

COMMITTED, UNFINISHED, ABORTED, NOT_WRITTEN, NOT_COMMITTED = (
    "committed", "committed, apply unfinished", "aborted", "not written", "not committed")


@dataclass(slots=True)
class Outcome:
    """What stage 5 did with one partition (``rows[pid]``, its groups' result rows ``groups``):
    ``COMMITTED``; ``UNFINISHED`` (committed, readers see it, but its commit record's apply did not
    finish: recovery's); ``ABORTED`` by an operator; ``NOT_WRITTEN`` (a group failed or is missing)
    or ``NOT_COMMITTED`` (the log changed, the lease was lost, the swap failed), with the error
    and its kind."""

    pid: int
    row: PartitionBatches
    groups: list[GroupResult]
    status: str
    error: str | None = None
    failure: Failure | None = None
    deleted: list[str] = field(default_factory=list)  # what the commit renamed to .deleted, to remove


def commit_partitions(rows: list[PartitionBatches], written: list[GroupResult], held: Callable[[str], bool], owner: str,
                      generations: dict[str, int], progress, outcomes: list[Outcome],
                      threads: int = 1) -> list[Outcome]:
    """Commit each of ``rows`` (the partitions cleaned) whose groups ``written`` all succeeded,
    while this job still ``held(path)`` its lease (``owner``; ``generations``: on an object store,
    the latest commit record generation seen under it); a local wave's fsyncs on ``threads``
    threads. What became of each is added to ``outcomes`` as it is known (so that a
    signal stopping the command leaves what was done), and returned."""
    ready, by_path = [], {}
    for w in written:
        by_path.setdefault(w.path, []).append(w)
    for pid, row in enumerate(rows):
        groups = by_path.get(row.path, [])
        errors = [w for w in groups if w.error]
        if errors or len(groups) != len(row.groups):
            _discard(groups)
            error, kind = ((errors[0].error, Failure(errors[0].failure)) if errors
                           else ("not every segment group was rewritten", Failure.INCOMPLETE))
            outcomes.append(Outcome(pid, row, groups, ABORTED if kind is Failure.ABORTED else NOT_WRITTEN, error, kind))
            if kind is Failure.ABORTED:
                progress(f"  aborted {row.name}: old segments kept")
            continue
        ready.append((pid, row, groups))
    # an object store's log dirs listed once for the stage, after every group was written
    listings = {log_dir: list_log_dir(log_dir) for log_dir in dict.fromkeys(row.log_dir for _, row, _ in ready)
                if commit.by_record(log_dir)}
    wave, in_wave = commit.Wave(), {}
    names = Counter((row.topic, row.partition) for row in rows)
    committed = 0

    def named(row: PartitionBatches) -> str:
        """The partition's name, with its log dir when it is in several (copies of log dirs)."""
        twice = names[(row.topic, row.partition)] > 1
        return row.name + (f" in {row.log_dir}" if twice else "")

    def checked(item: tuple[int, PartitionBatches, list[GroupResult]]) -> Outcome | list[Segment]:
        """The outcome of a partition that must not be committed (its log changed, its lease
        was lost), its groups discarded; else the segments its commit replaces."""
        pid, row, groups = item
        listing = listings.get(row.log_dir)
        part = (listing.partition(row.path, row.topic, row.partition) if listing is not None
                else scan_partition(row.path, row.topic, row.partition))
        replaced = [s for s in part.segments if s.base_offset <= row.latest_offset]
        changed = _changed_since_plan(row, replaced)
        if changed:
            _discard(groups)
            return Outcome(pid, row, groups, NOT_COMMITTED, changed, Failure.LOG_CHANGED)
        if not held(row.path):  # the last moment an abort can still stop us
            _discard(groups)
            return Outcome(pid, row, groups, ABORTED, failure=Failure.ABORTED)
        return replaced

    def attempt(item: tuple[int, PartitionBatches, list[GroupResult]]) -> Outcome:
        pid, row, groups = item
        refused = checked(item)
        if isinstance(refused, Outcome):
            return refused
        try:
            _commit(row, groups, owner, generations.get(row.path), wave)
        except CommitLost as exc:
            return Outcome(pid, row, groups, NOT_COMMITTED, str(exc), Failure.LEASE_LOST)
        except OSError as exc:
            return Outcome(pid, row, groups, NOT_COMMITTED, _recovered_after(row, exc), Failure.IO)
        return Outcome(pid, row, groups, COMMITTED)

    def commit_local(log_dir: str, items: list[tuple[int, PartitionBatches, list[GroupResult]]],
                     holds: set[tuple[str, int]] | None) -> list[Outcome]:
        """One wave of ``log_dir``'s partitions (``commit.commit_wave``; ``holds``: the log dir's partitions)."""
        done, going = [], []
        for item in items:
            replaced = checked(item)
            if isinstance(replaced, Outcome):
                done.append(replaced)
                continue
            _, row, groups = item
            going.append((item, commit.LocalCommit(row.path, row.topic, row.partition, [_written(g) for g in groups],
                                                   row.latest_offset + 1, replaced)))
        results = commit.commit_wave(log_dir, [c for _, c in going], threads, holds) if going else []
        for ((pid, row, groups), _), result in zip(going, results):
            if isinstance(result, OSError):
                done.append(Outcome(pid, row, groups, NOT_COMMITTED, _recovered_after(row, result), Failure.IO))
            else:
                done.append(Outcome(pid, row, groups, COMMITTED, deleted=result))
        return done

    def said(done: list[Outcome]) -> None:
        nonlocal committed
        for outcome in done:
            row = outcome.row
            if outcome.status == COMMITTED:
                committed += 1  # numbered among the partitions ready to commit
                if commit.by_record(row.log_dir):
                    in_wave.setdefault(row.log_dir, []).append(outcome)
                progress(f"  committed {named(row)} ({committed}/{len(ready)}): checkpoint {row.latest_offset + 1}")
            elif outcome.status == ABORTED:
                progress(f"  aborted {named(row)}: old segments kept")
        outcomes.extend(done)

    local: dict[str, list] = {}
    for item in ready:
        if not commit.by_record(item[1].log_dir):
            local.setdefault(item[1].log_dir, []).append(item)
    for log_dir, items in local.items():
        try:  # listed once for every wave's checkpoint (no partition dir comes or goes under the log dir's lock)
            holds = held_partitions(log_dir)
        except OSError:
            holds = None  # each wave lists it again, and fails on its error
        for at in range(0, len(items), commit.WAVE):
            # a stop held while they commit is raised once they are reported: every commit is said
            with critical.section():
                said(commit_local(log_dir, items[at:at + commit.WAVE], holds))
    remote = [item for item in ready if commit.by_record(item[1].log_dir)]
    for at in range(0, len(remote), storage.IN_FLIGHT):
        batch = remote[at:at + storage.IN_FLIGHT]
        with critical.section():
            said(storage.map_in_flight(attempt, batch, batch[0][1].path))
    for log_dir, exc in wave.finish().items():
        for outcome in in_wave[log_dir]:  # committed (readers see the new segments): the rest is recovery's
            outcome.status, outcome.failure = UNFINISHED, Failure.IO
            outcome.error = (
                f"{IO_ERROR}committed, but the commit record's apply did not finish ({exc}); the next run finishes it"
            )
            progress(f"  {named(outcome.row)}: {outcome.error}")
    return outcomes


def _recovered_after(row: PartitionBatches, exc: OSError) -> str:
    """A commit that stopped part way (a swap): finished or undone as a broker would; the error."""
    try:
        recover_partition(row.path, indexes=False)
        return f"{IO_ERROR}commit failed ({exc}); the interrupted swap was recovered"
    except OSError as again:
        return f"{IO_ERROR}commit failed ({exc}), recovery too ({again}): run 'kcompact recover'"


def _changed_since_plan(row: PartitionBatches, now: list[Segment]) -> str | None:
    """The segments the commit would replace (``now``: those up to the cleaned range's end, as
    listed for the commit) are not those the job read (retention, another cleaner, a restarted
    broker got there first): committing would lose records."""
    bases, read = [s.base_offset for s in now], row.segments_read
    if bases != read:
        return f"the partition changed while it was being cleaned (segments {read} became {bases}); cleaned next run"
    return None


def _written(group: GroupResult) -> WrittenGroup:
    return WrittenGroup(group.base_offset, group.size, group.batches, group.records, group.files)


def _commit(row: PartitionBatches, groups: list[GroupResult], owner: str, generation: int | None,
            wave: commit.Wave) -> None:
    """The object-store commit step (``operations.commit``) for a partition whose groups are all written."""
    commit.commit_cleaned(row.log_dir, row.path, row.topic, row.partition, [_written(g) for g in groups],
                          row.segments_read, row.latest_offset + 1, owner, generation, wave)


def _discard(groups: list[GroupResult]) -> None:
    commit.discard_cleaned(path for g in groups for path in g.files)
