"""readers.codecs against payloads compressed by other libraries (kafka-python's codec
functions, python-snappy, lz4.frame with every frame option, zstandard), and our
compressed output against kafka-python's decoders."""

from __future__ import annotations

import random
import struct
from concurrent.futures import ThreadPoolExecutor

import lz4.frame
import pytest
import zstandard
from kafka import codec as kp

from kcompact.errors import CodecError
from kcompact.readers.codecs import GZIP, LZ4, NONE, SNAPPY, ZSTD, decompress
from kcompact.writers.codecs import compress

# Records-like text: compressible, yet not one repeated byte.
_rng = random.Random(7)
SMALL = b"key-17\x00value of a record \xff\x01" * 3
LARGE = b"".join(b"record-%06d:%s;" % (i, bytes(_rng.choice(b"abcdefgh") for _ in range(30))) for i in range(5000))
assert len(LARGE) > 150_000  # several 32 KiB snappy blocks and 64 KiB lz4 blocks


@pytest.mark.parametrize("payload", [b"", b"x", SMALL, LARGE], ids=["empty", "one-byte", "small", "large"])
def test_gzip_from_kafka_python(payload):
    assert decompress(GZIP, kp.gzip_encode(payload)) == payload


def test_gzip_several_members():
    data = kp.gzip_encode(SMALL) + kp.gzip_encode(b"") + kp.gzip_encode(LARGE, compresslevel=1)
    assert decompress(GZIP, data) == SMALL + LARGE


@pytest.mark.parametrize("payload", [b"x", SMALL, LARGE], ids=["one-byte", "small", "large"])
def test_snappy_xerial_from_kafka_python(payload):
    assert decompress(SNAPPY, kp.snappy_encode(payload)) == payload


@pytest.mark.parametrize("payload", [b"", b"x", SMALL, LARGE], ids=["empty", "one-byte", "small", "large"])
def test_snappy_raw_from_kafka_python(payload):
    assert decompress(SNAPPY, kp.snappy_encode(payload, xerial_compatible=False)) == payload


def test_snappy_xerial_several_blocks():
    data = kp.snappy_encode(LARGE, xerial_blocksize=4096)
    assert data[:8] == b"\x82SNAPPY\x00"
    blocks, pos = 0, 16
    while pos < len(data):
        (size,) = struct.unpack_from(">i", data, pos)
        pos += 4 + size
        blocks += 1
    assert blocks == -(-len(LARGE) // 4096)
    assert decompress(SNAPPY, data) == LARGE


@pytest.mark.parametrize("payload", [b"", SMALL, LARGE], ids=["empty", "small", "large"])
def test_lz4_from_kafka_python(payload):
    assert decompress(LZ4, kp.lz4_encode(payload)) == payload


LZ4_OPTIONS = {
    "content-checksum": dict(content_checksum=True),
    "block-checksum": dict(block_checksum=True),
    "content-size": dict(store_size=True),
    "everything": dict(content_checksum=True, block_checksum=True, store_size=True,
                       block_size=lz4.frame.BLOCKSIZE_MAX64KB),
    "bare-linked-4mb": dict(content_checksum=False, store_size=False, block_linked=True,
                            block_size=lz4.frame.BLOCKSIZE_MAX4MB),
    "high-compression": dict(compression_level=lz4.frame.COMPRESSIONLEVEL_MINHC),
}


@pytest.mark.parametrize("options", LZ4_OPTIONS.values(), ids=LZ4_OPTIONS.keys())
def test_lz4_frame_options(options):
    assert decompress(LZ4, lz4.frame.compress(LARGE, **options)) == LARGE


def test_lz4_several_frames():
    data = (lz4.frame.compress(SMALL, content_checksum=True) + kp.lz4_encode(LARGE)
            + lz4.frame.compress(b"", store_size=False) + lz4.frame.compress(SMALL, block_checksum=True))
    assert decompress(LZ4, data) == SMALL + LARGE + SMALL


@pytest.mark.parametrize("payload", [b"", SMALL, LARGE], ids=["empty", "small", "large"])
def test_zstd_from_kafka_python(payload):
    assert decompress(ZSTD, kp.zstd_encode(payload)) == payload


def test_zstd_without_content_size():
    data = zstandard.ZstdCompressor(write_content_size=False).compress(LARGE)
    assert zstandard.get_frame_parameters(data).content_size == zstandard.CONTENTSIZE_UNKNOWN
    assert decompress(ZSTD, data) == LARGE


def test_zstd_streamed_frame_and_two_frames():
    stream = zstandard.ZstdCompressor(level=1).compressobj()
    streamed = stream.compress(LARGE) + stream.flush()
    two = zstandard.ZstdCompressor(write_content_size=False).compress(SMALL) + kp.zstd_encode(SMALL)
    assert decompress(ZSTD, streamed) == LARGE
    assert decompress(ZSTD, two) == SMALL + SMALL


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD], ids=["gzip", "snappy", "lz4", "zstd"])
def test_memoryview_input(codec):
    """Batches hand their payload over as a memoryview slice of the segment buffer."""
    framed = b"HEADER" + compress(codec, LARGE) + b"TAIL"
    assert decompress(codec, memoryview(framed)[6:-4]) == LARGE


