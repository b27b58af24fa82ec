"""Retention executed: each partition's planned prefix deleted, then the log dir's checkpoints moved.

The plan (``planner.build.plan``, columns ``retention_*``; ``kcompact.retain`` makes it and calls
``execute``) says which oldest segments Kafka's
UnifiedLog.deleteOldSegments removes and why; the driver alone then, per partition:
1. lists the partition again and checks that the planned segments are still its oldest ones, with
   the sizes planned, and that its cleaning state still lets retention run;
2. renames every file of every deleted segment (``.log``, ``.index``, ``.timeindex``,
   ``.txnindex``, and the producer snapshot ``<base>.snapshot`` of that base offset, as Kafka
   deletes snapshots of deleted segments) to ``.deleted``, oldest segment first, ``.log`` first;
   fsyncs the directory;
3. removes the ``.deleted`` files.
Then, per log dir, once all its partitions are done, one compare-and-swap write each
(``operations.checkpoints.move_log_starts``, the rule an object store's commit record applies too):
4. ``log-start-offset-checkpoint``: every changed partition's entry set to its new log start
   offset, the entries of the other partitions the log dir holds kept;
5. ``cleaner-offset-checkpoint``: entries below the new log start raised to it (what Kafka's
   cleaner does with a checkpoint below the log start);
each file drops the entries of partitions the log dir no longer holds, as Kafka's writes do.

A crash at any instant leaves a log dir a broker loads as the old or the new log: it deletes
``.deleted`` files on load, takes max(checkpoint, first base offset) as the log start, and its
cleaner resets a checkpoint below the log start.

Steps 2-3 are the commit step's (``operations.commit``, which chooses for compaction too). On
object stores (``s3://``) a rename is a copy and a delete, so steps 2-5 are one commit record
of ``operations.s3commit`` instead (no staged files; the deleted files as replaced; the new log
start), created by a conditional PUT on the partition's next generation: from that instant
readers see the new log start, and the apply (or ``kcompact recover`` after a crash) deletes the
files and moves both checkpoint entries by compare-and-swap. A compaction commit of the same
partition racing it loses the generation to it, or wins it and this partition is reported
failed (transient), never mixed.
"""

from __future__ import annotations

import posixpath
import uuid
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field

from kcompact import errors, storage
from kcompact.conf.units import MB, UNIT_NOTE
from kcompact.contracts.plan_row import PlanRow, RetentionDelete
from kcompact.errors import FormatError, LogChanged
from kcompact.errors.failure import Failure, outcome_counts
from kcompact.logdir.listing import SEGMENT_KINDS, scan_partition, segment_name
from kcompact.operations import commit, states
from kcompact.operations.checkpoints import move_log_starts


