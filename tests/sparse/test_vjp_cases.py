"""The backward rule of sparse.divide, continued (`test_vjp` holds the dense formulas, finite
differences and scalar divisors): zero-size and empty operands, 1-D CSR and N-D COO, container
classes and index dtypes, inputs left alone, the cotangent's errors, and the sums of repeated
positions, against the same independent references."""

import functools
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

import xpops
from xpops.sparse._vjp import RULE

from ._support import (
    FORMATS,
    Entries,
    build,
    index_arrays,
    random_entries,
)
from .test_vjp import _check, _cotangent, _entries

nan, inf = np.nan, np.inf


# ---- shapes: zero-size, empty patterns, 1-D CSR and N-D COO (SciPy) ------------------------------


@pytest.mark.parametrize("fmt_y", FORMATS)
@pytest.mark.parametrize("fmt_x", FORMATS)
@pytest.mark.parametrize(
    ("shape", "nx", "ny"),
    [
        ((0, 3), 0, 0),
        ((3, 0), 0, 0),
        ((0, 0), 0, 0),
        ((4, 5), 0, 6),
        ((4, 5), 6, 0),
        ((4, 5), 0, 0),
    ],
)
def test_zero_size_and_empty(lib, shape, nx, ny, fmt_x, fmt_y):
    rng = np.random.default_rng(8)
    xs = build(lib, fmt_x, random_entries(rng, shape, nx), shape)
    ys = build(lib, fmt_y, random_entries(rng, shape, ny), shape)
    for kind in ("dense", "coo"):
        if kind == "coo" and 0 in shape:
            dout = build(lib, "coo", Entries.empty(), shape)
        else:
            dout = _cotangent(lib, rng, shape, kind, "float64")
        dx, dy = _check(lib, xs, ys, dout)
        assert dx.data.shape == (nx,)
        assert dy.data.shape == (ny,)


def _has_1d_csr() -> bool:
    try:
        return sp.csr_array(np.ones(3)).shape == (3,)
    except (ValueError, TypeError):
        return False


def _has_nd_coo() -> bool:
    try:
        sp.coo_array((np.ones(1), (np.zeros(1, int),) * 3), shape=(2, 2, 2))
    except Exception:
        return False
    return True


@pytest.mark.skipif(not _has_1d_csr(), reason="this SciPy has no 1-D csr_array")
@pytest.mark.parametrize("fmt_y", FORMATS)
@pytest.mark.parametrize("fmt_x", FORMATS)
@pytest.mark.parametrize("dout_kind", ["dense", "coo", "csr"])
def test_1d(scipy_only, fmt_x, fmt_y, dout_kind):
    lib = scipy_only
    rng = np.random.default_rng(9)
    shape = (17,)
    x = random_entries(rng, shape, 9, zeros=0.2).shuffled(rng)
    y = random_entries(rng, shape, 9, zeros=0.2).shuffled(rng)
    xs = build(lib, fmt_x, x, shape, kind="array")
    ys = build(lib, fmt_y, y, shape, kind="array")
    dout = _cotangent(lib, rng, shape, dout_kind, "float64")
    _check(lib, xs, ys, dout)


@pytest.mark.skipif(not _has_nd_coo(), reason="this SciPy has no N-D COO")
@pytest.mark.parametrize("shape", [(3, 4, 5), (2, 1, 3, 4), (2, 0, 3)])
@pytest.mark.parametrize("dout_kind", ["dense", "coo"])
def test_nd_coo(scipy_only, shape, dout_kind):
    lib = scipy_only
    rng = np.random.default_rng(len(shape))
    x = random_entries(rng, shape, 25, zeros=0.2).shuffled(rng)
    y = random_entries(rng, shape, 20, zeros=0.2).shuffled(rng)
    xs = build(lib, "coo", x, shape, kind="array")
    ys = build(lib, "coo", y, shape, kind="array")
    if dout_kind == "coo" and 0 in shape:
        dout = build(lib, "coo", Entries.empty(len(shape)), shape, kind="array")
    else:
        dout = _cotangent(lib, rng, shape, dout_kind, "float64")
    _check(lib, xs, ys, dout)


# ---- containers, index dtypes, the inputs --------------------------------------------------------


