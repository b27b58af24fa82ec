"""The plan of every partition of one or many log dirs, computed on Spark.

The driver lists each log dir's root once (partition dirs, checkpoints, cleaning
states) and resolves each topic's configuration; executors list every partition
dir and make the few small reads the rules need (``planner.scan``), then apply
Kafka's rules (``planner.rules``). A plan has one row per partition, so ranking
and budgets run on the driver over the collected rows, which stay there as the
``planner.plan.Plan``. Every row also says what retention would delete
(``planner.retention``: log start offset, retention.bytes, retention.ms) and why.
Nothing is written.
"""

from __future__ import annotations

import posixpath
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa

from kcompact import storage
from kcompact.conf import releases
from kcompact.conf.policy import is_compacted, is_deleted
from kcompact.conf.resolve import Config, TopicConfig
from kcompact.contracts.plan_row import PlanRow, RetentionDelete, Segment
from kcompact.errors import FormatError
from kcompact.errors.failure import Failure
from kcompact.logdir import broker_load
from kcompact.logdir.listing import (
    META_PROPERTIES,
    METADATA_TOPIC,
    is_live_partition_dir,
    list_log_dir,
    parse_partition_dir,
)
from kcompact.operations import states
from kcompact.planner import gzip_os, retention, rules, scan
from kcompact.planner.plan import Plan
from kcompact.readers import checkpoint
from kcompact.session import kinds
from kcompact.storage import FileInfo
from kcompact.writers import snappy_library

RETENTION_ONLY = "not planned for compaction (retention-only plan)"
PLAN_SCHEMA = PlanRow.schema()
RANKING = ("path", "topic", "partition", "cleanable_ratio", "cleanable_bytes", "skip_reason", "rank", "selected")


@dataclass(frozen=True, slots=True)
class Task:
    """One partition to plan, with what the driver already knows about it."""

    topic: str | None
    partition: int | None
    log_dir: str
    path: str
    checkpoint: int | None
    log_start_checkpoint: int | None
    state: states.CleaningState
    config: TopicConfig | None  # None: a dir that is no partition (``problem`` says so)
    problem: str | None
    # on an object store, the partition dir's files and its commit record generations as the log dir
    # was listed on the driver (``logdir.listing.Listing``): a task then lists nothing
    files: tuple[FileInfo, ...] | None = None
    generations: tuple[int, int] = (0, 0)  # listed before the partition dirs, and after
    kafka_version: str = releases.DEFAULT.name
    kafka_version_source: str = "default"
    high_watermark: int | None = None  # from replication-offset-checkpoint, read when the release's rule needs it
    high_watermark_problem: str | None = None  # why there is none
    root_note: str | None = None  # a root checkpoint a broker's load passes over (broker_load.unreadable_checkpoint)


# -- driver: what each log dir's root says --------------------------------------------------------
def tasks_for(log_dir: str, config: Config) -> list[Task]:
    log_dir = log_dir.rstrip("/")
    listing = list_log_dir(log_dir)
    files, dirs = listing.root, listing.dirs
    by_name = {posixpath.basename(f.path): f.path for f in files}
    meta = next((f for f in files if posixpath.basename(f.path) == META_PROPERTIES), None)
    meta_problem = meta and broker_load.meta_properties_problem(meta.size)
    cleaner, cleaner_problem, _ = _checkpoint(by_name.get(checkpoint.CLEANER_OFFSET))
    log_start, log_start_problem, log_start_note = _checkpoint(by_name.get(checkpoint.LOG_START_OFFSET))
    root_problem = (meta_problem and f"{meta.path}: {meta_problem}") or cleaner_problem or log_start_problem
    choice = config.release_for(log_dir)
    release = {"kafka_version": choice.release.name, "kafka_version_source": choice.describe()}
    watermarks: dict[tuple[str, int], int] = {}
    hw_file = by_name.get(checkpoint.REPLICATION_OFFSET)
    if choice.release.keep_last_empty == "high_watermark":  # read only when the release's rule needs it
        watermarks, hw_problem, _ = _checkpoint(hw_file)
        root_problem = root_problem or hw_problem
    cleaning = _states(by_name)
    configs: dict[str, TopicConfig] = {}
    out = []
    for sub in sorted(dirs):
        name = posixpath.basename(sub.rstrip("/"))
        if not is_live_partition_dir(name):
            continue
        parsed = parse_partition_dir(name)
        if parsed is None:
            if not broker_load.ignores_dir(name):
                out.append(Task(None, None, log_dir, sub, None, None, states.CleaningState(), None,
                                f"{sub}: {broker_load.FOREIGN_DIR}", **release))
            continue
        topic, number = parsed
        if topic == METADATA_TOPIC:
            continue
        if topic not in configs:
            configs[topic] = config.for_topic(topic)
        state = cleaning.get((topic, number), states.CleaningState())
        listed = {} if listing.files is None else {
            "files": tuple(listing.files.get(sub.rstrip("/"), ())),
            "generations": (listing.before.get((topic, number), 0), listing.after.get((topic, number), 0))}
        hw = watermarks.get((topic, number))
        no_hw = (
            None
            if hw is not None or choice.release.keep_last_empty != "high_watermark"
            else (
                f"{storage.join(log_dir, checkpoint.REPLICATION_OFFSET)} "
                f"{'has no entry for it' if hw_file else 'is missing'}"
            )
        )
        out.append(Task(topic, number, log_dir, sub, cleaner.get((topic, number)), log_start.get((topic, number)),
                        state, configs[topic], root_problem,
                        **listed, **release, high_watermark=hw, high_watermark_problem=no_hw,
                        root_note=log_start_note))
    return out


