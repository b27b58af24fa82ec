"""What a segment group's task reports to the driver: a row of ``RESULT_SCHEMA``, with the count of
records per fate code, and how a failure is said (the driver reads the prefix to tell whether
the log is at fault: an I/O error and a task's memory are not)."""

from __future__ import annotations

import errno

import pyarrow as pa

# Each record's fate, one code per record: kept (a tombstone kept apart, since a kept tombstone
# needs a delete horizon), or removed and why.
KEPT, KEPT_TOMBSTONE, SUPERSEDED, TOMBSTONE, ABORTED, KEYLESS, MARKER = range(7)
REASON_OF_CODE = ("kept", "kept", "superseded", "tombstone", "aborted", "keyless", "marker")
IO_ERROR = "I/O error (transient, retried next run): "
# a task that ran out of memory: no fault of the log's (it is not marked uncleanable), but not
# transient either: the next run fails the same way unless the workers get more
OUT_OF_MEMORY = ("out of memory (give the Python workers more, spark.executor.pyspark.memory, or lower "
                 "spark.kcompact.map.memory so that large partitions take the shared path): ")
ABORTED_BY_OPERATOR = "aborted"
RESULT_SCHEMA = pa.schema([
    ("gid", pa.int32()), ("path", pa.string()), ("group", pa.int32()), ("base_offset", pa.int64()),
    ("size", pa.int64()), ("batches", pa.int64()), ("records", pa.int64()), ("files", pa.list_(pa.string())),
    ("seconds", pa.float64()), ("error", pa.string()), ("codes", pa.list_(pa.int64())),
])


def reason(exc: Exception) -> str:
    """The error of a group that failed on ``exc``."""
    return memory_error(exc) or (f"{IO_ERROR}{exc}" if isinstance(exc, OSError) else str(exc))


def memory_error(exc: Exception) -> str | None:
    """The error of a task that ran out of memory (a MemoryError, or an allocation the system
    refused: ENOMEM, a capped address space's mmap); None for any other failure."""
    if isinstance(exc, MemoryError) or getattr(exc, "errno", None) == errno.ENOMEM:
        return f"{OUT_OF_MEMORY}{str(exc) or type(exc).__name__}"
    return None


def fate_counts(written: list[dict]) -> dict[tuple[str, str], int]:
    """Records per (partition dir, reason) of result rows ``written``, as ``PartitionReport.of`` reads them."""
    counts: dict[tuple[str, str], int] = {}
    for w in written:
        for code, n in enumerate(w["codes"]):
            key = (w["path"], REASON_OF_CODE[code])
            counts[key] = counts.get(key, 0) + n
    return counts
