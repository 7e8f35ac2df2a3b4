"""The cuBLAS family of `cholesky_solve`'s CuPy engine: systems of more than SMALL_MAX_M
unknowns, solved (`solve`) and differentiated (`backward`) by cuBLAS and cuSOLVER calls.

The buffer of a row-major matrix is its transpose to cuBLAS (column-major), so the stored
factor F of a lower L is L^T with fill "upper", and of an upper U is U^T with fill "lower".

`solve`:
- One system: the right-hand sides are copied (broadcast) once into column-major order and
  solved in place on the left by cuSOLVER ``potrs`` (to which the buffer is the factor of
  ``A^T = conj(A)``, so complex right-hand sides are conjugated around it). On an H100 left-side
  solves ran 20% faster than right-side ones on the row-major data (4096, K = 256), and
  ``potrs`` 3-5% faster than two ``trsm`` calls. For the backward (`half`) the two left-side
  ``trsm`` calls run instead, and the first one's result is kept.
- A batch: two right-side ``trsmBatched`` calls on the result itself, with no transposed copy:
  its row-major (M, K) rows are the column-major B^T, and ``A X = B`` is ``X^T A^T = B^T``
  with ``A^T = conj(L) L^T`` (lower) or ``U^T conj(U)`` (upper). So ``V L^T = B^T`` is op N on
  F and ``X^T conj(L) = V`` op C (T for real dtypes); upper: op C, then op N. A broadcast factor
  is the same pointer repeated. On an H100 the right-side calls took the time of left-side ones
  ((64, 512, 512) K=64 float32: 0.36 ms each), and the solve with them 0.84 ms against 0.94
  with left-side calls and the two transposed copies they need ((1000, 128, 128) K=16: 0.33
  against 0.48); on an H200, in three alternated rounds, (64, 512, 512) K=64 took 0.82-0.92
  against 0.80-0.85 ms in float32 and 0.94-0.96 against 0.94-0.96 in float64. Solving in
  diagonal blocks of 64 rows with GEMMs between them ran 8-10% faster than one
  ``trsmBatched`` call in one H100 measurement ((64, 512, 512) and (1000, 128, 128)); its
  other timings ran on a GPU shared with other work and were inconclusive, so it is not used.

`backward` (real dtypes, a factor batch that is not broadcast): with ``W = L^-1 G`` the first
of the two solves of ``dB = A^-1 G``, ``Y = L^-1 B = L^T X`` the forward's first solve and X
its result, the factor's cotangent ``-tril((dB X^T + X dB^T) L)`` of `._vjp` is
``-tril([dB X] [Y W]^T)``: one product of M x 2K operands, where the generic rule takes two
(``[dB X] ([X dB]^T L)``). Upper: ``W = U^-T G``, ``Y = U^-T B = U X``, and
``-triu([W Y] [X dB]^T)``. ``W`` comes for free; ``Y`` is kept by the forward (`solve`'s
`half`), or else computed as a product with the used triangle. The four M x K blocks are held
column-major, as the left-side solves want them, in two (2K, M) buffers a system. For large
products only the used triangle's blocks are multiplied (`BLOCKS` row blocks); the wrong side
of the diagonal blocks is then zeroed. On an H100, (1, 4096, 4096) K=256 float32, the
pull-back took 2.95 ms with ``Y`` kept, 3.32 computed, 3.71 by the generic rule (float64
3.35 / 3.68 / 4.01); (64, 512, 512) K=64 float32 1.29 / 1.37 / 1.42; (100, 1000, 1000) K=1
float32 2.71 / 3.37 / 3.32.
"""

import math

import cupy
import numpy as np

from .._lib._dtypes import dtype_name

__all__ = ["BLOCKED_MIN_WORK", "BLOCKS", "backward", "solve"]

# cuBLAS enumerations (cublas_api.h)
_SIDE_LEFT, _SIDE_RIGHT = 0, 1
_FILL_LOWER, _FILL_UPPER = 0, 1
_OP_N, _OP_T, _OP_C = 0, 1, 2
_DIAG_NON_UNIT = 0
_PREFIX = {"float32": "s", "float64": "d", "complex64": "c", "complex128": "z"}

# The backward's product in BLOCKS row blocks, multiplying only the used triangle's blocks,
# where batch * M^2 * K is at least BLOCKED_MIN_WORK. On an H100, (4096, K = 256) float32 /
# float64: 0.27 / 0.28 ms with 4 blocks against 0.36 / 0.42 for the whole product (2 blocks
# 0.27 / 0.28, 8 blocks 0.30 / 0.28); (2048, K = 64) float32: 0.043 ms whole, 0.088 with 4.
BLOCKS = 4
BLOCKED_MIN_WORK = 1 << 31


def _pointers(base: int, n: int, stride: int) -> cupy.ndarray:
    """The n device addresses base, base + stride, ... (bytes) as uint64, for cuBLAS's
    batched calls."""
    return cupy.arange(base, base + n * stride, stride, dtype=np.uint64)


