"""readers.segment.iter_batches: framing of a .log byte stream in bounded chunks.

Truth for positions: the byte offsets of kafka-python-built batches laid end to end,
as kafka-python's MemoryRecords frames them."""

from __future__ import annotations

import io
import struct
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kcompact.errors import FormatError
from kcompact.readers import codecs
from kcompact.readers.records import Record
from kcompact.readers.segment import DEFAULT_CHUNK, iter_batches, problems
from tests.support import kp_batches, kp_build, read_batches

T0 = 1_720_000_000_000


def batch_specs_log(specs) -> bytes:
    """specs: (codec, record count, value size) per batch; offsets follow on."""
    parts, offset = [], 0
    for i, (codec, count, size) in enumerate(specs):
        records = [Record(offset + j, T0 + offset + j, b"key-%d" % (offset + j), bytes([65 + j % 26]) * size)
                   for j in range(count)]
        parts.append(kp_build(records, codec=codec, base_offset=offset, leader_epoch=i % 3, require_codec=False))
        offset += count
    return b"".join(parts)


def kp_framing(log: bytes) -> list[tuple[int, int, int, int]]:
    """(position, size, base offset, last offset) of every batch, by kafka-python."""
    out, pos = [], 0
    for b in kp_batches(log):
        out.append((pos, b.size_in_bytes, b.base_offset, b.last_offset))
        pos += b.size_in_bytes
    assert pos == len(log)
    return out


def our_framing(batches) -> list[tuple[int, int, int, int]]:
    return [(b.position, b.size, b.base_offset, b.last_offset) for b in batches]


SPECS = [(codecs.NONE, 3, 40), (codecs.GZIP, 20, 30), (codecs.NONE, 1, 0), (codecs.LZ4, 7, 500),
         (codecs.SNAPPY, 12, 60), (codecs.ZSTD, 30, 100), (codecs.NONE, 2, 5000), (codecs.NONE, 15, 20)]
LOG = batch_specs_log(SPECS)


@pytest.mark.parametrize("chunk_size", [1, 17, 100, 4096, DEFAULT_CHUNK])
def test_positions_and_bytes_independent_of_chunk_size(chunk_size):
    batches = read_batches(LOG, chunk_size=chunk_size)
    assert our_framing(batches) == kp_framing(LOG)
    assert b"".join(bytes(b.data) for b in batches) == LOG
    assert [r.offset for b in batches for r in b.records()] == list(range(sum(n for _, n, _ in SPECS)))


def test_batch_bigger_than_the_chunk():
    log = batch_specs_log([(codecs.NONE, 2, 10), (codecs.NONE, 40, 2000), (codecs.NONE, 1, 10)])
    big = kp_framing(log)[1]
    assert big[1] > 50 * 100
    batches = read_batches(log, chunk_size=100)
    assert our_framing(batches) == kp_framing(log)
    assert bytes(batches[1].data) == log[big[0] : big[0] + big[1]]


def test_start_end_ranges_yield_batches_starting_inside():
    framing = kp_framing(LOG)
    starts = [pos for pos, *_ in framing]
    ends = sorted({0, 1, len(LOG), len(LOG) + 10} | {p + d for p in starts for d in (-1, 0, 1, 30)} - {-1})
    for start in starts:
        for end in ends + [None]:
            got = [b.position for b in iter_batches(io.BytesIO(LOG), "mem.log", start=start, end=end, chunk_size=64)]
            assert got == [p for p in starts if p >= start and (end is None or p < end)], (start, end)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    specs=st.lists(
        st.tuples(st.sampled_from(list(codecs.NAMES)), st.integers(1, 25), st.integers(0, 700)),
        min_size=1, max_size=10,
    ),
    chunk_size=st.integers(1, 3000),
)
def test_property_any_batches_any_chunk_size(specs, chunk_size):
    log = batch_specs_log(specs)
    batches = read_batches(log, chunk_size=chunk_size)
    assert our_framing(batches) == kp_framing(log)
    assert all(bytes(b.data) == log[b.position : b.position + b.size] for b in batches)


# -- where reading stops ----------------------------------------------------------------------
@pytest.mark.parametrize("chunk_size", [100, DEFAULT_CHUNK])
def test_torn_tail_raises_after_every_whole_batch(chunk_size):
    framing = kp_framing(LOG)
    cut = framing[-1][0] + 70  # the last batch is cut inside its records
    got = []
    with pytest.raises(FormatError) as err:
        for b in iter_batches(io.BytesIO(LOG[:cut]), "seg.log", chunk_size=chunk_size):
            got.append(b.position)
    assert got == [p for p, *_ in framing[:-1]]
    assert (err.value.path, err.value.position) == ("seg.log", framing[-1][0])


@pytest.mark.parametrize("tail", [bytes(5), bytes(17), bytes(4096)], ids=["5", "17", "4096"])
def test_zero_filled_tail_is_reported_where_it_starts(tail):
    with pytest.raises(FormatError) as err:
        read_batches(LOG + tail, chunk_size=1000)
    assert err.value.position == len(LOG)
    assert "zero" in str(err.value)


def test_crc_mismatch_strict_and_lenient():
    framing = kp_framing(LOG)
    pos = framing[3][0]
    broken = bytearray(LOG)
    broken[pos + 70] ^= 0x01  # a byte inside the CRC-covered records of batch 3
    with pytest.raises(FormatError) as err:
        read_batches(bytes(broken))
    assert err.value.position == pos and "CRC" in str(err.value)

    lenient = read_batches(bytes(broken), strict=False)
    assert our_framing(lenient) == framing
    assert [bool(problems(b)) for b in lenient] == [i == 3 for i in range(len(framing))]


def test_unknown_magic_is_a_format_error():
    broken = bytearray(LOG)
    pos = kp_framing(LOG)[2][0]
    broken[pos + 16] = 3
    with pytest.raises(FormatError) as err:
        read_batches(bytes(broken))
    assert err.value.position == pos


# -- memory ------------------------------------------------------------------------------------
def test_large_file_is_read_in_bounded_memory(tmp_path):
    one = kp_build([Record(j, T0 + j, b"k%d" % j, bytes([j % 251]) * 4000) for j in range(64)])
    copies = (64 << 20) // len(one) + 1
    path = tmp_path / "00000000000000000000.log"
    with open(path, "wb") as f:
        for i in range(copies):
            f.write(struct.pack(">q", i * 64) + one[8:])  # the base offset lies outside the CRC
    size = path.stat().st_size
    assert size >= 64 << 20

    tracemalloc.start()
    try:
        with open(path, "rb") as f:
            count = last = 0
            for b in iter_batches(f, str(path)):
                count, last = count + 1, b.last_offset
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (count, last) == (copies, copies * 64 - 1)
    # One chunk being refilled holds at most the leftover, the new read and their join.
    assert peak < 3 * DEFAULT_CHUNK < size // 2, f"peak {peak >> 20} MiB while reading a {size >> 20} MiB file"
