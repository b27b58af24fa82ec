"""readers.walk: a segment's entries a chunk at a time, headers parsed by one compiled call.

Truth: kafka-python's framing and header fields of batches it built, and ``iter_batches`` (itself
checked against kafka-python) for framing errors: the same entries, fields, error positions and
messages, whatever the chunk size, from a file read into buffers (an object store's) or mapped
into memory (a local file's)."""

from __future__ import annotations

import io
import struct
import tempfile

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kcompact.errors import FormatError
from kcompact.readers import codecs, walk
from kcompact.readers.records import Record
from kcompact.readers.segment import iter_batches
from kcompact.writers.codecs import compress
from tests.support import kp_batches, kp_build, recompute_crc32c
from tests.unit.test_legacy import legacy_message_set
from tests.unit.test_segment_reader import LOG, SPECS, batch_specs_log

T0 = 1_720_000_000_000


def opened(data: bytes, mapped: bool):
    """``data`` as a file object: in memory (read) or a file on disk (mapped)."""
    if not mapped:
        return io.BytesIO(data)
    f = tempfile.TemporaryFile()
    f.write(data)
    f.flush()
    return f


def entries_of(data: bytes, chunk_size: int, start: int = 0, end: int | None = None, check: bool = True,
               mapped: bool = False) -> list:
    rows = []
    for chunk in walk.read_chunks(opened(data, mapped), "x.log", start, end, chunk_size, check):
        for row in chunk.entries.tolist():
            rows.append([chunk.file_position + row[0], *row[1:]])
    return rows


def kp_rows(data: bytes) -> list[list[int]]:
    out, pos = [], 0
    for b in kp_batches(data):
        out.append([pos, b.size_in_bytes, 2, b.base_offset, b.last_offset_delta, b.attributes, b.first_timestamp,
                    b.max_timestamp, b.producer_id, b.producer_epoch, b.base_sequence, b.records_count, b.crc,
                    b.leader_epoch])
        pos += b.size_in_bytes
    return out


@pytest.mark.parametrize("mapped", [False, True])
@pytest.mark.parametrize("chunk_size", [17, 61, 100, 4096, 1 << 20])
def test_entries_and_fields_match_kafka_python_at_any_chunk_size(chunk_size, mapped):
    ours = entries_of(LOG, chunk_size, mapped=mapped)
    theirs = kp_rows(LOG)
    assert ours == theirs
    assert [row[walk.LEADER_EPOCH] for row in ours] == [i % 3 for i in range(len(SPECS))]  # kp_build's


@pytest.mark.parametrize("mapped", [False, True])
def test_an_entry_larger_than_the_chunk_is_read_whole(mapped):
    data = batch_specs_log([(codecs.NONE, 2, 50_000), (codecs.NONE, 1, 10)])
    chunks = list(walk.read_chunks(opened(data, mapped), "x.log", chunk_size=1000))
    assert [len(c.entries) for c in chunks] == [1, 1]
    assert bytes(chunks[0].buf[:chunks[0].entries[0, walk.SIZE]]) == data[:chunks[0].entries[0, walk.SIZE]]


@pytest.mark.parametrize("mapped", [False, True])
@pytest.mark.parametrize("chunk_size", [61, 4096])
def test_a_range_reads_the_entries_starting_in_it(chunk_size, mapped):
    rows = kp_rows(LOG)
    start, end = rows[2][0], rows[5][0] + 1  # the third entry to the sixth
    assert [r[0] for r in entries_of(LOG, chunk_size, start, end, mapped=mapped)] == [r[0] for r in rows[2:6]]
    assert entries_of(LOG, chunk_size, len(LOG), mapped=mapped) == []  # from the end of the file
    assert entries_of(b"", chunk_size, mapped=mapped) == []


