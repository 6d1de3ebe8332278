"""The CPU kernels' special-case helpers (``fusegen/lower/pyhelpers.py``'s text over NumPy, and
NumPy's NaN-propagating ``_fmax``/``_fmin``), compiled once and shared by every generated
kernel, which imports them from here.

Why shared: a helper defined inside each generated module is a new dispatcher there, typed and
compiled again for every kernel that calls it (0.1-0.2 s each; a test run compiles a few hundred
kernels). From one module each (helper, signature) compiles once per process; the kernel that
calls it links the machine code in and LLVM inlines it (``forceinline``: ``alwaysinline``), as
before, so the kernels' loops are unchanged.

The helpers are compiled from a file of their own in the cache (``import_source``) with
``cache=True``: a new process loads them from Numba's disk cache. The flags are explicit (no
``fastmath``): a dispatcher shared by callers compiled with different flags must not depend on
which caller typed it first. The generated sources carry ``DIGEST`` (of
this text) in their header, so Numba's disk cache never serves a kernel that inlined an older
helper.

``_fg_row(a, start)`` is ``a[start:]`` of a 1-d C array, the per-row view every hot loop reads
and writes through, without the slice's bound fixing: a slice lowers to a few hundred LLVM
instructions per view (negative starts, clamping, a step) that the optimizer then has to remove,
and it was half the compile time of a small kernel. The loops' starts are offsets the planner
computed inside the array, so the view is the same pointer, extent and stride LLVM saw before, and
the loops vectorize as they did. ``_fg_flat(a)`` is ``a.ravel()`` of a C-contiguous array (the
kernels' operands always are: the runner makes them so), a view, for the same reason.

``_fg_maximum(a, b)``/``_fg_minimum`` are LLVM's ``llvm.maximum``/``llvm.minimum`` of two floats of
one type: NaN-propagating like ``_fmax`` (a NaN in either gives NaN), +0 above -0 (``_fmax``, like
NumPy's reductions, keeps the later of two zeros). The row loops' max and min
reductions fold with them because LLVM vectorizes a reduction of these (several vector
accumulators, as for a sum) and not one of ``_fmax``'s compare-and-select, which it may not
reorder without the no-NaN flag: a scalar chain, ten times slower (a softmax's max pass was most
of its time).
"""
from __future__ import annotations

import hashlib
from pathlib import Path

from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.core.imputils import impl_ret_borrowed
from numba.extending import intrinsic
from numba.np.arrayobj import make_array

from .lower.cpu_blocks import tile_lanes
from .lower.cpu_scans import SCAN_SUM_DTYPES
from .lower.pyhelpers import HELPER_NAMES, python_helpers
from .lower.pysource import NAN_HELPERS, import_source

_TEXT = NAN_HELPERS + python_helpers("np")
#: what a generated source names, so a change here is a change of its content (and cache key)
DIGEST = hashlib.sha256((_TEXT + Path(__file__).read_text(encoding="utf-8")).encode()).hexdigest()[:16]
#: the helpers compiled from the text below
HELPERS = ("_fmax", "_fmin") + HELPER_NAMES
#: every name a generated CPU kernel imports from here
NAMES = HELPERS + ("_fg_row", "_fg_flat", "_fg_maximum", "_fg_minimum", "_fg_wide", "_fg_stream", "_fg_fence",
                   "_fg_transpose", "_fg_scan_sum")


def _jit_helpers(module) -> None:
    for name in HELPERS:
        setattr(module, name, njit(forceinline=True, error_model="numpy", nogil=True, cache=True)(getattr(module, name)))


# (the text calls math.isinf, np.fmod, np.copysign, ...)
_helpers = import_source("import math\nimport numpy as np\n" + _TEXT, "numba", "fusegen_helpers", setup=_jit_helpers)
globals().update({name: getattr(_helpers, name) for name in HELPERS})


