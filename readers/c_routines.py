"""C routines of installed packages, called from numba-compiled code.

crc32c, python-lz4 and python-zstandard carry C routines that are fast per byte but cost a
Python call per use. ``bind`` registers a routine's address with LLVM under a name of ours, and
``routine`` makes an intrinsic that calls that name: the kernels that use it are still compiled
once and loaded from numba's cache (a ctypes or cffi function inside a kernel would stop the
cache), and the address is resolved when a process loads them. ``prefetch`` is LLVM's own
routine of that kind: a cache hint for the kernels whose reads the hardware cannot foresee.
"""

from __future__ import annotations

from llvmlite import binding, ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

# imported by every module with kernels, before they decorate one: where numba finds the shipped
# compiled kernels, and the CPU target they were compiled for (kernels.cache)
from kcompact.kernels import cache  # noqa: F401

I32, I64, POINTER, VOID = ir.IntType(32), ir.IntType(64), ir.IntType(8).as_pointer(), ir.VoidType()


def bind(symbols: dict[str, int]) -> None:
    """Each name made to stand for its address in compiled code."""
    for name, address in symbols.items():
        binding.add_symbol(name, address)


def routine(symbol: str, returns: ir.Type, params: tuple[ir.Type, ...]):
    """An intrinsic calling C function ``symbol`` with a tuple of integers, one per parameter
    (``I32``, ``I64``, or ``POINTER``, given as an address). It returns an int64 (an unsigned 32-bit
    result zero-extended), or nothing for ``VOID``."""
    def call(typingctx, args):
        def codegen(context, builder, signature, values):
            given = []
            for k, param in enumerate(params):
                value = context.cast(builder, builder.extract_value(values[0], k), signature.args[0][k], types.int64)
                given.append(builder.inttoptr(value, param) if param == POINTER
                             else builder.trunc(value, param) if param.width < 64 else value)
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(returns, params), symbol)
            result = builder.call(fn, given)
            if returns == VOID:
                return context.get_dummy_value()
            return builder.zext(result, I64) if returns.width < 64 else result
        if len(args) != len(params):
            raise TypeError(f"{symbol} takes {len(params)} arguments, not {len(args)}")
        return (types.none if returns == VOID else types.int64)(args), codegen
    return intrinsic(call)


@intrinsic
def prefetch(typingctx, array, i):
    """LLVM's prefetch of ``array[i]``'s cache line (a read, kept in every cache level): a hint
    that changes no result, so ``i`` may lie past the array's end."""
    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(VOID, [POINTER, I32, I32, I32]),
                                            "llvm.prefetch.p0")
        builder.call(fn, [builder.bitcast(builder.gep(data, [args[1]]), POINTER), I32(0), I32(3), I32(1)])
        return context.get_dummy_value()
    return types.void(array, i), codegen
