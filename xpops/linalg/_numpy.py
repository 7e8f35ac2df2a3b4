"""NumPy/SciPy engine of cholesky_solve and of the internal triangular solve.

Three paths, all working in place on one C-contiguous work array (n, M, K) that holds the
right-hand sides (batch dimensions in which the factor is broadcast are folded into K, so
that every distinct factor is read once and never copied):

* **BLAS**: per factor, two right-side ``?trsm`` calls of SciPy's BLAS on the arrays' own
  memory. The C-contiguous solution rows ``X`` are, seen column-major, ``Z = X^T``, and a
  C-contiguous factor ``A`` is, seen column-major, ``A^T``; so ``op(A) X = B`` becomes
  ``Z op(A)^T = B^T``, which ``trsm`` solves with ``side=R`` and ``trans_a`` N (``op = I``)
  or C (``op = ^H``, since ``conj(A) = (A^T)^H``). Nothing is transposed or copied but the
  right-hand sides into the output; only the triangle is read. ``scipy.linalg.cho_solve``
  calls ``potrs``, which first copies a C-ordered factor to Fortran order and, by default,
  scans it for NaN.
* **Rows** (vectorized substitution, batch first): row by row, one row-wise dot product
  (``einsum``) per step over a chunk of ``_CHUNK_BYTES`` of factors (L2-sized; 512 KiB to
  2 MiB measured the same, 4 MiB and up was 30-90% slower). The inner loops run along a row
  (at most M) or along K.
* **Batch last** (vectorized substitution): a chunk's stored triangle is gathered once into
  a (entries, chunk) array, the right-hand sides transposed to (M, K, chunk), and each step is
  one dot product whose inner loop runs along the chunk.

Long double (float128, complex256), which SciPy's BLAS lacks, takes a vectorized path
whatever the sizes, computed in long double.

``_path`` chooses: BLAS while ``M*M*K`` (K after folding) is above ``_SMALL_WORK`` = 2048, and
for few factors (n at most 2M: BLAS costs about 3.5-5 us a factor, the vectorized paths
6-10 us a step of 2M steps whatever n; one (16, 16) system: 0.02 against 0.12 ms); batch last
for 1 < K <= M, or with K = 1 from ``_BATCH_LAST_MIN`` = 4096 factors; rows otherwise. On a
2-core AMD EPYC (Zen 4) VM, float64, best of 7 (ms, rows / batch last; read the ratios, which
are steadier than the absolute times on a shared VM): 2000 factors: K=1 M=8 0.40 / 0.35, M=16 1.9 /
1.8, M=24 4.0 / 4.1, M=32 10.3 / 6.6; K=4 M=8 1.9 / 0.73, M=16 6.8 / 3.0; K=8 M=16 7.8 / 4.7;
K=2 M=32 27 / 8.2. 10000 factors, K=1: M=4 0.73 / 0.59, M=16 14 / 9.1, M=32 62 / 38; 512
factors, K=1: M=8 0.15 / 0.18, M=24 1.5 / 1.9 (rows ahead for K = 1 and a few thousand
factors); M=4 K=64 (K > M): 2.4 / 5.1. Rows against BLAS, 2000 factors: K=1 M=16 1.1 / 7.1,
M=24 5.5 / 8.4, M=32 10.0 / 10.1, M=48 22 / 19; K=16 M=16 11 / 9.0.

Against the peers (``python -m xpops bench --ops cholesky_solve``, and both alternated in one
process, same VM, on several days): (10000, 16, 16) K=1 runs at 0.8-0.9x the speed of
``torch.cholesky_solve`` in float64 and 0.9-1.2x in float32 (the rows path 0.5-0.8x).
PyTorch's C loop over LAPACK calls stays ahead on many tiny systems: the gather that makes the
batch the last axis reads every stored entry of the 20 MB of factors once more, and each of
the 2M steps is a NumPy call. Two threads over halves of the batch gained 25% (rows) and 15%
(batch last) at best and were slower in other runs (the calls hold the GIL between their
loops), so the batch is not split across threads. Reaching twice PyTorch's speed here needs
compiled code.
"""

