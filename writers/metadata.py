"""Encode the KRaft metadata records that carry topic configuration (TopicRecord,
ConfigRecord), framed as a KRaft controller writes them to
``__cluster_metadata-0``:
frame version 1, api key and version as unsigned varints, then the message in
Kafka's flexible encoding (compact strings, a trailing empty tagged-field section)."""

from __future__ import annotations

import base64
import struct

from kcompact.readers.metadata import CONFIG_RECORD, FRAME_VERSION, RESOURCE_TOPIC, TOPIC_RECORD
from kcompact.writers.batch import uvarint


def _compact_string(text: str | None) -> bytes:
    if text is None:
        return uvarint(0)
    data = text.encode()
    return uvarint(len(data) + 1) + data


def _frame(api_key: int, body: bytes) -> bytes:
    return uvarint(FRAME_VERSION) + uvarint(api_key) + uvarint(0) + body + uvarint(0)  # no tagged fields


def topic_record(name: str, topic_id: str) -> bytes:
    """``topic_id`` as Kafka prints it: unpadded URL-safe base64 of 16 bytes."""
    raw = base64.urlsafe_b64decode(topic_id + "=" * (-len(topic_id) % 4))
    return _frame(TOPIC_RECORD, _compact_string(name) + raw)


def topic_config_record(topic: str, key: str, value: str | None) -> bytes:
    """A topic's config entry; ``None`` deletes the key."""
    return _frame(CONFIG_RECORD, struct.pack(">b", RESOURCE_TOPIC) + _compact_string(topic)
                  + _compact_string(key) + _compact_string(value))

