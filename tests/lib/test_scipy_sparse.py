"""xpops._lib._scipy_sparse: the CSR sum into caller buffers, through SciPy's compiled routine
and through the public fallback, against a brute-force dense reference; the probe that
decides whether the compiled routine is used."""

import numpy as np
import pytest
import scipy.sparse._sparsetools as sparsetools

from xpops._lib import _scipy_sparse
from xpops._lib._scipy_sparse import csr_plus_csr, sparsetools_csr_plus_csr


@pytest.fixture(autouse=True)
def _fresh_probe():
    """Each test starts and ends with the probe's answer forgotten."""
    sparsetools_csr_plus_csr.cache_clear()
    yield
    sparsetools_csr_plus_csr.cache_clear()


@pytest.fixture(params=["compiled", "public"])
def path(request, monkeypatch):
    """Which implementation `csr_plus_csr` runs: SciPy's compiled routine, or the fallback
    through the public ``+`` (forced by a probe that finds no routine)."""
    if request.param == "compiled":
        if sparsetools_csr_plus_csr() is None:
            pytest.skip("this SciPy has no usable compiled csr_plus_csr")
    else:
        monkeypatch.setattr(_scipy_sparse, "sparsetools_csr_plus_csr", lambda: None)
    return request.param


# ---- operands and the reference --------------------------------------------------------------


def canonical_csr(dense_values, stored, index, dtype):
    """(indptr, indices, data) of a canonical CSR storing exactly the positions `stored`
    (explicit zeros included) with the values of `dense_values` there."""
    rows, cols = np.nonzero(stored)  # row-major: canonical
    indptr = np.zeros(stored.shape[0] + 1, dtype=index)
    np.cumsum(np.bincount(rows, minlength=stored.shape[0]), out=indptr[1:])
    return indptr, cols.astype(index), dense_values[rows, cols].astype(dtype)


def reference(a_dense, a_stored, b_dense, b_stored):
    """(indptr, indices, data) of the sum by brute force: stored where either side is stored
    and the dense sum is not zero, in row-major order."""
    total = np.where(a_stored, a_dense, 0) + np.where(b_stored, b_dense, 0)
    keep = (a_stored | b_stored) & (total != 0)
    rows, cols = np.nonzero(keep)
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=keep.shape[0]))])
    return indptr, cols, total[rows, cols]


def random_operand(rng, shape, density, dtype):
    """(dense values, stored mask): small integer values (sums exact), some stored zeros."""
    stored = rng.random(shape) < density
    values = rng.integers(-3, 4, shape).astype(np.float64)
    if np.dtype(dtype).kind == "c":
        values = values + 1j * rng.integers(-3, 4, shape)
    return values, stored


def run(shape, a, b, index, dtype, *, spare=0, b_index=None):
    """csr_plus_csr of operands (dense, stored) `a` and `b` into fresh buffers with `spare`
    extra elements; checks the result against the reference and the operands unchanged."""
    n_row, n_col = shape
    a_csr = canonical_csr(*a, index, dtype)
    b_csr = canonical_csr(*b, b_index or index, dtype)
    copies = [arr.copy() for arr in (*a_csr, *b_csr)]
    size = a_csr[2].size + b_csr[2].size + spare
    out = (
        np.full(n_row + 1 + spare, -7, dtype=index),
        np.full(size, -7, dtype=index),
        np.full(size, -7, dtype=dtype),
    )
    m = csr_plus_csr(n_row, n_col, *a_csr, *b_csr, *out)
    want_indptr, want_indices, want_data = reference(*a, *b)
    assert m == want_data.size
    np.testing.assert_array_equal(out[0][: n_row + 1], want_indptr)
    np.testing.assert_array_equal(out[1][:m], want_indices)
    np.testing.assert_array_equal(out[2][:m], want_data.astype(dtype))
    for before, after in zip(copies, (*a_csr, *b_csr), strict=True):
        np.testing.assert_array_equal(before, after)
    return m


# ---- the sum, on both paths ------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64", "complex128", "int64"])
@pytest.mark.parametrize("index", ["int32", "int64"])
@pytest.mark.parametrize("density", [0.0, 0.1, 0.5, 1.0])
def test_random_operands(path, dtype, index, density):
    rng = np.random.default_rng(int(density * 10))
    shape = (9, 13)
    a = random_operand(rng, shape, density, dtype)
    b = random_operand(rng, shape, density / 2, dtype)
    run(shape, a, b, np.dtype(index), np.dtype(dtype))


def test_zero_sums_are_dropped(path):
    """Positions where the two sides cancel are not stored; stored zeros alone neither."""
    shape = (2, 4)
    a = (np.array([[1.0, 2.0, 0.0, 5.0], [0.0, -3.0, 0.0, 0.0]]), np.ones(shape, bool))
    b = (np.array([[-1.0, 0.0, 0.0, 4.0], [0.0, 3.0, 0.0, 0.0]]), np.ones(shape, bool))
    m = run(shape, a, b, np.dtype(np.int32), np.dtype(np.float64))
    assert m == 2  # (0, 1) and (0, 3)