def _factor_pointers(y: cupy.ndarray, index: cupy.ndarray | None, n: int) -> cupy.ndarray:
    """Addresses of the n systems' factors in the C-contiguous `y` (..., M, M): the i-th, or
    the `index`-th one for a broadcast factor."""
    size = y.shape[-1] * y.shape[-1] * y.itemsize
    if index is None:
        return _pointers(y.data.ptr, n, size)
    return np.uint64(y.data.ptr) + index.astype(np.uint64) * np.uint64(size)


def solve(
    x: cupy.ndarray,
    y: cupy.ndarray,
    out: cupy.ndarray,
    index: cupy.ndarray | None,
    upper: bool,
    half: cupy.ndarray | None = None,
) -> None:
    """Write ``A^-1 x`` into `out` (*batch, M, K), C-contiguous; `y` C-contiguous, one dtype
    with `x`, `index` its systems' indices where its batch is broadcast (else None). With
    `half` (real dtypes; C-contiguous, `out`'s shape) the first solve's result is written there
    too: ``L^-1 x`` (lower) or ``U^-T x`` (upper), for the backward."""
    from cupy_backends.cuda.libs import cublas

    M, K = out.shape[-2], out.shape[-1]
    n = out.size // (M * K)
    prefix = _PREFIX[dtype_name(out.dtype)]
    one = np.ones((), dtype=out.dtype)
    handle = cupy.cuda.device.get_cublas_handle()
    if n == 1 and half is None:
        _potrs(x, y, out, upper, prefix)
        return
    if n == 1:  # the left-side pair (op T then N for lower, N then T for upper), column-major
        work = _column_major(x, out.shape)
        fill, ops = (_FILL_LOWER, (_OP_N, _OP_T)) if upper else (_FILL_UPPER, (_OP_T, _OP_N))
        trsm = getattr(cublas, f"{prefix}trsm")
        for step, op in enumerate(ops):
            kind = (_SIDE_LEFT, fill, op, _DIAG_NON_UNIT, M, K)
            trsm(handle, *kind, one.ctypes.data, y.data.ptr, M, work.data.ptr, M)
            if step == 0:
                cupy.copyto(half, cupy.swapaxes(work, -1, -2))
        cupy.copyto(out, cupy.swapaxes(work, -1, -2))
        return
    cupy.copyto(out, x)  # broadcast
    second = _OP_C if out.dtype.kind == "c" else _OP_T
    fill, ops = (_FILL_LOWER, (second, _OP_N)) if upper else (_FILL_UPPER, (_OP_N, second))
    factors = _factor_pointers(y, index, n)
    rhs = _pointers(out.data.ptr, n, M * K * out.itemsize)
    trsm = getattr(cublas, f"{prefix}trsmBatched")
    for step, op in enumerate(ops):
        kind = (_SIDE_RIGHT, fill, op, _DIAG_NON_UNIT, K, M)
        trsm(handle, *kind, one.ctypes.data, factors.data.ptr, M, rhs.data.ptr, K, n)
        if step == 0 and half is not None:
            cupy.copyto(half, out)


def _column_major(x: cupy.ndarray, shape: tuple[int, ...]) -> cupy.ndarray:
    """A new array of the (M, K) matrices of `x` broadcast to `shape`, column-major: the
    row-major (K, M) transposes. Always a copy: with K = 1 the transposed view of a
    C-contiguous `x` is C-contiguous too, and solving in it would write into `x`."""
    return cupy.swapaxes(cupy.broadcast_to(x, shape), -1, -2).copy()


def _potrs(x: cupy.ndarray, y: cupy.ndarray, out: cupy.ndarray, upper: bool, prefix: str) -> None:
    from cupy_backends.cuda.libs import cusolver

    M, K = out.shape[-2], out.shape[-1]
    work = _column_major(x, out.shape)
    complex_ = out.dtype.kind == "c"
    # L^T with fill upper is U with A^T = U^T U (and U^T with fill lower is L with A^T = L L^T)
    fill = _FILL_LOWER if upper else _FILL_UPPER
    info = cupy.empty((), dtype=np.int32)  # potrs reports only invalid arguments
    if complex_:
        cupy.conj(work, out=work)
    handle = cupy.cuda.device.get_cusolver_handle()
    potrs = getattr(cusolver, f"{prefix}potrs")
    potrs(handle, fill, M, K, y.data.ptr, M, work.data.ptr, M, info.data.ptr)
    if complex_:
        cupy.conj(work, out=work)
    out[...] = cupy.swapaxes(work, -1, -2)


_ZERO_SIDE = r"""
// The wrong side of the diagonal blocks of each system's (m, m) cotangent: element i of the
// launch is column c of a block-wide row window of global row r (system * m + row).
const long long r = i / s, row = r % m, j = row / s * s + i % s;
if (j < m && (upper ? j < row : j > row)) dy[r * m + j] = 0;
"""


