"""sparse.divide on 1-D CSR arrays and by Python ints beyond int64 (which NumPy holds only as
object arrays), each against the brute-force reference of `_support` or NumPy's own division
of the stored values."""

import fractions
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

import xpops

from ._support import (
    FORMATS,
    Entries,
    assert_result,
    assert_values,
    build,
    canonical,
    host_entries,
    random_entries,
    reference,
    run_and_check,
)

nan, inf = np.nan, np.inf


def _has_1d_csr() -> bool:
    try:
        return sp.csr_array(np.ones(3)).shape == (3,)
    except (ValueError, TypeError):
        return False


needs_1d_csr = pytest.mark.skipif(not _has_1d_csr(), reason="this SciPy has no 1-D csr_array")


# ---- 1-D CSR arrays (SciPy >= 1.14) -----------------------------------------------------------


@needs_1d_csr
@pytest.mark.parametrize("fmt_y", FORMATS)
@pytest.mark.parametrize("fmt_x", FORMATS)
@pytest.mark.parametrize(
    "dtypes", [("float64", "float64"), ("float32", "int32"), ("int64", "complex64")]
)
@pytest.mark.parametrize("seed", range(3))
def test_1d_union(scipy_only, fmt_x, fmt_y, dtypes, seed):
    """A 1-D CSR (or COO) operand: the union of the patterns, as a 1-D array of x's format."""
    rng = np.random.default_rng(seed)
    shape = (23,)
    x = random_entries(rng, shape, 12, zeros=0.2)  # duplicates and unsorted: not canonical
    y = random_entries(rng, shape, 12, zeros=0.2)
    out, _, _ = run_and_check(
        scipy_only, fmt_x, x, dtypes[0], fmt_y, y, dtypes[1], shape, kx="array", ky="array"
    )
    assert out.ndim == 1
    assert isinstance(out, sp.csr_array if fmt_x == "csr" else sp.coo_array)


@needs_1d_csr
def test_1d_signed_zeros_and_special_values(scipy_only):
    x = Entries(np.array([1.0, -1.0, 0.0, -0.0, inf, nan, 2.0]), (np.array([0, 1, 2, 3, 4, 5, 6]),))
    y = Entries(np.array([0.0, -0.0, 0.0, 5.0, 2.0, 1.0, 4.0]), (np.array([0, 1, 2, 3, 4, 5, 8]),))
    shape = (10,)
    xs = build(scipy_only, "csr", x, shape, kind="array")
    ys = build(scipy_only, "csr", y, shape, kind="array")
    out = xpops.sparse.divide(xs, ys)
    mask, want = reference(x, "float64", y, "float64", shape)
    assert_result(scipy_only, out, xs, mask, want, "float64")
    data, coords = host_entries(scipy_only, out)
    (cols,) = tuple(coords)
    np.testing.assert_array_equal(cols, [0, 1, 2, 3, 4, 5, 6, 8])
    np.testing.assert_array_equal(data, [inf, inf, nan, -0.0, inf, nan, inf, 0.0])


@needs_1d_csr
@pytest.mark.parametrize("y", [2, -0.5, 0.0, np.float32(4), 1j, 10**30])
def test_1d_scalar(scipy_only, y):
    rng = np.random.default_rng(7)
    shape = (17,)
    x = random_entries(rng, shape, 9, zeros=0.3)
    xs: Any = build(scipy_only, "csr", x, shape, kind="array")
    before = (xs.data.copy(), xs.indices.copy(), xs.indptr.copy())
    out: Any = xpops.sparse.divide(xs, y)
    assert isinstance(out, sp.csr_array)
    assert out.shape == shape
    assert out.has_canonical_format
    c = canonical(x, shape)
    with np.errstate(all="ignore"):
        want = c.data / y  # NumPy's semantics on the stored values
    assert out.dtype == want.dtype
    np.testing.assert_array_equal(out.indices, c.coords[0])
    np.testing.assert_array_equal(out.indptr, [0, c.data.size])
    assert_values(out.data, want, want.dtype)
    for a, b in zip((xs.data, xs.indices, xs.indptr), before, strict=True):
        np.testing.assert_array_equal(a, b)  # the input is left alone
    for a in (out.data, out.indices, out.indptr):  # and shares nothing with the result
        assert not any(np.may_share_memory(a, b) for b in (xs.data, xs.indices, xs.indptr))


