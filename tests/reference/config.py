"""The configuration one cleaning round reads: Kafka's names and defaults, looked up plainly.

A topic value beats the broker-level default, which beats Kafka's own default. Values are
given already typed (ints, floats, and ``cleanup.policy`` as text): the model reads no
configuration source of its own, the caller hands it the topics' settings.
"""

from __future__ import annotations

from dataclasses import dataclass, field

LONG_MAX = 2**63 - 1

# topic-level name -> (broker-level name, Kafka's default)
TOPIC_SETTINGS = {
    "cleanup.policy": ("log.cleanup.policy", "delete"),
    "min.cleanable.dirty.ratio": ("log.cleaner.min.cleanable.ratio", 0.5),
    "delete.retention.ms": ("log.cleaner.delete.retention.ms", 86_400_000),
    "min.compaction.lag.ms": ("log.cleaner.min.compaction.lag.ms", 0),
    "max.compaction.lag.ms": ("log.cleaner.max.compaction.lag.ms", LONG_MAX),
    "segment.bytes": ("log.segment.bytes", 1 << 30),
    "segment.index.bytes": ("log.index.size.max.bytes", 10 * 1024 * 1024),
    "index.interval.bytes": ("log.index.interval.bytes", 4096),
    "max.message.bytes": ("message.max.bytes", 1_048_588),
}
# broker-only settings
BROKER_DEFAULTS = {
    "producer.id.expiration.ms": 86_400_000,
    "log.cleaner.io.buffer.size": 512 * 1024,
    "log.cleaner.threads": 1,
    "message.max.bytes": 1_048_588,
}


@dataclass(frozen=True)
class Config:
    topics: dict[str, dict[str, object]] = field(default_factory=dict)
    broker: dict[str, object] = field(default_factory=dict)

    def topic(self, topic: str, name: str):
        broker_name, default = TOPIC_SETTINGS[name]
        if name in self.topics.get(topic, {}):
            return self.topics[topic][name]
        return self.broker.get(broker_name, default)

    def broker_value(self, name: str):
        return self.broker.get(name, BROKER_DEFAULTS[name])

    def compact(self, topic: str) -> bool:
        return "compact" in [p.strip() for p in str(self.topic(topic, "cleanup.policy")).split(",")]

    def io_buffer_size(self) -> int:
        """CleanerThread: log.cleaner.io.buffer.size / log.cleaner.threads / 2 (a read and a write buffer)."""
        return self.broker_value("log.cleaner.io.buffer.size") // self.broker_value("log.cleaner.threads") // 2
