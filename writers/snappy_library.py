"""Snappy blocks compressed by Google's C++ snappy itself, through its C API in ``libsnappy.so.1``.

Kafka's snappy batches come from snappy-java, whose native code is Google's snappy 1.1.10. No
maintained Python package links that code (pyarrow's and python-snappy's builds carry snappy 1.2,
whose hash table is larger; cramjam's Rust encoder picks other hash bits), so the system library
is called with ctypes. Debian 12's libsnappy1v5 is snappy 1.1.9, which chooses the same hash table
slots as 1.1.10 built without a CRC32 instruction, the way snappy-java builds it for Linux
(docs/compaction-semantics.md, "Compressed bytes"). ``snappy_compress`` is the C API's wrapper of
``snappy::RawCompress``, the call snappy-java makes.

The library is loaded once per process, on first use (the driver and each executor load their
own). Without it blocks come from cramjam: the same framing, a valid snappy stream, but not
always Kafka's bytes; ``missing()`` then says so for the plan and the report.
``KCOMPACT_LIBSNAPPY`` names another library file to load, or ``none`` for no library.
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading

import cramjam

from kcompact.errors import CodecError

LIBRARY = "libsnappy.so.1"
ENV = "KCOMPACT_LIBSNAPPY"
NOT_EXACT = "snappy batches: not byte-identical (libsnappy not found)"
_SNAPPY_OK = 0
_buffers = threading.local()


@functools.cache
def library() -> ctypes.CDLL | None:
    """Google's snappy, loaded on first call; None when it cannot be (or ``KCOMPACT_LIBSNAPPY=none``)."""
    name = os.environ.get(ENV) or LIBRARY
    if name.lower() == "none":
        return None
    try:
        lib = ctypes.CDLL(name)
        compress, bound = lib.snappy_compress, lib.snappy_max_compressed_length
    except (OSError, AttributeError):
        return None
    compress.restype, compress.argtypes = ctypes.c_int, (ctypes.c_char_p, ctypes.c_size_t, ctypes.c_void_p,
                                                         ctypes.POINTER(ctypes.c_size_t))
    bound.restype, bound.argtypes = ctypes.c_size_t, (ctypes.c_size_t,)
    return lib


def missing() -> str | None:
    """``NOT_EXACT`` when this process compresses snappy blocks without Google's snappy, else None."""
    return NOT_EXACT if library() is None else None


def compress_block(block: bytes) -> bytes:
    """One raw snappy block (no framing) of ``block``, as snappy-java's ``Snappy.rawCompress`` makes it."""
    lib = library()
    if lib is None:
        return bytes(cramjam.snappy.compress_raw(block))
    room = lib.snappy_max_compressed_length(len(block))
    out = getattr(_buffers, "out", None)
    if out is None or len(out) < room:
        out = _buffers.out = ctypes.create_string_buffer(room)
    size = ctypes.c_size_t(room)
    status = lib.snappy_compress(block, len(block), out, ctypes.byref(size))
    if status != _SNAPPY_OK:
        raise CodecError(f"libsnappy refused a block of {len(block)} bytes (status {status})")
    return ctypes.string_at(out, size.value)
