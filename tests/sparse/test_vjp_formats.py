"""The backward rule of sparse.divide (`xpops.vjp`) on the formats beyond COO and CSR (SciPy's
CSC, BSR, DOK, LIL, DIA; cupyx's CSC and DIA), on dense divisors, and on pydata arrays,
against the dense formulas and finite differences of `test_vjp`."""

import numpy as np
import pytest
import scipy.sparse as sp

import xpops

from ._support import Entries, canonical, host_entries, index_arrays, random_entries
from .test_formats import make
from .test_vjp import (
    _assert_values,
    _cotangent,
    _covering_divisor,
    _expected,
    _finite_differences,
    _grad_dtype,
    _reference,
    _wide,
)

nan, inf = np.nan, np.inf

SCIPY_FORMATS = ("csc", "bsr", "dok", "lil", "dia")
CUPYX_FORMATS = ("csc", "dia")


def _shown(lib, a):
    """The operand as its gradient's structure is: itself, or the CSR ``tocsr()`` gives."""
    return a if a.format in ("csr", "csc", "coo") else a.tocsr()


def _entries(lib, a) -> Entries:
    data, coords = host_entries(lib, _shown(lib, a))
    return Entries(data, tuple(coords))


def _assert_structure(lib, g, a, dtype):
    """Gradient `g` has the structure of `a` (or of the CSR of a converted format, of a's
    container kind) and dtype `dtype`."""
    s = _shown(lib, a)
    assert g.format == s.format
    if s is a:
        assert type(g) is type(a)
    elif lib.name == "numpy":
        assert isinstance(g, sp.sparray) == isinstance(a, sp.sparray)
    assert g.dtype == np.dtype(dtype)
    for gi, si in zip(index_arrays(g), index_arrays(s), strict=True):
        np.testing.assert_array_equal(lib.host(gi), lib.host(si))
        if lib.name == "numpy":
            assert not np.shares_memory(gi, si)


@pytest.mark.parametrize("dout_kind", ["dense", "coo", "csr"])
@pytest.mark.parametrize("fy", ["csr", *SCIPY_FORMATS])
@pytest.mark.parametrize("fx", SCIPY_FORMATS)
def test_dense_formulas(lib, fx, fy, dout_kind):
    formats = SCIPY_FORMATS if lib.name == "numpy" else CUPYX_FORMATS
    if fx not in formats or (fy != "csr" and fy not in formats):
        pytest.skip("cupyx has no such format")
    rng = np.random.default_rng(sum(map(ord, fx + fy + dout_kind)))
    shape = (6, 8)
    x = random_entries(rng, shape, 25, zeros=0.2).shuffled(rng)
    y = random_entries(rng, shape, 25, zeros=0.2).shuffled(rng)
    xs, ys = make(lib, fx, x, shape), make(lib, fy, y, shape)
    dout = _cotangent(lib, rng, shape, dout_kind, "float64", zeros=0.2)
    _, pullback = xpops.vjp(xpops.sparse.divide, xs, ys)
    dx, dy = pullback(dout)
    xe, ye = _entries(lib, xs), _entries(lib, ys)
    de = _entries(lib, dout) if lib.sparse.issparse(dout) else lib.host(dout)
    ref = _reference(xe, ye, de, shape, np.float64)
    want_x, want_y = _expected(*ref[:4], xe.coords, ye.coords)
    _assert_structure(lib, dx, xs, "float64")
    _assert_structure(lib, dy, ys, "float64")
    _assert_values(lib.host(dx.data), want_x, "float64")
    _assert_values(lib.host(dy.data), want_y, "float64")