@intrinsic
def _fg_row(typingctx, a, start):
    """``a[start:]`` for a 1-d C-contiguous array ``a`` and an integer ``start`` (see the module
    docstring); the extent is never negative. The view shares ``a``'s memory (a borrowed
    reference, as a slice's)."""
    if not (isinstance(a, types.Array) and a.ndim == 1 and a.layout == "C" and isinstance(start, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        src = make_array(sig.args[0])(context, builder, args[0])
        at = context.cast(builder, args[1], sig.args[1], types.intp)
        rest = builder.sub(builder.extract_value(src.shape, 0), at)
        zero = context.get_constant(types.intp, 0)
        rest = builder.select(builder.icmp_signed("<", rest, zero), zero, rest)
        view = make_array(sig.return_type)(context, builder)
        context.populate_array(view, data=builder.gep(src.data, [at]), shape=cgutils.pack_array(builder, [rest]),
                               strides=src.strides, itemsize=src.itemsize, meminfo=src.meminfo, parent=src.parent)
        return impl_ret_borrowed(context, builder, sig.return_type, view._getvalue())

    return types.Array(a.dtype, 1, "C")(a, start), codegen


@intrinsic
def _fg_flat(typingctx, a):
    """``a.ravel()`` of a C-contiguous array, always a view (see the module docstring)."""
    if not (isinstance(a, types.Array) and a.layout == "C"):
        return None

    def codegen(context, builder, sig, args):
        src = make_array(sig.args[0])(context, builder, args[0])
        size = context.get_constant(types.intp, 1)
        for extent in cgutils.unpack_tuple(builder, src.shape, sig.args[0].ndim):
            size = builder.mul(size, extent)
        view = make_array(sig.return_type)(context, builder)
        context.populate_array(view, data=src.data, shape=cgutils.pack_array(builder, [size]),
                               strides=cgutils.pack_array(builder, [src.itemsize]), itemsize=src.itemsize,
                               meminfo=src.meminfo, parent=src.parent)
        return impl_ret_borrowed(context, builder, sig.return_type, view._getvalue())

    return types.Array(a.dtype, 1, "C")(a), codegen


def _ieee_minmax(name: str):
    @intrinsic
    def minmax(typingctx, a, b):
        if not (isinstance(a, types.Float) and a == b):
            return None

        def codegen(context, builder, sig, args):
            t = context.get_value_type(sig.args[0])
            return builder.call(builder.module.declare_intrinsic(name, [t], ir.FunctionType(t, [t, t])), args)

        return a(a, b), codegen
    return minmax


_fg_maximum = _ieee_minmax("llvm.maximum")
_fg_minimum = _ieee_minmax("llvm.minimum")


#: the vector width a kernel asks LLVM for (``_fg_wide``): 512 bits, where the CPU has them
VECTOR_WIDTH = 512


@intrinsic
def _fg_wide(typingctx):
    """Marks the LLVM function being compiled ``"prefer-vector-width"="512"`` and returns nothing.

    Why: on AVX-512 Intel CPUs LLVM's CPU model sets ``prefer-256-bit`` (a tuning for the older
    cores' lower clock under 512-bit work), so Numba vectorized 8 float32 lanes where g++ -O3
    -march=native takes 16: the float32-lane math (silu, softplus, mish, gelu) ran twice the
    instructions per element of the emitted C++. The function attribute overrides the tuning for
    the one function that carries it, where ``NUMBA_CPU_FEATURES`` would change every function of
    the process. LLVM never goes past what the CPU has, so on an AVX2 CPU nothing changes. The
    generated kernel calls it inside its task loop, so that a ``prange`` loop's outlined body (a
    function of its own) carries it too; the call emits no instruction."""
    def codegen(context, builder, sig, args):
        # llvmlite's FunctionAttributes admits only its own list of keywords: a key="value"
        # attribute goes into the set as text, which the function's definition prints as it is
        set.add(builder.function.attributes, f'"prefer-vector-width"="{VECTOR_WIDTH}"')
        return context.get_dummy_value()

    return types.none(), codegen


#: the bytes of one non-temporal store (``_fg_stream``): a cache line, one zmm register
STREAM_BYTES = 64


@intrinsic
def _fg_stream(typingctx, dst, at, src, n):
    """``dst[at:at + n] = src[:n]`` for 1-d C arrays of one dtype, the whole cache lines of the
    destination written with non-temporal stores (LLVM ``!nontemporal``, 64 aligned bytes at a
    time; the unaligned ends copied as usual). Why: a large permuted copy read in its source's
    order (``rt.policy.stream_order``) writes each line of its output once, far from the lines
    around it; a cached store first reads the line (read-for-ownership) and evicts the operands,
    a third of the traffic of a copy. The emitted C++'s ``fg::stream_out`` does the same.
    Stores of this kind are weakly ordered: the task that made them calls ``_fg_fence`` before it
    ends. ``n`` past ``src``'s or ``dst``'s end is the caller's error (the kernels pass a tile
    that fits both)."""
    if not (isinstance(dst, types.Array) and isinstance(src, types.Array) and dst.ndim == src.ndim == 1
            and dst.layout == src.layout == "C" and dst.dtype == src.dtype
            and isinstance(at, types.Integer) and isinstance(n, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        i64, i8p = ir.IntType(64), ir.IntType(8).as_pointer()

        def c(v):
            return ir.Constant(i64, v)
        d = make_array(sig.args[0])(context, builder, args[0])
        s = make_array(sig.args[2])(context, builder, args[2])
        at = context.cast(builder, args[1], sig.args[1], types.int64)
        count = context.cast(builder, args[3], sig.args[3], types.int64)
        dp = builder.bitcast(builder.gep(d.data, [at]), i8p)
        sp = builder.bitcast(s.data, i8p)
        nbytes = builder.mul(count, c(context.get_abi_sizeof(context.get_data_type(sig.args[0].dtype))))
        # bytes up to the destination's next line boundary, at most all of them
        head = builder.and_(builder.sub(c(STREAM_BYTES), builder.and_(builder.ptrtoint(dp, i64), c(STREAM_BYTES - 1))),
                            c(STREAM_BYTES - 1))
        head = builder.select(builder.icmp_signed("<", nbytes, head), nbytes, head)
        cgutils.raw_memcpy(builder, dp, sp, head, 1)
        lines = builder.udiv(builder.sub(nbytes, head), c(STREAM_BYTES))
        vec = ir.VectorType(ir.IntType(32), STREAM_BYTES // 4).as_pointer()
        hint = builder.module.add_metadata([ir.Constant(ir.IntType(32), 1)])
        with cgutils.for_range(builder, lines) as loop:
            k = builder.add(head, builder.mul(loop.index, c(STREAM_BYTES)))
            v = builder.load(builder.bitcast(builder.gep(sp, [k]), vec), align=1)
            store = builder.store(v, builder.bitcast(builder.gep(dp, [k]), vec), align=STREAM_BYTES)
            store.set_metadata("nontemporal", hint)
        done = builder.add(head, builder.mul(lines, c(STREAM_BYTES)))
        cgutils.raw_memcpy(builder, builder.gep(dp, [done]), builder.gep(sp, [done]), builder.sub(nbytes, done), 1)
        return context.get_dummy_value()

    return types.none(dst, at, src, n), codegen


@intrinsic
def _fg_fence(typingctx):
    """A full memory fence (``fence seq_cst``: x86's mfence), which also orders the calling
    thread's earlier non-temporal stores (``_fg_stream``) before anything it does next."""
    def codegen(context, builder, sig, args):
        builder.fence("seq_cst")
        return context.get_dummy_value()

    return types.none(), codegen


@intrinsic
def _fg_transpose(typingctx, dst, dst_at, dst_step, src, src_at, src_step):
    """``dst[dst_at + c * dst_step + r] = src[src_at + r * src_step + c]`` for r, c < L, where L
    is ``lower.cpu_blocks.tile_lanes(itemsize)`` (16 float32s, 8 float64s): a square tile of one cache line
    per row, transposed in registers: L vector loads, log2(L) rounds of L two-vector shuffles
    (rows i and i + b trade their blocks of b lanes, b = L/2 ... 1), L vector stores. Why: a
    transposed read (y in ``x + y.T``) copied element by element into its block buffer
    (``lower/cpu_blocks``) ran a load and a store per element, most of the Numba backend's time
    on that row; the emitted C++ transposes in registers too. For 4- and 8-byte dtypes only
    (``None`` otherwise: the caller keeps its scalar copy). Bounds are the caller's."""
    if not (isinstance(dst, types.Array) and isinstance(src, types.Array) and dst.ndim == src.ndim == 1
            and dst.layout == src.layout == "C" and dst.dtype == src.dtype and tile_lanes(dst.dtype.bitwidth // 8)
            and all(isinstance(t, types.Integer) for t in (dst_at, dst_step, src_at, src_step))):
        return None
    lanes = tile_lanes(dst.dtype.bitwidth // 8)   # (the rule the generated code's copy loops use)

    def codegen(context, builder, sig, args):
        elem = ir.IntType(sig.args[0].dtype.bitwidth)
        vec = ir.VectorType(elem, lanes)
        d = make_array(sig.args[0])(context, builder, args[0])
        s = make_array(sig.args[3])(context, builder, args[3])
        dat, dstep, sat, sstep = (context.cast(builder, v, t, types.intp)
                                  for v, t in zip((args[1], args[2], args[4], args[5]), sig.args[1:3] + sig.args[4:6]))

        def row(base, at, step, r):
            ptr = builder.gep(base, [builder.add(at, builder.mul(step, ir.Constant(at.type, r)))])
            return builder.bitcast(ptr, vec.as_pointer())
        rows = [builder.load(row(builder.bitcast(s.data, elem.as_pointer()), sat, sstep, r), align=1) for r in range(lanes)]
        b = lanes // 2
        while b >= 1:
            low = ir.Constant(ir.VectorType(ir.IntType(32), lanes), [j if j & b == 0 else lanes + j - b for j in range(lanes)])
            high = ir.Constant(ir.VectorType(ir.IntType(32), lanes), [j + b if j & b == 0 else lanes + j for j in range(lanes)])
            for i in range(lanes):
                if i & b == 0:
                    rows[i], rows[i + b] = (builder.shuffle_vector(rows[i], rows[i + b], low),
                                            builder.shuffle_vector(rows[i], rows[i + b], high))
            b //= 2
        for c, v in enumerate(rows):
            builder.store(v, row(builder.bitcast(d.data, elem.as_pointer()), dat, dstep, c), align=1)
        return context.get_dummy_value()

    return types.none(dst, dst_at, dst_step, src, src_at, src_step), codegen


@intrinsic
def _fg_scan_sum(typingctx, buf, n, carry):
    """``buf[:n]`` replaced by its inclusive running sum, starting from ``carry``; returns the last
    sum (``carry`` when ``n`` is 0). In 64-byte vectors: each vector's own prefix sums in log2(L)
    rounds of a shift by 1, 2, 4 ... lanes and an add (independent of the vectors before it), then
    the carry added; the next carry is the carry plus the vector's own total broadcast, so the
    chain from one vector to the next is one add. Why: a running sum one element at a time is a chain of
    dependent adds, 4 cycles each; the blocked scan's independent chains (``lower/cpu_scans``)
    still ran a scalar load, add and store per element. A float sum adds in a different order than
    one element at a time (each element: the carry plus a tree of at most L of the piece's values),
    within the same error bound; integers wrap as before. The lanes shifted in are -0.0 for floats,
    which leaves every value, -0.0 included, as it is. Bounds are the caller's."""
    if not (isinstance(buf, types.Array) and buf.ndim == 1 and buf.layout == "C" and str(buf.dtype) in SCAN_SUM_DTYPES
            and isinstance(n, types.Integer) and carry == buf.dtype):
        return None
    lanes = 64 // (buf.dtype.bitwidth // 8)
    is_float = isinstance(buf.dtype, types.Float)

    def codegen(context, builder, sig, args):
        elem = context.get_value_type(sig.args[0].dtype)
        vec = ir.VectorType(elem, lanes)
        add = builder.fadd if is_float else builder.add
        shift_in = ir.Constant(vec, [-0.0 if is_float else 0] * lanes)
        a = make_array(sig.args[0])(context, builder, args[0])
        data = builder.bitcast(a.data, elem.as_pointer())
        count = context.cast(builder, args[1], sig.args[1], types.intp)
        width = ir.Constant(count.type, lanes)
        last = ir.Constant(ir.VectorType(ir.IntType(32), lanes), [lanes - 1] * lanes)
        running = cgutils.alloca_once_value(builder, builder.shuffle_vector(
            builder.insert_element(ir.Constant(vec, ir.Undefined), args[2], ir.Constant(ir.IntType(32), 0)),
            ir.Constant(vec, ir.Undefined), ir.Constant(ir.VectorType(ir.IntType(32), lanes), [0] * lanes)))
        with cgutils.for_range(builder, builder.sdiv(count, width)) as loop:
            ptr = builder.bitcast(builder.gep(data, [builder.mul(loop.index, width)]), vec.as_pointer())
            v = builder.load(ptr, align=1)
            step = 1
            while step < lanes:   # lane j += lane j - step (shift_in's lanes below step)
                mask = [lanes + j if j < step else j - step for j in range(lanes)]
                v = add(v, builder.shuffle_vector(v, shift_in, ir.Constant(ir.VectorType(ir.IntType(32), lanes), mask)))
                step *= 2
            carry_in = builder.load(running)
            builder.store(add(v, carry_in), ptr, align=1)
            # (the next carry from this vector's own total, not from the stored sums: the chain
            # from vector to vector is then one add; the values are the same)
            builder.store(add(carry_in, builder.shuffle_vector(v, ir.Constant(vec, ir.Undefined), last)), running)
        total = cgutils.alloca_once_value(builder, builder.extract_element(builder.load(running),
                                                                           ir.Constant(ir.IntType(32), 0)))
        tail = builder.mul(builder.sdiv(count, width), width)
        with cgutils.for_range_slice(builder, tail, count, ir.Constant(count.type, 1)) as (i, _):
            ptr = builder.gep(data, [i])
            value = add(builder.load(total), builder.load(ptr))
            builder.store(value, ptr)
            builder.store(value, total)
        return builder.load(total)

    return carry(buf, n, carry), codegen