def test_none_is_identity():
    assert decompress(NONE, memoryview(SMALL)) == SMALL
    assert compress(NONE, SMALL) == SMALL


CORRUPT = {
    "gzip-garbage": (GZIP, b"not gzip at all"),
    "gzip-truncated": (GZIP, kp.gzip_encode(LARGE)[:-9]),
    "gzip-bad-crc": (GZIP, kp.gzip_encode(SMALL)[:-8] + b"\0\0\0\0" + kp.gzip_encode(SMALL)[-4:]),
    "snappy-xerial-chunk-past-end": (SNAPPY, kp.snappy_encode(LARGE)[:-100]),
    "snappy-xerial-cut-chunk-header": (SNAPPY, kp.snappy_encode(SMALL) + b"\x00\x00"),
    "snappy-raw-garbage": (SNAPPY, b"\xff\xff\xff\xff\xff garbage"),
    "snappy-xerial-bad-block": (SNAPPY, b"\x82SNAPPY\x00" + struct.pack(">iii", 1, 1, 5) + b"\xff\xff\xff\xff\xff"),
    "lz4-garbage": (LZ4, b"not an lz4 frame"),
    "lz4-truncated": (LZ4, kp.lz4_encode(LARGE)[:-20]),
    "lz4-bad-content-checksum": (LZ4, lz4.frame.compress(SMALL, content_checksum=True)[:-1] + b"\x00"),
    "zstd-garbage": (ZSTD, b"not a zstd frame"),
    "zstd-truncated": (ZSTD, kp.zstd_encode(LARGE)[:-20]),
    "zstd-second-frame-truncated": (ZSTD, kp.zstd_encode(SMALL) + kp.zstd_encode(LARGE)[:-20]),
    "zstd-empty": (ZSTD, b""),
    "unknown-codec": (5, SMALL),
}


@pytest.mark.parametrize("codec, data", CORRUPT.values(), ids=CORRUPT.keys())
def test_corrupt_data_raises_codec_error(codec, data):
    with pytest.raises(CodecError):
        decompress(codec, data)


def test_zstd_contexts_are_per_thread():
    """zstd reuses one context per thread: threads compressing and decompressing at once must not
    mix their frames up (kafka-python decodes each)."""
    payloads = [bytes([i]) * 1000 + LARGE[: 5000 * i] for i in range(1, 9)]

    def round_trip(payload: bytes) -> bool:
        return all(kp.zstd_decode(compress(ZSTD, payload)) == payload == decompress(ZSTD, kp.zstd_encode(payload))
                   for _ in range(50))

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(round_trip, payloads))


def test_compress_unknown_codec_raises_codec_error():
    with pytest.raises(CodecError):
        compress(7, SMALL)


KP_DECODERS = {GZIP: kp.gzip_decode, SNAPPY: kp.snappy_decode, LZ4: kp.lz4_decode, ZSTD: kp.zstd_decode}


PAYLOADS = {"empty": b"", "one-byte": b"x", "small": SMALL, "large": LARGE}
# kafka-python takes a header-only xerial stream (our empty snappy output, as snappy-java writes it)
# for raw snappy: its xerial check wants more than 16 bytes. Our own decoder reads it.
ROUND_TRIPS = [(c, name) for c in KP_DECODERS for name in PAYLOADS if (c, name) != (SNAPPY, "empty")]


@pytest.mark.parametrize("codec, payload_name", ROUND_TRIPS, ids=[f"{codec}-{name}" for codec, name in ROUND_TRIPS])
def test_our_output_decodes_with_kafka_python(codec, payload_name):
    payload = PAYLOADS[payload_name]
    assert KP_DECODERS[codec](compress(codec, payload)) == payload
    assert decompress(codec, compress(codec, payload)) == payload


def test_our_empty_snappy_is_a_header_only_xerial_stream():
    assert compress(SNAPPY, b"") == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    assert decompress(SNAPPY, compress(SNAPPY, b"")) == b""


def test_our_snappy_is_xerial_framed_in_32k_blocks():
    data = compress(SNAPPY, LARGE)
    assert data[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    sizes, pos = [], 16
    while pos < len(data):
        (size,) = struct.unpack_from(">i", data, pos)
        sizes.append(size)
        pos += 4 + size
    assert pos == len(data) and len(sizes) == -(-len(LARGE) // 32768)


def test_our_lz4_is_kafkas_frame_layout():
    """KafkaLZ4BlockOutputStream: frame magic, independent blocks, no content size or checksum."""
    data = compress(LZ4, LARGE)
    assert data[:4] == b"\x04\x22\x4d\x18"
    flags, block_descriptor = data[4], data[5]
    assert flags >> 6 == 1  # version 01
    assert flags & 0x20  # block independence
    assert not flags & 0x08 and not flags & 0x04 and not flags & 0x10  # no content size / checksums
    assert (block_descriptor >> 4) & 0x7 == 4  # 64 KiB max block size
