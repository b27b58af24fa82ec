"""readers.compiled_codecs: many sections in one compiled call, the same bytes as the Python codecs.

The expected bytes come from the codec libraries' own Python APIs (python-lz4, python-zstandard,
gzip), called here directly, not from the code under test."""

from __future__ import annotations

import gzip

import lz4.frame
import numpy as np
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from kcompact import errors
from kcompact.readers import codecs, compiled_codecs
from kcompact.writers.codecs import compress
from kcompact.writers.compiled_codecs import compress_many


def _kafka_lz4(data: bytes) -> bytes:
    """As Kafka's Java client frames lz4: independent 64 KiB blocks, no checksums, no size."""
    return lz4.frame.compress(data, block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False,
                              content_checksum=False, store_size=False)


def _zstd_stream(data: bytes) -> bytes:
    """A zstd frame without a content size, as Kafka's Java producer writes it."""
    obj = zstandard.ZstdCompressor(level=3, write_content_size=False).compressobj()
    return obj.compress(data) + obj.flush()


def _sections(parts: list[bytes]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    sizes = np.array([len(p) for p in parts], np.int64)
    ends = np.cumsum(sizes)
    return np.frombuffer(b"".join(parts) or b"\0", np.uint8), ends - sizes, ends


def _decompressed(packed: list[bytes], codec: list[int], section=None) -> list[bytes]:
    src, starts, ends = _sections(packed)
    codec_ids = np.array(codec, np.int64)
    python = section or (lambda i: codecs.decompress(int(codec_ids[i]), src[starts[i]:ends[i]]))
    arena, out_end = compiled_codecs.decompress_many(src, codec_ids, starts, ends, python)
    out_start = np.concatenate(([0], out_end))[:-1]
    return [arena[s:e].tobytes() for s, e in zip(out_start, out_end, strict=True)]


TEXT = b"".join(b"key-%06d:value-%d;" % (i, i % 97) for i in range(20_000))


def test_kafka_framed_sections_decompress_in_order():
    raw = [TEXT[:1000], TEXT[:70_000], b"x", TEXT, np.random.default_rng(1).bytes(5000)]
    packed, codec = [], []
    for i, data in enumerate(raw):
        if i % 2:
            packed.append(_zstd_stream(data))
            codec.append(codecs.ZSTD)
        else:
            packed.append(_kafka_lz4(data))
            codec.append(codecs.LZ4)
    assert _decompressed(packed, codec) == raw


def test_several_frames_in_one_section_and_frames_with_checksums_or_sizes():
    lz4_frames = _kafka_lz4(TEXT[:500]) + lz4.frame.compress(TEXT[500:90_000], content_checksum=True,
                                                             block_checksum=True, store_size=True)
    zstd_frames = zstandard.ZstdCompressor(level=1, write_checksum=True).compress(TEXT[:3000]) + _zstd_stream(
        TEXT[3000:]
    )
    assert _decompressed([lz4_frames, zstd_frames], [codecs.LZ4, codecs.ZSTD]) == [TEXT[:90_000], TEXT]


def test_a_section_far_larger_than_its_compressed_bytes_grows_the_arena():
    zeros = bytes(8 << 20)  # compresses about a thousandfold: past the first arena
    assert _decompressed([_kafka_lz4(zeros), _zstd_stream(zeros), _kafka_lz4(b"tail")],
                         [codecs.LZ4, codecs.ZSTD, codecs.LZ4]) == [zeros, zeros, b"tail"]


def test_gzip_snappy_and_what_the_c_libraries_refuse_go_to_the_callers_decoder():
    packed = [gzip.compress(TEXT[:100]), _kafka_lz4(TEXT[:200]), compress(codecs.SNAPPY, TEXT[:300]),
              _kafka_lz4(TEXT[:400])[:-7], b"", _zstd_stream(TEXT[:500])]
    codec = [codecs.GZIP, codecs.LZ4, codecs.SNAPPY, codecs.LZ4, codecs.ZSTD, codecs.ZSTD]
    asked = []

    def caller(i: int) -> bytes:
        asked.append(i)
        return b"<%d>" % i

    out = _decompressed(packed, codec, caller)
    assert asked == [0, 2, 3, 4]  # gzip, snappy, a torn lz4 frame, an empty section
    assert out == [b"<0>", TEXT[:200], b"<2>", b"<3>", b"<4>", TEXT[:500]]


def test_the_callers_error_for_bad_bytes_is_the_error_raised():
    packed = [_kafka_lz4(TEXT[:100]), b"\x28\xb5\x2f\xfd garbage"]
    with pytest.raises(errors.CodecError, match="zstd"):
        _decompressed(packed, [codecs.LZ4, codecs.ZSTD])


def test_without_the_c_routines_every_section_is_the_callers(monkeypatch):
    monkeypatch.setattr(compiled_codecs, "NATIVE", 0)
    packed = [_kafka_lz4(TEXT[:100]), _zstd_stream(TEXT[:200])]
    assert _decompressed(packed, [codecs.LZ4, codecs.ZSTD]) == [TEXT[:100], TEXT[:200]]


def _expected(codec: int, data: bytes) -> bytes:
    if codec == codecs.LZ4:
        return _kafka_lz4(data)
    if codec == codecs.ZSTD:  # zstd-jni's stream: no content size, a flush, then the end
        stream = zstandard.ZstdCompressor(level=3).compressobj()
        return (stream.compress(data) + stream.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)
                + stream.flush(zstandard.COMPRESSOBJ_FLUSH_FINISH))
    out = gzip.compress(data, compresslevel=6, mtime=0)
    return out[:9] + b"\xff" + out[10:]  # Java's OS byte


