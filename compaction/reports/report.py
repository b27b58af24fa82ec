"""What a compaction run did, per partition and in total: printed as Kafka's cleaner logs a
cleaning (LogCleaner's stats message, one per partition), written as JSON with Kafka's cleaner
metrics (``metrics``: the gauges of LogCleaner and LogCleanerManager, by their JMX names).

The text's MB are Kafka's, 2^20 bytes (``conf.units``: every MB of this tool), formatted as
Java's ``%,.1f`` formats them (the shortest decimal of the double, rounded half up), so a line
reads as a broker's log would for the same bytes. The JSON gives exact bytes and ``mb_per_s`` in
the same MB.

Below the partitions' lines, every run says what it left undone and why: partitions the plan
could not clean because of bad input or an uncleanable state (until someone fixes them, every
run lists them and ends partial), the uncleanable partitions per log dir (Kafka's
``uncleanable-partitions-count`` is always visible), the paused ones with the way out (a pause
is an operator's choice, so it leaves the exit status alone, but a forgotten one must not stop
cleaning silently), the partitions another job's live lease holds, with its holder and the
lease's end (they wait, so the run is partial), and cleaner checkpoints reset to the log start
because they lay outside the log. A run that cleaned no partition ends with what happened instead of a line of zeros.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from decimal import ROUND_HALF_UP, Decimal

from kcompact.compaction.cleaning.partition_batches import PartitionBatches
from kcompact.compaction.cleaning.results import GroupResult
from kcompact.conf.units import MB, UNIT_NOTE
from kcompact.contracts.plan_row import LeaseHolder, PlanRow
from kcompact.errors.failure import Failure, outcome_counts
from kcompact.operations.states import IDLE, PAUSED, UNCLEANABLE, Refusal, kind_of, paused_lines
from kcompact.writers import snappy_library

REASONS = ("superseded", "tombstone", "aborted", "keyless", "marker")
MIB = MB  # LogCleaner.recordStats: mb(bytes) = bytes / (1024 * 1024)
# Kafka's cleaner gauges and what each means for a run of this job (the run plays one cleaner
# thread's pass over every partition it cleaned; the plan plays LogCleanerManager's view).
METRICS = {
    "max-dirty-percent": "100 x the largest cleanable ratio (cleanable bytes / log bytes) among the planned "
                         "compacted, idle, non-empty partitions, truncated to an integer",
    "max-clean-time-secs": "the longest time one partition took to clean, in whole seconds (truncated)",
    "max-buffer-utilization-percent": "how full the dedupe buffer got; always 0 (see the note)",
    "cleaner-recopy-percent": "100 x bytes written / bytes read by the partitions cleaned, truncated",
    "max-compaction-delay-secs": "how far past max.compaction.lag.ms the oldest dirty first batch of a planned "
                                 "compacted, idle partition is, in whole seconds (0: none overdue)",
    "uncleanable-partitions-count": "per log dir: partitions marked uncleanable (before the run, or by it)",
    "uncleanable-bytes": "per log dir: the cleanable bytes of those partitions, as planned",
    "time-since-last-run-ms": "per log dir: milliseconds from the moment the previous run began choosing what to clean "
                              "to the moment this one did (Kafka stamps a run as grabFilthiestCompactedLog starts), "
                              "as the gauge read just before this run",
}
NO_BUFFER = ("kcompact has no dedupe buffer: the offset map holds exact keys in Spark tasks (a shuffle when a "
             "partition exceeds a task), not in a fixed-size hash map, so no cleaning stops at a full buffer")
NO_PLAN = "unknown: the report was not given the plan (Report.observe_plan)"
NO_LAST_RUN = "null: no earlier run of kcompact recorded in that log dir (kcompact-last-run.json)"


def java_fixed(x: float, places: int, grouping: bool = True) -> str:
    """``String.format("%,.Nf", x)`` (``"%.Nf"`` without grouping) as Java prints a finite double."""
    rounded = Decimal(repr(x)).quantize(Decimal(1).scaleb(-places), ROUND_HALF_UP)
    return format(rounded, f"{',' if grouping else ''}.{places}f")


def _reduction(after: int, before: int) -> float:
    """Kafka's "% size reduction" / "% fewer messages": 100 * (1 - after / before)."""
    return 100.0 * (1.0 - after / before) if before else 0.0


