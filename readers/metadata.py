"""Values of KRaft metadata records (the ``__cluster_metadata`` log), the few that carry
topic configuration or the finalized ``metadata.version``, decoded (encoded by ``writers.metadata``).

A value is framed as unsigned varints ``frameVersion`` (1), ``apiKey``, ``version``, then
the message in Kafka's generated-message encoding. Kafka's schemas mark these records
flexible from version 0 (compact strings, trailing tagged fields), but copies of the
schemas without ``flexibleVersions`` exist, so a body that does not fit the flexible
encoding exactly is tried once more as non-flexible (int16-length strings) before it is
called malformed. Records of any other apiKey are returned undecoded.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass

from kcompact.errors import MetadataError

FRAME_VERSION = 1
TOPIC_RECORD, CONFIG_RECORD, REMOVE_TOPIC_RECORD, FEATURE_LEVEL_RECORD = 2, 4, 9, 12
METADATA_VERSION = "metadata.version"  # the feature whose level names the cluster's release line
RESOURCE_TOPIC, RESOURCE_BROKER = 2, 4  # ConfigRecord.ResourceType values
_SHORT_MAX = 0x7FFF
_UVARINT_MAX_BYTES = 5  # Kafka's unsigned varints are 32-bit


@dataclass(frozen=True, slots=True)
class TopicRecord:
    name: str
    topic_id: str  # Kafka's text form: base64url without padding


@dataclass(frozen=True, slots=True)
class ConfigRecord:
    resource_type: int
    resource_name: str
    name: str
    value: str | None  # None: the key was deleted


@dataclass(frozen=True, slots=True)
class RemoveTopicRecord:
    topic_id: str


@dataclass(frozen=True, slots=True)
class FeatureLevelRecord:
    name: str
    feature_level: int  # int16; 0 removes the feature


@dataclass(frozen=True, slots=True)
class OtherRecord:
    """A record type that configuration does not depend on (partitions, brokers, features...)."""

    api_key: int
    version: int


MetadataRecord = TopicRecord | ConfigRecord | RemoveTopicRecord | FeatureLevelRecord | OtherRecord


def uuid_text(raw: bytes) -> str:
    """A topic id as Kafka prints it (``Uuid.toString``)."""
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


class _Reader:
    """A cursor over one value; ``flexible`` selects the string encoding."""

    def __init__(self, data: bytes, pos: int, flexible: bool):
        self.data = data
        self.pos = pos
        self.flexible = flexible

    def take(self, n: int, what: str) -> bytes:
        if self.pos + n > len(self.data):
            raise MetadataError(self.pos, f"{what} needs {n} bytes, {len(self.data) - self.pos} left")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def uvarint(self, what: str) -> int:
        start, value = self.pos, 0
        for shift in range(0, 7 * _UVARINT_MAX_BYTES, 7):
            byte = self.take(1, what)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
        raise MetadataError(start, f"{what}: unsigned varint longer than {_UVARINT_MAX_BYTES} bytes")

    def int8(self, what: str) -> int:
        return int.from_bytes(self.take(1, what), "big", signed=True)

    def int16(self, what: str) -> int:
        return int.from_bytes(self.take(2, what), "big", signed=True)

    def uuid(self, what: str) -> str:
        return uuid_text(self.take(16, what))

    def nullable_string(self, what: str) -> str | None:
        start = self.pos
        if self.flexible:
            length = self.uvarint(what) - 1
        else:
            length = int.from_bytes(self.take(2, what), "big", signed=True)
            if length < -1:
                raise MetadataError(start, f"{what}: negative length {length}")
        if length == -1:
            return None
        if length > _SHORT_MAX:
            raise MetadataError(start, f"{what}: length {length} exceeds Kafka's string limit")
        raw = self.take(length, what)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise MetadataError(start, f"{what}: not UTF-8") from None

    def string(self, what: str) -> str:
        start = self.pos
        text = self.nullable_string(what)
        if text is None:
            raise MetadataError(start, f"{what}: null in a non-nullable string")
        return text

    def skip_tagged_fields(self) -> None:
        """Tagged fields carry nothing these records need: skipped whole."""
        for _ in range(self.uvarint("tagged field count")):
            self.uvarint("tag")
            self.take(self.uvarint("tagged field size"), "tagged field")


def _topic(r: _Reader) -> TopicRecord:
    return TopicRecord(r.string("Name"), r.uuid("TopicId"))


def _config(r: _Reader) -> ConfigRecord:
    return ConfigRecord(r.int8("ResourceType"), r.string("ResourceName"), r.string("Name"),
                        r.nullable_string("Value"))


def _remove_topic(r: _Reader) -> RemoveTopicRecord:
    return RemoveTopicRecord(r.uuid("TopicId"))


def _feature_level(r: _Reader) -> FeatureLevelRecord:
    return FeatureLevelRecord(r.string("Name"), r.int16("FeatureLevel"))


_BODIES: dict[int, tuple[str, Callable[[_Reader], MetadataRecord]]] = {
    TOPIC_RECORD: ("TopicRecord", _topic),
    CONFIG_RECORD: ("ConfigRecord", _config),
    REMOVE_TOPIC_RECORD: ("RemoveTopicRecord", _remove_topic),
    FEATURE_LEVEL_RECORD: ("FeatureLevelRecord", _feature_level),
}


def _body(value: bytes, start: int, read: Callable[[_Reader], MetadataRecord], flexible: bool) -> MetadataRecord:
    """The body read in one encoding; it must end exactly where the value ends."""
    r = _Reader(value, start, flexible)
    record = read(r)
    if flexible:
        r.skip_tagged_fields()
    if r.pos != len(value):
        raise MetadataError(r.pos, f"{len(value) - r.pos} bytes left after the message")
    return record


def _header_field(r: _Reader, what: str) -> int:
    start = r.pos
    value = r.uvarint(what)
    if value > _SHORT_MAX:
        raise MetadataError(start, f"{what} {value} is larger than an int16")
    return value


def decode(value: bytes) -> MetadataRecord:
    """One record value of the metadata log (or of a metadata snapshot)."""
    r = _Reader(value, 0, True)
    frame = _header_field(r, "frame version")
    if frame == 0:
        raise MetadataError(0, "frame version 0 is the KRaft preview format of Kafka 2.8, which no later "
                               "Kafka reads either")
    if frame != FRAME_VERSION:
        raise MetadataError(0, f"unknown frame version {frame} (only {FRAME_VERSION} exists)")
    api_key = _header_field(r, "apiKey")
    version = _header_field(r, "version")
    if api_key not in _BODIES:
        return OtherRecord(api_key, version)
    name, read = _BODIES[api_key]
    try:
        return _body(value, r.pos, read, flexible=True)
    except MetadataError as flexible:
        try:
            return _body(value, r.pos, read, flexible=False)
        except MetadataError as legacy:
            raise MetadataError(flexible.position, (
                f"{name} v{version} fits neither encoding: flexible: {flexible.what}; "
                f"non-flexible: {legacy.what} (byte {legacy.position})"
            )) from None