import functools
import math
from collections.abc import Callable

import numpy as np
from scipy.linalg import blas

from .._lib._typing import Namespace

__all__ = ["BLAS_DTYPES", "cholesky_solve", "solve_triangular"]

_SMALL_WORK = 2048  # vectorized substitution while M*M*(right-hand sides) <= this; BLAS above
_CHUNK_BYTES = 1 << 20  # factors per vectorized chunk: about this many bytes of them
_BATCH_LAST_MIN = 4096  # one right-hand side: batch-last substitution from this many factors
# Batch last: factors whose stored triangle is gathered at a time, so that their rows stay in
# the L2 cache while the gather picks each entry out of them (256 of (16, 16) float64: 512 KiB):
# 10000 such factors in 4.4 against 10 ms gathered a whole chunk at a time, on the 2-core VM
_GATHER = 256
_PATH: str | None = None  # tests only: force "blas", "rows" or "batch_last"


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

# ?trsm by dtype (looked up by name: SciPy generates the BLAS wrappers, stubs do not list them)
_TRSM = {
    np.dtype(dtype): getattr(blas, f"{prefix}trsm")
    for prefix, dtype in (
        ("s", np.float32),
        ("d", np.float64),
        ("c", np.complex64),
        ("z", np.complex128),
    )
}
#: The dtypes that the BLAS path takes (SciPy's BLAS has no long double)
BLAS_DTYPES = frozenset(_TRSM)


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


# ---- small M, many factors: substitution with the batch as the last (contiguous) axis --------


@functools.lru_cache(maxsize=64)
def _op_rows(m: int, lower: bool, conj: bool) -> tuple[np.ndarray, tuple[int, ...], bool]:
    """The rows of ``op(T)`` (``T``, or ``T^H`` if `conj`) for an (m, m) ``T`` whose `lower`
    (else upper) triangle is stored, packed one after another (the diagonal last in a row of
    a lower ``op(T)``, first in a row of an upper one): each entry's flat index in ``T``, each
    row's start, and whether ``op(T)`` is lower (a forward substitution)."""
    forward = lower != conj
    entries: list[int] = []
    starts = []
    for i in range(m):
        starts.append(len(entries))
        columns = range(i + 1) if forward else range(i, m)
        entries.extend(j * m + i if conj else i * m + j for j in columns)
    return np.array(entries, dtype=np.intp), tuple(starts), forward


