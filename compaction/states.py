"""Kafka's cleaning states of a partition, persisted so every job and operator sees them.

Kafka keeps these in the broker's memory (LogCleanerManager); a fleet of jobs
needs them on disk. Each partition that is not idle has one small JSON file at
the root of its log dir, ``kcompact-state.<topic>-<partition>.json`` (a file,
never a directory: a broker refuses to start on a log dir holding a directory
that is not a partition). No file means idle.

    {"state": "paused", "pause_count": 2}
    {"state": "uncleanable", "reason": "CRC mismatch in ...", "since_ms": 1720000000000}
    {"state": "in_progress", "owner": "job-uuid", "host": "h", "started_ms": ..., "heartbeat_ms": ...}
    {"state": "aborted", "owner": "job-uuid"}
"""

from __future__ import annotations

import json
import posixpath
import re
import time
from dataclasses import dataclass

import storage
from readers.errors import FormatError

IDLE, IN_PROGRESS, ABORTED, PAUSED, UNCLEANABLE = "idle", "in_progress", "aborted", "paused", "uncleanable"
STATES = (IDLE, IN_PROGRESS, ABORTED, PAUSED, UNCLEANABLE)
_FILE = re.compile(r"^kcompact-state\.(?P<topic>.+)-(?P<partition>\d+)\.json$")


@dataclass(frozen=True, slots=True)
class CleaningState:
    state: str = IDLE
    pause_count: int = 0
    reason: str | None = None
    owner: str | None = None
    heartbeat_ms: int | None = None

    @property
    def skip_reason(self) -> str | None:
        """Why the planner passes over a partition in this state, and the way out."""
        if self.state == PAUSED:
            return f"paused ({self.pause_count}x; resume to clean)"
        if self.state == IN_PROGRESS:
            return f"in progress (owner {self.owner})"
        if self.state == ABORTED:
            return f"aborted (owner {self.owner}; stops at the next segment group)"
        if self.state == UNCLEANABLE:
            return f"uncleanable: {self.reason} (reset-uncleanable after fixing)"
        return None


def file_name(topic: str, partition: int) -> str:
    return f"kcompact-state.{topic}-{partition}.json"


def parse_file_name(name: str) -> tuple[str, int] | None:
    match = _FILE.match(posixpath.basename(name))
    return (match["topic"], int(match["partition"])) if match else None


def state_path(partition_dir: str) -> str:
    """Where a partition's state file lives: the root of its log dir."""
    log_dir, _, name = partition_dir.rstrip("/").rpartition("/")
    topic, _, number = name.rpartition("-")
    return f"{log_dir}/{file_name(topic, int(number))}"


def mark_uncleanable(partition_dir: str, reason: str, now_ms: int | None = None) -> None:
    """Kafka marks a partition whose cleaning failed uncleanable and skips it until an
    operator resets it; the reason names the file and byte position when there is one."""
    doc = {"state": UNCLEANABLE, "reason": reason, "since_ms": now_ms or int(time.time() * 1000)}
    storage.write_atomic(state_path(partition_dir), json.dumps(doc).encode())


def parse(path: str, data: bytes) -> CleaningState:
    try:
        doc = json.loads(data)
        state = doc["state"]
    except (ValueError, KeyError, TypeError):
        raise FormatError(path, None, "cleaning-state file is not a JSON object with a 'state'") from None
    if state not in STATES:
        raise FormatError(path, None, f"unknown cleaning state {state!r} (known: {', '.join(STATES)})")
    return CleaningState(
        state=state,
        pause_count=int(doc.get("pause_count", 1 if state == PAUSED else 0)),
        reason=doc.get("reason"),
        owner=doc.get("owner"),
        heartbeat_ms=doc.get("heartbeat_ms"),
    )
