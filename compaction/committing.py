"""Stage 5 of the compaction job, on the driver alone: every partition whose groups were all
written is checked (its segments are still those the job read, the job still holds its lease)
and committed (``operations.commit``); on an object store the commits' applies then finish
together per log dir (``operations.commit.Wave``).

On an object store a batch of partitions is committed at once (``storage.map_in_flight``): each
commit is a few requests that wait on the store, one after another. A signal that stops the
command waits for the batch under way (``operations.critical``), then leaves the rest as they
were; on local disk the partitions go one at a time, as before.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from kcompact import storage
from kcompact.compaction.leases import LeaseKeeper
from kcompact.compaction.report import PartitionReport, group_outcomes
from kcompact.compaction.results import ABORTED_BY_OPERATOR, IO_ERROR
from kcompact.logdir.listing import Listing, list_log_dir, scan_partition
from kcompact.operations import commit, critical, s3commit
from kcompact.operations.cleaned import WrittenGroup
from kcompact.operations.recover import recover_partition

if TYPE_CHECKING:
    from kcompact.compaction.job_result import JobResult


def commit_partitions(rows: list[dict], written: list[dict], report_row: Callable[[dict, int], dict], counts: dict,
                      keeper: LeaseKeeper, result: JobResult, progress) -> None:
    """Commit each of ``rows`` (the partitions cleaned) whose groups ``written`` all succeeded;
    ``report_row(row, pid)``: the row as its report reads it."""
    report = result.report
    ready = []
    for pid, row in enumerate(rows):
        groups = [w for w in written if w["path"] == row["path"]]
        errors = [w["error"] for w in groups if w["error"]]
        if errors or len(groups) != len(row["groups"]):
            _discard(groups)
            error = errors[0] if errors else "not every segment group was rewritten"
            if error == ABORTED_BY_OPERATOR:
                _aborted(row, result, progress)
            else:
                result.fail(row | {"error": error}, groups=group_outcomes(row, groups, "written"))
            continue
        ready.append((pid, row, groups))
    # an object store's log dirs listed once for the stage, after every group was written
    listings = {log_dir: list_log_dir(log_dir) for log_dir in dict.fromkeys(row["log_dir"] for _, row, _ in ready)
                if commit.by_record(log_dir)}
    wave, in_wave = commit.Wave(), {}
    names = [(row["topic"], row["partition"]) for row in rows]

    def named(row: dict) -> str:
        """The partition's name, with its log dir when it is in several (copies of log dirs)."""
        twice = names.count((row["topic"], row["partition"])) > 1
        return f"{row['topic']}-{row['partition']}" + (f" in {row['log_dir']}" if twice else "")

    def attempt(item: tuple[int, dict, list[dict]]) -> tuple[str, object]:
        _, row, groups = item
        changed = _changed_since_plan(row, listings.get(row["log_dir"]))
        if changed:
            return "changed", changed
        if not keeper.held(row["path"]):  # the last moment an abort can still stop us
            return "aborted", None
        try:
            return "committed", _commit(row, groups, keeper.owner, result.generations.get(row["path"]), wave)
        except (s3commit.CommitLost, OSError) as exc:
            return "failed", exc

    size = storage.IN_FLIGHT if listings else 1  # local disk: one at a time, each reported as it ends
    done = 0
    for at in range(0, len(ready), size):
        batch = ready[at:at + size]
        # a stop held while they commit is raised once they are reported: every commit is said
        with critical.section():
            outcomes = storage.map_in_flight(attempt, batch, batch[0][1]["path"])
            for (pid, row, groups), (outcome, value) in zip(batch, outcomes):
                if outcome == "changed":
                    _discard(groups)
                    result.fail(row | {"error": value}, transient=True)
                elif outcome == "aborted":
                    _discard(groups)
                    _aborted(row, result, progress)
                elif isinstance(value, s3commit.CommitLost):
                    result.fail(row | {"error": str(value)}, transient=True)
                elif outcome == "failed":
                    result.fail(row | {"error": _recovered_after(row, value)})
                else:
                    done += 1  # numbered among the partitions ready to commit
                    result.deleted += value
                    in_wave.setdefault(row["log_dir"], []).append((row, len(report.partitions)))
                    report.partitions.append(PartitionReport.of(report_row(row, pid), counts, groups, committed=True))
                    progress(f"  committed {named(row)} ({done}/{len(ready)}): checkpoint {row['latest_offset'] + 1}")
    for log_dir, exc in wave.finish().items():
        for row, at in in_wave[log_dir]:  # committed (readers see the new segments): the rest is recovery's
            error = f"{IO_ERROR}committed, but the commit record's apply did not finish ({exc}); the next run finishes it"
            report.partitions[at] = PartitionReport.failed(row | {"error": error}, [])
            progress(f"  {row['topic']}-{row['partition']}: {error}")


def _recovered_after(row: dict, exc: OSError) -> str:
    """A commit that stopped part way (a swap): finished or undone as a broker would; the error."""
    try:
        recover_partition(row["path"], indexes=False)
        return f"{IO_ERROR}commit failed ({exc}); the interrupted swap was recovered"
    except OSError as again:
        return f"{IO_ERROR}commit failed ({exc}), recovery too ({again}): run 'kcompact recover'"


def _aborted(row: dict, result: JobResult, progress) -> None:
    result.report.partitions.append(PartitionReport.skipped_for(row, "aborted by an operator; old segments kept"))
    progress(f"  aborted {row['topic']}-{row['partition']}: old segments kept")


def _changed_since_plan(row: dict, listing: Listing | None) -> str | None:
    """The segments the commit would replace are not those the job read (retention, another
    cleaner, a restarted broker got there first): committing would lose records. ``listing``:
    the log dir as listed for the commits (object stores; else the partition dir is listed now)."""
    part = (listing.partition(row["path"], row["topic"], row["partition"]) if listing is not None
            else scan_partition(row["path"], row["topic"], row["partition"]))
    now = [s.base_offset for s in part.segments if s.base_offset <= row["latest_offset"]]
    read = [base for g in row["groups"] for base in g["segments"]]
    if now != read:
        return f"the partition changed while it was being cleaned (segments {read} became {now}); cleaned next run"
    return None


def _commit(row: dict, groups: list[dict], owner: str, generation: int | None, wave: commit.Wave) -> list[str]:
    """The commit step (``operations.commit``) for a partition whose groups are all written."""
    written = [WrittenGroup(g["base_offset"], g["size"], g["batches"], g["records"], tuple(g["files"]))
               for g in groups]
    read = [base for g in row["groups"] for base in g["segments"]]
    return commit.commit_cleaned(row["log_dir"], row["path"], row["topic"], row["partition"], written, read,
                                 row["latest_offset"] + 1, owner, generation, wave)


def _discard(groups: list[dict]) -> None:
    commit.discard_cleaned(path for g in groups for path in g["files"])