@pytest.mark.parametrize("ky", ["array", "matrix"])
@pytest.mark.parametrize("kx", ["array", "matrix"])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize(("fmt_x", "fmt_y"), [("csr", "coo"), ("coo", "csr")])
def test_containers_and_index_dtypes(lib, kx, ky, index_dtype, fmt_x, fmt_y):
    """Each gradient keeps its operand's class (csr_matrix stays csr_matrix, coo_array stays
    coo_array), index arrays and index dtype, whatever the other operand is."""
    if kx not in lib.kinds or ky not in lib.kinds:
        pytest.skip(f"{lib.name} has no *_{'array' if 'array' not in lib.kinds else kx}")
    if lib.name == "cupy" and index_dtype is np.int64:
        pytest.skip("cupyx indexes with int32")
    rng = np.random.default_rng(10)
    shape = (6, 7)
    x = random_entries(rng, shape, 20, zeros=0.1).shuffled(rng)
    y = random_entries(rng, shape, 20, zeros=0.1).shuffled(rng)
    xs = build(lib, fmt_x, x, shape, kind=kx, index_dtype=index_dtype)
    ys = build(lib, fmt_y, y, shape, kind=ky, index_dtype=index_dtype)
    dout = _cotangent(lib, rng, shape, "coo", "float64")
    dx, dy = _check(lib, xs, ys, dout)
    assert all(a.dtype == index_dtype for a in (*index_arrays(dx), *index_arrays(dy)))


def test_canonical_coo_flag_kept(lib):
    shape = (3, 3)
    e = Entries(np.array([1.0, 2.0, 3.0]), (np.array([0, 1, 2]), np.array([1, 0, 2])))
    xs = build(lib, "coo", e, shape)
    xs.sum_duplicates()  # canonical
    twice = Entries(np.array([2.0, 2.0]), (np.array([1, 1]), np.array([0, 0])))
    ys = build(lib, "coo", twice, shape)
    _, pullback = xpops.vjp(xpops.sparse.divide, xs, ys)
    dx, dy = pullback(lib.asarray(np.ones(shape)))
    assert dx.has_canonical_format
    assert not dy.has_canonical_format
    # each duplicate of y at (1, 0) (2 + 2): -dout * out / y = -1 * (2 / 4) / 4
    np.testing.assert_array_equal(lib.host(dy.data), [-0.125, -0.125])


@pytest.mark.parametrize("divisor", ["sparse", "scalar"])
@pytest.mark.parametrize("dout_kind", ["dense", "coo", "csr"])
@pytest.mark.parametrize(("fmt_x", "fmt_y"), [("coo", "csr"), ("csr", "coo")])
def test_inputs_unmodified(lib, fmt_x, fmt_y, dout_kind, divisor):
    rng = np.random.default_rng(12)
    shape = (5, 5)
    x = random_entries(rng, shape, 14, zeros=0.2).shuffled(rng)
    y = random_entries(rng, shape, 14, zeros=0.2).shuffled(rng)
    xs = build(lib, fmt_x, x, shape)
    ys: Any = build(lib, fmt_y, y, shape) if divisor == "sparse" else 2.0
    dout = _cotangent(lib, rng, shape, dout_kind, "float64")
    operands: list[Any] = [a for a in (xs, ys, dout) if lib.sparse.issparse(a)]
    before = [[lib.host(v).copy() for v in (a.data, *index_arrays(a))] for a in operands]
    dense_before = None if lib.sparse.issparse(dout) else lib.host(dout).copy()
    _, pullback = xpops.vjp(xpops.sparse.divide, xs, ys)
    dx, dy = pullback(dout)
    for a, saved in zip(operands, before, strict=True):
        for v, s in zip((a.data, *index_arrays(a)), saved, strict=True):
            np.testing.assert_array_equal(lib.host(v), s)
    if dense_before is not None:
        np.testing.assert_array_equal(lib.host(dout), dense_before)
    if lib.name == "numpy":
        for g in (dx, dy) if divisor == "sparse" else (dx,):
            for a in operands:
                for gv in (g.data, *index_arrays(g)):
                    for av in (a.data, *index_arrays(a)):
                        assert not np.shares_memory(gv, av)


# ---- the cotangent's errors ----------------------------------------------------------------------


def _operands(lib, kind=None):
    e = Entries(np.array([1.0, 2.0]), (np.array([0, 2]), np.array([1, 3])))
    return build(lib, "csr", e, (3, 4), kind=kind), build(lib, "coo", e, (3, 4), kind=kind)


def _pullback(lib):
    return xpops.vjp(xpops.sparse.divide, *_operands(lib))


def test_cotangent_of_another_kind(lib):
    """Anything but a sparse operand of x's library or a dense array of its array module:
    TypeError naming the cotangent, from the rule itself for objects with a shape."""
    import array_api_strict

    shape = (3, 4)
    _, pullback = _pullback(lib)
    others = [array_api_strict.asarray(np.ones(shape))]
    if lib.name == "cupy":  # host data for operands on the GPU
        others += [np.ones(shape), sp.csr_matrix(np.ones(shape))]
    for bad in others:
        with pytest.raises(TypeError, match=r"cotangent of sparse\.divide must be"):
            pullback(bad)
    with pytest.raises(TypeError, match="cotangent"):
        pullback([[1.0] * 4] * 3)  # no shape: refused by xpops.vjp
    _, residuals = RULE.forward(*_operands(lib))
    with pytest.raises(TypeError, match=r"cotangent of sparse\.divide must be"):
        RULE.backward(residuals, [[1.0] * 4] * 3)


