"""Kafka's compression codecs, encoded the way Kafka's Java client frames them (the decoders,
and the codec numbers, are ``readers.codecs``).

zstd goes through python-zstandard with one compression context per thread, reused: a context
made per call (as one-shot APIs do) costs more than compressing a batch of a few KiB. A reused
context writes the same frames as a fresh one.
"""

from __future__ import annotations

import gzip
import threading

import cramjam
import lz4.frame
import xxhash
import zstandard

from kcompact.readers.codecs import GZIP, INT32, LZ4, NONE, SNAPPY, XERIAL_HEADER, XERIAL_MAGIC, ZSTD, CodecError, lz4_header_checksum_at

XERIAL_BLOCK = 32 * 1024  # snappy-java's default block size, as Kafka uses it
ZSTD_LEVEL = 3  # the level Kafka's producer and cleaner use by default
_contexts = threading.local()


def compress(codec: int, data: bytes) -> bytes:
    if codec == NONE:
        return bytes(data)
    if codec == GZIP:
        return gzip.compress(data, compresslevel=6, mtime=0)
    if codec == SNAPPY:
        return _snappy_encode(data)
    if codec == LZ4:
        # Kafka's KafkaLZ4BlockOutputStream: independent 64 KiB blocks, no checksums, no size.
        return lz4.frame.compress(
            data,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            store_size=False,
        )
    if codec == ZSTD:
        return _zstd_compressor().compress(data)
    raise CodecError(f"unknown compression codec {codec}")


def _snappy_encode(data: bytes) -> bytes:
    out = [XERIAL_HEADER.pack(XERIAL_MAGIC, 1, 1)]
    view = memoryview(data)
    for start in range(0, len(data), XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + XERIAL_BLOCK]))
        out.append(INT32.pack(len(block)))
        out.append(block)
    return b"".join(out)


def _zstd_compressor() -> zstandard.ZstdCompressor:
    """This thread's zstd compressor (made on first use)."""
    ctx = getattr(_contexts, "compressor", None)
    if ctx is None:
        ctx = _contexts.compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
    return ctx


def break_legacy_lz4_header(frame: bytes) -> bytes:
    """The inverse of ``readers.codecs.fix_legacy_lz4_header``: the header checksum computed over the
    magic bytes too, as KafkaLZ4BlockOutputStream writes it for magic 0
    (useBrokenFlagDescriptorChecksum), so that magic-0 readers accept the frame."""
    end = lz4_header_checksum_at(frame)
    checksum = (xxhash.xxh32(frame[:end]).intdigest() >> 8) & 0xFF
    return frame[:end] + bytes([checksum]) + frame[end + 1 :]


def compress_legacy(magic: int, codec: int, data: bytes) -> bytes:
    """The value of a compressed magic-0/1 wrapper message holding ``data`` (its inner
    message set): ``compress``, with magic 0's lz4 header checksum quirk."""
    out = compress(codec, data)
    return break_legacy_lz4_header(out) if magic == 0 and codec == LZ4 else out
