"""Generate realistic Kafka log dirs, and the truth of what they hold.

A generated dir is what a Kafka 3.x broker leaves after a clean shutdown: v2
batches from plain, idempotent and transactional producers (with commits,
aborts, epoch bumps and optionally one transaction left open), optionally after
an old broker's magic-0/1 messages, segments rolled at ``segment.bytes`` or a
full index with the broker's index rules, ``.txnindex`` files, per-partition
metadata and the log-dir checkpoints. ``GenResult`` says record by record what
was written, so tests can use it as their expected answer. A spec may hold
records back (``append_records``): ``append`` writes them later, as producers
would between two cleaning rounds.

Same spec and seed give the same bytes: every random choice comes from a
``random.Random`` seeded per partition, nothing reads the clock, and all I/O
goes through ``storage`` (local paths and ``s3://`` alike).

The modules: ``spec`` (the demo spec, validation, loading, overrides), ``producers`` (one
partition's producers and their encoded batches), ``partition`` (segments, indexes, snapshots
and the other files of a partition dir), ``log_dir`` (``generate`` and ``append``: the
partitions, the KRaft metadata log and the root checkpoints) and ``truth`` (what was written).
Their public names are this package's too.
"""

from __future__ import annotations

from kcompact.tools.generator.log_dir import ROOT_CHECKPOINTS, append, generate, topic_id
from kcompact.tools.generator.partition import DEFAULT_SEGMENT_BYTES, DEFAULT_SEGMENT_INDEX_BYTES
from kcompact.tools.generator.producers import (
    COORDINATOR_EPOCH,
    IDEMPOTENT_PID_BASE,
    LOG_APPEND_DELAY_MS,
    TRANSACTIONAL_PID_BASE,
)
from kcompact.tools.generator.spec import _CONFIG_CHECKS as _CONFIG_CHECKS  # the README's list of spec keys is
from kcompact.tools.generator.spec import _SPEC_KEYS as _SPEC_KEYS  # checked against these three
from kcompact.tools.generator.spec import _TOPIC_FIELDS as _TOPIC_FIELDS
from kcompact.tools.generator.spec import DEFAULT_START_MS, DEMO_SPEC, load_spec, override, validate
from kcompact.tools.generator.truth import GenResult, PartitionTruth, WrittenBatch, WrittenRecord, WrittenSegment

__all__ = [
    "COORDINATOR_EPOCH", "DEFAULT_SEGMENT_BYTES", "DEFAULT_SEGMENT_INDEX_BYTES", "DEFAULT_START_MS", "DEMO_SPEC",
    "GenResult", "IDEMPOTENT_PID_BASE", "LOG_APPEND_DELAY_MS", "PartitionTruth", "ROOT_CHECKPOINTS",
    "TRANSACTIONAL_PID_BASE", "WrittenBatch", "WrittenRecord", "WrittenSegment", "append", "generate", "load_spec",
    "override", "topic_id", "validate",
]