def _checkpoint(path: str | None) -> tuple[dict[tuple[str, int], int], str | None, str | None]:
    """The entries of a root checkpoint file, and what a broker makes of one it cannot read
    (``broker_load.unreadable_checkpoint``): a problem refusing the log dir, or a note and no entries."""
    if path is None:
        return {}, None, None
    try:
        return checkpoint.parse(path, storage.read_bytes(path)), None, None
    except FormatError as exc:
        refused, outcome = broker_load.unreadable_checkpoint(posixpath.basename(path), exc)
        said = f"{exc}: {outcome}"
        return {}, said if refused else None, None if refused else said


def _states(by_name: dict[str, str]) -> dict[tuple[str, int], states.CleaningState]:
    out = {}
    for name, path in by_name.items():
        key = states.parse_file_name(name)
        if key is not None:
            try:
                out[key] = states.load(path)
            except FormatError as exc:  # an unreadable state must not look idle
                out[key] = states.CleaningState(states.UNCLEANABLE, reason=str(exc))
    return out


# -- executors: one partition at a time ----------------------------------------------------------
def plan_task(task: Task, now: int, retention_only: bool = False) -> PlanRow:
    """One plan row (before ranking): facts, Kafka's decision, and why it would be skipped.
    ``retention_only``: no compaction decision, so no batch is replayed."""
    return PlanRow.of(_columns(task, now, retention_only))


