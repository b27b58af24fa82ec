"""lz4 and zstd sections of many batches decompressed in one compiled call (compressed:
``writers.compiled_codecs``).

A chunk holds thousands of small compressed batches. One Python call per batch (through
python-lz4 and python-zstandard) costs about as much as decompressing the batch, and holds the
GIL while the other threads of a partition wait. ``decompress_many`` walks every section in one
numba call, with the GIL released, calling the same C libraries those packages carry: liblz4's
frame API that python-lz4's extension exports, and libzstd through python-zstandard's cffi
module, both through ``readers.c_routines`` (so the compiled code still comes from numba's
cache). A section the compiled call does not decode (gzip, snappy, or bytes the C call
refuses) goes to the caller's Python decoder, which then decides what it is (and raises the
error it raises today), so the result is always what ``readers.codecs.decompress`` gives.
"""

from __future__ import annotations

import ctypes
import queue
from collections.abc import Callable
from contextlib import contextmanager

import numpy as np
from numba import njit

from kcompact.readers import codecs
from kcompact.readers.c_routines import I32, I64, POINTER, VOID, bind, routine

# Status of a compiled call: every section done, the arena is full, or section i is the caller's.
DONE, ROOM, CALLER = range(3)
# ZSTD_error_dstSize_tooSmall: libzstd returns an error as minus its code (what ZSTD_getErrorCode
# undoes, a function zstandard 0.23's cffi module does not export)
_ZSTD_DST_TOO_SMALL = 70
_LZ4F_VERSION = 100
_GUESS = 4  # first arena: this many times the compressed bytes (untouched pages cost nothing)
# Past this the arena stops growing and the section goes to the caller's streaming decoder: a zstd
# frame may declare any content size, and a corrupt one must not be a reason to allocate it.
_MAX_ARENA = 1 << 30


def _lz4_library() -> ctypes.CDLL | None:
    try:
        from lz4.frame import _frame
        lib = ctypes.CDLL(_frame.__file__)
        lib.LZ4F_decompress, lib.LZ4F_isError, lib.LZ4F_resetDecompressionContext, lib.LZ4F_compressFrame  # noqa: B018
    except (ImportError, AttributeError, OSError):
        return None
    return lib


def _zstd_library():
    try:
        from zstandard import _cffi
        _cffi.ffi.addressof(_cffi.lib, "ZSTD_decompressDCtx")
    except (ImportError, AttributeError):
        return None
    return _cffi


LZ4_LIBRARY = _lz4_library()
ZSTD_LIBRARY = _zstd_library()
if LZ4_LIBRARY is not None:
    bind({f"kcompact_{name}": ctypes.cast(getattr(LZ4_LIBRARY, name), ctypes.c_void_p).value
           for name in ("LZ4F_decompress", "LZ4F_isError", "LZ4F_resetDecompressionContext")})
if ZSTD_LIBRARY is not None:
    bind(
        {
            f"kcompact_{name}": int(
                ZSTD_LIBRARY.ffi.cast("uintptr_t", ZSTD_LIBRARY.ffi.addressof(ZSTD_LIBRARY.lib, name))
            )
            for name in ("ZSTD_decompressDCtx", "ZSTD_isError")
        }
    )
# The codecs the compiled call decodes, as a bit mask over codec ids.
NATIVE = (1 << codecs.LZ4 if LZ4_LIBRARY is not None else 0) | (1 << codecs.ZSTD if ZSTD_LIBRARY is not None else 0)


_lz4f_decompress = routine("kcompact_LZ4F_decompress", I64, (POINTER, POINTER, POINTER, POINTER, POINTER, POINTER))
lz4f_is_error = routine("kcompact_LZ4F_isError", I32, (I64,))
_lz4f_reset = routine("kcompact_LZ4F_resetDecompressionContext", VOID, (POINTER,))
_zstd_decompress = routine("kcompact_ZSTD_decompressDCtx", I64, (POINTER, POINTER, I64, POINTER, I64))
zstd_is_error = routine("kcompact_ZSTD_isError", I32, (I64,))
_LZ4_ID, _ZSTD_ID = codecs.LZ4, codecs.ZSTD


@njit(cache=True, nogil=True, boundscheck=False)
def _lz4_frames(ctx, src, start, end, arena, pos):
    """Every lz4 frame of ``src[start:end]`` into ``arena`` from ``pos``: the new end, or -1 when the
    arena is full, -2 when the C library refuses the bytes or they end inside a frame."""
    sizes = np.empty(2, np.uint64)  # in: room and bytes given; out: bytes written and read
    _lz4f_reset((ctx,))
    at, frame_done = start, True
    while at < end:
        sizes[0], sizes[1] = arena.shape[0] - pos, end - at
        hint = _lz4f_decompress((ctx, arena.ctypes.data + pos, sizes.ctypes.data, src.ctypes.data + at,
                                 sizes.ctypes.data + 8, 0))
        if lz4f_is_error((hint,)):
            return -2
        pos += np.int64(sizes[0])
        at += np.int64(sizes[1])
        frame_done = hint == 0
        if not frame_done and sizes[0] == 0 and sizes[1] == 0:
            return -1 if pos == arena.shape[0] else -2
    return pos if frame_done else -2


