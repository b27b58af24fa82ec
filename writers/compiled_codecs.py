"""lz4 and zstd sections of many batches compressed in one compiled call, byte for byte as
``writers.codecs.compress`` compresses them (the cleaner recompresses every rebuilt batch).

The same C libraries and the same way of calling them as ``readers.compiled_codecs``, which
decompresses: see its docstring. A section the compiled call does not make (gzip, snappy, or a
library refusal) is made by ``writers.codecs.compress``.
"""

from __future__ import annotations

import ctypes
import queue

import numpy as np
from numba import njit

from kcompact.readers.c_routines import I32, I64, POINTER, bind, routine
from kcompact.readers.codecs import LZ4, ZSTD
from kcompact.readers.compiled_codecs import (
    CALLER,
    DONE,
    LZ4_LIBRARY,
    ROOM,
    ZSTD_LIBRARY,
    lz4f_is_error,
    reused,
    sections,
    zstd_is_error,
)
from kcompact.writers.codecs import ZSTD_LEVEL, compress

if LZ4_LIBRARY is not None:
    bind({f"kcompact_{name}": ctypes.cast(getattr(LZ4_LIBRARY, name), ctypes.c_void_p).value
          for name in ("LZ4F_compressFrame", "LZ4F_compressFrameBound")})
if ZSTD_LIBRARY is not None:
    bind(
        {
            f"kcompact_{name}": int(
                ZSTD_LIBRARY.ffi.cast("uintptr_t", ZSTD_LIBRARY.ffi.addressof(ZSTD_LIBRARY.lib, name))
            )
            for name in ("ZSTD_CCtx_reset", "ZSTD_CCtx_setPledgedSrcSize", "ZSTD_compressStream2", "ZSTD_compressBound")
        }
    )

_lz4f_compress = routine("kcompact_LZ4F_compressFrame", I64, (POINTER, I64, POINTER, I64, POINTER))
_lz4f_bound = routine("kcompact_LZ4F_compressFrameBound", I64, (I64, POINTER))
_zstd_reset = routine("kcompact_ZSTD_CCtx_reset", I64, (POINTER, I32))
_zstd_pledge = routine("kcompact_ZSTD_CCtx_setPledgedSrcSize", I64, (POINTER, I64))
_zstd_compress = routine("kcompact_ZSTD_compressStream2", I64, (POINTER, POINTER, POINTER, I32))
_zstd_bound = routine("kcompact_ZSTD_compressBound", I64, (I64,))
_LZ4_ID, _ZSTD_ID = LZ4, ZSTD
_ZSTD_ROOM = 16  # a streamed frame's end past ZSTD_compressBound: the empty last block

# How Kafka's Java client frames lz4 (``writers.codecs.compress``), as an LZ4F_preferences_t: 64 KiB
# independent blocks, no checksums, no content size, level 0, no auto-flush (fourteen 32-bit fields).
_LZ4_PREFERENCES = np.array([4, 1] + [0] * 12, np.int32)
_ZSTD_RESET_SESSION = 1
_ZSTD_CONTINUE, _ZSTD_FLUSH, _ZSTD_END = 0, 1, 2  # ZSTD_EndDirective
_ZSTD_UNKNOWN_SIZE = -1  # ZSTD_CONTENTSIZE_UNKNOWN as a signed 64-bit value


@njit(cache=True, nogil=True, boundscheck=False)
def _compress(src, codec, starts, ends, out, pos, i, out_end, cctx, lz4_preferences):
    """Sections ``i``, ``i + 1``, ... compressed into ``out`` from ``pos`` (as _decompress)."""
    buffers = np.empty(6, np.uint64)  # ZSTD_inBuffer then ZSTD_outBuffer: pointer, size, position
    while i < starts.shape[0]:
        c, size = codec[i], ends[i] - starts[i]
        if c == _ZSTD_ID:
            if pos + _zstd_bound((size,)) + _ZSTD_ROOM > out.shape[0]:
                return ROOM, i, pos
            # as ``writers.codecs``: a new session of unknown size, the input, a flush, the end
            _zstd_reset((cctx, _ZSTD_RESET_SESSION))
            if zstd_is_error((_zstd_pledge((cctx, _ZSTD_UNKNOWN_SIZE)),)):
                return CALLER, i, pos
            buffers[0], buffers[1], buffers[2] = src.ctypes.data + starts[i], size, 0
            buffers[3], buffers[4], buffers[5] = out.ctypes.data + pos, out.shape[0] - pos, 0
            for mode in (_ZSTD_CONTINUE, _ZSTD_FLUSH, _ZSTD_END):
                left = _zstd_compress((cctx, buffers.ctypes.data + 24, buffers.ctypes.data, mode))
                if zstd_is_error((left,)) or buffers[2] != size or (mode != _ZSTD_CONTINUE and left != 0):
                    return CALLER, i, pos
            n = np.int64(buffers[5])
        elif c == _LZ4_ID:
            if pos + _lz4f_bound((size, lz4_preferences.ctypes.data)) > out.shape[0]:
                return ROOM, i, pos
            n = _lz4f_compress((out.ctypes.data + pos, out.shape[0] - pos, src.ctypes.data + starts[i], size,
                                lz4_preferences.ctypes.data))
            if lz4f_is_error((n,)):
                return CALLER, i, pos
        else:
            return CALLER, i, pos
        pos += n
        out_end[i] = pos
        i += 1
    return DONE, i, pos


def _compressor() -> int:
    """A zstd compression context at Kafka's level (``writers.codecs``); 0 without the library."""
    if ZSTD_LIBRARY is None:
        return 0
    made = ZSTD_LIBRARY.lib.ZSTD_createCCtx()
    ZSTD_LIBRARY.lib.ZSTD_CCtx_setParameter(made, ZSTD_LIBRARY.lib.ZSTD_c_compressionLevel, ZSTD_LEVEL)
    return int(ZSTD_LIBRARY.ffi.cast("uintptr_t", made))


_COMPRESSORS: queue.SimpleQueue = queue.SimpleQueue()


def compress_many(
    src: np.ndarray, codec: np.ndarray, starts: np.ndarray, ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Sections ``src[starts[i]:ends[i]]`` compressed by ``codec[i]`` as ``writers.codecs.compress``
    compresses them (the same bytes), one after another: (the output, where each ends in it)."""
    out = np.empty(int((ends - starts).sum()) + len(starts) * 64 + (64 << 10), np.uint8)
    with reused(_COMPRESSORS, _compressor) as cctx:
        return sections(out, len(starts), 1 << 62, lambda i: compress(int(codec[i]), src[starts[i]:ends[i]]),
                         lambda out, pos, i, out_end: _compress(src, codec, starts, ends, out, pos, i, out_end, cctx,
                                                                _LZ4_PREFERENCES))