@pytest.mark.parametrize("case", ["disjoint", "identical", "empty_rows", "a_empty", "b_empty"])
def test_patterns(path, case):
    rng = np.random.default_rng(3)
    shape = (6, 8)
    keys = rng.permutation(48)
    a_stored = np.zeros(shape, bool)
    b_stored = np.zeros(shape, bool)
    if case == "disjoint":
        a_stored.flat[keys[:20]] = True
        b_stored.flat[keys[20:40]] = True
    elif case == "identical":
        a_stored.flat[keys[:20]] = True
        b_stored = a_stored.copy()
    elif case == "empty_rows":
        a_stored[[0, 2, 5]] = rng.random((3, 8)) < 0.5
        b_stored[[2, 3]] = rng.random((2, 8)) < 0.5
    elif case == "a_empty":
        b_stored.flat[keys[:20]] = True
    else:
        a_stored.flat[keys[:20]] = True
    a = (rng.integers(1, 5, shape).astype(np.float64), a_stored)
    b = (rng.integers(1, 5, shape).astype(np.float64), b_stored)
    run(shape, a, b, np.dtype(np.int32), np.dtype(np.float64))


@pytest.mark.parametrize("shape", [(0, 5), (4, 0), (0, 0), (1, 1)])
def test_degenerate_shapes(path, shape):
    rng = np.random.default_rng(4)
    a = random_operand(rng, shape, 0.5, "float64")
    b = random_operand(rng, shape, 0.5, "float64")
    run(shape, a, b, np.dtype(np.int64), np.dtype(np.float64))


def test_larger_buffers(path):
    """Buffers longer than needed: the sum fills their start, the count says how much."""
    rng = np.random.default_rng(5)
    shape = (7, 7)
    a = random_operand(rng, shape, 0.3, "complex128")
    b = random_operand(rng, shape, 0.3, "complex128")
    run(shape, a, b, np.dtype(np.int32), np.dtype(np.complex128), spare=11)


# ---- which path runs -----------------------------------------------------------------------


def _spy(monkeypatch):
    """Count the calls of the compiled routine that `csr_plus_csr` is given."""
    routine = sparsetools_csr_plus_csr()
    if routine is None:
        pytest.skip("this SciPy has no usable compiled csr_plus_csr")
    calls = []

    def spy(*args):
        calls.append(args)
        return routine(*args)

    monkeypatch.setattr(_scipy_sparse, "sparsetools_csr_plus_csr", lambda: spy)
    return calls


def test_compiled_routine_used_when_dtypes_agree(monkeypatch):
    calls = _spy(monkeypatch)
    rng = np.random.default_rng(6)
    shape = (5, 6)
    a, b = random_operand(rng, shape, 0.4, "float64"), random_operand(rng, shape, 0.4, "float64")
    run(shape, a, b, np.dtype(np.int32), np.dtype(np.float64))
    assert len(calls) == 1


def test_public_fallback_for_mixed_index_dtypes(monkeypatch):
    """int32 and int64 index arrays together: the compiled routine would refuse them."""
    calls = _spy(monkeypatch)
    rng = np.random.default_rng(7)
    shape = (5, 6)
    a, b = random_operand(rng, shape, 0.4, "float64"), random_operand(rng, shape, 0.4, "float64")
    run(shape, a, b, np.dtype(np.int64), np.dtype(np.float64), b_index=np.dtype(np.int32))
    assert calls == []


# ---- the probe -------------------------------------------------------------------------------


def test_probe_accepts_this_scipy():
    routine = sparsetools_csr_plus_csr()
    assert routine is None or routine is sparsetools.csr_plus_csr
    assert sparsetools_csr_plus_csr() is routine  # decided once


def test_probe_rejects_a_missing_routine(monkeypatch):
    monkeypatch.delattr(sparsetools, "csr_plus_csr", raising=False)
    assert sparsetools_csr_plus_csr() is None


def test_probe_rejects_a_routine_that_fails(monkeypatch):
    def fails(*args):
        raise TypeError("other arguments")

    monkeypatch.setattr(sparsetools, "csr_plus_csr", fails)
    assert sparsetools_csr_plus_csr() is None


def test_probe_rejects_a_routine_with_other_results(monkeypatch):
    def keeps_zero_sums(n_row, n_col, ap, aj, ax, bp, bj, bx, cp, cj, cx):
        cp[:] = [0, 3]
        cj[:3] = [0, 1, 2]
        cx[:3] = [1.0, 3.0, 0.0]

    monkeypatch.setattr(sparsetools, "csr_plus_csr", keeps_zero_sums)
    assert sparsetools_csr_plus_csr() is None
