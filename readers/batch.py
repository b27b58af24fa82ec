"""One entry of a ``.log`` file: a magic-v2 record batch or a magic-v0/v1 message.

A ``Batch`` keeps a reference to the bytes it was read from and parses its
header eagerly (cheap) and its records only on request (costly), so a header
scan never decompresses. The raw bytes stay available for byte-for-byte copies.
"""

from __future__ import annotations

import struct
import zlib

import crc32c
import numpy as np

from kcompact import errors
from kcompact.errors import FormatError
from kcompact.readers import codecs, scan
from kcompact.readers.layout import (
    LEGACY_FIELDS,
    LEGACY_TIMESTAMP_AT,
    LOG_OVERHEAD,
    MAGIC_AT,
    V2_CRC_START,
    V2_HEADER,
    V2_HEADER_SIZE,
)
from kcompact.readers.records import Record, build_records, control_type

ENTRY_PREFIX = struct.Struct(">qiib")  # offset, length, (leader epoch | crc), magic: every format's
LEGACY_V0 = struct.Struct(">" + "".join(code for _, code in LEGACY_FIELDS[:5]))  # offset .. attributes
LEGACY_V1_TIMESTAMP = struct.Struct(">q")
LEGACY_MIN_SIZE = {0: 14, 1: 22}  # crc+magic+attributes+[timestamp]+keylen+valuelen
_INT32 = struct.Struct(">i")

CREATE_TIME, LOG_APPEND_TIME = 0, 1
NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1

ATTR_CODEC_MASK = 0x07
ATTR_TIMESTAMP_TYPE = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
ATTR_DELETE_HORIZON = 0x40