# -- the report ---------------------------------------------------------------------------------
@dataclass(slots=True)
class PartitionRetention:
    topic: str | None
    partition: int | None
    path: str
    log_dir: str
    log_start: int | None  # before retention
    new_log_start: int | None
    segments: list[RetentionDelete] = field(default_factory=list)
    bytes_deleted: int = 0
    deleted: bool = False  # the files are gone (never in a dry run)
    skipped: str | None = None
    skip_kind: Failure | None = None  # what ``skipped`` is (None: a skip that is no failure)
    error: str | None = None
    warnings: list[str] = field(default_factory=list)  # problems that do not stop retention

    @classmethod
    def of(cls, row: PlanRow) -> PartitionRetention:
        kind = row.retention_skip_kind and Failure(row.retention_skip_kind)
        return cls(row.topic, row.partition, row.path, row.log_dir, row.log_start_offset,
                   row.retention_log_start, list(row.retention_deletes),
                   row.retention_bytes_deleted or 0, skipped=row.retention_skip_reason, skip_kind=kind,
                   warnings=[] if kind is Failure.BAD_INPUT else list(row.problems))

    def skip(self, why: str | None) -> None:
        """Skipped for ``why`` (a ``states.Refusal`` carries its kind), or not when None."""
        self.skipped, self.skip_kind = why, states.kind_of(why)

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}" if self.topic is not None else self.path

    @property
    def reasons(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for s in self.segments:
            counts[s.reason] = counts.get(s.reason, 0) + 1
        return counts

    def summary(self, dry_run: bool) -> str:
        reasons = ", ".join(f"{reason}: {n}" for reason, n in self.reasons.items())
        what = (
            f"{len(self.segments)} segment{'' if len(self.segments) == 1 else 's'} ({self.bytes_deleted / MB:.2f} MB)"
        )
        if self.error:
            return f"{self.name}: NOT deleted ({what} due): {self.error}"
        if self.skipped:
            return f"{self.name}: retention skipped: {self.skipped}" + (f" ({what} due: {reasons})" if reasons else "")
        verb = "would delete" if dry_run else "deleted"
        warn = f"; warnings: {'; '.join(self.warnings)}" if self.warnings else ""
        return (f"{verb} {what} of {self.name}: log start {self.log_start} -> {self.new_log_start} "
                f"({reasons}){warn}")


@dataclass(slots=True)
class RetentionReport:
    now: int
    dry_run: bool
    partitions: list[PartitionRetention] = field(default_factory=list)
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    run: dict = field(default_factory=dict)  # where and how the run ran (jobs.cli: clock, host, Spark, arguments)
    # log dir -> its paused partitions (``kcompact pause``): retention waits for a pause, as Kafka's does
    paused: dict[str, list[str]] = field(default_factory=dict)

    @property
    def totals(self) -> dict:
        due = [p for p in self.partitions if not p.skipped and not p.error]
        counts = outcome_counts(self.partitions)
        return {
            "partitions": counts["partitions"], "deleted": sum(p.deleted for p in due),
            "skipped": counts["skipped"], "failed": counts["failed"],
            "segments": sum(len(p.segments) for p in due), "bytes": sum(p.bytes_deleted for p in due),
            "seconds": self.seconds,
        }

    @property
    def attempted(self) -> int:
        return sum(1 for p in self.partitions if not p.skipped)

    @property
    def blocked(self) -> list[PartitionRetention]:
        """Partitions with segments due (or unknown) that bad input or an uncleanable state held back:
        work this run could not do until someone fixes them."""
        return [p for p in self.partitions if p.skipped and p.skip_kind is not None and p.skip_kind.blocks]

    def text(self) -> str:
        """Every partition's line but those ``execute`` printed as it deleted them, then the totals."""
        lines = [p.summary(self.dry_run) for p in self.partitions if not p.deleted or p.error]
        lines += states.paused_lines(self.paused)
        t = self.totals
        verb = "to delete" if self.dry_run else "deleted"
        lines.append(f"retention: {t['partitions']} partition{'' if t['partitions'] == 1 else 's'} "
                     f"({t['skipped']} skipped, {t['failed']} failed); "
                     f"{t['segments']} segments, {t['bytes'] / MB:.2f} MB {verb} in {t['seconds']:.1f} s")
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)

    def to_json(self) -> dict:
        return {"run": self.run, "now": self.now, "dry_run": self.dry_run, "units": UNIT_NOTE,
                "totals": self.totals, "notes": self.notes, "paused": self.paused,
                "partitions": [asdict(p) | {"reasons": p.reasons} for p in self.partitions]}


