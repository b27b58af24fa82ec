"""Kafka's delete policy (UnifiedLog.deleteOldSegments), as pure functions of segment facts.

Three rules in Kafka's order, each continuing from where the previous one stopped, each
deleting only a prefix of the log (the first segment that may not go stops it) and never
the active segment: the log start offset, then ``retention.bytes``, then ``retention.ms``.
The log start offset applies to every topic; size and time only with ``cleanup.policy``
containing ``delete``.

Two of Kafka's conditions are not applied, because the log dir offline cannot supply them:
a segment also needs the next segment's base offset <= the high watermark (a broker's
in-memory state), and Kafka may delete a non-empty active segment after rolling a new one
(only a broker can roll). Here the active segment always stays.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kcompact.planner.rules import SegmentFacts, largest_timestamp

LOG_START, SIZE, TIME = "log start offset", "retention.bytes", "retention.ms"
RULES = (LOG_START, SIZE, TIME)


@dataclass(frozen=True, slots=True)
class Deletion:
    """Segments retention removes (a prefix of the log), with the rule that removes each."""

    reasons: tuple[tuple[int, str], ...]  # (base offset, rule) for each deleted segment, oldest first
    new_log_start: int

    @property
    def bases(self) -> list[int]:
        return [base for base, _ in self.reasons]

    def by_rule(self) -> dict[str, int]:
        """How many segments each rule removes, in Kafka's order (rules removing none left out)."""
        counts = {rule: sum(1 for _, r in self.reasons if r == rule) for rule in RULES}
        return {rule: n for rule, n in counts.items() if n}


def _prefix(segments: Sequence[SegmentFacts], start: int, may_go) -> int:
    """How many segments from ``start`` on may go, stopping at the first that may not (the
    active segment, the last one, never goes)."""
    n = start
    while n < len(segments) - 1 and may_go(n):
        n += 1
    return n


def plan_deletion(
    segments: Sequence[SegmentFacts],
    *,
    log_start: int,
    delete_policy: bool,
    retention_ms: int,
    retention_bytes: int,
    now: int,
) -> Deletion:
    """Which oldest segments go and why; the log start offset after they have gone.

    ``segments`` oldest first, the last one active; ``log_start`` already at least the first
    base offset; ``retention_ms`` / ``retention_bytes`` < 0 disable their rule. A segment's
    time is ``largest_timestamp`` (its last time-index entry), else its file's mtime."""
    reasons: list[tuple[int, str]] = []
    gone = _prefix(segments, 0, lambda i: segments[i + 1].base_offset <= log_start)
    reasons += [(s.base_offset, LOG_START) for s in segments[:gone]]
    if delete_policy and retention_bytes >= 0:
        excess = sum(s.size for s in segments[gone:]) - retention_bytes
        if excess >= 0:
            def fits(i: int) -> bool:
                nonlocal excess
                if excess - segments[i].size >= 0:
                    excess -= segments[i].size
                    return True
                return False

            before = gone
            gone = _prefix(segments, gone, fits)
            reasons += [(s.base_offset, SIZE) for s in segments[before:gone]]
    if delete_policy and retention_ms >= 0:
        before = gone
        gone = _prefix(segments, gone, lambda i: now - largest_timestamp(segments[i]) > retention_ms)
        reasons += [(s.base_offset, TIME) for s in segments[before:gone]]
    first_left = segments[gone].base_offset if segments else log_start
    return Deletion(tuple(reasons), max(log_start, first_left))