def _batch_last_solve(
    factors: np.ndarray, work: np.ndarray, steps: list[tuple[bool, bool]]
) -> None:
    """Solve in place in `work` (n, M, K), a chunk of factors at a time, with the batch made
    the last axis: each row of ``op(T)`` becomes a (row length, chunk) block, and every step is
    one dot product (``einsum``) whose inner loop runs along the chunk, not along a short row.
    The stored triangle is gathered once a chunk, `_GATHER` factors at a time (nothing else of
    the factors is read), and reordered by rows for a step that reads it transposed."""
    n, m, k = work.shape
    complex_ = np.iscomplexobj(work)
    chunk = max(1, _CHUNK_BYTES // max(1, m * (m + 1) // 2 * factors.itemsize))
    plans = [(*_op_rows(m, lower, conj), conj) for lower, conj in steps]
    first = plans[0][0]
    # every step reads the same stored triangle (the callers' steps share `lower`): a later
    # step's rows are the first step's gathered rows, reordered
    position = {int(e): p for p, e in enumerate(first)}
    orders = [np.array([position[int(e)] for e in plan[0]], dtype=np.intp) for plan in plans]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for s in range(0, n, chunk):
            t = factors[s : s + chunk].reshape(-1, m * m)
            c = t.shape[0]
            packed = np.empty((first.size, c), dtype=t.dtype)  # (entries, c)
            for g in range(0, c, _GATHER):
                packed[:, g : g + _GATHER] = t[g : g + _GATHER].T[first]
            y = np.ascontiguousarray(work[s : s + chunk].transpose(1, 2, 0))  # (M, K, c)
            if k == 1:
                y = y.reshape(m, c)
            for step, ((_, starts, forward, conj), order) in enumerate(
                zip(plans, orders, strict=True)
            ):
                rows = packed if step == 0 else packed[order]
                if conj and complex_:
                    rows = np.conjugate(rows)
                _sweep_rows(rows, starts, forward, y)
            work[s : s + chunk] = y.reshape(m, k, c).transpose(2, 0, 1)


def _sweep_rows(rows: np.ndarray, starts: tuple[int, ...], forward: bool, y: np.ndarray) -> None:
    """Forward (or back) substitution in place in `y` ((M, c) or (M, K, c)), the rows of the
    triangular matrix packed in `rows` as `_op_rows` lays them out.

    As in `_substitute`: `y` is preset to ``-y / d`` so that a dot product over the entries
    solved so far and the diagonal is ``-(y_i - sum_j T_ij x_j)``, and one multiplication by
    ``-1 / d_i`` finishes ``x_i`` (two NumPy calls a row)."""
    m = y.shape[0]
    subscripts = "jn,jn->n" if y.ndim == 2 else "jn,jkn->kn"
    diagonal = [starts[i] + (i if forward else 0) for i in range(m)]
    scale = np.divide(-1, rows[diagonal], dtype=y.dtype)  # (M, c)
    if y.ndim == 3:
        scale = scale[:, None, :]
    np.multiply(y, scale, out=y)
    order = range(m) if forward else range(m - 1, -1, -1)
    # the first row has only its diagonal: x = -(-y / d)
    np.multiply(y[order[0]], -1, out=y[order[0]])
    dot = np.empty_like(y[0])
    for i in order[1:]:
        a = starts[i]
        if forward:
            np.einsum(subscripts, rows[a : a + i + 1], y[: i + 1], out=dot)
        else:
            np.einsum(subscripts, rows[a : a + m - i], y[i:], out=dot)
        np.multiply(dot, scale[i], out=y[i])


def _path(n: int, m: int, k: int, dtype: np.dtype) -> str:
    """The path for n factors of order m with k right-hand sides each (see the docstring).

    SciPy's BLAS has no long double ``?trsm``: long double (float128, complex256) takes a
    vectorized substitution on every path, computed in long double by NumPy."""
    path = _PATH
    if path is None:
        if m * m * k > _SMALL_WORK or n <= 2 * m:
            path = "blas"
        elif 1 < k <= m or n >= _BATCH_LAST_MIN:
            path = "batch_last"
        else:
            path = "rows"
    if path == "blas" and dtype not in _TRSM:
        return "batch_last" if 1 < k <= m or n >= _BATCH_LAST_MIN else "rows"
    return path


def _solve(b: np.ndarray, a: np.ndarray, steps: list[tuple[bool, bool]]) -> np.ndarray:
    work, factors, restore = _fold(b, a)
    n, m, k = work.shape
    if work.size:
        path = _path(n, m, k, work.dtype)
        if path == "blas":
            _blas_solve(factors, work, steps)
        elif path == "batch_last":
            _batch_last_solve(factors, work, steps)
        else:
            _small_solve(factors, work, steps)
    return restore(work)


def cholesky_solve(
    x: np.ndarray, y: np.ndarray, upper: bool, *, xp: Namespace | None = None
) -> np.ndarray:
    """Solve ``A X = x`` with ``A = y y^H`` (``y^H y`` if `upper`); C-contiguous result.

    `xp` is not used: the dispatch passes it to every engine."""
    # U^H then U, or L then L^H: (lower, conjugate transpose) of each triangular solve
    steps = [(False, True), (False, False)] if upper else [(True, False), (True, True)]
    return _solve(x, y, steps)


def solve_triangular(
    b: np.ndarray, a: np.ndarray, lower: bool, conj_trans: bool, *, xp: Namespace | None = None
) -> np.ndarray:
    """Solve ``op(a) X = b`` (``op(a) = a^H`` if `conj_trans`); C-contiguous result.

    `xp` is not used: the dispatch passes it to every engine."""
    return _solve(b, a, [(lower, conj_trans)])
