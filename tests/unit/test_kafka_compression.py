"""Our compressed bytes against Kafka's own: tests/fixtures/java-compression/out holds each payload
of its inputs.py compressed by Kafka's compression classes (Compress.java, made by make.sh; see
its README), the way Kafka's cleaner compresses a rebuilt batch; snappy also for 81 more inputs of
1 B to 64 KiB, made by snappy-java 1.1.10.7's own native library. The Python path
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
from kcompact.writers import snappy_library
from kcompact.writers.codecs import compress, compress_legacy
from kcompact.writers.compiled_codecs import compress_many
from tests.support import FIXTURE_INPUT

FIXTURES = Path(__file__).parents[1] / "fixtures" / "java-compression"
_spec = importlib.util.spec_from_file_location("java_compression_inputs", FIXTURES / "inputs.py")
_inputs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_inputs)
PAYLOADS = _inputs.payloads()
SNAPPY_PAYLOADS = _inputs.snappy_payloads()
CODECS = {"gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD}


def kafka(codec: str, name: str) -> bytes:
    return (FIXTURES / "out" / f"{codec}-{name}.bin").read_bytes()


CASES = [(c, n) for c in CODECS for n in PAYLOADS]


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


def test_snappy_blocks_of_every_size_are_kafkas():
    """Google's snappy sizes its hash table to the input: 1 B to 64 KiB, records, text, random bytes."""
    assert snappy_library.library() is not None, "libsnappy.so.1 not found: make install installs libsnappy1v5"
    differ = [n for n, data in SNAPPY_PAYLOADS.items() if compress(SNAPPY, data) != kafka("snappy", n)]
    assert len(SNAPPY_PAYLOADS) == 81
    assert differ == []


def _kafka_snappy_payloads(root: Path) -> list[bytes]:
    """The compressed records sections of every snappy v2 batch in the .log files under ``root``
    (read here with struct: base offset, length, then attributes at byte 21, records at 61)."""
    out = []
    for log in sorted(root.rglob("*.log")):
        data, pos = log.read_bytes(), 0
        while pos + 61 <= len(data):
            (length,) = struct.unpack_from(">i", data, pos + 8)
            (attributes,) = struct.unpack_from(">h", data, pos + 21)
            if data[pos + 16] == 2 and attributes & 7 == SNAPPY:
                out.append(data[pos + 61 : pos + 12 + length])
            pos += 12 + length
    return out


def test_kafka_written_snappy_batches_are_ours():
    """The Kafka-written fixture's snappy batches (kafka-clients 3.9.1 with snappy-java 1.1.10.5;
    131, 54 B to 2.9 KiB uncompressed), decoded by kafka-python and compressed again, are their own bytes."""
    payloads = _kafka_snappy_payloads(FIXTURE_INPUT)
    assert len(payloads) == 131
    differ = [i for i, p in enumerate(payloads) if compress(SNAPPY, kp.snappy_decode(p)) != p]
    assert differ == []
