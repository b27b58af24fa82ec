"""CRC-32C of many byte ranges in one compiled call (Kafka's v2 batch checksum).

The crc32c library computes a CRC with the CPU's instruction, but one Python call per batch costs
more than the CRC of a small batch, and holds the GIL while the other threads wait. ``crcs``
walks every range of a buffer in one numba call, with the GIL released, and calls the library's
own routine (the one its ``crc32c()`` uses) through a symbol registered with LLVM, so the
compiled code still comes from numba's cache. Should a future crc32c not export the routine,
the same results come from its Python function, one range at a time.
"""

from __future__ import annotations

import ctypes

import crc32c
import numpy as np
from crc32c import _crc32c as _extension
from llvmlite import binding, ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

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
    binding.add_symbol(_SYMBOL, _ADDRESS)


@intrinsic
def _update(typingctx, crc, data, start, length):
    """The library routine over ``data[start:start + length]`` from the running ``crc``."""
    def codegen(context, builder, signature, args):
        i32, i64, byte_ptr = ir.IntType(32), ir.IntType(64), ir.IntType(8).as_pointer()
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(i32, [i32, byte_ptr, i64]), _SYMBOL)
        base = context.make_array(signature.args[1])(context, builder, args[1]).data
        pointer = builder.bitcast(builder.gep(base, [args[2]]), byte_ptr)
        return builder.call(fn, [builder.trunc(args[0], i32), pointer, args[3]])
    return types.uint32(types.int64, data, types.int64, types.int64), codegen


@njit(cache=True, nogil=True, boundscheck=False)
def _crcs(data, starts, ends, out):
    for i in range(starts.shape[0]):
        out[i] = _update(np.int64(0xFFFFFFFF), data, starts[i], ends[i] - starts[i]) ^ np.uint32(0xFFFFFFFF)


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