class Batch:
    """A batch (v2) or shallow message (v0/v1) at ``position`` in file ``path``."""

    __slots__ = (
        "path", "buf", "start", "end", "position", "magic", "base_offset_field", "crc",
        "attributes", "partition_leader_epoch", "last_offset_delta", "base_timestamp",
        "max_timestamp", "producer_id", "producer_epoch", "base_sequence", "records_count",
        "_legacy_records", "_legacy_mixed_magic", "_scanned",
    )

    def __init__(self, path: str, buf: bytes, start: int, end: int, position: int):
        self.path = path
        self.buf = buf
        self.start = start
        self.end = end
        self.position = position
        self._legacy_records: list[Record] | None = None
        self._legacy_mixed_magic = False
        self._scanned: tuple[bytes, np.ndarray, np.ndarray] | None = None
        magic = buf[start + MAGIC_AT]
        self.magic = magic
        if magic == 2:
            (
                self.base_offset_field, _, self.partition_leader_epoch, _, self.crc,
                self.attributes, self.last_offset_delta, self.base_timestamp,
                self.max_timestamp, self.producer_id, self.producer_epoch,
                self.base_sequence, self.records_count,
            ) = V2_HEADER.unpack_from(buf, start)
        else:
            self.base_offset_field, _, self.crc, _, self.attributes = LEGACY_V0.unpack_from(buf, start)
            self.partition_leader_epoch = -1
            self.last_offset_delta = 0
            if magic == 1:
                (ts,) = LEGACY_V1_TIMESTAMP.unpack_from(buf, start + LEGACY_V0.size)
            else:
                ts = NO_TIMESTAMP
            self.base_timestamp = self.max_timestamp = ts
            self.producer_id, self.producer_epoch, self.base_sequence = NO_PRODUCER_ID, -1, -1
            self.records_count = 1

    # -- raw bytes -----------------------------------------------------------------
    @property
    def size(self) -> int:
        return self.end - self.start

    @property
    def data(self) -> memoryview:
        """The batch's bytes exactly as stored, for byte-for-byte copies."""
        return memoryview(self.buf)[self.start : self.end]

    def compute_crc(self) -> int:
        if self.magic == 2:
            return crc32c.crc32c(memoryview(self.buf)[self.start + V2_CRC_START : self.end])
        return zlib.crc32(memoryview(self.buf)[self.start + MAGIC_AT : self.end])

    def crc_valid(self) -> bool:
        return self.compute_crc() == self.crc

    # -- header fields -------------------------------------------------------------
    @property
    def codec(self) -> int:
        return self.attributes & ATTR_CODEC_MASK

    @property
    def timestamp_type(self) -> int:
        if self.magic == 0:
            return NO_TIMESTAMP
        return LOG_APPEND_TIME if self.attributes & ATTR_TIMESTAMP_TYPE else CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return self.magic == 2 and bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return self.magic == 2 and bool(self.attributes & ATTR_CONTROL)

    @property
    def has_delete_horizon(self) -> bool:
        return self.magic == 2 and bool(self.attributes & ATTR_DELETE_HORIZON)

    @property
    def delete_horizon_ms(self) -> int:
        return self.base_timestamp if self.has_delete_horizon else NO_TIMESTAMP

    @property
    def last_offset(self) -> int:
        return self.base_offset_field + self.last_offset_delta

    @property
    def base_offset(self) -> int:
        """First offset; for a compressed legacy wrapper, that of its first inner message."""
        if self.magic == 2 or self.codec == codecs.NONE:
            return self.base_offset_field
        records = self.records()
        return records[0].offset if records else self.base_offset_field

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def last_sequence(self) -> int:
        if self.base_sequence < 0:
            return -1
        return (self.base_sequence + self.last_offset_delta) % (1 << 31)

    @property
    def count(self) -> int:
        """Records stored (v2: the header's count; legacy wrappers: inner messages)."""
        if self.magic == 2 or self.codec == codecs.NONE:
            return self.records_count
        return len(self.records())

    # -- records -------------------------------------------------------------------
    def payload(self) -> bytes:
        """The v2 records section, decompressed."""
        raw = memoryview(self.buf)[self.start + V2_HEADER_SIZE : self.end]
        try:
            return codecs.decompress(self.codec, raw)
        except errors.CodecError as exc:
            raise FormatError(self.path, self.position, f"batch at offset {self.base_offset_field}: {exc}") from None

    def scan_records(self) -> tuple[bytes, np.ndarray, np.ndarray]:
        """The v2 records section located by the compiled scanner: (bytes holding the
        section, their uint8 view, position matrix with positions absolute in those bytes).
        An uncompressed section is scanned where it lies, without a copy. The result stays with
        the batch: one both decoded and rebuilt (by the cleaner) decompresses once."""
        if self._scanned is None:
            self._scanned = self._scan()
        return self._scanned

    def _scan(self) -> tuple[bytes, np.ndarray, np.ndarray]:
        if self.codec == codecs.NONE:
            data, start, end = self.buf, self.start + V2_HEADER_SIZE, self.end
        else:
            data = self.payload()
            start, end = 0, len(data)
        if self.records_count < 0:
            raise self._records_error(0, f"negative record count {self.records_count}")
        buf = np.frombuffer(data, dtype=np.uint8)
        cols, err, pos = scan.scan_records(buf, start, end, self.records_count)
        if err != scan.OK:
            raise self._records_error(int(pos) - start, scan.MESSAGES[err])
        return data, buf, cols

    def records(self) -> list[Record]:
        if self.magic != 2:
            if self._legacy_records is None:
                self._legacy_records, self._legacy_mixed_magic = _legacy_records(self)
            return self._legacy_records
        data, buf, cols = self.scan_records()
        append_time = self.max_timestamp if self.timestamp_type == LOG_APPEND_TIME else None
        return build_records(data, buf, cols, self.base_offset_field, self.base_timestamp, append_time)

    def _records_error(self, section_pos: int, what: str) -> FormatError:
        """A malformed records section, at its file position when uncompressed."""
        prefix = f"batch at offset {self.base_offset_field}"
        if self.codec == codecs.NONE:
            return FormatError(self.path, self.position + V2_HEADER_SIZE + section_pos, f"{prefix}: {what}")
        return FormatError(self.path, self.position, (
            f"{prefix}: byte {section_pos} of its decompressed {codecs.name(self.codec)} records: {what}"
        ))

    @property
    def inner_magic_differs(self) -> bool:
        """A compressed legacy wrapper holding an inner message whose magic is not the
        wrapper's (KAFKA-4298: cleaners before 0.10.1 wrote such wrappers). Kafka's
        cleaner never copies one as stored: it rebuilds it with the wrapper's magic."""
        if self.magic == 2 or self.codec == codecs.NONE:
            return False
        self.records()
        return self._legacy_mixed_magic

    def control_type(self) -> int | None:
        """ABORT (0) or COMMIT (1) for a control batch, else None."""
        if not self.is_control:
            return None
        records = self.records()
        return control_type(records[0]) if records else None

    def __repr__(self) -> str:
        return (
            f"Batch(magic={self.magic}, base_offset={self.base_offset_field}, last_offset={self.last_offset}, "
            f"position={self.position}, size={self.size}, codec={codecs.name(self.codec)})"
        )


