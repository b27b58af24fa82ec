"""Writing a log dir's checkpoint files while jobs and commits of other partitions write them too.

Every change is a compare-and-swap on the whole file (a directory flock locally, a conditional
PUT on an object store), retried while others change it in between. Both checkpoints this
product writes keep, on every write, only the entries of partitions the log dir holds, as Kafka
does: LogCleanerManager.updateCheckpoints writes ``cleaner-offset-checkpoint`` for the logs it
holds, LogManager.checkpointLogStartOffsetsInDir ``log-start-offset-checkpoint`` for the logs it
holds (it also leaves out a log start equal to the first segment's base offset, which tells a
broker nothing: kept here, as it tells it nothing wrong either). An entry left by a deleted or
moved partition goes with the next write. Retention moves both through ``move_log_starts``,
on local disk and in an object-store commit record's apply alike.
"""

from __future__ import annotations

from collections.abc import Callable

from kcompact import errors, storage
from kcompact.errors import FormatError
from kcompact.logdir import broker_load
from kcompact.logdir.listing import held_partitions
from kcompact.readers import checkpoint
from kcompact.writers.checkpoint import render_checkpoint

CAS_ATTEMPTS = 100  # compare-and-swap rounds on a checkpoint before giving up (transient)


def raise_log_starts(entries: dict[tuple[str, int], int], starts: dict[tuple[str, int], int]) -> dict:
    """``log-start-offset-checkpoint`` entries after retention moved the log starts to ``starts``:
    a log start only ever grows."""
    return entries | {key: max(entries.get(key, start), start) for key, start in starts.items()}


def raise_cleaner_offsets(entries: dict[tuple[str, int], int], starts: dict[tuple[str, int], int]) -> dict:
    """``cleaner-offset-checkpoint`` entries below a new log start raised to it, as Kafka's cleaner
    resets them; partitions without an entry get none."""
    return entries | {key: start for key, start in starts.items() if key in entries and entries[key] < start}


def update_checkpoint(log_dir: str, name: str, change: Callable[[dict], dict | None]) -> None:
    """Rewrite the checkpoint file ``name`` of ``log_dir`` to ``change(entries)`` by compare-and-swap;
    ``None``: leave it as it is."""
    path = storage.join(log_dir, name)
    for _ in range(CAS_ATTEMPTS):
        found = storage.read_versioned(path)
        entries = _entries(path, name, found[0]) if found else {}
        wanted = change(dict(entries))
        if wanted is None or wanted == entries:
            return
        if storage.write_if(path, render_checkpoint(wanted), found[1] if found else None):
            return
    raise errors.StorageError(f"{path}: changed by others {CAS_ATTEMPTS} times while this job set its entries; "
                              "try again")


def _entries(path: str, name: str, data: bytes) -> dict[tuple[str, int], int]:
    """The file's entries; none for one a broker's load passes over unread
    (``broker_load.unreadable_checkpoint``), which the write then replaces, as a broker's next
    checkpoint of its logs does. Any other fault is raised."""
    try:
        return checkpoint.parse(path, data)
    except FormatError as exc:
        if broker_load.unreadable_checkpoint(name, exc)[0]:
            raise
        return {}


def update_cleaner_offsets(log_dir: str, change: Callable[[dict], dict | None],
                           held: set[tuple[str, int]] | None = None) -> None:
    """``update_checkpoint`` of ``cleaner-offset-checkpoint``, keeping the entries of the partitions
    ``log_dir`` holds whenever it writes (``change`` returns None: no write). ``held``: those
    partitions when known (``logdir.listing.held_partitions``)."""
    _update_held(log_dir, checkpoint.CLEANER_OFFSET, change, held)


def update_log_starts(log_dir: str, change: Callable[[dict], dict | None],
                      held: set[tuple[str, int]] | None = None) -> None:
    """``update_checkpoint`` of ``log-start-offset-checkpoint``, keeping the entries of the
    partitions ``log_dir`` holds whenever it writes, as ``update_cleaner_offsets``."""
    _update_held(log_dir, checkpoint.LOG_START_OFFSET, change, held)


def _update_held(log_dir: str, name: str, change: Callable[[dict], dict | None],
                 held: set[tuple[str, int]] | None) -> None:
    held = held_partitions(log_dir) if held is None else held

    def kept(entries: dict) -> dict | None:
        wanted = change(entries)
        return None if wanted is None else {key: offset for key, offset in wanted.items() if key in held}

    update_checkpoint(log_dir, name, kept)


def move_log_starts(log_dir: str, starts: dict[tuple[str, int], int],
                    held: set[tuple[str, int]] | None = None) -> None:
    """Both checkpoints after retention moved the log starts of partitions of ``log_dir`` to
    ``starts`` (local retention: once per log dir; an object-store commit record: per partition):
    ``log-start-offset-checkpoint`` raised to them, a ``cleaner-offset-checkpoint`` entry below its
    new log start raised to it (what Kafka's cleaner does with one); each file keeps only the
    entries of the partitions the log dir holds (and is written when that changes anything);
    ``held``: those partitions when known."""
    held = held_partitions(log_dir) if held is None else held
    update_log_starts(log_dir, lambda entries: raise_log_starts(entries, starts), held)
    update_cleaner_offsets(log_dir, lambda entries: raise_cleaner_offsets(entries, starts), held)

