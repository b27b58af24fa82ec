"""Kafka's compression codecs, encoded byte for byte as Kafka's cleaner compresses a rebuilt batch
(``Compression.wrapForOutput`` of every release from 3.9 on, at the codec's default level; the
decoders, and the codec numbers, are ``readers.codecs``):

- gzip: Java's GZIPOutputStream around zlib's raw deflate at level 6: a 10-byte header with no
  time and OS byte 255 (what Java 16 and later write, JDK-8244706; 0 on Java 8 and 11, which a
  3.9 broker may run: ``gzip_os``), the deflate stream, CRC-32 and size. zlib's deflate writes
  the same stream whether it gets the input whole or in Java's 8 KiB and 16 KiB buffers.
- snappy: snappy-java's xerial framing (16-byte header, 32 KiB blocks each behind its length),
  the blocks from Google's snappy through ``writers.snappy_library`` (cramjam's without it).
- lz4: Kafka's Lz4BlockOutputStream: an LZ4 frame of independent 64 KiB blocks, no checksums,
  no content size (liblz4's frame API writes exactly that).
- zstd: zstd-jni's ZstdOutputStreamNoFinalizer at level 3: a streamed frame (no content size),
  a flush, then the end (an empty last block). Byte-identical with libzstd 1.5.6, the version
  every release ships, hence zstandard 0.23 (setup.cfg).

zstd goes through python-zstandard with one compression context per thread, reused: a context
made per call (as one-shot APIs do) costs more than compressing a batch of a few KiB. A reused
context writes the same frames as a fresh one.
"""

from __future__ import annotations

import struct
import threading
import zlib

import lz4.frame
import xxhash
import zstandard

from kcompact.errors import CodecError
from kcompact.readers.codecs import (
    GZIP,
    INT32,
    LZ4,
    NONE,
    SNAPPY,
    XERIAL_HEADER,
    XERIAL_MAGIC,
    ZSTD,
    lz4_header_checksum_at,
)
from kcompact.writers.snappy_library import compress_block

XERIAL_BLOCK = 32 * 1024  # snappy-java's default block size, as Kafka uses it
ZSTD_LEVEL = 3  # the level Kafka's producer and cleaner use by default
GZIP_LEVEL = 6  # zlib's default, Java's Deflater.DEFAULT_COMPRESSION
# Java's gzip header: magic, deflate, no flags, no time, no extra flags, then the OS byte
JAVA_GZIP_PREFIX = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00"
GZIP_OS_JAVA_16, GZIP_OS_JAVA_8 = 255, 0  # "unknown" from Java 16 on (JDK-8244706); 0 on Java 8 and 11
_GZIP_TRAILER = struct.Struct("<II")  # CRC-32 and size mod 2^32
_contexts = threading.local()


def compress(codec: int, data: bytes, gzip_os: int = GZIP_OS_JAVA_16) -> bytes:
    """``data`` compressed as Kafka's cleaner compresses it; ``gzip_os``: the JVM's gzip header OS byte."""
    if codec == NONE:
        return bytes(data)
    if codec == GZIP:
        return _gzip_encode(data, gzip_os)
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
        return _zstd_encode(data)
    raise CodecError(f"unknown compression codec {codec}")


def _gzip_encode(data: bytes, os_byte: int) -> bytes:
    deflate = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS)
    body = deflate.compress(data) + deflate.flush()
    return JAVA_GZIP_PREFIX + bytes([os_byte]) + body + _GZIP_TRAILER.pack(zlib.crc32(data), len(data) & 0xFFFFFFFF)


def _zstd_encode(data: bytes) -> bytes:
    """As zstd-jni's stream: the input (size unknown), a flush, then the frame's end."""
    stream = _zstd_compressor().compressobj()
    return (stream.compress(data) + stream.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)
            + stream.flush(zstandard.COMPRESSOBJ_FLUSH_FINISH))


def _snappy_encode(data: bytes) -> bytes:
    out = [XERIAL_HEADER.pack(XERIAL_MAGIC, 1, 1)]
    view = memoryview(data).cast("B")
    for start in range(0, len(view), XERIAL_BLOCK):
        block = compress_block(bytes(view[start : start + XERIAL_BLOCK]))
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


def compress_legacy(magic: int, codec: int, data: bytes, gzip_os: int = GZIP_OS_JAVA_16) -> bytes:
    """The value of a compressed magic-0/1 wrapper message holding ``data`` (its inner
    message set): ``compress``, with magic 0's lz4 header checksum quirk."""
    out = compress(codec, data, gzip_os)
    return break_legacy_lz4_header(out) if magic == 0 and codec == LZ4 else out