@cupy.memoize(for_each_device=True)
def _zero_side() -> cupy.ElementwiseKernel:
    return cupy.ElementwiseKernel(
        "int64 m, int64 s, bool upper", "raw T dy", _ZERO_SIDE, "xpops_cholesky_solve_zero_side"
    )


def backward(
    g: cupy.ndarray, z: cupy.ndarray, u: cupy.ndarray, upper: bool, half: cupy.ndarray | None
) -> tuple[cupy.ndarray, cupy.ndarray] | None:
    """``(A^-1 g, the factor's cotangent)`` for real `g`, `z` (*batch, M, K) and `u`
    (*batch, M, M), one dtype and one batch shape, nothing empty; None for complex ones.
    `half` is the forward's first solve (`solve`), or None: then Y is computed from `z`."""
    from cupy_backends.cuda.libs import cublas

    if g.dtype.kind != "f":
        return None
    M, K = g.shape[-2], g.shape[-1]
    batch = tuple(g.shape[:-2])
    n = math.prod(batch)
    dt, item = g.dtype, g.itemsize
    prefix = _PREFIX[dtype_name(dt)]
    u = cupy.ascontiguousarray(u)
    # lft, rgt: (n, 2K, M), each the column-major M x 2K operand of the product
    # P^T = rgt lft^T (the row-major P): lower lft = [dB X], rgt = [Y W]; upper lft = [W Y],
    # rgt = [X dB]
    lft = cupy.empty((n, 2 * K, M), dt)
    rgt = cupy.empty((n, 2 * K, M), dt)
    if upper:
        rhs, w, x_, y_ = rgt[:, K:], lft[:, :K], rgt[:, :K], lft[:, K:]
        fill, ops, y_op = _FILL_LOWER, (_OP_N, _OP_T), _OP_T
    else:
        rhs, w, x_, y_ = lft[:, :K], rgt[:, K:], lft[:, K:], rgt[:, :K]
        fill, ops, y_op = _FILL_UPPER, (_OP_T, _OP_N), _OP_N
    cupy.copyto(rhs, cupy.swapaxes(g.reshape(n, M, K), -1, -2))
    cupy.copyto(x_, cupy.swapaxes(z.reshape(n, M, K), -1, -2))
    one, zero, minus = (np.full((), v, dtype=dt) for v in (1, 0, -1))
    handle = cupy.cuda.device.get_cublas_handle()
    stride = 2 * K * M  # elements between two systems' operands
    if n == 1:
        trsm = getattr(cublas, f"{prefix}trsm")
        operands: tuple[int, ...] = (u.data.ptr, M, rhs.data.ptr, M)
    else:
        trsm = getattr(cublas, f"{prefix}trsmBatched")
        factors = _pointers(u.data.ptr, n, M * M * item)
        rhs_ptrs = _pointers(rhs.data.ptr, n, stride * item)
        operands = (factors.data.ptr, M, rhs_ptrs.data.ptr, M, n)
    for step, op in enumerate(ops):
        trsm(handle, _SIDE_LEFT, fill, op, _DIAG_NON_UNIT, M, K, one.ctypes.data, *operands)
        if step == 0:  # W, one factor of the product
            cupy.copyto(w, rhs)
    gemm = getattr(cublas, f"{prefix}gemmStridedBatched")
    if half is not None:
        cupy.copyto(y_, cupy.swapaxes(half.reshape(n, M, K), -1, -2))
    else:
        # Y = L^T X (U X): the used triangle alone (the other may hold anything), a full product
        clean = cupy.triu(u) if upper else cupy.tril(u)
        a, b, c = (clean.data.ptr, M, M * M), (x_.data.ptr, M, stride), (y_.data.ptr, M, stride)
        gemm(handle, y_op, _OP_N, M, K, M, one.ctypes.data, *a, *b, zero.ctypes.data, *c, n)
        del clean
    dy = cupy.zeros((*batch, M, M), dt)
    blocks = BLOCKS if n * M * M * K >= BLOCKED_MIN_WORK else 1
    size = -(-M // blocks)  # rows a block
    for r0 in range(0, M, size):
        r1 = min(M, r0 + size)
        # the row-major rows [r0, r1) of P: its columns [0, r1) (lower) or [r0, M) (upper)
        first = r0 if upper else 0
        rows = (M if upper else r1) - first
        a = (rgt.data.ptr + first * item, M, stride)
        b = (lft.data.ptr + r0 * item, M, stride)
        c = (dy.data.ptr + (r0 * M + first) * item, M, M * M)
        shape = (rows, r1 - r0, 2 * K)
        gemm(handle, _OP_N, _OP_T, *shape, minus.ctypes.data, *a, *b, zero.ctypes.data, *c, n)
    _zero_side()(M, size, upper, dy, size=n * M * size)
    dx = cupy.ascontiguousarray(cupy.swapaxes(rhs, -1, -2))
    return dx.reshape(g.shape), dy