@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
def test_numpy_matrix_cotangent(scipy_only):
    """A NumPy matrix cotangent (what SciPy's ``*_matrix.todense()`` gives) reads as an array."""
    _, pullback = xpops.vjp(xpops.sparse.divide, *_operands(scipy_only, "matrix"))
    d = np.arange(12.0).reshape(3, 4) - 5
    got = pullback(np.asmatrix(d))
    want = pullback(d)
    for g, w in zip(got, want, strict=True):
        assert isinstance(g, sp.spmatrix)
        np.testing.assert_array_equal(_entries(scipy_only, g).data, _entries(scipy_only, w).data)


def test_other_sparse_formats_taken(lib):
    """A cotangent in another sparse format of the same library (CSC here) is read as its
    dense meaning."""
    _, pullback = _pullback(lib)
    d = np.arange(12.0).reshape(3, 4) - 5
    got = pullback(lib.sparse.csc_matrix(lib.asarray(d)))
    want = pullback(lib.asarray(d))
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(lib.host(g.data), lib.host(w.data))


@pytest.mark.parametrize("dtype", ["int64", "bool", "complex128"])
@pytest.mark.parametrize("kind", ["dense", "sparse"])
def test_cotangent_dtype(lib, kind, dtype):
    """Integer and bool cotangents, and complex ones for a real output: TypeError."""
    if lib.name == "cupy" and kind == "sparse" and dtype == "int64":
        pytest.skip("cupyx has no int64 sparse matrices")
    _, pullback = _pullback(lib)
    d = np.ones((3, 4), dtype=dtype)
    bad = lib.asarray(d) if kind == "dense" else lib.sparse.coo_matrix(lib.asarray(d))
    with pytest.raises(TypeError, match=r"cotangent.*dtype"):
        pullback(bad)


def test_cotangent_shape(lib):
    _, pullback = _pullback(lib)
    with pytest.raises(ValueError, match="shape"):
        pullback(lib.asarray(np.ones((4, 3))))


def test_dask_operands_refused(scipy_only):
    da = pytest.importorskip("dask.array")
    x = da.from_array(sp.csr_array(np.eye(4)), chunks=2, asarray=False)
    with pytest.raises(NotImplementedError, match="Dask"):
        xpops.vjp(xpops.sparse.divide, x, 2.0)


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64", "complex128"])
def test_summed_repeated_positions(lib, dtype):
    """The sums at repeated positions as the GPU takes them (atomic adds; run on the host
    too): IEEE sums in order, -0.0 only where every term is -0.0, float32 subnormals kept on
    the host, +0 where a position has no terms, the last slot (the dropped values) left
    out."""
    from xpops.sparse._vjp import _device_summed

    tiny = float(np.finfo(np.float32).smallest_subnormal)
    # positions: 0 all -0.0; 1 -0.0 and +0.0; 2 subnormals; 3 NaN and -0.0; 4 nothing;
    # 5 a lone -0.0; 6 = n, dropped
    at = np.array([0, 0, 1, 1, 2, 2, 3, 3, 5, 6, 6])
    vals = np.array([-0.0, -0.0, -0.0, 0.0, 3 * tiny, tiny, nan, -0.0, -0.0, 1.0, -0.0])
    dtype = np.dtype(dtype)
    if dtype.kind == "c":
        vals = np.stack([vals, vals[::-1]], axis=-1).view(np.complex128)[:, 0]  # no NaN spread
    n = 6
    xp = lib.xp
    got = lib.host(_device_summed(xp, n, xp.asarray(at), xp.asarray(vals.astype(dtype)), dtype))
    # the reference: each real part summed left to right in float64, one rounding
    parts = vals.astype(np.complex128).view(np.float64).reshape(vals.size, 2)
    want = np.zeros((n, 2))
    for p in range(n):
        for k in range(2):
            terms = parts[at == p, k]
            if terms.size:
                want[p, k] = functools.reduce(lambda a, b: a + b, terms)
    want = (want.view(np.complex128)[:, 0] if dtype.kind == "c" else want[:, 0]).astype(dtype)
    if lib.name == "cupy" and want.real.dtype == np.float32:
        want.real[2] = 0  # CuPy's kernels flush float32 subnormals to zero (documented)
    assert got.dtype == dtype
    assert got.shape == (n,)
    np.testing.assert_array_equal(got, want)
    real = got.real.dtype
    np.testing.assert_array_equal(np.signbit(got.view(real)), np.signbit(want.view(real)))
