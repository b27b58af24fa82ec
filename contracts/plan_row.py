"""A plan's row: Kafka's cleaning decision and retention's for one partition, as the planner's
tasks make it (``planner.build``) and the compaction job, retention, the reports and the command
line read it. Its Arrow schema (``PlanRow.schema()``) is the plan table's, a plan file's and the
notebook's DataFrame's."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from kcompact.conf.policy import is_compacted
from kcompact.contracts.typed_rows import TypedRow, column, mapping, nested

I32, I64, F64, STR, BOOL = pa.int32(), pa.int64(), pa.float64(), pa.string(), pa.bool_()


@dataclass(frozen=True, slots=True)
class Segment(TypedRow):
    """A segment as the planner saw it; ``largest_timestamp`` is what the retention.ms rule
    compares (the last time-index entry, else the file's modification time)."""

    base_offset: int = column(I64)
    size: int = column(I64)
    mtime_ms: int = column(I64)
    largest_timestamp: int = column(I64)
    first_batch_timestamp: int | None = column(I64)


@dataclass(frozen=True, slots=True)
class RetentionDelete(TypedRow):
    """A segment retention deletes, and by which rule."""

    base_offset: int = column(I64)
    size: int = column(I64)
    largest_timestamp: int = column(I64)
    reason: str = column(STR)


@dataclass(frozen=True, slots=True)
class LeaseHolder(TypedRow):
    """Another job's lease on the partition (``operations.states``)."""

    owner: str | None = column(STR)
    host: str | None = column(STR)
    pid: int | None = column(I64)
    until: str | None = column(STR)


@dataclass(frozen=True, slots=True)
class PlanRow(TypedRow):
    """One partition of a plan, by Kafka's names. Decisions read the kinds (``skip_kind``,
    ``retention_skip_kind``, ``fault_kind``: ``errors.failure.Failure``'s values), people the
    reasons beside them."""

    topic: str | None = column(STR)
    partition: int | None = column(I32)
    log_dir: str = column(STR)
    path: str = column(STR)
    cleanup_policy: str | None = column(STR)
    state: str | None = column(STR)
    log_start_offset: int | None = column(I64)
    log_end_offset: int | None = column(I64)
    checkpoint_offset: int | None = column(I64)
    first_dirty_offset: int | None = column(I64)
    checkpoint_reset: str | None = column(STR)  # why Kafka would reset the cleaner checkpoint entry
    last_stable_offset: int | None = column(I64)
    active_base_offset: int | None = column(I64)
    first_uncleanable_dirty_offset: int | None = column(I64)
    uncleanable_bound: str | None = column(STR)
    clean_bytes: int | None = column(I64)
    cleanable_bytes: int | None = column(I64)
    total_bytes: int | None = column(I64)
    cleanable_ratio: float | None = column(F64)
    min_cleanable_ratio: float | None = column(F64)
    need_compaction_now: bool | None = column(BOOL)
    max_compaction_delay_ms: int | None = column(I64)
    selected: bool = column(BOOL, False)
    skip_reason: str | None = column(STR)
    rank: int | None = column(I32)
    config: dict[str, str] | None = mapping()  # the topic's settings as strings, by Kafka's names
    config_sources: dict[str, str] | None = mapping()  # where each came from
    segments: tuple[Segment, ...] = nested(Segment, many=True)
    problems: tuple[str, ...] = column(pa.list_(STR))
    retention_deletes: tuple[RetentionDelete, ...] = nested(RetentionDelete, many=True)
    retention_log_start: int | None = column(I64)
    retention_bytes_deleted: int = column(I64, 0)
    retention_skip_reason: str | None = column(STR)
    notes: tuple[str, ...] = column(pa.list_(STR))
    skip_kind: str | None = column(STR)
    retention_skip_kind: str | None = column(STR)
    fault: str | None = column(STR)  # the first problem that fails a cleaning
    fault_kind: str | None = column(STR)
    lease_holder: LeaseHolder | None = nested(LeaseHolder)
    # the Kafka release whose cleaner is reproduced (conf.releases) and why it was chosen; the
    # high watermark its rule for the round's last emptied batch reads (4.4 on; None: not read or none)
    kafka_version: str | None = column(STR)
    kafka_version_source: str | None = column(STR)
    # the OS byte of rewritten gzip batches' header (the broker's JVM: 255 from Java 16 on, 0 on Java 8
    # and 11) and where it was taken from (planner.gzip_os)
    gzip_os: int | None = column(I32)
    gzip_os_source: str | None = column(STR)
    high_watermark: int | None = column(I64)

    @property
    def name(self) -> str:
        """``topic-partition``; the directory's path for one not named so."""
        return f"{self.topic}-{self.partition}" if self.topic is not None else self.path

    @property
    def compacted(self) -> bool:
        """A partition dir of a topic whose cleanup.policy has compact."""
        return self.topic is not None and is_compacted(self.cleanup_policy)