def test_csc_finite_differences(scipy_only):
    lib = scipy_only
    rng = np.random.default_rng(3)
    shape = (4, 5)
    x = random_entries(rng, shape, 10, zeros=0.1)
    y = _covering_divisor(rng, x, shape, False)  # every position of x, away from zero
    xs, ys = make(lib, "csc", x, shape), make(lib, "csc", y, shape)
    d = rng.integers(-4, 5, shape) / 4
    _, pullback = xpops.vjp(xpops.sparse.divide, xs, ys)
    dx, dy = pullback(d)
    xe, ye = _entries(lib, xs), _entries(lib, ys)

    def loss(xv, yv):
        _, _, o, dv, mask = _reference(Entries(xv, xe.coords), Entries(yv, ye.coords), d,
                                       shape, np.float64)  # fmt: skip
        return float(np.sum(dv[mask] * o[mask]))

    want_x = _finite_differences(lambda v: loss(v, ye.data), xe.data)
    np.testing.assert_allclose(dx.data, want_x, rtol=1e-6, atol=1e-8)
    want_y = _finite_differences(lambda v: loss(xe.data, v), ye.data)
    np.testing.assert_allclose(dy.data, want_y, rtol=1e-6, atol=1e-8)


# ---- dense divisors -----------------------------------------------------------------------------


@pytest.mark.parametrize("dout_kind", ["dense", "coo"])
@pytest.mark.parametrize("dtype", ["float64", "float32", "complex128"])
@pytest.mark.parametrize("fx", ["csr", "coo", "csc"])
def test_dense_divisor(lib, fx, dtype, dout_kind):
    """dx on x's structure; a dense dy, -dout * conj(out / y) on out's (x's) pattern, 0
    elsewhere."""
    lib.require(dtype)
    rng = np.random.default_rng(sum(map(ord, fx + dtype + dout_kind)))
    shape = (5, 7)
    x = random_entries(rng, shape, 20, zeros=0.2).shuffled(rng)
    yd = rng.integers(-3, 4, shape) / 2.0
    if np.dtype(dtype).kind == "c":
        x = Entries(x.data + 1j * rng.integers(-3, 4, x.data.size), x.coords)
        yd = yd + 1j * rng.integers(-3, 4, shape)
    xs = make(lib, fx, x, shape, dtype=dtype)
    ys = lib.asarray(yd.astype(dtype))
    dout = _cotangent(lib, rng, shape, dout_kind, dtype, zeros=0.1)
    _, pullback = xpops.vjp(xpops.sparse.divide, xs, ys)
    dx, dy = pullback(dout)
    wide = _wide(dtype)
    xe = _entries(lib, xs)
    de = _entries(lib, dout) if lib.sparse.issparse(dout) else lib.host(dout)
    x_vals, mask = _reference(xe, 1.0, de, shape, wide)[0], _reference(xe, 1.0, de, shape, wide)[4]
    d_vals = _reference(xe, 1.0, de, shape, wide)[3]
    y_vals = yd.astype(dtype).astype(wide)
    with np.errstate(all="ignore"):
        o = np.where(mask, x_vals / y_vals, 0)
        want_x = d_vals[xe.coords] / np.conj(y_vals[xe.coords])
        want_y = np.where(mask, -d_vals * np.conj(o / y_vals), 0)
    _assert_structure(lib, dx, xs, dtype)
    assert type(dy) is type(ys)
    assert dy.shape == shape
    assert dy.dtype == np.dtype(dtype)
    _assert_values(lib.host(dx.data), want_x, dtype)
    _assert_values(lib.host(dy), want_y, dtype)


def test_dense_integer_divisor_gets_a_floating_gradient(scipy_only):
    xs = sp.csr_array(np.array([[1.0, 0.0], [0.0, 4.0]]))
    ys = np.array([[2, 3], [5, 8]])
    _, pullback = xpops.vjp(xpops.sparse.divide, xs, ys)
    dx, dy = pullback(np.ones((2, 2)))
    assert dy.dtype == np.float64
    np.testing.assert_array_equal(dy, [[-0.25, 0.0], [0.0, -1 / 16]])
    np.testing.assert_array_equal(dx.data, [0.5, 0.125])


# ---- pydata ---------------------------------------------------------------------------------


def _pydata_structure(g, a):
    assert type(g) is type(a)
    assert g.shape == a.shape
    assert g.fill_value == 0
    if a.format == "coo":
        np.testing.assert_array_equal(g.coords, a.coords)
        assert not np.shares_memory(g.coords, a.coords)
    else:
        assert tuple(g.compressed_axes) == tuple(a.compressed_axes)
        np.testing.assert_array_equal(g.indices, a.indices)
        np.testing.assert_array_equal(g.indptr, a.indptr)