def group_outcomes(row: PartitionBatches, written: list[GroupResult], done: str) -> list[dict]:
    """What became of each planned segment group of ``row``: ``done`` for a group written without
    an error; on a failure, "written, then discarded" (the partition stays untouched)."""
    by_group = {w.group: w for w in written}
    failed = any(w.error for w in written) or len(written) != len(row.groups)
    out = []
    for g in row.groups:
        w = by_group.get(g.group)
        outcome = ("not written" if w is None else f"failed: {w.error}" if w.error
                   else "written, then discarded" if failed else done)
        out.append({"base_offset": g.base_offset, "segments": list(g.segments), "outcome": outcome})
    return out


@dataclass(slots=True)
class PartitionReport:
    topic: str
    partition: int
    path: str
    dirty_start: int
    dirty_end: int | None
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    removed: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REASONS, 0))
    seconds: float = 0.0
    committed: bool = False
    error: str | None = None
    skipped: str | None = None  # not attempted (another job's lease, an abort...): neither done nor failed
    failure: Failure | None = None  # the kind of ``error`` or ``skipped`` (None: a skip that is no failure)
    holder: LeaseHolder | None = None  # skipped for another job's lease: its holder (``CleaningState.lease_holder``)
    # per output segment group: its base offset, the segments it replaces and what became of it
    # ("swapped in"; on a failure "written, then discarded", "failed: ..." or "not written")
    groups: list[dict] = field(default_factory=list)

    @property
    def mb_per_s(self) -> float:
        return self.bytes_read / MB / self.seconds if self.seconds else 0.0

    def to_json(self) -> dict:
        """The report's JSON row: every field, as ``dataclasses.asdict`` would give it, then
        ``mb_per_s``. Built field by field: ``asdict`` deep-copies each value through a generic
        walk, a cost every run pays once per partition."""
        row = {name: getattr(self, name) for name in _FIELDS}
        row["removed"] = dict(self.removed)
        row["holder"] = None if self.holder is None else asdict(self.holder)
        row["groups"] = [g | {"segments": list(g["segments"])} for g in self.groups]
        row["mb_per_s"] = self.mb_per_s
        return row

    @classmethod
    def failed(cls, row: PlanRow | PartitionBatches, error: str, failure: Failure | str, groups: list[dict] = (),
               seconds: float = 0.0) -> PartitionReport:
        """``row``'s partition failed of ``error``, of kind ``failure``."""
        return cls(row.topic, row.partition, row.path, row.first_dirty_offset, None, seconds=seconds, error=error,
                   failure=Failure(failure), groups=list(groups))

    @classmethod
    def skipped_for(cls, row: PlanRow | PartitionBatches, why: str, kind: Failure | None = None) -> PartitionReport:
        """Not attempted for ``why``: its kind ``kind``, or the one a ``states.Refusal`` carries."""
        return cls(row.topic, row.partition, row.path, row.first_dirty_offset, None, skipped=why,
                   failure=kind or kind_of(why), holder=why.holder if isinstance(why, Refusal) else None)

    @classmethod
    def of(cls, row: PartitionBatches, bytes_read: int, counts: dict[tuple[str, str], int], groups: list[GroupResult],
           committed: bool) -> PartitionReport:
        """``row``'s partition cleaned (``committed``, or a dry run's): ``bytes_read``: its batches'
        bytes; ``counts``: records per (partition dir, fate); ``groups``: its groups' results."""
        removed = {reason: counts.get((row.path, reason), 0) for reason in REASONS}
        kept = counts.get((row.path, "kept"), 0)
        return cls(
            row.topic, row.partition, row.path, row.first_dirty_offset, row.latest_offset + 1,
            bytes_read=bytes_read,
            bytes_written=sum(g.size for g in groups),
            records_read=kept + sum(removed.values()), records_kept=kept, removed=removed,
            seconds=row.seconds + sum(g.seconds for g in groups), committed=committed,
            groups=group_outcomes(row, groups, "swapped in" if committed else "would be written"),
        )

    def summary(self, where: bool = False) -> str:
        """Kafka's cleaner stats message for this partition (a dry run says "would clean" and
        has no end size: nothing was written), then the records removed by reason. ``where``: the
        partition named with its log dir (copies of one partition in several log dirs)."""
        name = f"{self.topic}-{self.partition}" + (f" in {self.path.rstrip('/').rpartition('/')[0]}" if where else "")
        if self.skipped:
            return f"{name}: skipped: {self.skipped}"
        if self.error:
            groups = "; ".join(f"group {g['base_offset']} {g['outcome'].split(':')[0]}" for g in self.groups)
            return (f"{name}: NOT cleaned, its files left as they were: {self.error}"
                    + (f" (segment groups: {groups})" if groups else ""))
        read = self.bytes_read / MIB
        rate = read / self.seconds if self.seconds else 0.0
        fewer = java_fixed(_reduction(self.records_kept, self.records_read), 1, grouping=False)
        lines = [
            f"Log cleaner thread 0 {'cleaned' if self.committed else 'would clean'} log {name} "
            f"(dirty section = [{self.dirty_start}, {self.dirty_end}])",
            f"\t{java_fixed(read, 1)} MB of log processed in {java_fixed(self.seconds, 1)} seconds "
            f"({java_fixed(rate, 1)} MB/sec).",
            f"\tStart size: {java_fixed(read, 1)} MB ({self.records_read:,d} messages)",
        ]
        if self.committed:
            size = java_fixed(_reduction(self.bytes_written, self.bytes_read), 1, grouping=False)
            lines += [f"\tEnd size: {java_fixed(self.bytes_written / MIB, 1)} MB ({self.records_kept:,d} messages)",
                      f"\t{size}% size reduction ({fewer}% fewer messages)"]
        else:
            lines += [f"\tEnd size: not written in a dry run ({self.records_kept:,d} messages)",
                      f"\t{fewer}% fewer messages"]
        removed = ", ".join(f"{n:,d} {reason}" for reason, n in self.removed.items() if n)
        if removed:
            lines.append(f"\tRemoved: {removed}")
        return "\n".join(lines)


