"""Kafka's settings that cleaning and retention depend on: names, defaults, valid ranges.

Each setting has its topic-level name (``cleanup.policy``) and the broker-level
name of its default (``log.cleanup.policy``), with Kafka's default value and
Kafka's validation. Values are parsed from the strings Kafka's tools write, and
a bad value is an error that names the key and where it came from.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from kcompact.errors import ConfigError

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1
POLICIES = ("compact", "delete")


def _int_parser(lo: int, hi: int) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        try:
            value = int(raw.strip())
        except ValueError:
            raise ValueError(f"must be a whole number between {lo} and {hi}") from None
        if not lo <= value <= hi:
            raise ValueError(f"must be between {lo} and {hi}")
        return value

    return parse


def _ratio(raw: str) -> float:
    try:
        value = float(raw.strip())
    except ValueError:
        raise ValueError("must be a number between 0 and 1") from None
    if math.isnan(value) or not 0.0 <= value <= 1.0:
        raise ValueError("must be between 0 and 1")
    return value


def policy_items(raw: str) -> tuple[str, ...]:
    """The names of a ``cleanup.policy`` value as written, in order (duplicates kept)."""
    text = raw.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    return tuple(part.strip().lower() for part in text.split(",") if part.strip())


def _policy(raw: str) -> tuple[str, ...]:
    """The policies named; none (an empty list, which every release accepts) means neither
    compaction nor retention by time or size: UnifiedLog.deleteOldSegments then deletes only
    segments below the log start offset (KIP-1161 documents it as infinite retention in 4.2)."""
    items = policy_items(raw)
    unknown = [item for item in items if item not in POLICIES]
    if unknown:
        raise ValueError(f"unknown policy {', '.join(unknown)} (allowed: compact, delete)")
    return tuple(p for p in POLICIES if p in items)


@dataclass(frozen=True, slots=True)
class Setting:
    topic_name: str | None  # None: broker-wide only, no topic override exists
    broker_name: str
    default: object
    parse: Callable[[str], object]

    @property
    def name(self) -> str:
        return self.topic_name or self.broker_name


SETTINGS: tuple[Setting, ...] = (
    Setting("cleanup.policy", "log.cleanup.policy", ("delete",), _policy),
    Setting("min.cleanable.dirty.ratio", "log.cleaner.min.cleanable.ratio", 0.5, _ratio),
    Setting("delete.retention.ms", "log.cleaner.delete.retention.ms", 86_400_000, _int_parser(0, LONG_MAX)),
    Setting("min.compaction.lag.ms", "log.cleaner.min.compaction.lag.ms", 0, _int_parser(0, LONG_MAX)),
    Setting("max.compaction.lag.ms", "log.cleaner.max.compaction.lag.ms", LONG_MAX, _int_parser(1, LONG_MAX)),
    Setting("segment.bytes", "log.segment.bytes", 1_073_741_824, _int_parser(14, INT_MAX)),
    Setting("segment.index.bytes", "log.index.size.max.bytes", 10_485_760, _int_parser(4, INT_MAX)),
    Setting("index.interval.bytes", "log.index.interval.bytes", 4096, _int_parser(0, INT_MAX)),
    Setting("max.message.bytes", "message.max.bytes", 1_048_588, _int_parser(0, INT_MAX)),
    Setting("retention.ms", "log.retention.ms", 604_800_000, _int_parser(-1, LONG_MAX)),
    Setting("retention.bytes", "log.retention.bytes", -1, _int_parser(-1, LONG_MAX)),
    Setting(None, "producer.id.expiration.ms", 86_400_000, _int_parser(1, INT_MAX)),
    # The cleaner's I/O buffers (log.cleaner.io.buffer.size / log.cleaner.threads / 2 each) decide
    # where its appends to a cleaned segment end, hence that segment's index entries. Kafka accepts
    # 0 for both, which leaves it no buffer (or no cleaner) to clean with; we ask for at least 1.
    Setting(None, "log.cleaner.io.buffer.size", 524_288, _int_parser(1, INT_MAX)),
    Setting(None, "log.cleaner.threads", 1, _int_parser(1, INT_MAX)),
)
# The broker's own message.max.bytes (max.message.bytes' broker default) bounds the cleaner's
# buffers whatever a topic overrides; effective configs carry it under this broker name too.
BROKER_MESSAGE_MAX_BYTES = "message.max.bytes"

BY_TOPIC_NAME = {s.topic_name: s for s in SETTINGS if s.topic_name}
BY_BROKER_NAME = {s.broker_name: s for s in SETTINGS}

# Broker aliases of log.retention.ms, with the factor to milliseconds; Kafka uses
# the most precise one given (ms, then minutes, then hours).
RETENTION_ALIASES = {"log.retention.minutes": 60_000, "log.retention.hours": 3_600_000}

# Valid Kafka topic-level settings that cleaning does not depend on: accepted
# (Kafka's tools and metadata carry them) and ignored.
OTHER_TOPIC_SETTINGS = frozenset({
    "compression.type", "compression.gzip.level", "compression.lz4.level", "compression.zstd.level",
    "file.delete.delay.ms", "flush.messages", "flush.ms", "follower.replication.throttled.replicas",
    "leader.replication.throttled.replicas", "local.retention.bytes", "local.retention.ms",
    "message.downconversion.enable", "message.format.version", "message.timestamp.after.max.ms",
    "message.timestamp.before.max.ms", "message.timestamp.difference.max.ms", "message.timestamp.type",
    "min.insync.replicas", "preallocate", "remote.storage.enable", "remote.log.copy.disable",
    "remote.log.delete.on.disable", "segment.jitter.ms", "segment.ms", "unclean.leader.election.enable",
})


def parse_value(setting: Setting, raw: str, key: str, source: str) -> object:
    try:
        return setting.parse(raw)
    except ValueError as exc:
        raise ConfigError(f"{source}: {key}={raw!r}: {exc}") from None