@pytest.mark.parametrize("dout_kind", ["dense", "coo", "gcxs"])
@pytest.mark.parametrize("divisor", ["sparse", "scalar", "dense"])
@pytest.mark.parametrize(("fx", "fy"), [("coo", "coo"), ("gcxs", "coo"), ("coo", "gcxs"),
                                        ("gcxs", "gcxs")])  # fmt: skip
def test_pydata(fx, fy, divisor, dout_kind):
    sparse = pytest.importorskip("sparse")
    rng = np.random.default_rng(sum(map(ord, fx + fy + divisor + dout_kind)))
    shape = (3, 4, 5)
    x = canonical(random_entries(rng, shape, 20, zeros=0.2), shape)
    y = canonical(random_entries(rng, shape, 20, zeros=0.2), shape)

    def build(e, fmt, axes=None):
        coo = sparse.COO(np.array(e.coords), e.data, shape=shape)
        return coo if fmt == "coo" else sparse.GCXS.from_coo(coo, compressed_axes=axes)

    xs = build(x, fx, (1,))
    yd = rng.integers(1, 5, shape) / 2.0
    ys = {"sparse": build(y, fy, (2,)), "scalar": 2.0, "dense": yd}[divisor]
    d = rng.integers(-4, 5, shape) / 4.0
    dout = {"dense": d, "coo": sparse.COO.from_numpy(d),
            "gcxs": sparse.GCXS.from_numpy(d, compressed_axes=(0, 2))}[dout_kind]  # fmt: skip
    _, pullback = xpops.vjp(xpops.sparse.divide, xs, ys)
    dx, dy = pullback(dout)
    _pydata_structure(dx, xs)
    xc = xs.asformat("coo")
    xe = Entries(xc.data, tuple(xc.coords))
    y_arg = {"sparse": None, "scalar": 2.0, "dense": None}[divisor]
    if divisor == "sparse":
        yc = ys.asformat("coo")
        ye = Entries(yc.data, tuple(yc.coords))
        x_vals, y_vals, o, d_vals, _ = _reference(xe, ye, d, shape, np.float64)
        want_x, want_y = _expected(x_vals, y_vals, o, d_vals, xe.coords, ye.coords)
        _pydata_structure(dy, ys)
        _assert_values(dy.asformat("coo").data, want_y, "float64")
    else:
        y_vals = yd if divisor == "dense" else np.full(shape, y_arg)
        _, _, _, d_vals, mask = _reference(xe, 1.0, d, shape, np.float64)
        x_vals = _reference(xe, 1.0, d, shape, np.float64)[0]
        with np.errstate(all="ignore"):
            o = np.where(mask, x_vals / y_vals, 0)
            want_x = d_vals[xe.coords] / y_vals[xe.coords]
            terms = np.where(mask, -d_vals * o / y_vals, 0)
        if divisor == "dense":
            _assert_values(dy, terms, "float64")
        else:
            assert dy.shape == ()
            np.testing.assert_allclose(dy, terms.sum(), rtol=1e-14)
    _assert_values(dx.asformat("coo").data, want_x, "float64")


def test_pydata_cotangent_of_another_library_refused():
    sparse = pytest.importorskip("sparse")
    xs = sparse.COO.from_numpy(np.array([[1.0, 0.0], [0.0, 2.0]]))
    _, pullback = xpops.vjp(xpops.sparse.divide, xs, xs)
    with pytest.raises(TypeError, match=r"cotangent of sparse\.divide must be a pydata sparse"):
        pullback(sp.csr_array(np.ones((2, 2))))
    dx, _ = pullback(sparse.DOK.from_numpy(np.ones((2, 2))))  # another pydata format: taken
    np.testing.assert_array_equal(dx.data, [1.0, 0.5])
    assert _grad_dtype("float64", "float64") == np.float64
