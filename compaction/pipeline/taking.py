"""What a compaction job takes before it cleans: a lease on each selected partition, the recovery
of what a crashed run left in it, and the check that no other job cleaned it since the plan
(``take_partitions``). No ``.lock`` is taken here: the function that opened the command holds the
log dirs' (``storage.held_locks``) and hands over the plan of those alone."""

from __future__ import annotations

import errno
from typing import TYPE_CHECKING

from kcompact import storage
from kcompact.compaction.pipeline.leases import LeaseKeeper
from kcompact.compaction.reports.report import PartitionReport
from kcompact.contracts.plan_row import PlanRow
from kcompact.errors import FormatError
from kcompact.errors.failure import Failure
from kcompact.logdir.listing import list_log_dir
from kcompact.operations.recover import needs_recovery, recover_partition
from kcompact.readers import checkpoint

if TYPE_CHECKING:
    from kcompact.compaction.pipeline.job_result import JobResult


def take_partitions(selected: list[PlanRow], keeper: LeaseKeeper, result: JobResult, progress) -> list[PlanRow]:
    """Lease each selected partition (all at once, ``LeaseKeeper.acquire_many``) and finish any
    swap a crashed run left in it (the broker's recovery). A partition another job holds is
    skipped; one where recovery changed files is skipped too, since the plan no longer describes
    it (the next run plans it afresh). Each log dir is listed once, after its partitions are leased, and its
    cleaner checkpoint read once (an object store is asked nothing per partition that a listing
    tells); on an object store the partitions as listed go to the tasks (``result.listed``)."""
    taken = keeper.acquire_many([row.path for row in selected])
    leased = []
    for row in selected:
        busy = taken[row.path]
        if isinstance(busy, OSError):  # its state file cannot be written (a full disk): retried next run
            result.fail(row, _lease_failure(busy, row), Failure.IO, transient=True)
            continue
        if busy is not None:
            result.report.partitions.append(PartitionReport.skipped_for(row, busy))
            progress(f"  skipped {row.name}: {busy}")
            continue
        leased.append(row)
    listings = {log_dir: list_log_dir(log_dir) for log_dir in dict.fromkeys(row.log_dir for row in leased)}
    checkpoints: dict[str, dict | str] = {}
    keep = []
    for row in leased:
        listing = listings[row.log_dir]
        part = listing.partition(row.path, row.topic, row.partition)
        # swaps only: the command line recovered the whole log dirs before planning
        recovered = recover_partition(row.path, indexes=False) if needs_recovery(part) else None
        if recovered is not None and recovered.changed:
            keeper.release(row.path)
            why = f"recovered an interrupted run first ({recovered.summary()}); planned again next run"
            result.report.partitions.append(PartitionReport.skipped_for(row, why, Failure.LOG_CHANGED))
            progress(f"  skipped {row.name}: {why}")
            continue
        if row.log_dir not in checkpoints:
            checkpoints[row.log_dir] = cleaner_checkpoint(row.log_dir)
        moved = cleaned_since_plan(row, checkpoints[row.log_dir])
        if moved:
            keeper.release(row.path)
            result.report.partitions.append(PartitionReport.skipped_for(row, moved, Failure.LOG_CHANGED))
            progress(f"  skipped {row.name}: {moved}")
            continue
        if not storage.is_local_path(row.path):
            result.generations[row.path] = (recovered.generation if recovered is not None
                                               else listing.generation(row.topic, row.partition))
            if recovered is None:
                result.listed[row.path] = part
        keep.append(row)
    return keep


def _lease_failure(exc: OSError, row: PlanRow) -> str:
    """Why a partition's lease could not be written: on a full disk, the state file and the room
    its cleaning needs (``results.no_space``), else the error naming the state file."""
    from kcompact.compaction.cleaning.results import IO_ERROR, no_space
    from kcompact.operations.states import state_path

    path = state_path(row.path)
    if exc.errno == errno.ENOSPC:
        return no_space(OSError(exc.errno, exc.strerror), path, row.cleanable_bytes or 0)  # not its .tmp
    return f"{IO_ERROR}{storage.describe_error(exc, path)}"


def cleaner_checkpoint(log_dir: str) -> dict | str:
    """The entries of ``log_dir``'s cleaner-offset-checkpoint, or what is wrong with the file."""
    path = storage.join(log_dir, checkpoint.CLEANER_OFFSET)
    found = storage.read_versioned(path)
    try:
        return checkpoint.parse(path, found[0]) if found else {}
    except FormatError as exc:
        return str(exc)


def cleaned_since_plan(row: PlanRow, entries: dict | str) -> str | None:
    """Another job cleaned the partition between this plan and our lease (its cleaner checkpoint
    entry moved; ``entries``: the checkpoint read after the lease): the plan's dirty range is
    stale, and cleaning it again would redo that work."""
    if isinstance(entries, str):
        return f"{entries}; planned again next run"
    now = entries.get((row.topic, row.partition))
    if now == row.checkpoint_offset:
        return None
    def entry(offset: int | None) -> str:
        return "no entry" if offset is None else str(offset)

    return (f"cleaned by another job since it was planned (its cleaner checkpoint went from "
            f"{entry(row.checkpoint_offset)} to {entry(now)}); planned again next run")