def test_legacy_entries_are_framed_with_their_offset_crc_and_timestamp():
    data = legacy_message_set(1, codecs.NONE, [Record(5, T0, b"k", b"v"), Record(6, T0 + 1, None, b"w")])
    rows = entries_of(data, 4096)
    assert [(r[walk.MAGIC], r[walk.BASE_OFFSET], r[walk.MAX_TIMESTAMP], r[walk.RECORDS_COUNT]) for r in rows] == [
        (1, 5, T0, 1), (1, 6, T0 + 1, 1)]
    assert [r[walk.CRC] for r in rows] == [struct.unpack_from(">I", data, r[0] + 12)[0] for r in rows]


def iter_error(data: bytes) -> tuple[int, str]:
    with pytest.raises(FormatError) as info:
        list(iter_batches(io.BytesIO(data), "x.log"))
    return info.value.position, str(info.value)


def walk_error(data: bytes, chunk_size: int, mapped: bool = False) -> tuple[int, str]:
    with pytest.raises(FormatError) as info:
        entries_of(data, chunk_size, mapped=mapped)
    return info.value.position, str(info.value)


def with_bad_crc(data: bytes, k: int) -> bytes:
    pos = kp_rows(data)[k][0]
    return data[:pos + 70] + bytes([data[pos + 70] ^ 1]) + data[pos + 71:]


BAD = {
    "torn": LOG[:-5],
    "zero tail": LOG + bytes(200),
    "short tail": LOG + b"\x01\x02\x03",
    "bad magic": LOG[:kp_rows(LOG)[3][0] + 16] + b"\x07" + LOG[kp_rows(LOG)[3][0] + 17:],
    "short length": LOG[:kp_rows(LOG)[1][0] + 8] + struct.pack(">i", 20) + LOG[kp_rows(LOG)[1][0] + 12:],
    "crc": with_bad_crc(LOG, 4),
}


@pytest.mark.parametrize("mapped", [False, True])
@pytest.mark.parametrize("name", list(BAD))
@pytest.mark.parametrize("chunk_size", [61, 4096, 1 << 20])
def test_framing_and_content_errors_are_iter_batches_errors(name, chunk_size, mapped):
    assert walk_error(BAD[name], chunk_size, mapped) == iter_error(BAD[name])


def test_a_bad_crc_passes_unchecked():
    assert len(entries_of(BAD["crc"], 4096, check=False)) == len(SPECS)


@pytest.mark.parametrize("mapped", [False, True])
def test_chunks_before_an_error_are_yielded(mapped):
    seen = []
    with pytest.raises(FormatError):
        for chunk in walk.read_chunks(opened(BAD["torn"], mapped), "x.log", chunk_size=61):
            seen.extend((chunk.file_position + chunk.entries[:, walk.POSITION]).tolist())
    assert seen == [r[0] for r in kp_rows(LOG)[:-1]]


def corrupted(data: bytes, k: int, kind: str) -> bytes:
    """Entry ``k`` (a v2 batch) of ``data`` with one thing wrong that only its content shows; its
    CRC made right again where the fault is in a header field."""
    pos, size = ROWS[k][0], ROWS[k][1]  # no fault moves an entry
    entry = bytearray(data[pos:pos + size])
    if kind == "crc":
        entry[70] ^= 1
        return data[:pos] + bytes(entry) + data[pos + size:]
    if kind == "codec":
        entry[22] = (entry[22] & 0xF8) | 6
    elif kind == "negative count":
        struct.pack_into(">i", entry, 57, -1)
    else:  # more records than offsets
        struct.pack_into(">i", entry, 57, struct.unpack_from(">i", entry, 23)[0] + 2)
    return data[:pos] + bytes(recompute_crc32c(entry)) + data[pos + size:]


ROWS = kp_rows(LOG)
LEGACY = legacy_message_set(1, codecs.NONE, [Record(0, T0, b"k", b"v"), Record(1, T0 + 1, None, b"w")])


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.integers(0, len(SPECS) - 1), st.sampled_from(["crc", "codec", "negative count", "counts"]),
                       min_size=1, max_size=4), st.booleans(), st.sampled_from([61, 300, 4096]), st.booleans())