def _compressed(raw: list[bytes], codec: list[int]) -> list[bytes]:
    src, starts, ends = _sections(raw)
    out, out_end = compress_many(src, np.array(codec, np.int64), starts, ends)
    out_start = np.concatenate(([0], out_end))[:-1]
    return [out[s:e].tobytes() for s, e in zip(out_start, out_end, strict=True)]


def test_compressed_bytes_are_the_libraries_own_for_every_size():
    sizes = [0, 1, 100, 4095, 65_535, 65_536, 65_537, 131_072, 131_073, 1 << 20, (4 << 20) + 3]
    rng = np.random.default_rng(7)
    raw = [(rng.bytes(n) if i % 3 == 0 else (TEXT * 30)[:n]) for i, n in enumerate(sizes) for _ in (0, 1)]
    codec = [codecs.LZ4, codecs.ZSTD] * len(sizes)
    codec[5] = codecs.GZIP  # not compiled: the Python codec, in place
    assert _compressed(raw, codec) == [_expected(c, d) for c, d in zip(codec, raw, strict=True)]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([codecs.LZ4, codecs.ZSTD, codecs.GZIP, codecs.SNAPPY]),
                          st.binary(max_size=3000) | st.integers(0, 200_000).map(lambda n: TEXT[:n])),
                max_size=12))
def test_round_trip_property(sections):
    codec = [c for c, _ in sections]
    raw = [d for _, d in sections]
    packed = _compressed(raw, codec)
    assert [p for p, c in zip(packed, codec, strict=True) if c != codecs.SNAPPY] == \
        [_expected(c, d) for c, d in zip(codec, raw, strict=True) if c != codecs.SNAPPY]
    assert _decompressed(packed, codec) == raw


def test_the_installed_packages_provide_both_c_routines():
    """Without them every section would quietly take the slow path (setup.cfg asks for cffi)."""
    assert compiled_codecs.NATIVE == (1 << codecs.LZ4) | (1 << codecs.ZSTD)


def test_a_zstd_frame_claiming_a_huge_size_goes_to_the_callers_streaming_decoder():
    """Its header declares 2^40 bytes (single segment, 8-byte content size), its one raw block 3:
    the arena grows to its bound, no further, and the Python decoder says what is wrong."""
    frame = b"\x28\xb5\x2f\xfd\xe0" + (1 << 40).to_bytes(8, "little") + bytes([3 << 3 | 1, 0, 0]) + b"abc"
    with pytest.raises(errors.CodecError, match="zstd"):
        _decompressed([_kafka_lz4(b"before"), frame], [codecs.LZ4, codecs.ZSTD])
