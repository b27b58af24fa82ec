"""Kafka's compression codecs, decoded: the codec numbers and names, and decompression.

Decoders accept whatever a conforming producer may write (several gzip members,
several lz4 frames, lz4 frames with or without checksums, zstd frames without a
content size, snappy with or without xerial framing). The encoders, which write what
Kafka's Java client writes, are ``writers.codecs``.

zstd goes through python-zstandard with one decompression context per thread, reused: a
context made per call (as one-shot APIs do) costs more than decompressing a batch of a few KiB.
"""

from __future__ import annotations

import gzip
import struct
import threading
import zlib

import cramjam
import lz4.frame
import xxhash
import zstandard

from kcompact.errors import CodecError

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
BY_NAME = {name: code for code, name in NAMES.items()}

XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = struct.Struct(">8sii")
INT32 = struct.Struct(">i")
_contexts = threading.local()


def name(codec: int) -> str:
    return NAMES.get(codec, f"unknown({codec})")


def decompress(codec: int, data: bytes | memoryview) -> bytes:
    try:
        if codec == GZIP:
            return gzip.decompress(data)
        if codec == SNAPPY:
            return _snappy_decode(data)
        if codec == LZ4:
            return _lz4_decode(data)
        if codec == ZSTD:
            return _zstd_decode(data)
    except CodecError:
        raise
    except (OSError, EOFError, RuntimeError, ValueError, zlib.error, struct.error, cramjam.DecompressionError,
            zstandard.ZstdError) as exc:
        raise CodecError(f"{name(codec)} data does not decompress: {exc}") from None
    if codec == NONE:
        return bytes(data)
    raise CodecError(f"unknown compression codec {codec}")


def _snappy_decode(data: bytes | memoryview) -> bytes:
    view = memoryview(data)
    if bytes(view[:8]) != XERIAL_MAGIC:
        return bytes(cramjam.snappy.decompress_raw(view))
    pos, out = XERIAL_HEADER.size, []
    while pos < len(view):
        if pos + 4 > len(view):
            raise CodecError(f"snappy chunk header cut short at byte {pos} of the payload")
        (size,) = INT32.unpack_from(view, pos)
        pos += 4
        if size < 0 or pos + size > len(view):
            raise CodecError(f"snappy chunk of {size} bytes at byte {pos} runs past the payload")
        out.append(bytes(cramjam.snappy.decompress_raw(view[pos : pos + size])))
        pos += size
    return b"".join(out)


def _zstd_decompressor() -> zstandard.ZstdDecompressor:
    """This thread's zstd decompressor (made on first use)."""
    ctx = getattr(_contexts, "decompressor", None)
    if ctx is None:
        ctx = _contexts.decompressor = zstandard.ZstdDecompressor()
    return ctx


def _zstd_decode(data: bytes | memoryview) -> bytes:
    """Every frame, with or without a content size (Kafka's Java producer writes none)."""
    rest, out = data, []
    while True:
        frame = _zstd_decompressor().decompressobj()
        out.append(frame.decompress(rest))
        if not frame.eof:
            raise CodecError(f"zstd frame at byte {len(data) - len(rest)} of the payload is cut short")
        rest = frame.unused_data
        if not rest:
            return out[0] if len(out) == 1 else b"".join(out)


def _lz4_decode(data: bytes | memoryview) -> bytes:
    view = memoryview(data)
    pos, out = 0, []
    while pos < len(view):
        chunk, used = lz4.frame.decompress(view[pos:], return_bytes_read=True)
        if used <= 0:
            raise CodecError(f"lz4 frame at byte {pos} of the payload does not decode")
        out.append(chunk)
        pos += used
    return b"".join(out)


def lz4_header_checksum_at(frame: bytes) -> int:
    """Where an lz4 frame's header checksum byte lies: after magic, FLG, BD and the
    optional 8-byte content size."""
    return 4 + 2 + (8 if frame[4] & 0x08 else 0)


def fix_legacy_lz4_header(data: bytes) -> bytes:
    """Magic-0 messages carry Kafka's pre-0.10 lz4 frames, whose header checksum
    was computed over the magic bytes too (KAFKA-3160). Recompute it the standard way."""
    if len(data) < 7:
        return bytes(data)
    end = lz4_header_checksum_at(data)
    checksum = (xxhash.xxh32(data[4:end]).intdigest() >> 8) & 0xFF
    return data[:end] + bytes([checksum]) + data[end + 1 :]


def decompress_legacy(magic: int, codec: int, data: bytes | memoryview) -> bytes:
    """The inner message set of a compressed magic-0/1 wrapper message's value."""
    raw = fix_legacy_lz4_header(bytes(data)) if magic == 0 and codec == LZ4 else data
    return decompress(codec, raw)
