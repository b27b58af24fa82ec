"""When the previous compaction run of a log dir began choosing what to clean.

Kafka's ``time-since-last-run-ms`` gauge is the time since its cleaner last began choosing a log
(LogCleanerManager stamps ``timeOfLastRun`` as ``grabFilthiestCompactedLog`` starts). A broker
keeps that stamp in memory and its cleaner runs every few seconds; a nightly job must keep it in
the log dir, ``kcompact-last-run.json`` at its root, to say how long the log dir went uncleaned
before this run. A dry run leaves it as it is: it cleaned nothing.
"""

from __future__ import annotations

import json

from kcompact import storage

FILE = "kcompact-last-run.json"


def read(log_dir: str) -> int | None:
    """The wall-clock ms at which the previous run began choosing, None when none was recorded
    (or the record is unreadable: the gauge is then unknown, the run goes on)."""
    found = storage.read_versioned(storage.join(log_dir.rstrip("/"), FILE))
    if found is None:
        return None
    try:
        return int(json.loads(found[0])["began_choosing_ms"])
    except (ValueError, KeyError, TypeError):
        return None


def write(log_dir: str, began_choosing_ms: int) -> None:
    storage.write_atomic(storage.join(log_dir.rstrip("/"), FILE),
                         json.dumps({"began_choosing_ms": began_choosing_ms}).encode())