def _legacy_records(batch: Batch) -> tuple[list[Record], bool]:
    """The message itself, or for a compressed wrapper its inner messages; and whether an
    inner message's magic differs from the wrapper's."""
    key, value, _ = _legacy_key_value(batch.path, batch.buf, batch.start, batch.end, batch.position, batch.magic)
    if batch.codec == codecs.NONE:
        return [Record(batch.base_offset_field, batch.base_timestamp, key, value)], False
    if value is None:
        raise FormatError(batch.path, batch.position, "compressed legacy wrapper message has no value")
    try:
        inner = codecs.decompress_legacy(batch.magic, batch.codec, value)
    except errors.CodecError as exc:
        raise FormatError(
            batch.path, batch.position, f"legacy wrapper at offset {batch.base_offset_field}: {exc}"
        ) from None
    entries = []
    pos = 0
    while pos < len(inner):
        if pos + LOG_OVERHEAD + 5 > len(inner):
            raise FormatError(
                batch.path, batch.position, f"legacy wrapper: inner message cut short at inner byte {pos}"
            )
        offset, size, _, magic = ENTRY_PREFIX.unpack_from(inner, pos)
        end = pos + LOG_OVERHEAD + size
        if magic not in (0, 1) or size < LEGACY_MIN_SIZE[magic] or end > len(inner):
            raise FormatError(batch.path, batch.position, f"legacy wrapper: bad inner message at inner byte {pos}")
        ts = LEGACY_V1_TIMESTAMP.unpack_from(inner, pos + LEGACY_TIMESTAMP_AT)[0] if magic == 1 else NO_TIMESTAMP
        k, v, _ = _legacy_key_value(batch.path, inner, pos, end, batch.position, magic)
        entries.append((offset, ts, k, v, magic))
        pos = end
    if not entries:
        return [], False
    # v1 wrappers carry relative inner offsets ending at the wrapper's own offset; like
    # Kafka, a shift that would go negative is not applied (the inner offsets stand).
    shift = max(batch.base_offset_field - entries[-1][0], 0) if batch.magic >= 1 else 0
    append_time = batch.timestamp_type == LOG_APPEND_TIME
    records = [
        Record(offset + shift, batch.max_timestamp if append_time else ts, k, v)
        for offset, ts, k, v, _ in entries
    ]
    return records, any(magic != batch.magic for *_, magic in entries)


def _legacy_key_value(path, buf, start, end, position, magic):
    pos = start + (LEGACY_V0.size + (8 if magic == 1 else 0))
    fields = []
    for _ in range(2):
        if pos + 4 > end:
            raise FormatError(path, position, "legacy message: key/value length runs past the message")
        (n,) = _INT32.unpack_from(buf, pos)
        pos += 4
        if n < 0:
            fields.append(None)
            continue
        if pos + n > end:
            raise FormatError(path, position, "legacy message: key/value runs past the message")
        fields.append(bytes(buf[pos : pos + n]))
        pos += n
    return fields[0], fields[1], pos