def execute(plan: Iterable[PlanRow], now: int, dry_run: bool = False,
            progress: Callable[[str], None] = print) -> RetentionReport:
    """Delete what the ``retention_*`` columns of the plan's rows say, log dir by log dir."""
    report = RetentionReport(now=now, dry_run=dry_run)
    owner = f"kcompact-retention-{uuid.uuid4().hex[:12]}"  # names this run in its object-store commit records
    planned = list(plan)
    for r in sorted((r for r in planned if r.state == states.PAUSED and r.topic is not None),
                    key=lambda r: (r.log_dir, r.topic, r.partition)):
        report.paused.setdefault(r.log_dir, []).append(r.name)
    rows = [r for r in planned
            if r.retention_deletes or r.retention_skip_kind == Failure.BAD_INPUT]
    by_dir: dict[str, list[PlanRow]] = {}
    for row in sorted(rows, key=lambda r: (r.log_dir, r.topic or "", r.partition or 0, r.path)):
        by_dir.setdefault(row.log_dir, []).append(row)
    for log_dir, dir_rows in by_dir.items():
        done: list[PartitionRetention] = []
        for row in dir_rows:
            entry = PartitionRetention.of(row)
            report.partitions.append(entry)
            if entry.skipped or dry_run:
                continue
            try:
                entry.skip(_delete_prefix(row, owner))
            except (LogChanged, FormatError, OSError, errors.CommitLost) as exc:
                entry.error = str(exc)
                continue
            if entry.skipped is None:
                entry.deleted = True
                done.append(entry)
                progress(f"  {entry.summary(dry_run)}")
        if done and not commit.by_record(log_dir):  # a commit record moved them already
            try:
                _move_checkpoints(log_dir, {(p.topic, p.partition): p.new_log_start for p in done})
            except (FormatError, OSError) as exc:
                for p in done:  # the segments are gone; a broker takes the first base offset as log start
                    p.error = f"segments deleted, checkpoints not written: {exc}"
    return report


def _delete_prefix(row: PlanRow, owner: str) -> str | None:
    """Delete one partition's planned prefix; returns a skip reason instead when its cleaning
    state changed since planning. Raises ``LogChanged`` when its segments did, ``CommitLost`` when
    a compaction committed the partition first (object stores)."""
    path = row.path
    files, _ = storage.list_dir(path)
    part = scan_partition(path, row.topic, row.partition, files)
    planned = [(d.base_offset, d.size) for d in row.retention_deletes]
    found = [(s.base_offset, s.size) for s in part.segments]
    if len(found) <= len(planned) or found[:len(planned)] != planned or part.leftovers:
        raise LogChanged(f"{path}: changed since planning (planned to delete (base, size) {planned}; "
                      f"found {found[:len(planned) + 1]}{', leftovers' if part.leftovers else ''}); nothing deleted")
    unsettled = _unsettled_commit(part)
    if unsettled:
        raise LogChanged(f"{path}: {unsettled}; nothing deleted")
    skip = _state_skip(path, row.cleanup_policy or "")
    if skip:
        return skip
    names = {posixpath.basename(info.path) for info in files}
    victims = []
    for seg in part.segments[:len(planned)]:
        victims += [segment_name(seg.base_offset, kind) for kind in SEGMENT_KINDS if getattr(seg, kind) is not None]
        if segment_name(seg.base_offset, "snapshot") in names:
            victims.append(segment_name(seg.base_offset, "snapshot"))
    commit.commit_deletion(row.log_dir, path, row.topic, row.partition, victims, row.retention_log_start,
                           owner, part.commit.generation if part.commit else 0)
    return None


def _unsettled_commit(part) -> str | None:
    """Object stores: why the partition's commit records forbid a new one now (a commit listed
    meanwhile, or one not yet applied: its owner is at work, or ``kcompact recover`` finishes it)."""
    if part.commit_problem is not None:
        return str(part.commit_problem)
    if part.commit is not None and not part.commit.applied:
        return (f"its commit record generation {part.commit.generation} is not applied yet (a compaction "
                "committing, or one interrupted: kcompact recover finishes it)")
    return None


def _state_skip(partition_dir: str, policy: str) -> str | None:
    """The cleaning state as it is now (the plan's may be minutes old), as retention sees it."""
    try:
        state, _ = states.read(partition_dir)
    except FormatError as exc:
        return f"unreadable cleaning state: {exc}"
    return states.retention_skip(state, policy)


def _move_checkpoints(log_dir: str, new_starts: dict[tuple[str, int], int]) -> None:
    """One write of each checkpoint for every partition of ``log_dir`` that changed."""
    move_log_starts(log_dir, new_starts)