_FIELDS = tuple(f.name for f in fields(PartitionReport))


@dataclass(slots=True)
class Report:
    now: int
    dry_run: bool
    partitions: list[PartitionReport] = field(default_factory=list)
    seconds: float = 0.0
    stages: dict[str, float] = field(default_factory=dict)  # wall seconds, back to back from session ready
    planned: list[PlanRow] | None = None  # every planned partition (observe_plan)
    marked: list[str] = field(default_factory=list)  # partition dirs this run marks uncleanable
    # cleaner-offset-checkpoint entries outside their log, reset to the log start as Kafka's
    # grabFilthiestCompactedLog resets them, whether or not the partition is cleaned
    checkpoint_resets: list[dict] = field(default_factory=list)
    # log dir -> wall ms at which its previous run began choosing (None: none recorded), and when this one did
    previous_runs: dict[str, int | None] = field(default_factory=dict)
    began_choosing_ms: int | None = None
    run: dict = field(default_factory=dict)  # where and how the run ran (jobs.cli: clock, host, Spark, arguments)
    # partition dir -> its snappy batches compressed anew by an executor without Google's snappy
    inexact_snappy: dict[str, int] = field(default_factory=dict)

    def observe_plan(self, plan: Iterable[PlanRow], marked: Iterable[str] = (), paused: Iterable[str] = ()) -> None:
        """Keep the rows of ``plan``, what Kafka's cleaner-manager gauges read, the partition dirs
        this run marks uncleanable and those paused since it planned (as the state files now read)."""
        now_paused = set(paused)
        self.planned = [r.but(state=PAUSED) if r.path in now_paused else r for r in plan]
        self.marked = sorted(set(marked))

    @property
    def totals(self) -> dict:
        done = [p for p in self.partitions if not p.error and not p.skipped]
        removed = {reason: sum(p.removed.get(reason, 0) for p in done) for reason in REASONS}
        read = sum(p.bytes_read for p in done)
        counts = outcome_counts(self.partitions)
        return {
            "partitions": counts["partitions"], "cleaned": sum(p.committed for p in done),
            "failed": counts["failed"], "skipped": counts["skipped"],
            "bytes_read": read, "bytes_written": sum(p.bytes_written for p in done),
            "records_read": sum(p.records_read for p in done), "records_kept": sum(p.records_kept for p in done),
            "removed": removed, "seconds": self.seconds,
            "mb_per_s": read / MB / self.seconds if self.seconds else 0.0,
            "records_per_s": sum(p.records_read for p in done) / self.seconds if self.seconds else 0.0,
        }

    @property
    def metrics(self) -> tuple[dict, dict[str, str]]:
        """Kafka's cleaner gauges as they would read at the end of this run (``METRICS``), and a
        note for each that is 0 or unknown for a reason of its own."""
        done = [p for p in self.partitions if not p.error and not p.skipped]
        read, written = sum(p.bytes_read for p in done), sum(p.bytes_written for p in done)
        values = {
            "max-dirty-percent": None,
            "max-clean-time-secs": int(max((p.seconds for p in done), default=0.0)),
            "max-buffer-utilization-percent": 0,
            "cleaner-recopy-percent": int(100 * (written / max(read, 1))),
            "max-compaction-delay-secs": None,
            "uncleanable-partitions-count": None,
            "uncleanable-bytes": None,
            "time-since-last-run-ms": self._since_last_run(),
        }
        notes = {"max-buffer-utilization-percent": NO_BUFFER}
        if None in values["time-since-last-run-ms"].values():
            notes["time-since-last-run-ms"] = NO_LAST_RUN
        if self.dry_run:
            notes["cleaner-recopy-percent"] = "dry run: nothing was written"
        if self.planned is None:
            for name in ("max-dirty-percent", "max-compaction-delay-secs", "uncleanable-partitions-count",
                         "uncleanable-bytes"):
                notes[name] = NO_PLAN
            return values, notes
        values.update(self._manager_gauges())
        return values, notes

    def _manager_gauges(self) -> dict:
        """LogCleanerManager's gauges over the plan: ratio and delay over the compacted partitions
        not being cleaned elsewhere, paused or uncleanable; the uncleanable ones per log dir."""
        idle = [r for r in self.planned if r.compacted and r.state == IDLE]
        ratios = [r.cleanable_ratio for r in idle if r.cleanable_ratio is not None and r.total_bytes]
        delays = [r.max_compaction_delay_ms for r in idle if r.max_compaction_delay_ms is not None]
        bytes_of = {r.path: r.cleanable_bytes or 0 for r in self.planned}
        marked = self.uncleanable
        count = {log_dir: len(paths) for log_dir, paths in marked.items()}
        size = {log_dir: sum(bytes_of.get(path, 0) for path in paths) for log_dir, paths in marked.items()}
        return {
            "max-dirty-percent": int(100 * max(ratios, default=0.0)),
            "max-compaction-delay-secs": int(max(delays, default=0)) // 1000,
            "uncleanable-partitions-count": count,
            "uncleanable-bytes": size,
        }

    def _since_last_run(self) -> dict[str, int | None]:
        """Per log dir, this run's start of choosing less the previous run's (None: no previous run)."""
        return {log_dir: None if before is None or self.began_choosing_ms is None else self.began_choosing_ms - before
                for log_dir, before in sorted(self.previous_runs.items())}

    @property
    def blocked(self) -> list[dict]:
        """``blocked_rows`` of the plan, less the partitions this run reported otherwise."""
        reported = {p.path for p in self.partitions}
        return [b for b in blocked_rows(self.planned or []) if b["path"] not in reported]

    @property
    def held(self) -> list[dict]:
        """Compacted partitions another job's live lease kept from this run, when it planned or when
        it came to take them: each with the lease's holder (owner, host, pid) and end (``until``,
        UTC; None: no heartbeat recorded). They wait until that job ends or its lease lapses, so
        they make the run partial."""
        out: dict[str, dict] = {}
        for r in self.planned or []:
            holder = r.lease_holder
            if holder is not None and r.compacted:
                out[r.path] = {"partition": r.name, "path": r.path, "log_dir": r.log_dir, **holder.row()}
        for p in self.partitions:
            holder = p.holder
            if holder is not None:
                out[p.path] = {"partition": f"{p.topic}-{p.partition}", "path": p.path,
                               "log_dir": p.path.rstrip("/").rpartition("/")[0], **holder.row()}
        return sorted(out.values(), key=lambda h: (h["log_dir"], _by_number(h["partition"])))

    def _held_lines(self) -> list[str]:
        """``held``, one line per holder (its latest lease end), then its partitions per log dir."""
        groups: dict[tuple, list[dict]] = {}
        for h in self.held:
            groups.setdefault((h["owner"], h["host"], h["pid"]), []).append(h)
        lines = []
        for (owner, host, pid), rows in groups.items():
            ends = [h["until"] for h in rows if h["until"]]
            until = f"lease until {max(ends)}" if ends else "no heartbeat recorded: 'kcompact abort' clears it"
            lines.append(f"held by another job: {_count(len(rows), 'partition')} (owner {owner}, host {host}, "
                         f"pid {pid}, {until}) -> {'it is' if len(rows) == 1 else 'they are'} cleaned once that job "
                         "ends or its lease lapses")
            by_dir: dict[str, list[str]] = {}
            for h in rows:
                by_dir.setdefault(h["log_dir"], []).append(h["partition"])
            lines += [f"  {log_dir}: {', '.join(names)}" for log_dir, names in by_dir.items()]
        return lines

    @property
    def releases(self) -> list[dict]:
        """Per planned log dir, the Kafka release whose cleaner this run reproduces and why."""
        seen = {r.log_dir: (r.kafka_version, r.kafka_version_source) for r in self.planned or []
                if r.kafka_version}
        return [{"log_dir": d, "kafka_version": v, "why": why} for d, (v, why) in sorted(seen.items())]

    @property
    def gzip_headers(self) -> list[dict]:
        """Per planned 3.9 log dir (whose broker may run Java 8 or 11), the gzip header OS byte its
        rewritten batches carry and why (``planner.gzip_os``)."""
        seen = {r.log_dir: (r.gzip_os, r.gzip_os_source) for r in self.planned or []
                if (r.kafka_version or "").startswith("3.9") and r.gzip_os_source}
        return [{"log_dir": d, "gzip_os": b, "why": why} for d, (b, why) in sorted(seen.items())]

    @property
    def notes(self) -> list[str]:
        """What the plan noted without holding anything back (torn tails of active segments, snappy
        blocks without Google's snappy), each once; and when this process lacks Google's snappy
        while the plan's did not, that too, or (said instead, with the partitions) when executors
        wrote snappy batches without it."""
        notes = dict.fromkeys(note for r in self.planned or [] for note in r.notes or [])
        if self.inexact_snappy:
            where = sorted(self.inexact_snappy)
            notes.pop(snappy_library.NOT_EXACT, None)
            notes[f"{snappy_library.NOT_EXACT} on the executors that wrote {sum(self.inexact_snappy.values()):,d} "
                  f"snappy batches of {len(where):,d} partitions: {', '.join(where[:3])}"
                  + (", ..." if len(where) > 3 else "")] = None
        elif self.partitions and snappy_library.missing():
            notes[snappy_library.NOT_EXACT] = None
        return list(notes)

    @property
    def uncleanable(self) -> dict[str, list[str]]:
        """Per planned log dir, the partition dirs marked uncleanable (before the run, or by it)."""
        log_dir = {r.path: r.log_dir for r in self.planned or []}
        marked = {r.path for r in self.planned or [] if r.state == UNCLEANABLE} | set(self.marked)
        out: dict[str, list[str]] = {d: [] for d in sorted(set(log_dir.values()))}
        for path in sorted(marked):
            out.setdefault(log_dir.get(path) or path.rstrip("/").rpartition("/")[0], []).append(path)
        return out

    @property
    def paused(self) -> dict[str, list[str]]:
        """Per log dir, the names of the compacted partitions an operator paused (``kcompact pause``),
        which no job cleans until they are resumed; log dirs with none left out."""
        out: dict[str, list[str]] = {}
        for r in self.planned or []:
            if r.state == PAUSED and r.compacted:
                out.setdefault(r.log_dir, []).append(r.name)
        return {log_dir: sorted(names, key=_by_number) for log_dir, names in sorted(out.items())}

    def text(self, each: bool = True) -> str:
        """The stats message of every partition (``each``; else of those that failed alone, as
        ``--quiet`` asks); what the run left undone and why (partitions blocked
        by bad input or an uncleanable state, cleaner checkpoints reset, the uncleanable partitions
        of every log dir, the paused ones with the way out: a forgotten pause must not stop cleaning
        silently); then the run's totals, in the same units, or, when it cleaned no partition at
        all, what happened instead."""
        names = Counter((p.topic, p.partition) for p in self.partitions)  # a name in two log dirs says where
        lines = release_lines(self.releases)
        lines += [f"gzip header OS byte {b} ({why})" for b, why in dict.fromkeys((g["gzip_os"], g["why"])
                                                                                 for g in self.gzip_headers)]
        lines += [p.summary(where=names[p.topic, p.partition] > 1) for p in self.partitions
                  if each or p.error]
        blocked = self.blocked
        if blocked:
            lines.append(f"not cleaned until fixed ({_count(len(blocked), 'partition')}):")
            lines += [f"  {b['partition']}: {b['why']} -> {b['way_out']}" for b in blocked]
        lines += self._held_lines()
        lines += [f"reset the cleaner checkpoint of {r['topic']}-{r['partition']} ({r['log_dir']}): {r['why']}, "
                  f"now the log start {r['offset']}, as Kafka's cleaner resets it" for r in self.checkpoint_resets]
        lines += self.notes
        if self.planned is not None:
            lines.append("uncleanable partitions: " + ("; ".join(
                f"{log_dir}: {len(paths)}" + (f" ({', '.join(p.rstrip('/').rpartition('/')[2] for p in paths)})"
                                              if paths else "")
                for log_dir, paths in self.uncleanable.items()) or "none"))
        lines += paused_lines(self.paused)
        t = self.totals
        if t["partitions"] == 0:
            lines.append(self._nothing())
            return "\n".join(lines)
        written = "not written (dry run)" if self.dry_run else f"{java_fixed(t['bytes_written'] / MIB, 1)} MB"
        done = (
            f"would clean {t['partitions'] - t['failed'] - t['skipped']}" if self.dry_run else f"{t['cleaned']} cleaned"
        )
        lines.append(f"{_count(t['partitions'], 'partition')}: {done}, {t['failed']} failed, "
                     f"{t['skipped']} skipped; {java_fixed(t['bytes_read'] / MIB, 1)} MB -> {written}, "
                     f"{t['records_read']:,d} -> "
                     f"{t['records_kept']:,d} messages in {java_fixed(t['seconds'], 1)} seconds "
                     f"({java_fixed(t['bytes_read'] / MIB / t['seconds'] if t['seconds'] else 0.0, 1)} MB/sec, "
                     f"{java_fixed(t['records_per_s'], 0)} messages/sec)")
        return "\n".join(lines)

    def _nothing(self) -> str:
        """The last line of a run that cleaned no partition: why, in the counts of the lines above."""
        head = "nothing to clean" if self.dry_run else "nothing cleaned"
        if self.planned is None:
            return head
        blocked, paused = len(self.blocked), sum(len(names) for names in self.paused.values())
        held = len(self.held)
        compacted = sum(1 for r in self.planned if r.compacted)
        why = [f"{_count(blocked, 'partition')} held back until fixed (above)"] if blocked else []
        if held:
            why.append(f"{held if why else _count(held, 'partition')} held by another job (above)")
        if paused:
            why.append(f"{paused if why else _count(paused, 'partition')} paused (above)")
        rest = compacted - blocked - paused - held
        if rest > 0:
            plan = "('kcompact plan' says why)"
            why.append(f"{rest} other{'' if rest == 1 else 's'} not due {plan}" if why else
                       f"{_count(rest, 'compacted partition')}, {'not' if rest == 1 else 'none'} due {plan}")
        return f"{head}: {', '.join(why) or 'no compacted partition (cleanup.policy)'}"

    def to_json(self) -> dict:
        metrics, notes = self.metrics
        return {"run": self.run, "now": self.now, "dry_run": self.dry_run, "units": UNIT_NOTE,
                "totals": self.totals, "stages": self.stages, "metrics": metrics, "metric_notes": notes,
                "blocked": self.blocked, "held": self.held, "paused": self.paused,
                "checkpoint_resets": self.checkpoint_resets, "kafka_releases": self.releases,
                "gzip_headers": self.gzip_headers,
                "notes": self.notes,
                "partitions": [p.to_json() for p in self.partitions]}