def _columns(task: Task, now: int, retention_only: bool) -> dict:
    """The plan row's columns by name (``PlanRow.of`` refuses a name it does not have)."""
    values = task.config.values if task.config is not None else {}
    state = task.state
    columns = {
        "topic": task.topic, "partition": task.partition, "log_dir": task.log_dir, "path": task.path,
        "cleanup_policy": ",".join(values.get("cleanup.policy", [])) or None, "state": state.state,
        "checkpoint_offset": task.checkpoint, "min_cleanable_ratio": values.get("min.cleanable.dirty.ratio"),
        "config": task.config and task.config.as_strings(),
        "config_sources": task.config and dict(task.config.sources),
        "selected": False, "rank": None, "segments": [], "problems": [],
        "retention_deletes": [], "retention_bytes_deleted": 0,
        "kafka_version": task.kafka_version, "kafka_version_source": task.kafka_version_source,
        "high_watermark": task.high_watermark,
    }
    if task.problem is not None:
        columns["problems"] = [task.problem]
        columns["skip_reason"] = columns["retention_skip_reason"] = f"bad input: {task.problem}"
        columns["skip_kind"] = columns["retention_skip_kind"] = Failure.BAD_INPUT.value
        return columns
    compact = is_compacted(values["cleanup.policy"])
    delete = is_deleted(values["cleanup.policy"])
    facts = scan.gather(task.path, task.topic, task.partition, files=task.files, generations=task.generations,
                        checkpoint=task.checkpoint,
                        log_start_checkpoint=task.log_start_checkpoint,
                        min_lag_ms=values["min.compaction.lag.ms"], replay=compact and not retention_only,
                        retention_timestamps=delete and values["retention.ms"] >= 0,
                        first_batches=rules.first_batches_matter(values["max.compaction.lag.ms"], now))
    columns.update(_retention(facts, values, state, now))
    if facts.segments:
        columns.update(log_start_offset=facts.log_start, active_base_offset=facts.segments[-1].base_offset)
    root_notes = [task.root_note] if task.root_note else []
    columns["problems"], columns["notes"] = facts.problems, [*root_notes, *facts.notes]
    if task.high_watermark_problem and compact and facts.segments:
        columns["notes"] = [*columns["notes"], f"{task.path}: high watermark unknown ({task.high_watermark_problem}): "
                            f"Kafka {task.kafka_version}'s rule for the round's last emptied batch takes the log end "
                            f"offset {facts.log_end} instead (docs/compaction-semantics.md)"]
    if compact and not facts.problems and task.kafka_version.startswith("3.9."):  # 4.x: always Java 17 on
        columns.update(gzip_os.finding(facts.partition))
    # as this worker finds it (the report adds the compacting driver's)
    if compact and facts.segments and snappy_library.missing():
        columns["notes"] = [*columns["notes"], snappy_library.NOT_EXACT]
    columns["segments"] = [
        Segment(s.base_offset, s.size, s.mtime_ms, s.largest_timestamp, s.first_batch_timestamp)
        for s in facts.segments
    ]
    columns["skip_reason"], kind = _skip_before_rules(facts, compact, state)
    columns["skip_kind"] = kind and kind.value
    columns["lease_holder"] = state.lease_holder() if kind is Failure.LEASE_HELD else None
    fault = facts.fault()
    columns["fault"], columns["fault_kind"] = (fault[0], fault[1].value) if fault else (None, None)
    if retention_only and columns["skip_reason"] is None:
        columns["skip_reason"] = RETENTION_ONLY
    if not facts.segments or not compact or facts.problems or retention_only:
        return columns
    decision = rules.decide(
        facts.segments, log_start=facts.log_start, log_end=facts.log_end, checkpoint=task.checkpoint,
        last_stable=facts.last_stable, min_lag_ms=values["min.compaction.lag.ms"],
        max_lag_ms=values["max.compaction.lag.ms"], min_cleanable_ratio=values["min.cleanable.dirty.ratio"], now=now,
    )
    columns.update(
        log_start_offset=facts.log_start, log_end_offset=facts.log_end, last_stable_offset=facts.last_stable,
        active_base_offset=facts.segments[-1].base_offset,
        first_dirty_offset=decision.first_dirty_offset, checkpoint_reset=decision.checkpoint_reset,
        first_uncleanable_dirty_offset=decision.first_uncleanable_dirty_offset,
        uncleanable_bound=decision.uncleanable_bound, clean_bytes=decision.clean_bytes,
        cleanable_bytes=decision.cleanable_bytes, total_bytes=decision.total_bytes,
        cleanable_ratio=decision.cleanable_ratio, need_compaction_now=decision.need_compaction_now,
        max_compaction_delay_ms=decision.max_compaction_delay_ms,
    )
    if columns["skip_reason"] is None:
        if decision.total_bytes == 0:
            columns["skip_reason"] = "empty"
        elif not decision.cleanable:
            columns["skip_reason"] = (
                f"below ratio: {rules.ratio_text(decision.cleanable_ratio, values['min.cleanable.dirty.ratio'])} <= "
                f"min.cleanable.dirty.ratio {values['min.cleanable.dirty.ratio']}"
            )
    return columns


def _retention(facts: scan.PartitionFacts, values: dict, state: states.CleaningState, now: int) -> dict:
    """The retention columns: the prefix Kafka's deleteOldSegments removes, and why retention
    would not run (bad input, or a cleaning state Kafka's retention also waits for)."""
    out = {"retention_deletes": [], "retention_log_start": None, "retention_bytes_deleted": 0,
           "retention_skip_reason": None, "retention_skip_kind": None}
    if facts.retention_blockers:
        more = f" (+{len(facts.retention_blockers) - 1} more)" if len(facts.retention_blockers) > 1 else ""
        out["retention_skip_reason"] = f"bad input: {facts.retention_blockers[0]}{more}"
        out["retention_skip_kind"] = Failure.BAD_INPUT.value
        return out
    if not facts.segments:
        return out
    policy = values["cleanup.policy"]
    timed = is_deleted(policy) and values["retention.ms"] >= 0  # the time indexes were read
    deletion = retention.plan_deletion(
        facts.segments, log_start=facts.log_start, delete_policy=is_deleted(policy),
        retention_ms=values["retention.ms"], retention_bytes=values["retention.bytes"], now=now)
    gone = facts.segments[:len(deletion.reasons)]
    out["retention_deletes"] = [
        RetentionDelete(s.base_offset, s.size, rules.largest_timestamp(s) if timed else s.largest_timestamp, why)
        for s, (_, why) in zip(gone, deletion.reasons)
    ]
    out["retention_log_start"] = deletion.new_log_start
    out["retention_bytes_deleted"] = sum(s.size for s in gone)
    out["retention_skip_reason"] = states.retention_skip(state, policy)
    kind = states.kind_of(out["retention_skip_reason"])
    out["retention_skip_kind"] = kind and kind.value
    return out


