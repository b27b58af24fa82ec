"""A partition the compaction job cleans: what stage 1 reads of its plan row, built once on the
driver from the plan's selected rows (``to_clean``) and shipped to the tasks as it is."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pyarrow as pa
import pyarrow.compute as pc

from kcompact.compaction.rules.cleaner_config import CleanerConfig
from kcompact.compaction.rules.decisions import retain_last_empty_at
from kcompact.conf import releases
from kcompact.logdir.listing import Partition

# the plan's columns a PartitionToClean takes as they are (its config is typed from the plan's)
PLAN_COLUMNS = ("path", "log_dir", "topic", "partition", "log_start_offset", "first_dirty_offset",
                "first_uncleanable_dirty_offset", "total_bytes")
# and those it derives its release's rules from
RELEASE_COLUMNS = ("config", "kafka_version", "high_watermark", "log_end_offset")


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
    def of(cls, row: dict) -> PartitionToClean:
        """From a plan row (``planner.build.PLAN_SCHEMA``'s columns)."""
        release = releases.resolve(row["kafka_version"] or releases.DEFAULT.name)
        return cls(**{name: row[name] for name in PLAN_COLUMNS if name != "total_bytes"},
                   total_bytes=row["total_bytes"] or 0, config=CleanerConfig.of(row["config"], release.index_per_batch,
                                                                                release.legacy_to_v2),
                   retain_last_empty_at=retain_last_empty_at(release, row["first_uncleanable_dirty_offset"],
                                                             row["high_watermark"], row["log_end_offset"]))


def to_clean(rows: pa.Table, listed: dict[str, Partition] | None = None) -> list[PartitionToClean]:
    """The selected partitions of ``rows`` (a plan's table, or some of its rows), in their order;
    ``listed``: partitions as listed, by path."""
    selected = rows.filter(pc.equal(rows.column("selected"), True))
    found = [PartitionToClean.of(row) for row in selected.select([*PLAN_COLUMNS, *RELEASE_COLUMNS]).to_pylist()]
    return [replace(p, listed=listed[p.path]) if listed and p.path in listed else p for p in found]
