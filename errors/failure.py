"""Why a partition was not cleaned, as a kind every decision reads (what marks it uncleanable, what
is retried, what makes a run partial); the message beside it is for people and may say anything."""

from __future__ import annotations

from enum import StrEnum


class Failure(StrEnum):
    """The kind of a partition's failure or skip, as carried in a plan's and a result's rows."""

    CORRUPT = "corrupt input"  # bad bytes in a segment the job read: Kafka's cleaner marks it uncleanable
    BAD_INPUT = "bad input"  # what the planner found wrong (a problem): nothing is done until it is fixed
    INCOMPLETE = "incomplete"  # a partition some of whose groups came back with no result
    IO = "I/O"  # transient: retried next run
    UNREADABLE = "unreadable"  # a file the job may not read: the operator's to fix, retried every run
    MEMORY = "memory"  # a task ran out of memory: no fault of the log's, but it fails again as configured
    LOG_CHANGED = "log changed"  # the segments changed under the job: cleaned next run
    LEASE_LOST = "lease lost"  # another job took the lease over: cleaned next run
    LEASE_HELD = "lease held"  # another job's live lease: waits for that job
    ABORTED = "aborted"  # an operator's abort
    UNCLEANABLE = "uncleanable"  # the partition's state: a reset by an operator lets it go again
    PAUSED = "paused"  # the partition's state: an operator's resume lets it go again

    @property
    def marks_uncleanable(self) -> bool:
        """A failure of the log itself, which Kafka's cleaner marks uncleanable (no retry)."""
        return self in (Failure.CORRUPT, Failure.INCOMPLETE)

    @property
    def blocks(self) -> bool:
        """A skip that only an operator's fix ends: it makes every run partial until then."""
        return self in (Failure.BAD_INPUT, Failure.UNCLEANABLE)


def problem_kind(path: str, position: int | None) -> Failure:
    """The kind of a fault the listing or a read found in ``path`` at byte ``position``: a
    ``.log``'s bytes are corrupt input, whatever else the planner meets is bad input."""
    return Failure.CORRUPT if position is not None and path.endswith(".log") else Failure.BAD_INPUT


def outcome_counts(partitions) -> dict[str, int]:
    """The partitions of a run's report (each with ``error`` and ``skipped``) by outcome, each
    counted once: ``skipped`` (not attempted: no failure, whatever else it says), ``failed``
    (attempted, with an error) and ``done``."""
    skipped = sum(1 for p in partitions if p.skipped)
    failed = sum(1 for p in partitions if p.error and not p.skipped)
    return {"partitions": len(partitions), "skipped": skipped, "failed": failed,
            "done": len(partitions) - skipped - failed}
