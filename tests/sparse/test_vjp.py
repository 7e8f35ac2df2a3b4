"""The backward rule of sparse.divide (`xpops.vjp`), SciPy and cupyx (skipped without a GPU).

References are independent of the rule: the dense formulas in float64/complex128 NumPy
restricted to the stored patterns (``dx = dout / conj(Y)`` at x's entries, ``dy = -dout *
conj(out / Y)`` at y's), and central finite differences of the real loss
``re(sum(conj(dout) * out))`` over out's stored positions with respect to each stored value
(real and imaginary parts), computed densely from the operands' own stored entries.
"""

from typing import Any

import numpy as np
import pytest

import xpops

from ._support import (
    FORMATS,
    Entries,
    build,
    dense,
    host_entries,
    index_arrays,
    random_entries,
)
from ._support import (
    canonical as canonical_entries,
)

nan, inf = np.nan, np.inf
RTOL = {"float32": 1e-6, "float64": 1e-14, "complex64": 1e-5, "complex128": 1e-13}


# ---- helpers -------------------------------------------------------------------------------------


def _entries(lib, a) -> Entries:
    """The stored entries of operand `a` on the host, in stored order."""
    data, coords = host_entries(lib, a)
    return Entries(data, tuple(coords))


def _wide(*dtypes):
    return np.complex128 if any(np.dtype(d).kind == "c" for d in dtypes) else np.float64


def _dense_of(e, shape, wide):
    """(values, mask) of Entries `e`, summed in `wide`, +0 where nothing is stored."""
    return dense(e, e.data.dtype, shape, wide)


def _reference(xe, y, d, shape, wide):
    """Dense (X, Y, O, D, mask): the operands (summed), the quotient on the union of the
    patterns, the cotangent (Entries or a dense array) and the union. `y` is Entries or a
    host scalar."""
    x_vals, mask = _dense_of(xe, shape, wide)
    if isinstance(y, Entries):
        y_vals, ym = _dense_of(y, shape, wide)
        mask = mask | ym
    else:
        y_vals = np.full(shape, np.asarray(y).astype(wide))
    if isinstance(d, Entries):
        d_vals, _ = _dense_of(d, shape, wide)
    else:
        d_vals = np.asarray(d).astype(wide)
    with np.errstate(all="ignore"):
        o = np.where(mask, x_vals / y_vals, 0)
    return x_vals, y_vals, o, d_vals, mask


def _expected(x_vals, y_vals, o, d_vals, coords_x, coords_y):
    """The dense formulas at the given stored positions of x and of y."""
    with np.errstate(all="ignore"):
        dx = d_vals[coords_x] / np.conj(y_vals[coords_x])
        dy = -d_vals[coords_y] * np.conj(o[coords_y] / y_vals[coords_y])
    return dx, dy


def _assert_values(got, want, dtype, *, complex_quotient=False):
    """Close, NaN where NaN, infinities and signed zeros exactly (real dtypes); for complex
    dtypes, and the real parts of a complex quotient's gradients, close (within the rounding
    of the largest value) where the reference is finite and non-finite where it is not:
    complex division has no single IEEE answer, for division by zero nor for the last bits
    (NumPy's and the GPU's algorithms differ)."""
    dtype = np.dtype(dtype)
    rtol = RTOL.get(dtype.name, 1e-14)  # longdouble: as float64 at least
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape
    if dtype.kind == "c" or complex_quotient:
        finite = np.isfinite(want)
        scale = np.abs(want[finite]).max(initial=0.0)
        np.testing.assert_allclose(got[finite], want[finite], rtol=rtol, atol=rtol * scale)
        assert not np.isfinite(got[~finite]).any(), (got[~finite], want[~finite])
        return
    np.testing.assert_allclose(got, want, rtol=rtol, atol=0, equal_nan=True)
    zero = want == 0
    np.testing.assert_array_equal(np.signbit(got[zero]), np.signbit(want[zero]), "signs of zeros")


