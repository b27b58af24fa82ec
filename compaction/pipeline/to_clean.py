"""A partition the compaction job cleans: what stage 1 reads of its plan row, built once on the
driver from the plan's selected rows (``to_clean``) and shipped to the tasks as it is."""

from __future__ import annotations

from dataclasses import dataclass, replace

from kcompact.compaction.rules.cleaner_config import CleanerConfig
from kcompact.compaction.rules.decisions import retain_last_empty_at
from kcompact.conf import releases
from kcompact.contracts.plan_row import PlanRow
from kcompact.logdir.listing import Partition


@dataclass(frozen=True, slots=True)
class PartitionToClean:
    """One selected partition of a plan, by the plan's (Kafka's) names: the dirty section is
    [first_dirty_offset, first_uncleanable_dirty_offset)."""

    path: str
    log_dir: str
    topic: str
    partition: int
    log_start_offset: int
    first_dirty_offset: int
    first_uncleanable_dirty_offset: int
    total_bytes: int
    config: CleanerConfig
    listed: Partition | None = None  # as the job listed it under its lease (object stores: no task lists it again)
    # the round's last batch emptied by cleaning stays as an empty header when its next offset is this
    # (None: never), by the plan's Kafka release
    retain_last_empty_at: int | None = None

    @classmethod
    def of(cls, row: PlanRow) -> PartitionToClean:
        """From a plan row; its config typed, its release's rules applied."""
        release = releases.resolve(row.kafka_version or releases.DEFAULT.name)
        return cls(row.path, row.log_dir, row.topic, row.partition, row.log_start_offset, row.first_dirty_offset,
                   row.first_uncleanable_dirty_offset, total_bytes=row.total_bytes or 0,
                   config=CleanerConfig.of_topic(row.config, release.index_per_batch, release.legacy_to_v2,
                                                 255 if row.gzip_os is None else row.gzip_os),
                   retain_last_empty_at=retain_last_empty_at(release, row.first_uncleanable_dirty_offset,
                                                             row.high_watermark, row.log_end_offset))


def to_clean(rows: list[PlanRow], listed: dict[str, Partition] | None = None) -> list[PartitionToClean]:
    """The selected partitions of ``rows`` (a plan's, or some of them), in their order; ``listed``:
    partitions as listed, by path."""
    found = [PartitionToClean.of(row) for row in rows if row.selected]
    return [replace(p, listed=listed[p.path]) if listed and p.path in listed else p for p in found]
