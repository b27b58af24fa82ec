"""The bytes a batch becomes in a cleaned segment, given what the cleaner decided for it.

An ``Outcome`` is Kafka's filterTo result for one batch: copied byte for byte, rebuilt with
only its kept records (and perhaps a new delete horizon), written as Kafka's empty header, or
dropped. This module turns a batch and its outcome into bytes; writing the files of a segment
group (``.cleaned`` or staged names, indexes, fsync) is ``operations.cleaned``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kcompact.readers.batch import Batch
from kcompact.writers.codecs import GZIP_OS_JAVA_16
from kcompact.writers.convert import legacy_as_v2
from kcompact.writers.legacy import rebuild_wrapper
from kcompact.writers.rebuild import empty, rebuild

COPY, REWRITE, EMPTY, DROP = "copy", "rewrite", "empty", "drop"


@dataclass(frozen=True, slots=True)
class Outcome:
    """What becomes of one batch: Kafka's filterTo result."""

    kind: str  # COPY, REWRITE, EMPTY or DROP
    delete_horizon_ms: int | None = None  # to stamp (REWRITE), else None


def output_bytes(batch: Batch, outcome: Outcome, keep: np.ndarray | None, legacy_to_v2: bool = False,
                 gzip_os: int = GZIP_OS_JAVA_16) -> bytes | None:
    """The bytes a batch becomes, or None when it is dropped. A legacy (v0/v1) entry is
    copied, dropped, or rebuilt: as a v2 batch with ``legacy_to_v2`` (Kafka 4.0 on, which never
    copies one), else (a compressed wrapper) around its kept inner messages in its own magic
    (a gzip one with the header OS byte ``gzip_os``). It has no empty form, and Kafka's cleaner
    fails on one it must keep empty."""
    if outcome.kind == DROP:
        return None
    if outcome.kind == COPY:
        return bytes(batch.data)
    if batch.magic != 2:
        if outcome.kind == EMPTY:
            raise ValueError(f"{batch.path}: byte {batch.position}: magic-{batch.magic} entry at offset "
                             f"{batch.base_offset_field} loses every record but must be kept (the last batch of "
                             "the cleaning round): empty batches are only supported for magic v2 and above, "
                             "so Kafka's cleaner fails here too")
        assert outcome.kind == REWRITE and keep is not None
        if legacy_to_v2:
            return legacy_as_v2(batch, keep, outcome.delete_horizon_ms)
        return rebuild_wrapper(batch, keep, gzip_os)
    if outcome.kind == EMPTY:
        return empty(batch)
    assert outcome.kind == REWRITE and keep is not None
    return rebuild(batch, keep, outcome.delete_horizon_ms, gzip_os)


def records_written(batch: Batch, outcome: Outcome, keep: np.ndarray | None, written: Batch) -> int:
    """Records in a written batch; a legacy wrapper counts its inner messages (known without
    decompressing the output again)."""
    if written.magic == 2:
        return written.records_count
    if outcome.kind == REWRITE:
        return int(np.count_nonzero(keep))
    return batch.count