def _assert_structure(lib, g, a, dtype):
    """Gradient `g` has `a`'s class, format, shape, the given dtype and exactly `a`'s index
    arrays (same values and dtypes, not the same memory)."""
    assert type(g) is type(a)
    assert g.format == a.format
    assert tuple(g.shape) == tuple(a.shape)
    assert g.dtype == np.dtype(dtype)
    assert g.data.shape == a.data.shape
    assert g.data.flags.c_contiguous
    for gi, ai in zip(index_arrays(g), index_arrays(a), strict=True):
        assert gi.dtype == ai.dtype
        np.testing.assert_array_equal(lib.host(gi), lib.host(ai))
        if lib.name == "numpy":
            assert not np.shares_memory(gi, ai)
    if a.format == "coo":
        assert g.has_canonical_format == a.has_canonical_format


def _check(lib, xs, ys, dout, *, wide=None):
    """Pull `dout` back through divide(xs, ys) and compare with the dense formulas."""
    out, pullback = xpops.vjp(xpops.sparse.divide, xs, ys)
    dx, dy = pullback(dout)
    xe = _entries(lib, xs)
    ye = _entries(lib, ys)
    de = _entries(lib, dout) if lib.sparse.issparse(dout) else lib.host(dout)
    wide = wide or _wide(xs.dtype, ys.dtype)
    ref = _reference(xe, ye, de, tuple(out.shape), wide)
    want_x, want_y = _expected(*ref[:4], xe.coords, ye.coords)
    gx, gy = _grad_dtype(xs.dtype, out.dtype), _grad_dtype(ys.dtype, out.dtype)
    _assert_structure(lib, dx, xs, gx)
    _assert_structure(lib, dy, ys, gy)
    if gx.kind != "c":
        want_x = want_x.real
    if gy.kind != "c":
        want_y = want_y.real
    complex_quotient = np.dtype(out.dtype).kind == "c"
    _assert_values(lib.host(dx.data), want_x, gx, complex_quotient=complex_quotient)
    _assert_values(lib.host(dy.data), want_y, gy, complex_quotient=complex_quotient)
    return dx, dy


def _grad_dtype(primal, out):
    """The documented dtype of a cotangent: the primal's if inexact, else the quotient's real
    dtype."""
    primal, out = np.dtype(primal), np.dtype(out)
    if primal.kind in "fc":
        return primal
    return np.dtype(np.real(np.zeros(1, out)).dtype)


