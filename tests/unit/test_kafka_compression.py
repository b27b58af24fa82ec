"""Our compressed bytes against Kafka's own: tests/fixtures/java-compression/out holds each payload
of its inputs.py compressed by Kafka's compression classes (Compress.java, made by make.sh; see
its README), the way Kafka's cleaner compresses a rebuilt batch. The Python path
(``writers.codecs``) and the compiled one (``writers.compiled_codecs``) must both give those bytes.
"""

from __future__ import annotations

import importlib.util
import struct
from pathlib import Path

import numpy as np
import pytest
import zstandard
from kafka import codec as kp

from kcompact.conf import releases
from kcompact.readers.codecs import GZIP, LZ4, SNAPPY, ZSTD
from kcompact.writers.codecs import compress, compress_legacy
from kcompact.writers.compiled_codecs import compress_many

FIXTURES = Path(__file__).parents[1] / "fixtures" / "java-compression"
_spec = importlib.util.spec_from_file_location("java_compression_inputs", FIXTURES / "inputs.py")
_inputs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_inputs)
PAYLOADS = _inputs.payloads()
CODECS = {"gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD}
# Kafka's snappy blocks come from Google's C++ snappy 1.1.10; cramjam's Rust encoder writes other
# blocks for some inputs under about 8 KiB (docs/compaction-semantics.md, "Compressed bytes").
SNAPPY_UNMATCHED = {"small"}


def kafka(codec: str, name: str) -> bytes:
    return (FIXTURES / "out" / f"{codec}-{name}.bin").read_bytes()


CASES = [(c, n) for c in CODECS for n in PAYLOADS if not (c == "snappy" and n in SNAPPY_UNMATCHED)]


@pytest.mark.parametrize("codec, name", CASES, ids=[f"{c}-{n}" for c, n in CASES])
def test_compressed_bytes_are_kafkas(codec, name):
    assert compress(CODECS[codec], PAYLOADS[name]) == kafka(codec, name)


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
def test_compiled_compression_is_kafkas(codec):
    """Every payload in one compiled call, as the rewrite compresses a chunk's rebuilt batches."""
    names = list(PAYLOADS)
    src = np.frombuffer(b"".join(PAYLOADS[n] for n in names), np.uint8)
    sizes = np.array([len(PAYLOADS[n]) for n in names], np.int64)
    ends = np.cumsum(sizes)
    out, out_end = compress_many(src, np.full(len(names), CODECS[codec], np.int64), ends - sizes, ends)
    got = np.split(out, out_end[:-1])
    assert [g.tobytes() for g in got] == [kafka(codec, n) for n in names]


@pytest.mark.parametrize("name", [n for n in PAYLOADS if len(PAYLOADS[n]) <= 65536])
def test_magic_zero_lz4_is_kafkas(name):
    """Magic 0's lz4 frame: Kafka's header checksum over the magic bytes too."""
    assert compress_legacy(0, LZ4, PAYLOADS[name]) == kafka("lz4v0", name)


def test_gzip_header_is_javas():
    """Java 16 and later write OS 255 ("unknown"); Python's gzip module writes 3 (Unix)."""
    out = compress(GZIP, PAYLOADS["small"])
    assert out[:10] == b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff" == kafka("gzip", "small")[:10]


def test_zstd_library_is_every_releases():
    """Every Kafka release from 3.9 on ships zstd-jni 1.5.6-x: libzstd 1.5.6, as the release table says."""
    assert {r.libzstd for r in releases.SUPPORTED} == {".".join(map(str, zstandard.ZSTD_VERSION))} == {"1.5.6"}


def test_zstd_frame_has_no_content_size():
    out = compress(ZSTD, PAYLOADS["12k"])
    assert zstandard.get_frame_parameters(out).content_size == zstandard.CONTENTSIZE_UNKNOWN
    assert out.endswith(b"\x01\x00\x00")  # the empty last block of the stream's end


@pytest.mark.parametrize("name", sorted(SNAPPY_UNMATCHED))
def test_snappy_unmatched_blocks_keep_kafkas_framing(name):
    """Where the block bytes differ, the framing is Kafka's and the payload decodes the same."""
    ours, theirs = compress(SNAPPY, PAYLOADS[name]), kafka("snappy", name)
    assert ours[:16] == theirs[:16]

    def block_sizes(data):
        pos, sizes = 16, []
        while pos < len(data):
            (n,) = struct.unpack_from(">i", data, pos)
            sizes.append(n)
            pos += 4 + n
        return sizes

    assert len(block_sizes(ours)) == len(block_sizes(theirs))
    assert kp.snappy_decode(ours) == kp.snappy_decode(theirs) == PAYLOADS[name]
