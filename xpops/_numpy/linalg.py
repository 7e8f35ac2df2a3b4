"""NumPy/SciPy engine of cholesky_solve and of the internal triangular solve.

Two paths, both working in place on one C-contiguous work array that holds the right-hand
sides (batch dimensions in which the factor is broadcast are folded into K, so that every
distinct factor is read once and never copied):

* **BLAS** (large systems): per factor, two right-side ``?trsm`` calls of SciPy's BLAS on the
  arrays' own memory. The C-contiguous solution rows ``X`` are, seen column-major,
  ``Z = X^T``, and a C-contiguous factor ``A`` is, seen column-major, ``A^T``; so
  ``op(A) X = B`` becomes ``Z op(A)^T = B^T``, which ``trsm`` solves with ``side=R`` and
  ``trans_a`` N (``op = I``) or C (``op = ^H``, since ``conj(A) = (A^T)^H``). Nothing is
  transposed or copied but the right-hand sides into the output; only the triangle is read.
  ``scipy.linalg.cho_solve`` calls ``potrs``, which first copies a C-ordered factor to
  Fortran order and, by default, scans it for NaN.
* **Vectorized substitution** (many small systems): row by row, one row-wise dot product
  (``einsum``) per step over the whole chunk of factors, in chunks of ``_CHUNK_BYTES`` of
  factors (L2-sized; 512 KiB to 2 MiB measured the same, 4 MiB and up was 30-90% slower).

``_SMALL_WORK``: the vectorized path is used while ``M*M*K`` (K: right-hand sides per factor
after folding) is at most 2048. Measured on the 2-core AMD EPYC (Zen 4) VM, float64, 2000
factors (ms, vectorized / BLAS): K=1: M=16 1.1 / 7.1, M=24 5.5 / 8.4, M=32 10.0 / 10.1,
M=48 22 / 19; K=4: M=16 5.7 / 7.3, M=24 17 / 9.5; K=16: M=8 2.6 / 7.8, M=16 11 / 9.0.
The BLAS path costs about 3.5 us of call overhead per factor, the vectorized one about
20-80 ns per factor and row.

Against the peers, same process, medians of 15 (``python -m xpops bench --ops
cholesky_solve``, ms): (10000, 16, 16) K=1: 9.3, ``torch.cholesky_solve`` 4.9, SciPy
``cho_solve`` 78; (1000, 64, 64) K=8: 13.7, torch 15.5, SciPy 22; (1, 2048, 2048) K=64:
12.7, torch 36, SciPy 42. The many-small-systems case is NumPy-bound: each of the 2M
dependent steps is a NumPy call whose inner loop runs once per factor (7-10 ns each, plus
misses on the factor rows 2 KiB apart), against PyTorch's C loop over LAPACK calls;
transposing the batch innermost first costs more (3.7-6 ms for these 20 MB) than it saves,
and two threads over halves of the batch gained only 25% (GIL), so neither is done.
"""

import math
from collections.abc import Callable

import numpy as np
from scipy.linalg import blas

__all__ = ["cholesky_solve", "solve_triangular"]

_SMALL_WORK = 2048  # vectorized substitution while M*M*(right-hand sides) <= this; BLAS above
_CHUNK_BYTES = 1 << 20  # factors per vectorized chunk: about this many bytes of them


# ---- layout: one C-contiguous (n, M, F*K) work array against (n, M, M) factors -------------


def _fold(b: np.ndarray, a: np.ndarray) -> tuple[np.ndarray, np.ndarray, Callable]:
    """Copy `b` (*bb, M, K) into a work array (n, M, F*K) that lines up with `a` (n, M, M).

    The batch dimensions where `a` has size 1 and the broadcast batch does not ("fold"
    dimensions) move next to K: every factor is then used once, with F*K right-hand sides,
    and no factor is copied. Returns the work array, the factors, and the function that
    turns the solved work array into the C-contiguous (*batch, M, K) result.
    """
    m, k = b.shape[-2], b.shape[-1]
    batch = np.broadcast_shapes(b.shape[:-2], a.shape[:-2])
    nb = len(batch)
    a_batch = (1,) * (nb - (a.ndim - 2)) + a.shape[:-2]
    fold = [d for d in range(nb) if a_batch[d] == 1 and batch[d] > 1]
    keep = [d for d in range(nb) if d not in fold]
    n = math.prod(a_batch)
    factors = a.reshape(n, m, m)
    bb = np.broadcast_to(b, (*batch, m, k))
    if not fold:
        work = np.array(bb, order="C").reshape(n, m, k)
        return work, factors, lambda w: w.reshape(*batch, m, k)
    perm = [*keep, nb, *fold, nb + 1]
    fold_shape = tuple(batch[d] for d in fold)
    moved = np.array(bb.transpose(perm), order="C")
    work = moved.reshape(n, m, math.prod(fold_shape) * k)
    inverse = np.argsort(perm)

    def restore(w: np.ndarray) -> np.ndarray:
        full = w.reshape(moved.shape).transpose(inverse)
        return np.ascontiguousarray(full)

    return work, factors, restore


# ---- large M: BLAS trsm per factor, on the arrays' own memory ------------------------------

_TRSM = {
    np.dtype(np.float32): blas.strsm,
    np.dtype(np.float64): blas.dtrsm,
    np.dtype(np.complex64): blas.ctrsm,
    np.dtype(np.complex128): blas.ztrsm,
}