def _cotangent(lib, rng, shape, kind, dtype, *, zeros=0.0):
    """A cotangent of `shape`: dense, or sparse (COO with duplicates and positions anywhere,
    or canonical CSR)."""
    if kind == "dense":
        d = rng.integers(-8, 9, shape) / 4
        if np.dtype(dtype).kind == "c":
            d = d + 1j * rng.integers(-8, 9, shape) / 4
        d[rng.random(shape) < zeros] = -0.0
        return lib.asarray(d.astype(dtype))
    n = max(1, int(np.prod(shape)) // 2)
    e = random_entries(rng, shape, n, zeros=zeros)
    if np.dtype(dtype).kind == "c":
        e = Entries(e.data + 1j * rng.integers(-8, 9, e.data.size) / 4, e.coords)
    if kind == "coo":
        return build(lib, "coo", e.shuffled(rng), shape, dtype=dtype)
    a = build(lib, "csr", canonical_entries(e, shape), shape, dtype=dtype)
    a.has_canonical_format = True
    return a


def _complexify(e, rng):
    return Entries(e.data + 1j * rng.integers(-8, 9, e.data.size) / 4, e.coords)


# ---- against the dense formulas ------------------------------------------------------------------


@pytest.mark.parametrize("canonical", [False, True], ids=["raw", "canonical"])
@pytest.mark.parametrize("dout_kind", ["dense", "coo", "csr"])
@pytest.mark.parametrize("dtype", ["float64", "float32", "complex128", "complex64"])
@pytest.mark.parametrize("fmt_y", FORMATS)
@pytest.mark.parametrize("fmt_x", FORMATS)
def test_dense_formulas(lib, fmt_x, fmt_y, dtype, dout_kind, canonical):
    """Duplicates and unsorted CSR indices (or canonical operands), explicitly stored zeros of
    both signs (so ±inf and NaN where y is zero or not stored), cotangents dense or sparse
    (duplicates, positions that out does not store)."""
    lib.require(dtype)
    rng = np.random.default_rng(sum(map(ord, f"{fmt_x}{fmt_y}{dtype}{dout_kind}{canonical}")))
    shape = (7, 9)
    x = random_entries(rng, shape, 30, zeros=0.2).shuffled(rng)
    y = random_entries(rng, shape, 30, zeros=0.2).shuffled(rng)
    if np.dtype(dtype).kind == "c":
        x, y = _complexify(x, rng), _complexify(y, rng)
    if canonical:
        x, y = canonical_entries(x, shape), canonical_entries(y, shape)
    xs = build(lib, fmt_x, x, shape, dtype=dtype)
    ys = build(lib, fmt_y, y, shape, dtype=dtype)
    if canonical:
        xs.has_canonical_format = ys.has_canonical_format = True
    dout = _cotangent(lib, rng, shape, dout_kind, dtype, zeros=0.2)
    dx, dy = _check(lib, xs, ys, dout)
    if np.dtype(dtype).kind == "f":  # the zeros and missing sides give infinities and NaN
        values = np.concatenate([lib.host(dx.data), lib.host(dy.data)])
        assert np.isinf(values).any()
        assert np.isnan(values).any()


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_special_values(lib, fmt, dtype):
    """NaN and ±inf in x, y and the cotangent; signed zeros everywhere."""
    lib.require(dtype)
    shape = (3, 4)
    rows = np.array([0, 0, 0, 1, 1, 1, 2, 2, 2, 0])
    cols = np.array([0, 1, 2, 0, 1, 2, 0, 1, 3, 3])
    x = Entries(np.array([inf, -inf, nan, 0.0, -0.0, 1.0, 2.0, -0.0, inf, 3.0]), (rows, cols))
    y = Entries(np.array([2.0, inf, 1.0, -0.0, 0.0, nan, -inf, 4.0, 0.0]), (rows[:9], cols[:9] + 0))
    xs = build(lib, fmt, x, shape, dtype=dtype)
    ys = build(lib, "coo", y, shape, dtype=dtype)
    d = np.array([[1.0, -0.0, 2.0, inf], [nan, -1.0, 0.0, 1.0], [-0.0, 2.0, 1.0, -2.0]])
    _check(lib, xs, ys, lib.asarray(d.astype(dtype)))


@pytest.mark.parametrize("dout_kind", ["dense", "coo", "csr", "out"])
@pytest.mark.parametrize("divisor", ["same", "subset", "scalar"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_canonical_operands_covering_out(lib, fmt, divisor, dout_kind):
    """Canonical operands that store all of out's pattern (x and y of one pattern, y's pattern
    within x's, a scalar divisor) and cotangents of out's own pattern: the same formulas."""
    rng = np.random.default_rng(13)
    shape = (6, 8)
    x = canonical_entries(random_entries(rng, shape, 25, zeros=0.2), shape)
    if divisor == "same":
        y = Entries(rng.integers(-8, 9, x.data.size) / 4, x.coords)
    else:
        keep = rng.random(x.data.size) < 0.5
        y = Entries(rng.integers(-8, 9, int(keep.sum())) / 4, tuple(c[keep] for c in x.coords))
    xs = build(lib, fmt, x, shape)
    y_op = build(lib, "coo" if fmt == "csr" else "csr", y, shape)
    xs.has_canonical_format = y_op.has_canonical_format = True
    ys: Any = -1.5 if divisor == "scalar" else y_op
    out, pullback = xpops.vjp(xpops.sparse.divide, xs, ys)
    if dout_kind == "out":
        dout = out.copy()
        dout.data = lib.asarray(rng.integers(-8, 9, out.data.size) / 4)
    else:
        dout = _cotangent(lib, rng, shape, dout_kind, "float64", zeros=0.2)
    dx, dy = pullback(dout)
    xe = _entries(lib, xs)
    de = _entries(lib, dout) if lib.sparse.issparse(dout) else lib.host(dout)
    ye = _entries(lib, y_op)
    y_ref = ys if divisor == "scalar" else ye
    x_vals, y_vals, o, d_vals, mask = _reference(xe, y_ref, de, shape, np.float64)
    with np.errstate(all="ignore"):
        want_x = d_vals[xe.coords] / y_vals[xe.coords]
    _assert_structure(lib, dx, xs, "float64")
    _assert_values(lib.host(dx.data), want_x, "float64")
    if divisor == "scalar":
        with np.errstate(all="ignore"):
            terms = -d_vals[mask] * (o[mask] / ys)
        _assert_sum(lib.host(dy), terms.sum(), terms, "float64")
        return
    _, want_y = _expected(x_vals, y_vals, o, d_vals, xe.coords, ye.coords)
    _assert_structure(lib, dy, y_op, "float64")
    _assert_values(lib.host(dy.data), want_y, "float64")


@pytest.mark.parametrize(
    ("dx", "dy"),
    [
        ("float32", "float32"),
        ("float32", "float64"),
        ("float64", "float32"),
        ("float32", "complex64"),
        ("complex128", "float64"),
        ("int64", "float32"),
        ("int32", "int64"),
        ("bool", "float64"),
        ("int16", "complex64"),
        ("longdouble", "float64"),
    ],
)
def test_dtypes(lib, dx, dy):
    """Each gradient has its operand's dtype (float32 stays float32), the real part for a real
    operand of a complex quotient, the quotient's real dtype for integer and bool operands."""
    lib.require(dx, dy)
    if np.dtype(dx) == np.longdouble and np.finfo(np.longdouble).bits == 64:
        pytest.skip("longdouble is float64 here")
    rng = np.random.default_rng(3)
    shape = (5, 6)
    x = random_entries(rng, shape, 15, integer=True)
    y = random_entries(rng, shape, 15, integer=True)
    if np.dtype(dx).kind == "b":
        x = Entries(np.ones_like(x.data), x.coords)
    xs = build(lib, "csr", x, shape, dtype=dx)
    ys = build(lib, "coo", y, shape, dtype=dy)
    out_dtype = (np.ones(1, dx) / np.ones(1, dy)).dtype
    dout = _cotangent(lib, rng, shape, "dense", out_dtype)
    _check(lib, xs, ys, dout, wide=_wide(out_dtype))


@pytest.mark.parametrize("layout", ["fortran", "strided"])
def test_dense_cotangent_not_contiguous(lib, layout):
    """A dense cotangent in Fortran order, or a strided view, is read at out's positions."""
    rng = np.random.default_rng(14)
    shape = (6, 7)
    xs = build(lib, "coo", random_entries(rng, shape, 15, zeros=0.2).shuffled(rng), shape)
    ys = build(lib, "csr", random_entries(rng, shape, 15, zeros=0.2).shuffled(rng), shape)
    wide = lib.xp.asarray(rng.integers(-8, 9, (shape[0], 2 * shape[1])) / 4)
    dout = lib.xp.asfortranarray(wide[:, ::2]) if layout == "fortran" else wide[:, ::2]
    assert not dout.flags.c_contiguous
    _check(lib, xs, ys, dout)


def test_real_cotangent_of_complex_output(lib):
    """A real cotangent is taken for a complex output (its imaginary part zero)."""
    rng = np.random.default_rng(4)
    shape = (4, 4)
    x = _complexify(random_entries(rng, shape, 8), rng)
    y = _complexify(random_entries(rng, shape, 8), rng)
    xs = build(lib, "coo", x, shape, dtype="complex128")
    ys = build(lib, "csr", y, shape, dtype="complex128")
    _check(lib, xs, ys, _cotangent(lib, rng, shape, "dense", "float64"))
    _check(lib, xs, ys, _cotangent(lib, rng, shape, "coo", "float32"))


# ---- finite differences ----------------------------------------------------------------------


def _loss(xe, y, d_vals, shape):
    """re(sum(conj(dout) * out)) over out's stored positions, densely from stored entries."""
    _, _, o, _, mask = _reference(xe, y, d_vals, shape, np.complex128)
    return float(np.sum(np.conj(d_vals[mask]) * o[mask]).real)


def _finite_differences(f, values, h=1e-6):
    """Central differences of f(values) with respect to each entry: d/d re + i d/d im for
    complex values."""
    grad = np.zeros(values.shape, dtype=values.dtype)
    for k in range(values.size):
        steps = (1.0, 1j) if values.dtype.kind == "c" else (1.0,)
        for step in steps:
            plus, minus = values.copy(), values.copy()
            plus[k] += h * step
            minus[k] -= h * step
            slope = (f(plus) - f(minus)) / (2 * h)
            grad[k] += slope * (1 if step == 1.0 else 1j)
    return grad


def _covering_divisor(rng, x, shape, complex_):
    """Entries of y storing every position of x (and more), duplicates included, with sums
    far from zero: the loss is smooth in every stored value."""
    extra = random_entries(rng, shape, 10)
    coords = tuple(np.concatenate([a, b]) for a, b in zip(x.coords, extra.coords, strict=True))
    vals = rng.integers(2, 9, coords[0].size) / 4
    if complex_:
        vals = vals + 1j * rng.integers(-4, 5, vals.size) / 8
    return Entries(vals, coords).shuffled(rng)


@pytest.mark.parametrize("dout_kind", ["dense", "coo"])
@pytest.mark.parametrize("dtype", ["float64", "complex128"])
@pytest.mark.parametrize(("fmt_x", "fmt_y"), [("coo", "csr"), ("csr", "coo"), ("csr", "csr")])
def test_finite_differences(lib, fmt_x, fmt_y, dtype, dout_kind):
    """Each stored value of x and y, duplicates included (complex: PyTorch's convention,
    ``dx = dout / conj(y)``, ``dy = -dout * conj(out / y)``)."""
    rng = np.random.default_rng(11)
    shape = (4, 5)
    complex_ = dtype == "complex128"
    x = random_entries(rng, shape, 12, zeros=0.1).shuffled(rng)
    if complex_:
        x = _complexify(x, rng)
    y = _covering_divisor(rng, x, shape, complex_)
    xs = build(lib, fmt_x, x, shape, dtype=dtype)
    ys = build(lib, fmt_y, y, shape, dtype=dtype)
    dout = _cotangent(lib, rng, shape, dout_kind, dtype)
    _, pullback = xpops.vjp(xpops.sparse.divide, xs, ys)
    dx, dy = pullback(dout)
    xe, ye = _entries(lib, xs), _entries(lib, ys)
    if lib.sparse.issparse(dout):
        d_vals, _ = _dense_of(_entries(lib, dout), shape, np.complex128)
    else:
        d_vals = lib.host(dout).astype(np.complex128)

    def fx(v):
        return _loss(Entries(v, xe.coords), ye, d_vals, shape)

    def fy(v):
        return _loss(xe, Entries(v, ye.coords), d_vals, shape)

    want_x = _finite_differences(fx, xe.data)
    want_y = _finite_differences(fy, ye.data)
    np.testing.assert_allclose(lib.host(dx.data), want_x, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(lib.host(dy.data), want_y, rtol=1e-6, atol=1e-8)


# ---- scalar divisors -----------------------------------------------------------------------------


def _scalars(lib):
    yield from (2, 2.5, -0.5, True, 1.5 - 2j, 10**30, 0, 0.0, -0.0)
    yield from (np.float32(4), np.float64(-2), np.complex64(1 + 1j), np.array(2.0), np.int8(3))
    if lib.name == "cupy":
        yield lib.xp.asarray(2.0)
        yield lib.xp.asarray(0.5 + 1j, dtype=np.complex64)


def _scalar_grad_dtype(y, out_dtype):
    """The documented dtype of a scalar divisor's cotangent."""
    if isinstance(y, complex) and not isinstance(y, np.generic):
        return np.dtype(out_dtype)
    return _grad_dtype(getattr(y, "dtype", np.int64), out_dtype)  # Python bool, int, float


def _assert_sum(got, want, terms, dtype):
    """A sum of `terms` (wide): within the rounding of a sum in `dtype`, NaN where NaN,
    infinities exactly; non-finite where the reference is, for complex dtypes."""
    dtype = np.dtype(dtype)
    got, want = complex(got), complex(want)
    if not np.isfinite(want):
        assert not np.isfinite(got)
        if dtype.kind != "c":
            np.testing.assert_equal(got.real, want.real)
        return
    info = np.finfo(dtype)
    scale = float(np.sum(np.abs(terms)))
    bound = (terms.size + 2) * (4 * float(info.eps) * scale + float(info.smallest_normal))
    assert abs(got - want) <= bound, (got, want)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", ["float64", "float32", "complex64"])
def test_scalar_divisor(lib, fmt, dtype):
    """dx on x's own structure, a 0-d dy of x's library summed over out's stored entries only
    (values of a dense cotangent elsewhere are not read), y == 0 giving inf and NaN as the
    forward does."""
    lib.require(dtype)
    rng = np.random.default_rng(5)
    shape = (5, 6)
    x = random_entries(rng, shape, 14, zeros=0.2).shuffled(rng)
    if np.dtype(dtype).kind == "c":
        x = _complexify(x, rng)
    xs = build(lib, fmt, x, shape, dtype=dtype)
    xe = _entries(lib, xs)
    for y in _scalars(lib):
        out, pullback = xpops.vjp(xpops.sparse.divide, xs, y)
        on_device = type(y).__module__.startswith("cupy")
        y_host = lib.host(y) if on_device else y
        wide = _wide(out.dtype)
        with np.errstate(all="ignore"):  # as the forward takes it: converted to out's dtype
            y_wide = np.asarray(y_host).astype(out.dtype).astype(wide)
        for kind in ("dense", "coo"):
            dout = _cotangent(lib, rng, shape, kind, out.dtype)
            dx, dy = pullback(dout)
            de = _entries(lib, dout) if kind == "coo" else lib.host(dout)
            _, _, o, d_vals, mask = _reference(xe, y_wide, de, shape, wide)
            with np.errstate(all="ignore"):
                want_x = d_vals[xe.coords] / np.conj(y_wide)
                terms = -d_vals[mask] * np.conj(o[mask] / y_wide)
            gx = _grad_dtype(xs.dtype, out.dtype)
            gy = _scalar_grad_dtype(y_host if not on_device else y, out.dtype)
            _assert_structure(lib, dx, xs, gx)
            assert type(dy) is type(lib.xp.asarray(0.0)), type(dy)
            assert dy.shape == ()
            assert dy.dtype == gy, (y, dy.dtype, gy)
            _assert_values(
                lib.host(dx.data),
                want_x if gx.kind == "c" else want_x.real,
                gx,
                complex_quotient=np.dtype(out.dtype).kind == "c",
            )
            with np.errstate(all="ignore"):
                want_y = terms.sum()
            _assert_sum(lib.host(dy), want_y if gy.kind == "c" else want_y.real, terms, gy)


@pytest.mark.parametrize("complex_", [False, True])
def test_scalar_divisor_finite_differences(lib, complex_):
    rng = np.random.default_rng(6)
    shape = (4, 5)
    x = random_entries(rng, shape, 10).shuffled(rng)
    if complex_:
        x = _complexify(x, rng)
    dtype = "complex128" if complex_ else "float64"
    xs = build(lib, "coo", x, shape, dtype=dtype)
    y = 1.25 - 0.5j if complex_ else -1.25
    dout = _cotangent(lib, rng, shape, "dense", dtype)
    _, pullback = xpops.vjp(xpops.sparse.divide, xs, y)
    dx, dy = pullback(dout)
    xe = _entries(lib, xs)
    d_vals = lib.host(dout).astype(np.complex128)
    want_x = _finite_differences(lambda v: _loss(Entries(v, xe.coords), y, d_vals, shape), xe.data)
    yv = np.array([y], dtype=np.complex128 if complex_ else np.float64)
    want_y = _finite_differences(lambda v: _loss(xe, v[0], d_vals, shape), yv)
    np.testing.assert_allclose(lib.host(dx.data), want_x, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(lib.host(dy).reshape(1), want_y, rtol=1e-6, atol=1e-8)
