"""The magic-v2 record grammar, compiled.

One function walks the records section of a batch (already decompressed) and
returns, per record, where its fields lie. Full decoding, key extraction for
the Spark source and ``verify`` all use it, so the grammar exists once. It is
compiled with numba because a per-record Python loop is too slow: key extraction
must run several times faster than such a loop can.
Every read is bounds-checked: malformed input gives an error code and a
position, never a read past the buffer.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from kcompact.readers.c_routines import prefetch

# Column layout of the int64 matrix returned by scan_records.
OFFSET_DELTA, TIMESTAMP_DELTA, KEY_POS, KEY_LEN, VALUE_POS, VALUE_LEN, HEADERS_POS, HEADERS_COUNT, RECORD_POS = range(9)
N_COLUMNS = 9
PREFETCH_BYTES = 2048  # how far past the record being read the scan asks for cache lines

# Error codes (0 = fine).
OK, TRUNCATED, VARINT_TOO_LONG, BAD_LENGTH, SIZE_MISMATCH, TRAILING_BYTES, NEGATIVE_COUNT = range(7)
MESSAGES = {
    TRUNCATED: "record runs past the end of the records section",
    VARINT_TOO_LONG: "varint longer than 10 bytes",
    BAD_LENGTH: "negative length other than -1",
    SIZE_MISMATCH: "record length field does not match the record's fields",
    TRAILING_BYTES: "bytes left over after the last record",
    NEGATIVE_COUNT: "negative header count",
}


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _varint(buf, pos, end):
    """Zigzag varint at ``pos``: (value, next position, error code). One loop bound (at most 10
    bytes, none past ``end``) and the error told apart after it: shaped so, the record scan runs
    much faster than with a check of each kind per byte."""
    result = np.int64(0)
    shift = 0
    limit = min(end, pos + 10)
    while pos < limit:
        b = np.int64(buf[pos])
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            # zigzag decode on the unsigned bit pattern: the shift must be logical (Java's >>>),
            # or values beyond +-2**62 come out wrong
            return ((result >> 1) & np.int64(0x7FFFFFFFFFFFFFFF)) ^ -(result & 1), pos, OK
        shift += 7
    return np.int64(0), pos, TRUNCATED if pos >= end else VARINT_TOO_LONG


@njit(cache=True, nogil=True, boundscheck=False)
def scan_records(buf, start, end, count):
    """Walk ``count`` records in ``buf[start:end]``.

    Returns (columns, error, error_position): columns is an int64 (count, 9) matrix (positions are
    absolute indexes into ``buf``; -1 marks a null key or value), error one of the codes above.
    """
    out = np.empty((count, N_COLUMNS), dtype=np.int64)
    done, err, pos, _ = _scan_into(buf, start, end, count, out, 0, start)
    return out[:done], err, pos


@njit(cache=True, nogil=True, boundscheck=False)
def scan_sections(plain, packed, in_packed, starts, ends, counts, out):
    """``scan_records`` of many records sections in one call, into the rows of ``out`` (section
    k's records from row sum(counts[:k]) on; ``out`` has sum(counts) rows). Section k lies in
    ``packed`` when ``in_packed[k]`` (a decompressed section), else in ``plain``; its positions
    index that buffer. Returns (sections scanned without error, error, error position): the scan
    stops at the first error."""
    row = 0
    ahead_plain = ahead_packed = 0
    for k in range(starts.shape[0]):
        if in_packed[k]:
            done, err, pos, ahead_packed = _scan_into(packed, starts[k], ends[k], counts[k], out, row, ahead_packed)
        else:
            done, err, pos, ahead_plain = _scan_into(plain, starts[k], ends[k], counts[k], out, row, ahead_plain)
        if err != OK:
            return k, err, pos
        row += done
    return starts.shape[0], OK, 0


@njit(cache=True, nogil=True, boundscheck=False)
def _scan_into(buf, start, end, count, out, row, ahead):
    """The records of one section into ``out`` from ``row``: (records done, error, position, the
    prefetch mark). Each record is found by the length of the one before, a chain of reads the
    hardware does not foresee, so every cache line up to ``PREFETCH_BYTES`` past the record being
    read is asked for (lines before ``ahead`` were already), which saves much of the time a record
    takes in a buffer larger than the caches."""
    pos = start
    ahead = max(ahead, start)
    for i in range(count):
        rec_start = pos
        length, pos, err = _varint(buf, pos, end)
        if err != OK:
            return i, err, rec_start, ahead
        if length < 0:
            return i, BAD_LENGTH, rec_start, ahead
        body = pos
        rec_end = body + length
        if rec_end > end:
            return i, TRUNCATED, rec_start, ahead
        stop = min(rec_end + PREFETCH_BYTES, buf.shape[0])
        while ahead < stop:
            prefetch(buf, ahead)
            ahead += 64
        pos += 1  # attributes, unused
        ts_delta, pos, err = _varint(buf, pos, rec_end)
        if err != OK:
            return i, err, rec_start, ahead
        off_delta, pos, err = _varint(buf, pos, rec_end)
        if err != OK:
            return i, err, rec_start, ahead
        klen, pos, err = _varint(buf, pos, rec_end)
        if err != OK:
            return i, err, rec_start, ahead
        kpos = -1
        if klen >= 0:
            kpos = pos
            pos += klen
        elif klen != -1:
            return i, BAD_LENGTH, rec_start, ahead
        vlen, pos, err = _varint(buf, pos, rec_end)
        if err != OK:
            return i, err, rec_start, ahead
        vpos = -1
        if vlen >= 0:
            vpos = pos
            pos += vlen
        elif vlen != -1:
            return i, BAD_LENGTH, rec_start, ahead
        hcount, pos, err = _varint(buf, pos, rec_end)
        if err != OK:
            return i, err, rec_start, ahead
        if hcount < 0:
            return i, NEGATIVE_COUNT, rec_start, ahead
        hpos = pos
        for _ in range(hcount):
            hklen, pos, err = _varint(buf, pos, rec_end)
            if err != OK:
                return i, err, rec_start, ahead
            if hklen < 0:
                return i, BAD_LENGTH, rec_start, ahead
            pos += hklen
            hvlen, pos, err = _varint(buf, pos, rec_end)
            if err != OK:
                return i, err, rec_start, ahead
            if hvlen >= 0:
                pos += hvlen
            elif hvlen != -1:
                return i, BAD_LENGTH, rec_start, ahead
        if pos != rec_end:
            return i, SIZE_MISMATCH, rec_start, ahead
        r = row + i
        out[r, OFFSET_DELTA] = off_delta
        out[r, TIMESTAMP_DELTA] = ts_delta
        out[r, KEY_POS] = kpos
        out[r, KEY_LEN] = klen if klen >= 0 else 0
        out[r, VALUE_POS] = vpos
        out[r, VALUE_LEN] = vlen if vlen >= 0 else 0
        out[r, HEADERS_POS] = hpos
        out[r, HEADERS_COUNT] = hcount
        out[r, RECORD_POS] = rec_start
    if pos != end:
        return count, TRAILING_BYTES, pos, ahead
    return count, OK, pos, ahead


@njit(cache=True, nogil=True, boundscheck=False)
def scan_headers(buf, pos, count):
    """Positions of ``count`` headers starting at ``pos`` (already validated by scan_records):
    an int64 (count, 4) matrix of key position, key length, value position (-1 null), value length."""
    out = np.empty((count, 4), dtype=np.int64)
    end = buf.shape[0]
    for i in range(count):
        klen, pos, _ = _varint(buf, pos, end)
        out[i, 0] = pos
        out[i, 1] = klen
        pos += klen
        vlen, pos, _ = _varint(buf, pos, end)
        if vlen >= 0:
            out[i, 2] = pos
            out[i, 3] = vlen
            pos += vlen
        else:
            out[i, 2] = -1
            out[i, 3] = 0
    return out


@njit(cache=True, nogil=True, boundscheck=False)
def gather(buf, positions, lengths, out_offsets, out_data, out_start, data_start):
    """Copy the byte ranges (positions[i], lengths[i]) of ``buf`` one after another into
    ``out_data`` from ``data_start`` and record Arrow-style offsets in ``out_offsets``
    from ``out_start``. A position of -1 (null) adds an empty range. Returns the data end."""
    d = data_start
    for i in range(positions.shape[0]):
        out_offsets[out_start + i] = d
        p = positions[i]
        if p >= 0:
            n = lengths[i]
            # a plain loop: slice assignment builds two array views per range, which
            # costs more than copying a typical key
            for j in range(n):
                out_data[d + j] = buf[p + j]
            d += n
    out_offsets[out_start + positions.shape[0]] = d
    return d