@needs_1d_csr
def test_1d_canonical_input_shares_nothing(scipy_only):
    xs: Any = sp.csr_array(np.array([1.0, 0.0, 2.0]))
    assert xs.has_canonical_format
    for y in (xs, 2.0):
        out: Any = xpops.sparse.divide(xs, y)
        for a in (out.data, out.indices, out.indptr):
            assert not any(np.may_share_memory(a, b) for b in (xs.data, xs.indices, xs.indptr))


@needs_1d_csr
def test_1d_empty_and_zero_length(scipy_only):
    for n in (0, 4):
        e = sp.csr_array((np.zeros(0), np.zeros(0, np.int32), np.zeros(2, np.int32)), shape=(n,))
        out = xpops.sparse.divide(e, e)
        assert isinstance(out, sp.csr_array)
        assert out.shape == (n,)
        assert out.nnz == 0
        np.testing.assert_array_equal(out.indptr, [0, 0])


@needs_1d_csr
def test_1d_shape_mismatch(scipy_only):
    x = sp.csr_array(np.array([1.0, 0.0, 2.0]))
    with pytest.raises(
        ValueError, match=r"`x` and `y` must have the same shape, got \(3,\) and \(1, 3\)"
    ):
        xpops.sparse.divide(x, sp.csr_array(np.array([[1.0, 0.0, 2.0]])))
    with pytest.raises(ValueError, match=r"same shape, got \(3,\) and \(4,\)"):
        xpops.sparse.divide(x, sp.csr_array(np.array([1.0, 0.0, 2.0, 3.0])))


# ---- Python ints that NumPy holds only as object arrays ---------------------------------------

BIG_INTS = [10**30, 2**64, -(2**64), 2**64 + 1, 2**63, 3**200, 10**39]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", ["int32", "float32", "float64", "complex64", "complex128"])
@pytest.mark.parametrize("y", BIG_INTS)
def test_big_int_divisor(lib, y, dtype, fmt):
    """Dtype and values of NumPy's ``x.data / y`` (float32 / 10**39 divides by inf: zeros)."""
    lib.require(dtype)
    rng = np.random.default_rng(5)
    shape = (6, 9)
    x = random_entries(rng, shape, 25, zeros=0.2, integer=True)
    xs = build(lib, fmt, x, shape, dtype=dtype)
    out = xpops.sparse.divide(xs, y)
    c = canonical(Entries(x.data.astype(dtype), x.coords), shape)
    with np.errstate(all="ignore"):
        want = c.data / y  # NumPy's semantics
    assert out.dtype == want.dtype
    assert out.has_canonical_format
    data, coords = host_entries(lib, out)
    for got_c, want_c in zip(coords, c.coords, strict=True):
        np.testing.assert_array_equal(got_c, want_c)
    assert_values(data, want, want.dtype)
    # independently: float64 division by the int rounded to the result's precision
    with np.errstate(all="ignore"):
        y_rounded = complex(want.dtype.type(y))
        ref = c.data.astype(np.complex128) / y_rounded
    finite = np.isfinite(ref)
    tol = 1e-6 if want.dtype in (np.float32, np.complex64) else 1e-15
    np.testing.assert_allclose(data[finite], ref[finite], rtol=tol, atol=1e-300)


def test_big_int_dtype_rules(scipy_only):
    x32 = sp.csr_array(np.array([[1.0, 0.0, 2.0]], dtype=np.float32))
    xi = sp.csr_array(np.array([[1, 0, 2]], dtype=np.int8))
    assert xpops.sparse.divide(x32, 10**30).dtype == np.float32  # weak, as in NumPy
    assert xpops.sparse.divide(xi, 2**64).dtype == np.float64
    np.testing.assert_array_equal(xpops.sparse.divide(xi, 2**64).data, [2.0**-64, 2.0**-63])


@pytest.mark.parametrize("y", [10**400, -(10**400)])
def test_int_too_large_for_a_float(lib, y):
    xs = build(lib, "csr", Entries.from_dense(np.array([[1.0, 0.0]])), (1, 2))
    with pytest.raises(
        OverflowError, match=r"`y` must be a Python int that converts to a float .*401 digits"
    ):
        xpops.sparse.divide(xs, y)


def test_other_python_numbers_stay_refused(scipy_only):
    xs = sp.csr_array(np.array([[1.0, 0.0]]))
    with pytest.raises(TypeError, match=r"`y` must have a numeric dtype, got object"):
        xpops.sparse.divide(xs, fractions.Fraction(1, 3))
