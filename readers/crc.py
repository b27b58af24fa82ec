"""CRC-32C of many byte ranges in one compiled call (Kafka's v2 batch checksum).

The crc32c library computes a CRC with the CPU's instruction, but one Python call per batch costs
more than the CRC of a small batch, and holds the GIL while the other threads wait. ``crcs``
walks every range of a buffer in one numba call, with the GIL released, and calls the library's
own routine (the one its ``crc32c()`` uses) through ``readers.c_routines``, so the
compiled code still comes from numba's cache. Should a future crc32c not export the routine,
the same results come from its Python function, one range at a time.
"""

from __future__ import annotations

import ctypes

import crc32c
import numpy as np
from crc32c import _crc32c as _extension
from numba import njit

from kcompact.readers.c_routines import I32, I64, POINTER, bind, routine

_SYMBOL = "kcompact_crc32c_update"  # (crc, pointer, length) -> crc, without the pre and post inversion


def _routine() -> int | None:
    """The address of the crc32c library's routine: hardware when its probe found the instruction."""
    name = "_crc32c_hw_adler" if crc32c.hardware_based else "_crc32c_sw_slicing_by_8"
    try:
        return ctypes.cast(getattr(ctypes.CDLL(_extension.__file__), name), ctypes.c_void_p).value
    except (AttributeError, OSError):
        return None


_ADDRESS = _routine()
if _ADDRESS is not None:
    bind({_SYMBOL: _ADDRESS})
_update = routine(_SYMBOL, I32, (I32, POINTER, I64))


@njit(cache=True, nogil=True, boundscheck=False)
def _crcs(data, starts, ends, out):
    for i in range(starts.shape[0]):
        out[i] = _update((0xFFFFFFFF, data.ctypes.data + starts[i], ends[i] - starts[i])) ^ 0xFFFFFFFF


def crcs(data: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The CRC-32C of each ``data[starts[i]:ends[i]]`` (uint8 ``data``), as uint32."""
    starts = np.asarray(starts, np.int64)
    ends = np.asarray(ends, np.int64)
    out = np.empty(len(starts), np.uint32)
    if _ADDRESS is None:
        for i, (s, e) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True)):
            out[i] = crc32c.crc32c(data[s:e])
    elif len(starts):
        _crcs(data, starts, ends, out)
    return out
