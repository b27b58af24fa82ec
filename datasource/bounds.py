"""Per-partition bounds given as options: offsets (with Kafka's -2 earliest / -1 latest) or
timestamps, a default and per-partition overrides."""

from __future__ import annotations

from dataclasses import dataclass

PartitionKey = tuple[str | None, int]  # (None, n): partition n of every topic
EARLIEST, LATEST = -2, -1  # Kafka's ListOffsets sentinels, as Spark's Kafka source takes them


@dataclass(frozen=True, slots=True)
class OffsetBound:
    """One number per partition: a default and per-partition overrides (exact topic first)."""

    default: int | None = None
    overrides: tuple[tuple[PartitionKey, int], ...] = ()

    def of(self, topic: str, partition: int) -> int | None:
        found = dict(self.overrides)
        return found.get((topic, partition), found.get((None, partition), self.default))
