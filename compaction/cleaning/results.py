"""What a segment group's task reports to the driver: a ``GroupResult``, with the count of records
per fate code, and a failure's kind (``errors.failure.Failure``: what the driver decides on)
beside its message (what people read)."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from kcompact import storage
from kcompact.contracts.typed_rows import TypedRow, column
from kcompact.errors import memory
from kcompact.errors.failure import Failure
from kcompact.planner.scan import unreadable_reason

# Each record's fate, one code per record: kept (a tombstone kept apart, since a kept tombstone
# needs a delete horizon), or removed and why.
KEPT, KEPT_TOMBSTONE, SUPERSEDED, TOMBSTONE, ABORTED, KEYLESS, MARKER = range(7)
REASON_OF_CODE = ("kept", "kept", "superseded", "tombstone", "aborted", "keyless", "marker")
IO_ERROR = "I/O error (transient, retried next run): "
# a task that ran out of memory: no fault of the log's (it is not marked uncleanable), but not
# transient either: the next run fails the same way unless the workers get more
OUT_OF_MEMORY = ("out of memory (give the Python workers more, spark.executor.pyspark.memory; a partition over "
                 "256 MiB also takes the shared path once spark.kcompact.map.memory is lowered): ")
ABORTED_BY_OPERATOR = "aborted"
I64 = pa.int64()


@dataclass(frozen=True, slots=True)
class GroupResult(TypedRow):
    """One segment group of a partition (``gid``: its index in the job), as stages 2-4 left it: its
    ``.cleaned`` files written (``files``, of ``size`` bytes, ``batches`` and ``records``), or
    the error that stopped it; ``codes``: its records per fate code (``REASON_OF_CODE``)."""

    gid: int | None = column(pa.int32())
    path: str = column(pa.string())
    group: int = column(pa.int32())
    base_offset: int | None = column(I64)
    size: int = column(I64, 0)
    batches: int = column(I64, 0)
    records: int = column(I64, 0)
    files: tuple[str, ...] = column(pa.list_(pa.string()))
    seconds: float = column(pa.float64(), 0.0)
    error: str | None = column(pa.string())
    codes: tuple[int, ...] = column(pa.list_(I64))
    failure: str | None = column(pa.string())  # ``errors.failure.Failure``'s value
    inexact_snappy: int = column(I64, 0)  # snappy batches compressed without Google's snappy


def reason(exc: Exception, path: str | None = None) -> str:
    """The error of a group that failed on ``exc``; ``path``: the partition dir, for an object
    store's error that names no object (the OS's own errors keep their words and file name)."""
    if isinstance(exc, OSError) and not memory_error(exc):
        return f"{IO_ERROR}{exc if exc.errno is not None else storage.describe_error(exc, path)}"
    return memory_error(exc) or str(exc)


def failure_of(exc: Exception) -> str:
    """The kind of a group's failure on ``exc`` (``reason`` says it): memory, I/O, or the bytes."""
    if memory_error(exc):
        return Failure.MEMORY.value
    return (Failure.IO if isinstance(exc, OSError) else Failure.CORRUPT).value


def read_failure_of(exc: Exception) -> str:
    """The kind of a failure on ``exc`` reading a partition (``read_error`` says it)."""
    if memory_error(exc):
        return Failure.MEMORY.value
    return (Failure.UNREADABLE if isinstance(exc, OSError) else Failure.CORRUPT).value


def no_space(exc: OSError, writing: str, needed: int) -> str:
    """The error of a group whose files found no room (ENOSPC, which write() raises with no file
    name): the file system by its mount point, the file being written (``writing``, unless the
    error names another) and the room the group needed: at most its input's bytes, since
    cleaning keeps a subset of the batches (rebuilt ones may differ by a few bytes)."""
    import os
    import posixpath

    from kcompact.conf.units import MB

    path = exc.filename if isinstance(exc.filename, str) else writing
    mount = posixpath.dirname(path)
    if storage.is_local_path(path):
        mount = os.path.realpath(mount)
        while not os.path.ismount(mount):
            mount = os.path.dirname(mount)
    short = "/".join(path.rstrip("/").split("/")[-2:])
    mb = needed / MB
    needed = f"{mb:.1f}" if mb >= 0.05 else f"{mb:.2g}"
    return f"{IO_ERROR}no space left on {mount} (writing {short}, up to {needed} MB needed)"


def task_failure(exc: Exception) -> bool:
    """A failure that is one group's or partition's (bad bytes, I/O, memory), not the program's: a
    RuntimeError only when it is a thread that could not start (``memory_error``)."""
    return not isinstance(exc, RuntimeError) or memory_error(exc) is not None


def read_error(exc: Exception, path: str) -> str:
    """The error of a partition whose files stage 1 could not read (``path``: its dir): bad bytes
    as they are, an OSError as ``planner.scan`` says it (``UNREADABLE``: not the log's fault)."""
    return memory_error(exc) or (unreadable_reason(exc, path) if isinstance(exc, OSError) else str(exc))


def memory_error(exc: Exception) -> str | None:
    """The error of a task that ran out of memory (``errors.memory``); None for any other failure."""
    return f"{OUT_OF_MEMORY}{str(exc) or type(exc).__name__}" if memory.out_of_memory(exc) else None


def fate_counts(written: list[GroupResult]) -> dict[tuple[str, str], int]:
    """Records per (partition dir, reason) of result rows ``written``, as ``PartitionReport.of`` reads them."""
    counts: dict[tuple[str, str], int] = {}
    for w in written:
        for code, n in enumerate(w.codes):
            key = (w.path, REASON_OF_CODE[code])
            counts[key] = counts.get(key, 0) + n
    return counts