def release_lines(found: list[dict]) -> list[str]:
    """The release reproduced, once per distinct choice: a log dir's own (detected, default) names it."""
    whys = dict.fromkeys(r["why"] for r in found)
    return [f"reproducing {why}" for why in whys]


def blocked_rows(rows: Iterable[PlanRow]) -> list[dict]:
    """Compacted partitions of a plan that bad input or an
    uncleanable state keeps from being cleaned: each with why and the way out. They make a run
    partial until someone fixes them; paused and in-progress partitions do not (an operator or
    another job holds them on purpose)."""
    out = []
    for r in rows:
        why = r.skip_reason or ""
        if not r.compacted:
            continue
        name = r.name
        if r.state == UNCLEANABLE:
            way_out = f"fix or remove the named file, then 'kcompact reset-uncleanable {r.log_dir} {name}'"
        elif r.skip_kind == Failure.BAD_INPUT:
            way_out = f"'kcompact verify {r.log_dir}' lists every problem"
        else:
            continue
        out.append({"partition": name, "path": r.path, "log_dir": r.log_dir, "why": why, "way_out": way_out})
    return out


def _by_number(name: str) -> tuple[str, int]:
    """``orders-10`` after ``orders-9``."""
    topic, _, number = name.rpartition("-")
    return topic, int(number)


def _count(n: int, noun: str) -> str:
    return f"{n:,d} {noun}{'' if n == 1 else 's'}"