def _trsm_steps(lower: bool, conj_trans: bool) -> tuple[int, int]:
    """(lower, trans_a) flags of a right-side trsm that solves ``op(A) X = B`` in place.

    The work rows ``X`` (M, K) are C-contiguous, so BLAS sees ``Z = X^T`` (column-major);
    a C-contiguous factor ``A`` is, seen column-major, ``A^T``. ``op(A) X = B`` is
    ``Z op(A)^T = B^T``, and ``op(A)^T`` is ``A^T`` (``trans_a`` N) for ``op = I`` and
    ``conj(A) = (A^T)^H`` (``trans_a`` C) for ``op = ^H``; ``A^T`` has the other triangle.
    """
    return int(not lower), 2 if conj_trans else 0


def _blas_solve(factors: np.ndarray, work: np.ndarray, steps: list[tuple[bool, bool]]) -> None:
    """Solve ``op_s(A_f) ... op_1(A_f) X_f = B_f`` for every f, in place in `work`."""
    trsm = _TRSM[work.dtype]
    one = work.dtype.type(1)
    flags = [_trsm_steps(lower, conj) for lower, conj in steps]
    for f in range(factors.shape[0]):
        a = factors[f]
        if not a.flags.c_contiguous:
            a = np.ascontiguousarray(a)
        z = work[f].T
        for lower_flag, trans in flags:
            z = trsm(one, a.T, z, side=1, lower=lower_flag, trans_a=trans, overwrite_b=1)
        if not np.shares_memory(z, work[f]):  # f2py copied: never for C-contiguous work
            work[f] = z.T


# ---- small M: substitution vectorized over the factors ---------------------------------------


def _substitute(t: np.ndarray, w: np.ndarray, nrd: np.ndarray, lower: bool, rows: bool) -> None:
    """Solve ``T X = W`` (`rows`) or ``T^T X = W`` in place, vectorized over the first axis.

    `nrd` is ``-1 / diag(T)``. `w` is (n, M) or (n, M, K). Each step is one row-wise dot
    product over the entries solved so far *and* the diagonal, against ``W`` preset to
    ``-w / d``: the diagonal term turns the sum into ``-(w_i - sum_j T_ij x_j)``, so that one
    multiplication by ``-1/d_i`` finishes ``x_i`` (two NumPy calls per row, not three).
    Only the triangle of `T` is read.
    """
    m = t.shape[-1]
    vector = w.ndim == 2
    scale = nrd if vector else nrd[:, :, None]
    np.multiply(w, scale, out=w)
    forward = lower == rows  # T lower, or T^T lower
    order = range(m) if forward else range(m - 1, -1, -1)
    first = order[0]
    # not np.negative: NumPy 2.4 negates strided float64 views wrongly (reads them as if
    # contiguous) when input and output are both strided
    np.multiply(w[:, first], -1, out=w[:, first])
    e = np.empty(w.shape[:1] + w.shape[2:], dtype=w.dtype)
    subscripts = "bj,bj->b" if vector else "bj,bjk->bk"
    for i in order[1:]:
        seg = slice(0, i + 1) if forward else slice(i, m)
        vec = t[:, i, seg] if rows else t[:, seg, i]
        np.einsum(subscripts, vec, w[:, seg], out=e)
        np.multiply(e, scale[:, i], out=w[:, i])


def _small_solve(factors: np.ndarray, work: np.ndarray, steps: list[tuple[bool, bool]]) -> None:
    n, m, k = work.shape
    complex_ = np.iscomplexobj(work)
    chunk = max(1, _CHUNK_BYTES // max(1, m * m * factors.itemsize))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for s in range(0, n, chunk):
            t = factors[s : s + chunk]
            w = work[s : s + chunk]
            if k == 1:
                w = w[..., 0]
            nrd = np.divide(-1.0, np.diagonal(t, 0, -2, -1), dtype=work.dtype)
            for lower, conj in steps:
                # T^H X = W is T^T conj(X) = conj(W): transposed, on conjugates
                if conj and complex_:
                    np.conjugate(w, out=w)
                _substitute(t, w, nrd, lower, rows=not conj)
                if conj and complex_:
                    np.conjugate(w, out=w)


def _solve(b: np.ndarray, a: np.ndarray, steps: list[tuple[bool, bool]]) -> np.ndarray:
    work, factors, restore = _fold(b, a)
    m = work.shape[1]
    if work.size:
        if m * m * work.shape[2] <= _SMALL_WORK:
            _small_solve(factors, work, steps)
        else:
            _blas_solve(factors, work, steps)
    return restore(work)


def cholesky_solve(x: np.ndarray, y: np.ndarray, upper: bool) -> np.ndarray:
    """Solve ``A X = x`` with ``A = y y^H`` (``y^H y`` if `upper`); C-contiguous result."""
    # U^H then U, or L then L^H: (lower, conjugate transpose) of each triangular solve
    steps = [(False, True), (False, False)] if upper else [(True, False), (True, True)]
    return _solve(x, y, steps)


def solve_triangular(b: np.ndarray, a: np.ndarray, lower: bool, conj_trans: bool) -> np.ndarray:
    """Solve ``op(a) X = b`` (``op(a) = a^H`` if `conj_trans`); C-contiguous result."""
    return _solve(b, a, [(lower, conj_trans)])
