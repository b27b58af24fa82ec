"""Records as values, and the decoding of a v2 records section into them; also a control
record's key and value, read (``control_type``) and built (``control_key``, ``control_value``:
for the generator and tests, which write transaction markers)."""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from kcompact.readers import scan

Header = tuple[str, bytes | None]

COMMIT, ABORT = 1, 0
CONTROL_TYPES = {ABORT: "ABORT", COMMIT: "COMMIT"}
_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_VALUE = struct.Struct(">hi")


@dataclass(frozen=True, slots=True)
class Record:
    """One record with its absolute offset and timestamp.

    Header keys are Java strings on the wire (UTF-8); they are decoded with
    ``surrogateescape`` so that any bytes re-encode exactly.
    """

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


def build_records(
    data: bytes, buf: np.ndarray, cols: np.ndarray, base_offset: int, base_timestamp: int, log_append_time: int | None
) -> list[Record]:
    """Records from a scanned section: ``buf`` is the uint8 view of ``data`` and ``cols``
    the scanner's position matrix. ``log_append_time`` replaces every timestamp when set."""
    records = []
    for off_delta, ts_delta, kpos, klen, vpos, vlen, hpos, hcount, _ in cols.tolist():
        key = data[kpos : kpos + klen] if kpos >= 0 else None
        value = data[vpos : vpos + vlen] if vpos >= 0 else None
        headers: tuple[Header, ...] = ()
        if hcount:
            headers = tuple(
                (
                    data[hk : hk + hkl].decode("utf-8", "surrogateescape"),
                    data[hv : hv + hvl] if hv >= 0 else None,
                )
                for hk, hkl, hv, hvl in scan.scan_headers(buf, hpos, hcount).tolist()
            )
        ts = log_append_time if log_append_time is not None else base_timestamp + ts_delta
        records.append(Record(base_offset + off_delta, ts, key, value, headers))
    return records


def control_type(record: Record) -> int | None:
    """The control type (ABORT 0 / COMMIT 1) a control record's key declares, or None
    when the key is too short to say."""
    if record.key is None or len(record.key) < _CONTROL_KEY.size:
        return None
    return _CONTROL_KEY.unpack_from(record.key)[1]


def control_coordinator_epoch(record: Record) -> int | None:
    if record.value is None or len(record.value) < _CONTROL_VALUE.size:
        return None
    return _CONTROL_VALUE.unpack_from(record.value)[1]


def control_key(kind: int) -> bytes:
    return _CONTROL_KEY.pack(0, kind)


def control_value(coordinator_epoch: int) -> bytes:
    return _CONTROL_VALUE.pack(0, coordinator_epoch)