@njit(cache=True, nogil=True, boundscheck=False)
def _decompress(src, codec, starts, ends, arena, pos, i, out_end, lz4_ctx, zstd_ctx, native):
    """Sections ``i``, ``i + 1``, ... into ``arena`` from ``pos``, each ending at ``out_end``; stops
    at the end (DONE), when the arena is full (ROOM) or at a section for the caller (CALLER)."""
    while i < starts.shape[0]:
        c = codec[i]
        if (native >> c) & 1 == 0 or starts[i] == ends[i]:  # an empty section: the caller says what it is
            return CALLER, i, pos
        if c == _ZSTD_ID:  # every frame, with or without a content size
            n = _zstd_decompress((zstd_ctx, arena.ctypes.data + pos, arena.shape[0] - pos,
                                  src.ctypes.data + starts[i], ends[i] - starts[i]))
            if zstd_is_error((n,)):
                return (ROOM if -n == _ZSTD_DST_TOO_SMALL else CALLER), i, pos
            new = pos + n
        else:
            new = _lz4_frames(lz4_ctx, src, starts[i], ends[i], arena, pos)
            if new < 0:
                return (ROOM if new == -1 else CALLER), i, pos
        pos = new
        out_end[i] = pos
        i += 1
    return DONE, i, pos


@contextmanager
def reused(pool: queue.SimpleQueue, make: Callable):
    """A C context from ``pool`` (``make()`` when none is free), put back after the call: kept for
    the next call, never freed, so there are at most as many as threads ever used them at once."""
    try:
        context = pool.get_nowait()
    except queue.Empty:
        context = make()
    try:
        yield context
    finally:
        pool.put(context)


def _decompressors() -> tuple[int, int]:
    """A pair of decompression contexts: lz4's and zstd's (0 for a library not found)."""
    lz4 = ctypes.c_void_p()
    if LZ4_LIBRARY is not None and LZ4_LIBRARY.LZ4F_createDecompressionContext(ctypes.byref(lz4), _LZ4F_VERSION) != 0:
        raise MemoryError("lz4: no decompression context") from None
    zstd = (
        int(ZSTD_LIBRARY.ffi.cast("uintptr_t", ZSTD_LIBRARY.lib.ZSTD_createDCtx())) if ZSTD_LIBRARY is not None else 0
    )
    return lz4.value or 0, zstd


_DECOMPRESSORS: queue.SimpleQueue = queue.SimpleQueue()


def decompress_many(src: np.ndarray, codec: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                    section: Callable[[int], bytes]) -> tuple[np.ndarray, np.ndarray]:
    """Sections ``src[starts[i]:ends[i]]`` (uint8 ``src``) decompressed by ``codec[i]``, one after
    another: (the arena, where each ends in it). ``section(i)`` decompresses section i in Python
    (the compiled call leaves it gzip, snappy and whatever its C library refuses)."""
    arena = np.empty(int((ends - starts).sum()) * _GUESS + (64 << 10), np.uint8)
    with reused(_DECOMPRESSORS, _decompressors) as (lz4_ctx, zstd_ctx):
        return sections(arena, len(starts), _MAX_ARENA, section, lambda out, pos, i, out_end: _decompress(
            src, codec, starts, ends, out, pos, i, out_end, lz4_ctx, zstd_ctx, NATIVE))


def sections(out: np.ndarray, n: int, limit: int, python: Callable[[int], bytes],
              compiled: Callable) -> tuple[np.ndarray, np.ndarray]:
    """What decompression and ``writers.compiled_codecs``'s compression share: ``compiled(out, pos, i,
    out_end)`` goes on from section i; when
    ``out`` is full it is doubled (up to ``limit``: past it the section is the caller's), and a
    section it leaves is made by ``python(i)`` and put in its place. (``out`` up to its end, where
    each section ends.)"""
    out_end = np.empty(n, np.int64)
    i = pos = 0
    while i < n:
        status, i, pos = compiled(out, pos, i, out_end)
        if status == ROOM and len(out) < limit:
            out = grown(out, pos, 2 * len(out))
        elif status != DONE:  # a section for the caller, or one that claims more than ``limit``
            data = np.frombuffer(python(i), np.uint8)
            if pos + len(data) > len(out):
                out = grown(out, pos, 2 * (pos + len(data)))
            out[pos:pos + len(data)] = data
            pos += len(data)
            out_end[i] = pos
            i += 1
    return out[:pos], out_end


def grown(arena: np.ndarray, used: int, size: int) -> np.ndarray:
    bigger = np.empty(size, np.uint8)
    bigger[:used] = arena[:used]
    return bigger
