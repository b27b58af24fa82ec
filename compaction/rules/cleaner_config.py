"""What the compaction job reads of a topic's configuration, typed once from the plan.

A plan row carries the topic's resolved settings as strings by Kafka's names (its ``config``
map); the job needs a few of them as numbers. ``CleanerConfig.of_topic`` takes them from that map once,
on the driver, and the job carries the record from there on (to its stage 1 tasks with each
``PartitionToClean``, back in ``PartitionPlan``'s ``config`` column).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import pyarrow as pa

from kcompact.contracts.typed_rows import TypedRow, column

I64 = pa.int64()


@dataclass(frozen=True, slots=True)
class CleanerConfig(TypedRow):
    """The settings Kafka's cleaner reads when it cleans one partition (topic-level names;
    broker-only ones by their broker names)."""

    delete_retention_ms: int = column(I64)  # delete.retention.ms
    segment_bytes: int = column(I64)  # segment.bytes
    segment_index_bytes: int = column(I64)  # segment.index.bytes
    producer_id_expiration_ms: int = column(I64)  # producer.id.expiration.ms
    index_interval_bytes: int = column(I64)  # index.interval.bytes
    max_message_bytes: int = column(I64)  # max.message.bytes, the topic's
    message_max_bytes: int = column(I64)  # message.max.bytes, the broker's
    io_buffer_size: int = column(I64)  # log.cleaner.io.buffer.size
    cleaner_threads: int = column(I64)  # log.cleaner.threads
    index_per_batch: int = column(I64, 1)  # 1: the Kafka release indexes per batch (KAFKA-806), 0: per append
    legacy_to_v2: int = column(I64, 1)  # 1: the Kafka release rewrites kept v0/v1 entries as v2 (4.0 on, KIP-724)
    gzip_os: int = column(I64, 255)  # the broker JVM's gzip header OS byte: 255 from Java 16 on, 0 on Java 8 and 11

    @classmethod
    def of_topic(cls, config: Mapping[str, str] | Iterable[tuple[str, str]], index_per_batch: bool = True,
                 legacy_to_v2: bool = True, gzip_os: int = 255) -> CleanerConfig:
        """From a plan row's ``config`` (Kafka's names -> values as strings; a dict, or a list of
        pairs) and its release's index rule and rule for v0/v1 entries."""
        strings = dict(config)
        return cls(*(int(strings[key]) for key in CONFIG_KEYS), index_per_batch=int(index_per_batch),
                   legacy_to_v2=int(legacy_to_v2), gzip_os=int(gzip_os))


# Kafka's name of each field, in field order
CONFIG_KEYS = ("delete.retention.ms", "segment.bytes", "segment.index.bytes", "producer.id.expiration.ms",
               "index.interval.bytes", "max.message.bytes", "message.max.bytes", "log.cleaner.io.buffer.size",
               "log.cleaner.threads")
