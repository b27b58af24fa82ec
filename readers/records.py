"""Records as values, and the decoding of a v2 records section into them."""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from readers import scan

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


class RecordsError(ValueError):
    """A malformed records section; ``position`` is relative to the section's start."""

    def __init__(self, position: int, what: str):
        self.position = position
        super().__init__(what)


def scan_section(payload: bytes, count: int) -> tuple[np.ndarray, np.ndarray]:
    """The uint8 view of ``payload`` and its record position matrix (see ``scan``)."""
    buf = np.frombuffer(payload, dtype=np.uint8)
    if count < 0:
        raise RecordsError(0, f"negative record count {count}")
    columns, err, pos = scan.scan_records(buf, 0, len(buf), count)
    if err != scan.OK:
        raise RecordsError(int(pos), scan.MESSAGES[err])
    return buf, columns


def decode_section(
    payload: bytes, count: int, base_offset: int, base_timestamp: int, log_append_time: int | None
) -> list[Record]:
    """Decode ``count`` records. ``log_append_time`` replaces every timestamp when set."""
    buf, cols = scan_section(payload, count)
    records = []
    for row in cols.tolist():
        off_delta, ts_delta, kpos, klen, vpos, vlen, hpos, hcount, _ = row
        key = payload[kpos : kpos + klen] if kpos >= 0 else None
        value = payload[vpos : vpos + vlen] if vpos >= 0 else None
        headers: tuple[Header, ...] = ()
        if hcount:
            headers = tuple(
                (
                    payload[hk : hk + hkl].decode("utf-8", "surrogateescape"),
                    payload[hv : hv + hvl] if hv >= 0 else None,
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