def _skip_before_rules(facts: scan.PartitionFacts, compact: bool,
                       state: states.CleaningState) -> tuple[str | None, Failure | None]:
    """Why the rules are not applied, and its kind (None: a skip that is no failure)."""
    if facts.problems:
        more = f" (+{len(facts.problems) - 1} more)" if len(facts.problems) > 1 else ""
        return f"bad input: {facts.problems[0]}{more}", Failure.BAD_INPUT
    if not compact:
        return "not compacted (cleanup.policy has no compact)", None
    if state.skip_reason:
        return state.skip_reason, states.kind_of(state.skip_reason)
    if not facts.segments:
        return "empty", None
    return None, None


# -- the whole plan ------------------------------------------------------------------------------
def plan(spark, paths: Sequence[str], conf: Config, now: int | None = None,
         top: int | None = None, max_bytes: int | None = None, retention_only: bool = False) -> Plan:
    """Kafka's cleaning decision for every partition under ``paths``, ranked, on the driver.
    ``retention_only``: only the retention columns (no batch replay, nothing selected)."""
    now = int(time.time() * 1000) if now is None else now
    tasks = [t for path in paths for t in tasks_for(path, conf)]
    if tasks:
        kinds.name_jobs(spark, "kcompact-retention-plan" if retention_only else "kcompact-plan",
                        f"{'retention' if retention_only else 'cleaning'} plan of {len(tasks)} partitions")
    # with no partition too: the empty table then has Spark's Arrow shape, as every plan's table has
    return Plan(ranked(gzip_os.apply(_planned(spark, tasks, now, retention_only), conf.gzip_os), top, max_bytes))


def _planned(spark, tasks: list[Task], now: int, retention_only: bool) -> pa.Table:
    """The plan rows of ``tasks``, one Spark task per core, each planning every n-th partition (so
    a topic's partitions spread over the cores). A partition's plan is quick next to what a
    Python task costs Spark, so more tasks would only cost. The partitions travel with the
    tasks: spreading them by a shuffle cost a Spark job of its own."""
    from pyspark.sql.pandas.types import from_arrow_schema

    n = max(1, min(len(tasks), kinds.parallelism(spark)))

    def run(ids: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for rb in ids:
            for share in rb.column(0).to_pylist():
                mine = tasks[share::n]
                rows = (
                    storage.map_in_flight(lambda t: plan_task(t, now, retention_only), mine, mine[0].path)
                    if mine
                    else []
                )
                yield PlanRow.batch(rows)

    return spark.range(0, n, 1, n).mapInArrow(kinds.carrying(spark, run), from_arrow_schema(PLAN_SCHEMA)).toArrow()


def ranked(planned: pa.Table, top: int | None, max_bytes: int | None) -> pa.Table:
    """Ranks and budgets applied to the executors' rows, sorted by rank then name, in the Arrow
    shape ``planned`` has (Spark names nested fields its own way: a plan written as Parquet keeps
    them). Only the columns ranking reads become records; the rest stay Arrow's, taken in order."""
    rows = PlanRow.read(planned, RANKING)
    candidates = [rules.Candidate(r.path, r.cleanable_ratio, r.cleanable_bytes, r.topic, r.partition)
                  for r in rows if r.skip_reason is None]
    ranks = rules.rank(candidates, top, max_bytes)
    rows = [r.but(rank=ranks[r.path][0], skip_reason=ranks[r.path][1], selected=ranks[r.path][1] is None)
            if r.path in ranks else r for r in rows]
    for name in ("rank", "skip_reason", "selected"):
        at = planned.schema.get_field_index(name)
        planned = planned.set_column(at, planned.field(at), pa.array([getattr(r, name) for r in rows],
                                                                      planned.field(at).type))
    order = sorted(range(len(rows)), key=lambda i: (rows[i].rank is None, rows[i].rank or 0, rows[i].topic or "",
                                                    rows[i].partition or 0, rows[i].path))
    return planned.take(pa.array(order, pa.int64()))