def test_the_first_bad_entry_is_found_among_several_and_after_legacy_ones(faults, legacy, chunk_size, mapped):
    data = LOG
    for k, kind in faults.items():
        data = corrupted(data, k, kind)
    data = (LEGACY if legacy else b"") + data
    assert walk_error(data, chunk_size, mapped) == iter_error(data)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([codecs.NONE, codecs.LZ4, codecs.ZSTD]), st.integers(1, 30),
                          st.integers(0, 300)), min_size=1, max_size=12), st.integers(17, 3000), st.booleans())
def test_any_log_any_chunk_size(specs, chunk_size, mapped):
    data = batch_specs_log(specs)
    assert entries_of(data, chunk_size, mapped=mapped) == kp_rows(data)


def test_payload_is_the_decompressed_records_section():
    records = [Record(i, T0, b"k%d" % i, b"value " * 20) for i in range(10)]
    data = kp_build(records, codec=codecs.LZ4)
    (chunk,) = walk.read_chunks(io.BytesIO(data), "x.log")
    batch = chunk.batch(0)
    assert bytes(chunk.payload(0)) == batch.payload()
    broken = bytearray(data)
    broken[70:80] = bytes(10)
    (chunk,) = walk.read_chunks(io.BytesIO(bytes(recompute_crc32c(broken))), "x.log")
    with pytest.raises(FormatError, match="batch at offset 0"):
        chunk.payload(0)


def records_by_decode(data: bytes, chunk_size: int = 4096) -> list[tuple]:
    out = []
    from kcompact.readers import scan

    for chunk in walk.read_chunks(io.BytesIO(data), "x.log", chunk_size=chunk_size):
        sections = walk.decode(chunk, np.arange(len(chunk.entries)))
        for i, k in enumerate(sections.ks.tolist()):
            buf = sections.buffer(i, chunk)
            base = int(chunk.entries[k, walk.BASE_OFFSET])
            for row in sections.cols[sections.rows[i]:sections.rows[i + 1]].tolist():
                key = (
                    None
                    if row[scan.KEY_POS] < 0
                    else bytes(buf[row[scan.KEY_POS] : row[scan.KEY_POS] + row[scan.KEY_LEN]])
                )
                value = None if row[scan.VALUE_POS] < 0 else bytes(
                    buf[row[scan.VALUE_POS]:row[scan.VALUE_POS] + row[scan.VALUE_LEN]])
                out.append((base + row[scan.OFFSET_DELTA], key, value))
    return out


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([codecs.NONE, codecs.GZIP, codecs.SNAPPY, codecs.LZ4, codecs.ZSTD]),
                          st.integers(1, 30), st.integers(0, 300)), min_size=1, max_size=10), st.integers(61, 5000))
def test_decode_gives_kafka_pythons_records(specs, chunk_size):
    data = batch_specs_log(specs)
    assert records_by_decode(data, chunk_size) == [(r.offset, r.key, r.value) for b in kp_batches(data) for r in b]


def corrupt_record(codec: int) -> bytes:
    """A batch whose second record's length varint claims more bytes than the section has."""
    records = [Record(i, T0, b"k%d" % i, b"value " * 10) for i in range(3)]
    good = kp_build(records, codec=codec)
    if codec == codecs.NONE:
        body = bytearray(good)
        first_len = body[61] >> 1  # zigzag of a one-byte varint
        body[61 + 1 + first_len] = 0x7E  # record 2's length: 63, past the section's end
        return bytes(recompute_crc32c(body))
    section = bytearray(codecs.decompress(codec, good[61:]))
    section[1 + (section[0] >> 1)] = 0x7E
    body = bytearray(good[:61]) + compress(codec, bytes(section))
    struct.pack_into(">i", body, 8, len(body) - 12)
    return bytes(recompute_crc32c(body))


@pytest.mark.parametrize("codec", [codecs.NONE, codecs.LZ4])
def test_decode_errors_are_batch_records_errors(codec):
    data = corrupt_record(codec)
    with pytest.raises(FormatError) as expected:
        next(iter(iter_batches(io.BytesIO(data), "x.log"))).records()
    with pytest.raises(FormatError) as got:
        records_by_decode(data)
    assert (got.value.position, str(got.value)) == (expected.value.position, str(expected.value))
