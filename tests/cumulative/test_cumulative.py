"""logcumsumexp on every backend, against independent float64 / long double references."""

import cmath
import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import xpops
from xpops._lib._compat import array_namespace

from .._support import backend_name, to_numpy

nan, inf = np.nan, np.inf


def reference(x, axis=None, exclusive=False, reverse=False):
    """float64 reference along a moved, reversed view: ``numpy.logaddexp.accumulate`` for real
    inputs, a scalar loop with `cmath` (and the documented special values) for complex ones."""
    y = np.asarray(x)
    if axis is None:
        y = y.reshape(-1)
        axis = 0
    if y.ndim == 0:
        y = y.reshape(1)
    complex_ = np.iscomplexobj(y)
    y = np.moveaxis(y.astype(np.complex128 if complex_ else np.float64), axis, -1)
    if reverse:
        y = y[..., ::-1]
    if complex_:
        r = np.array([_complex_scan(lane) for lane in y.reshape(-1, y.shape[-1])])
        r = r.reshape(y.shape)
    else:
        with np.errstate(invalid="ignore"):
            r = np.logaddexp.accumulate(y, axis=-1)
    if exclusive and r.shape[-1]:
        r = np.concatenate([np.full((*r.shape[:-1], 1), -np.inf), r[..., :-1]], axis=-1)
    if reverse:
        r = r[..., ::-1]
    return np.moveaxis(r, -1, axis)


def _principal(y):
    return y if -math.pi < y <= math.pi else math.pi - (math.pi - y) % (2 * math.pi)


def _complex_scan(lane):
    """``log(cumsum(exp(z)))`` one element at a time, with the complex special values: real
    part -inf is the identity; NaN (or a non-finite imaginary part) gives NaN+NaNj from there
    on; real part +inf gives +inf with that element's principal phase (NaN if two disagree)."""
    out, acc, state = [], complex(-inf, 0.0), "empty"
    for z in lane.tolist():
        re, im = z.real, z.imag
        if re == -inf or state == "nan":
            pass
        elif math.isnan(re) or not math.isfinite(im):
            state = "nan"
        elif re == inf:
            phase = _principal(im)
            if state != "inf":
                acc, state = complex(inf, phase), "inf"
            elif acc.imag != phase:
                acc = complex(inf, nan)
        elif state == "empty":
            acc, state = complex(re, _principal(im)), "finite"
        elif state == "finite":
            m = max(acc.real, re)
            s = cmath.exp(acc - m) + cmath.exp(z - m)
            acc = cmath.log(s) + m if s != 0 else complex(-inf, 0.0)
        out.append(complex(nan, nan) if state == "nan" else acc)
    return out


def long_double_reference(x):
    """``log(cumsum(exp(x)))`` of a 1-D array, summed in long double after a shift."""
    xl = np.asarray(x, dtype=np.longdouble)
    m = xl.max()
    return np.log(np.cumsum(np.exp(xl - m))) + m


def assert_scan_close(got, want, atol, rtol=0.0):
    """Same NaN and infinity positions (infinities exactly), finite values within tolerance;
    complex imaginary parts are compared as angles (modulo 2 pi)."""
    got = to_numpy(got).astype(want.dtype)
    assert got.shape == want.shape
    g, w = np.real(got), np.real(want)
    np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
    inf_ = np.isinf(w)
    np.testing.assert_array_equal(g[inf_], w[inf_])
    ok = np.isfinite(w)
    np.testing.assert_allclose(g[ok], w[ok], rtol=rtol, atol=atol)
    if np.iscomplexobj(want):
        gi, wi = np.imag(got), np.imag(want)
        np.testing.assert_array_equal(np.isnan(gi), np.isnan(wi))
        both = np.isfinite(gi) & np.isfinite(wi) & (np.real(want) > -inf)
        diff = np.angle(np.exp(1j * (gi[both] - wi[both])))
        np.testing.assert_allclose(diff, 0, atol=atol + rtol)


def tolerance(dtype_name):
    return {"float16": 2e-2, "bfloat16": 1e-1, "float32": 2e-5, "float64": 1e-12}[dtype_name]


def numpy_engine():
    from xpops._numpy import cumulative

    return cumulative


# ---- the contract's examples, axes and flags ------------------------------------------------


def test_docstring_examples(xp):
    x = xp.asarray(np.array([0.0, 0.0, math.log(2.0)]))
    log2, log3, log4 = math.log(2), math.log(3), math.log(4)
    assert_scan_close(xpops.logcumsumexp(x), np.array([0, log2, log4]), 1e-15)
    big = xpops.logcumsumexp(xp.asarray(np.array([1000.0, 1000.0])))
    assert_scan_close(big, np.array([1000, 1000 + log2]), 1e-12)
    assert_scan_close(xpops.logcumsumexp(x, exclusive=True), np.array([-inf, 0, log2]), 1e-15)
    assert_scan_close(xpops.logcumsumexp(x, reverse=True), np.array([log4, log3, log2]), 1e-15)
    out = xpops.logcumsumexp(xp.reshape(xp.arange(6), (2, 3)), axis=0)
    assert_scan_close(
        out, np.array([[0, 1, 2], [3, 4, 5]]) + np.array([[0], [np.log1p(np.exp(-3))]]), 1e-6
    )


@pytest.mark.parametrize("shape", [(7,), (5, 9), (3, 4, 6)])
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("dtype_name", ["float32", "float64"])
def test_every_axis_and_flag(xp, shape, exclusive, reverse, dtype_name):
    rng = np.random.default_rng(0)
    x_np = (rng.standard_normal(shape) * 10).astype(dtype_name)
    x = xp.asarray(x_np)
    for axis in [None, *range(-len(shape), len(shape))]:
        out = xpops.logcumsumexp(x, axis=axis, exclusive=exclusive, reverse=reverse)
        assert out.dtype == x.dtype
        assert out.shape == ((x_np.size,) if axis is None else shape)
        want = reference(x_np, axis, exclusive, reverse)
        assert_scan_close(out, want, tolerance(dtype_name) * 10)


def test_axis_none_is_row_major(xp):
    x_np = np.arange(12.0).reshape(3, 4) / 3
    out = xpops.logcumsumexp(xp.asarray(x_np))
    assert_scan_close(out, reference(x_np.reshape(-1)), 1e-12)
    out = xpops.logcumsumexp(xp.asarray(x_np.T), reverse=True, exclusive=True)
    assert_scan_close(out, reference(x_np.T.reshape(-1), 0, True, True), 1e-12)


# ---- special values -------------------------------------------------------------------------

SPECIAL = [
    [0.0, nan, 1.0],
    [nan, 0.0, 1.0],
    [-inf, -inf],
    [-inf, 0.0, 1.0],
    [0.0, inf, 1.0],
    [0.0, inf, nan, 1.0],
    [1000.0, 1000.0],
    [-1000.0, -1000.0],
    [-1000.0, 1000.0],
    [1000.0, -1000.0],
    [1000.0, -1000.0, 1000.0],
    [-inf, 5.0, -inf],
    [inf, -inf, inf],
]


@pytest.mark.parametrize("values", SPECIAL)
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_special_values(xp, values, exclusive, reverse):
    x_np = np.array(values)
    out = xpops.logcumsumexp(xp.asarray(x_np), exclusive=exclusive, reverse=reverse)
    assert_scan_close(out, reference(x_np, None, exclusive, reverse), 1e-12)


L2 = math.log(2.0)


@pytest.mark.parametrize(
    ("values", "exclusive", "reverse", "expected"),
    [
        ([0.0, nan, 1.0], False, False, [0.0, nan, nan]),
        ([0.0, nan, 1.0], False, True, [nan, nan, 1.0]),
        ([nan, 0.0, 1.0], True, False, [-inf, nan, nan]),
        ([-inf, -inf], False, False, [-inf, -inf]),
        ([-inf, -inf], True, True, [-inf, -inf]),
        ([-inf, 0.0, 1.0], False, False, [-inf, 0.0, 1.0 + math.log1p(math.exp(-1.0))]),
        ([0.0, inf, 1.0], False, False, [0.0, inf, inf]),
        ([0.0, inf, 1.0], True, False, [-inf, 0.0, inf]),
        ([0.0, inf, nan], False, False, [0.0, inf, nan]),
        ([1000.0, 1000.0], False, False, [1000.0, 1000.0 + L2]),
        ([-1000.0, -1000.0], False, False, [-1000.0, -1000.0 + L2]),
        ([-1000.0, 1000.0], False, False, [-1000.0, 1000.0]),
        ([1000.0, -1000.0], False, False, [1000.0, 1000.0]),
        ([1000.0, -1000.0], False, True, [1000.0, -1000.0]),
        ([1000.0, -1000.0], True, True, [-1000.0, -inf]),
    ],
)
def test_special_values_exactly(xp, values, exclusive, reverse, expected):
    out = xpops.logcumsumexp(xp.asarray(np.array(values)), exclusive=exclusive, reverse=reverse)
    got = to_numpy(out)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)


def test_nan_leaves_earlier_outputs_alone(xp):
    x_np = np.random.default_rng(8).standard_normal((4, 50)) * 10
    x_np[1, 20] = nan
    x_np[2, 30] = inf
    out = to_numpy(xpops.logcumsumexp(xp.asarray(x_np), axis=1))
    want = reference(x_np, 1)
    np.testing.assert_allclose(out[1, :20], want[1, :20], atol=1e-12)
    assert np.isnan(out[1, 20:]).all()
    np.testing.assert_allclose(out[2, :30], want[2, :30], atol=1e-12)
    assert (out[2, 30:] == inf).all()
    np.testing.assert_allclose(out[[0, 3]], want[[0, 3]], atol=1e-12)


# ---- complex --------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype_name", ["complex64", "complex128"])
def test_complex_moderate(xp, dtype_name):
    rng = np.random.default_rng(1)
    z = rng.standard_normal((4, 6)) + 1j * rng.standard_normal((4, 6)) * 3
    z = z.astype(dtype_name)
    atol = 1e-12 if dtype_name == "complex128" else 2e-5
    for axis in (None, 0, 1):
        out = xpops.logcumsumexp(xp.asarray(z), axis=axis)
        assert out.dtype == getattr(xp, dtype_name)
        got = to_numpy(out).astype(np.complex128)
        flat = z.reshape(-1) if axis is None else z
        want = np.log(np.cumsum(np.exp(flat.astype(np.complex128)), axis=axis or 0))
        np.testing.assert_allclose(got, want, atol=atol)
        assert np.all(got.imag > -np.pi - 1e-6)
        assert np.all(got.imag <= np.pi + 1e-6)


@pytest.mark.parametrize(("exclusive", "reverse"), list(itertools.product([False, True], repeat=2)))
def test_complex_large_real_parts(xp, exclusive, reverse):
    rng = np.random.default_rng(12)
    z = rng.normal(0, 300, (3, 40)) + 1j * rng.normal(0, 4, (3, 40))
    z[0, 5] = 1000 + 1j
    z[1, :] += 5000
    out = xpops.logcumsumexp(xp.asarray(z), axis=1, exclusive=exclusive, reverse=reverse)
    got = to_numpy(out)
    assert_scan_close(got, reference(z, 1, exclusive, reverse), 1e-9)
    finite = np.isfinite(got)
    assert np.all(np.abs(got.imag[finite]) <= np.pi + 1e-12)


CNAN = complex(nan, nan)


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([complex(-inf, 5.0), 1 + 0j], [complex(-inf, 0.0), 1 + 0j]),
        ([complex(-inf, nan), 2 + 1j], [complex(-inf, 0.0), 2 + 1j]),
        ([1 + 1j, complex(nan, 0.0), 2 + 0j], [1 + 1j, CNAN, CNAN]),
        ([1 + 1j, complex(1.0, nan), 2 + 0j], [1 + 1j, CNAN, CNAN]),
        ([1 + 1j, complex(1.0, inf)], [1 + 1j, CNAN]),
        ([0j, complex(inf, 1.0), 3 + 0j], [0j, complex(inf, 1.0), complex(inf, 1.0)]),
        ([complex(inf, 1.0 + 2 * math.pi)], [complex(inf, 1.0)]),
        ([complex(inf, 1.0), complex(inf, 2.0)], [complex(inf, 1.0), complex(inf, nan)]),
        ([complex(inf, 1.0), complex(inf, 1.0)], [complex(inf, 1.0), complex(inf, 1.0)]),
        ([complex(inf, 1.0), complex(nan, 0.0)], [complex(inf, 1.0), CNAN]),
        ([0 + 7j], [complex(0.0, 7.0 - 2 * math.pi)]),
    ],
)
def test_complex_special_values(xp, values, expected):
    z = np.array(values, dtype=np.complex128)
    got = to_numpy(xpops.logcumsumexp(xp.asarray(z)))
    want = np.array(expected)
    for part in (np.real, np.imag):
        np.testing.assert_array_equal(np.isnan(part(got)), np.isnan(part(want)))
        np.testing.assert_allclose(part(got), part(want), rtol=0, atol=1e-12)
    excl = to_numpy(xpops.logcumsumexp(xp.asarray(z), exclusive=True))
    assert excl[0] == complex(-inf, 0.0)


def test_engines_agree_on_random_complex_special_values():
    """The NumPy engine (fast and exact paths) and the generic engine give the same results."""
    import array_api_strict

    pool = [0, 1 + 2j, 5 - 7j, complex(-inf, 3), complex(inf, 1), complex(inf, 2), complex(nan, 0)]
    pool += [complex(1, nan), complex(-inf, nan), complex(300, 1), complex(-800, 2)]
    rng = np.random.default_rng(13)
    for _ in range(60):
        z = np.array(rng.choice(pool, rng.integers(1, 8)), dtype=np.complex128)
        for exclusive, reverse in itertools.product([False, True], repeat=2):
            a = xpops.logcumsumexp(z, exclusive=exclusive, reverse=reverse)
            b = xpops.logcumsumexp(
                array_api_strict.asarray(z), exclusive=exclusive, reverse=reverse
            )
            assert_scan_close(b, a, 1e-9)


# ---- dtypes ---------------------------------------------------------------------------------


def test_low_precision_accumulates_in_float32(xp):
    if not hasattr(xp, "float16"):
        pytest.skip(f"{backend_name(xp)} has no float16")
    rng = np.random.default_rng(2)
    x_np = (rng.standard_normal(5000) * 3).astype(np.float16)
    out = xpops.logcumsumexp(xp.asarray(x_np))
    assert out.dtype == xp.float16
    want = reference(x_np.astype(np.float64))
    got = to_numpy(out).astype(np.float64)
    # one float16 rounding of the result (spacing 2**-7 near 10), not 5000 of them
    np.testing.assert_allclose(got, want, atol=1.5e-2)


def test_bfloat16(xp):
    if not hasattr(xp, "bfloat16"):
        pytest.skip(f"{backend_name(xp)} has no bfloat16")
    x_np = np.random.default_rng(2).standard_normal(3000).astype(np.float32) * 3
    x = xp.asarray(x_np)
    cxp = array_namespace(x)
    x16 = cxp.astype(x, xp.bfloat16)
    out = xpops.logcumsumexp(x16)
    assert out.dtype == xp.bfloat16
    want = reference(to_numpy(cxp.astype(x16, xp.float32)))
    got = to_numpy(cxp.astype(out, xp.float32))
    np.testing.assert_allclose(got, want, atol=0.07)  # one bfloat16 rounding near 10
    out = xpops.logcumsumexp(x, dtype=xp.bfloat16)
    assert out.dtype == xp.bfloat16


def test_integer_and_bool_inputs(xp):
    ints = xp.asarray(np.arange(6).reshape(2, 3))
    out = xpops.logcumsumexp(ints, axis=1)
    default = xp.float32 if backend_name(xp) == "torch" else xp.float64
    assert out.dtype == default
    assert_scan_close(out, reference(np.arange(6.0).reshape(2, 3), 1), 1e-6)
    out = xpops.logcumsumexp(xp.asarray(np.array([True, False, True])))
    assert out.dtype == default
    assert_scan_close(out, reference(np.array([1.0, 0.0, 1.0])), 1e-6)
    out = xpops.logcumsumexp(xp.asarray(np.arange(4, dtype=np.int32)), dtype=xp.float64)
    assert out.dtype == xp.float64


def test_dtype_argument_casts_first(xp):
    x = xp.asarray(np.array([0.1, 0.2, 0.3]))
    out = xpops.logcumsumexp(x, dtype=xp.float32)
    assert out.dtype == xp.float32
    assert_scan_close(out, reference(np.array([0.1, 0.2, 0.3], dtype=np.float32)), 1e-6)
    out = xpops.logcumsumexp(xp.asarray(np.arange(3)), dtype=xp.complex128)
    assert out.dtype == xp.complex128
    assert_scan_close(out, reference(np.arange(3.0)).astype(np.complex128), 1e-12)


# ---- shapes ---------------------------------------------------------------------------------


def test_zero_dimensional(xp):
    x = xp.asarray(2.5)
    out = xpops.logcumsumexp(x)
    assert out.shape == (1,)
    assert float(to_numpy(out)[0]) == pytest.approx(2.5, abs=1e-15)
    for axis in (0, -1):
        out = xpops.logcumsumexp(x, axis=axis)
        assert out.shape == ()
        assert float(to_numpy(out)) == pytest.approx(2.5, abs=1e-15)
        out = xpops.logcumsumexp(x, axis=axis, reverse=True)
        assert float(to_numpy(out)) == pytest.approx(2.5, abs=1e-15)
    out = xpops.logcumsumexp(x, axis=0, exclusive=True)
    assert out.shape == ()
    assert float(to_numpy(out)) == -inf
    out = xpops.logcumsumexp(x, exclusive=True)
    assert out.shape == (1,)
    assert float(to_numpy(out)[0]) == -inf


@pytest.mark.parametrize("shape", [(0,), (3, 0), (0, 4), (2, 0, 3)])
@pytest.mark.parametrize(("exclusive", "reverse"), [(False, False), (True, True)])
def test_empty(xp, shape, exclusive, reverse):
    x = xp.asarray(np.zeros(shape))
    for axis in [None, *range(-len(shape), len(shape))]:
        out = xpops.logcumsumexp(x, axis=axis, exclusive=exclusive, reverse=reverse)
        assert out.shape == ((math.prod(shape),) if axis is None else shape)
        assert out.dtype == x.dtype
        assert type(out).__module__.split(".")[0] == backend_name(xp)


def test_length_one_axis(xp):
    x_np = np.random.default_rng(6).standard_normal((3, 1, 4))
    x = xp.asarray(x_np)
    assert_scan_close(xpops.logcumsumexp(x, axis=1), x_np, 1e-15)
    out = xpops.logcumsumexp(x, axis=1, exclusive=True, reverse=True)
    assert_scan_close(out, np.full((3, 1, 4), -inf), 0)


@pytest.mark.parametrize("shape", [(1,), (3, 1), (5,)])
def test_result_is_a_new_array(xp, shape):
    x_np = np.arange(math.prod(shape), dtype=np.float64).reshape(shape)
    x = xp.asarray(x_np.copy())
    for axis, reverse in itertools.product([None, -1], [False, True]):
        out = xpops.logcumsumexp(x, axis=axis, reverse=reverse)
        out[...] = -7.0
        np.testing.assert_array_equal(to_numpy(x), x_np)


def test_input_not_modified_and_result_layout(xp):
    x_np = np.random.default_rng(4).standard_normal((6, 7))
    x = xp.asarray(x_np.copy())
    for axis, exclusive, reverse in itertools.product([None, 0, 1], [False, True], [False, True]):
        out = xpops.logcumsumexp(x, axis=axis, reverse=reverse, exclusive=exclusive)
        np.testing.assert_array_equal(to_numpy(x), x_np)
        assert type(out).__module__.split(".")[0] == backend_name(xp)
        assert backend_name(array_namespace(out)) in ("array_api_compat", backend_name(xp))
        assert out.dtype == x.dtype
        assert out.shape == ((42,) if axis is None else (6, 7))


def test_non_contiguous_numpy_inputs_are_left_alone():
    base = np.random.default_rng(9).standard_normal((300, 500)) * 10
    before = base.copy()
    for view in (base[:, ::2], base.T, base[::-1], base[:, ::-3], base[::2, 1:].T):
        for axis in (0, 1):
            for exclusive, reverse in itertools.product([False, True], repeat=2):
                got = xpops.logcumsumexp(view, axis=axis, exclusive=exclusive, reverse=reverse)
                assert got.flags.c_contiguous
                assert_scan_close(got, reference(view, axis, exclusive, reverse), 1e-11)
    np.testing.assert_array_equal(base, before)


# ---- errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"axis": 2}, ValueError, "`axis` 2 is out of bounds for an array of dimension 2"),
        ({"axis": -3}, ValueError, "`axis` -3 is out of bounds for an array of dimension 2"),
        ({"axis": 1.0}, TypeError, "`axis` must be an integer or None, got float 1.0"),
        ({"axis": True}, TypeError, "`axis` must be an integer or None, got bool True"),
        ({"axis": "0"}, TypeError, "`axis` must be an integer or None, got str '0'"),
        ({"exclusive": 1}, TypeError, "`exclusive` must be a bool, got int 1"),
        ({"exclusive": None}, TypeError, "`exclusive` must be a bool, got NoneType None"),
        ({"reverse": "yes"}, TypeError, "`reverse` must be a bool, got str 'yes'"),
    ],
)
def test_errors(xp, kwargs, error, message):
    with pytest.raises(error, match=message):
        xpops.logcumsumexp(xp.asarray(np.ones((2, 3))), **kwargs)


def test_axis_out_of_bounds_for_zero_dimensional(xp):
    with pytest.raises(ValueError, match="`axis` 1 is out of bounds for an array of dimension 0"):
        xpops.logcumsumexp(xp.asarray(1.0), axis=1)


def test_dtype_errors(xp):
    for bad in (xp.int64, xp.bool, "float64"):
        with pytest.raises(TypeError, match="`dtype` must be a real floating or complex floating"):
            xpops.logcumsumexp(xp.asarray(np.ones(3)), dtype=bad)


def test_not_an_array():
    with pytest.raises(TypeError, match=r"expected an array, got builtins\.list"):
        xpops.logcumsumexp([1.0, 2.0])
    with pytest.raises(TypeError, match="`x` must be an array, got float"):
        xpops.logcumsumexp(1.0)
    with pytest.raises(TypeError, match="`x` must have a numeric dtype, got <U1"):
        xpops.logcumsumexp(np.array(["a", "b"]))
    with pytest.raises(TypeError, match="`x` must have a numeric dtype, got object"):
        xpops.logcumsumexp(np.array([1.0, None]))


# ---- accuracy -------------------------------------------------------------------------------


def _accurate_backend(xp):
    if backend_name(xp) not in ("numpy", "cupy"):
        pytest.skip("long accuracy runs are for the NumPy and CuPy engines")


def test_accuracy_float64_long(xp):
    """2**20 N(0, 10**2) values within 1e-13 of a long double reference."""
    _accurate_backend(xp)
    if np.finfo(np.longdouble).eps > 1e-18:
        pytest.skip("numpy.longdouble is not extended precision here")
    x = np.random.default_rng(5).normal(0, 10, 2**20)
    want = long_double_reference(x)
    got = to_numpy(xpops.logcumsumexp(xp.asarray(x))).astype(np.longdouble)
    assert float(np.max(np.abs(got - want))) < 1e-13
    got = to_numpy(xpops.logcumsumexp(xp.asarray(x), reverse=True))[::-1]
    assert float(np.max(np.abs(got.astype(np.longdouble) - long_double_reference(x[::-1])))) < 1e-13


def test_accuracy_float32_long(xp):
    """The same values in float32 within 2e-5 (float32 spacing near 50 is 4e-6)."""
    _accurate_backend(xp)
    x = np.random.default_rng(5).normal(0, 10, 2**20).astype(np.float32)
    want = long_double_reference(x.astype(np.float64))
    got = to_numpy(xpops.logcumsumexp(xp.asarray(x)))
    assert got.dtype == np.float32
    assert float(np.max(np.abs(got.astype(np.longdouble) - want))) < 2e-5


def test_accuracy_float64_many_lanes():
    """Both NumPy layouts (lanes side by side, lanes along the contiguous axis)."""
    x = np.random.default_rng(15).normal(0, 10, (4096, 64))
    want = np.stack([long_double_reference(x[:, j]) for j in range(0, 64, 9)], axis=1)
    got = xpops.logcumsumexp(x, axis=0)[:, ::9]
    assert float(np.max(np.abs(got - want))) < 1e-13
    got = xpops.logcumsumexp(np.ascontiguousarray(x.T), axis=1)[::9].T
    assert float(np.max(np.abs(got - want))) < 1e-13


# ---- NumPy engine: block boundaries, lanes that leave the fast path ------------------------


def _block_lengths():
    e = numpy_engine()
    bn = (e._BLOCK // e._CHUNK) * e._CHUNK
    return [bn - 1, bn, bn + 1, 2 * bn + 1]


@pytest.mark.parametrize("n", _block_lengths())
def test_numpy_lengths_around_the_block(n):
    rng = np.random.default_rng(n)
    x = rng.normal(0, 10, n)
    x[n // 3] = 1500.0  # a jump the fast path cannot take
    x[n // 2 : n // 2 + 3] = -3000.0  # terms that underflow: negligible, fine
    for exclusive, reverse in itertools.product([False, True], repeat=2):
        got = xpops.logcumsumexp(x, exclusive=exclusive, reverse=reverse)
        assert_scan_close(got, reference(x, 0, exclusive, reverse), 1e-9)


@pytest.fixture(params=[False, True], ids=["one_thread", "helper_thread"])
def small_blocks(request, monkeypatch):
    """Blocks of a few hundred elements, so that short inputs cross many of them; all work on
    the calling thread, or shared with a helper thread from any size."""
    e = numpy_engine()
    monkeypatch.setattr(e, "_BLOCK", 256)
    monkeypatch.setattr(e, "_CHUNK", 7)
    monkeypatch.setattr(e, "_ROW_LANES", 16)
    monkeypatch.setattr(e, "_TILE_LANES", 40)
    monkeypatch.setattr(e, "_TWO_LEVEL", 50)
    if not request.param:
        monkeypatch.setattr(e, "helper_thread", lambda: None)
        yield e
        return
    from concurrent.futures import ThreadPoolExecutor

    from xpops._lib._threads import Helper

    with ThreadPoolExecutor(1) as pool:
        monkeypatch.setattr(e, "helper_thread", lambda: Helper(pool))
        monkeypatch.setattr(e, "_THREAD_MIN", 0)
        yield e


def _mess_up(x, rng):
    """NaN, +-inf, huge jumps, very negative and -inf-only starts in some lanes."""
    lanes = np.moveaxis(x, 0, -1).reshape(-1, x.shape[0])  # a view: lanes along axis 0
    n = x.shape[0]
    lanes[0, n // 2] = nan
    lanes[1, n // 3] = inf
    lanes[2, : n // 2] = -inf
    lanes[3, n // 4] = 2000.0
    lanes[4, :] -= 5000.0
    lanes[5, :] += np.linspace(0, 900, n)  # drifting up: the carry is renormalized
    lanes[6, :] = -inf
    lanes[7, : n // 3] = -inf
    lanes[7, n // 3] = -700.0  # the first element above -inf underflows: exact path
    lanes[8, ::2] = -inf
    return x


@pytest.mark.parametrize("shape", [(600, 20), (600, 3, 9), (9, 600), (3, 600, 4), (600, 36)])
@pytest.mark.parametrize("dtype_name", ["float64", "float32", "complex128"])
def test_numpy_lanes_leaving_the_fast_path(small_blocks, shape, dtype_name):
    rng = np.random.default_rng(21)
    for axis in range(len(shape)):
        x = np.moveaxis(rng.normal(0, 10, shape), axis, 0).copy()
        x = np.moveaxis(_mess_up(x, rng), 0, axis)
        if dtype_name == "complex128":
            x = x + 1j * rng.normal(0, 2, shape)
        x = x.astype(dtype_name)
        for exclusive, reverse in itertools.product([False, True], repeat=2):
            got = xpops.logcumsumexp(x, axis=axis, exclusive=exclusive, reverse=reverse)
            want = reference(x, axis, exclusive, reverse)
            if dtype_name == "float32":  # outputs reach -5000: float32 spacing 5e-4 there
                assert_scan_close(got, want, 2e-5, rtol=2.4e-7)
            else:
                assert_scan_close(got, want, 1e-9)


LONG_LANE_CASES = {
    "plain": lambda x: x,
    "nan_in_first_part": lambda x: _put(x, 100, nan),
    "nan_in_rest": lambda x: _put(x, 900, nan),
    "inf_in_first_part": lambda x: _put(x, 100, inf),
    "inf_in_rest": lambda x: _put(x, 900, inf),
    "inf_then_nan": lambda x: _put(_put(x, 100, inf), 1100, nan),
    "first_part_all_minus_inf": lambda x: _put(x, slice(0, 800), -inf),
    "rest_all_minus_inf": lambda x: _put(x, slice(500, None), -inf),
    "all_minus_inf": lambda x: _put(x, slice(None), -inf),
    "large_total": lambda x: x + 1000.0,
    "small_total": lambda x: x - 1000.0,
    "total_near_200": lambda x: x + 190.0,
    "jump_after_the_split": lambda x: _put(x, 760, 2000.0),
}


def _put(x, where, value):
    x = x.copy()
    x[where] = value
    return x


@pytest.mark.parametrize("case", LONG_LANE_CASES)
@pytest.mark.parametrize("dtype_name", ["float64", "float32"])
def test_numpy_one_long_lane(small_blocks, case, dtype_name):
    """One lane of several blocks: with the helper thread the part after the calling thread's
    share starts from the exact total of that share, whatever it holds."""
    x = LONG_LANE_CASES[case](np.random.default_rng(24).normal(0, 10, 1300)).astype(dtype_name)
    for exclusive, reverse in itertools.product([False, True], repeat=2):
        got = xpops.logcumsumexp(x, exclusive=exclusive, reverse=reverse)
        want = reference(x, None, exclusive, reverse)
        if dtype_name == "float32":
            assert_scan_close(got, want, 2e-5, rtol=2.4e-7)
        else:
            assert_scan_close(got, want, 1e-10, rtol=1e-15)


def test_numpy_busy_helper_thread(monkeypatch):
    """A call that finds the helper thread busy with another call's work does all of its own
    work on the calling thread, with the same results."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from xpops._lib._threads import Helper

    e = numpy_engine()
    monkeypatch.setattr(e, "_BLOCK", 256)
    monkeypatch.setattr(e, "_THREAD_MIN", 0)
    with ThreadPoolExecutor(1) as pool:
        helper = Helper(pool)
        monkeypatch.setattr(e, "helper_thread", lambda: helper)
        release = threading.Event()
        blocker = helper.try_submit(release.wait, 30)
        assert blocker is not None
        assert helper.try_submit(lambda: None) is None  # busy: nothing queued
        try:
            rng = np.random.default_rng(25)
            for x, axis in [(rng.normal(0, 10, 1300), 0), (rng.normal(0, 10, (40, 300)), 1)]:
                for exclusive, reverse in itertools.product([False, True], repeat=2):
                    got = xpops.logcumsumexp(x, axis=axis, exclusive=exclusive, reverse=reverse)
                    assert_scan_close(got, reference(x, axis, exclusive, reverse), 1e-10)
        finally:
            release.set()
        assert blocker.result(timeout=30)
        assert helper.try_submit(int, "7").result(timeout=30) == 7  # free again


def test_helper_thread_follows_omp_num_threads(monkeypatch):
    from xpops._lib import _threads

    _threads.helper_thread.cache_clear()
    try:
        monkeypatch.setenv("OMP_NUM_THREADS", "1")
        assert _threads.helper_thread() is None
        _threads.helper_thread.cache_clear()
        monkeypatch.setenv("OMP_NUM_THREADS", "2")
        monkeypatch.setattr(_threads.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
        assert _threads.helper_thread() is not None
    finally:
        _threads.helper_thread.cache_clear()


def test_numpy_engine_modes(small_blocks):
    """Short inputs through every layout of the engine, against the reference."""
    rng = np.random.default_rng(22)
    shapes = [(1,), (2,), (700,), (5, 300), (300, 5), (2, 300, 30), (30, 2, 300), (60, 60)]
    # one strided tile of enough lanes to be halved, along the leading or the trailing lanes
    for shape in [*shapes, (300, 36), (4, 300, 9)]:
        x = rng.normal(0, 30, shape)
        for axis in range(len(shape)):
            for exclusive, reverse in itertools.product([False, True], repeat=2):
                got = small_blocks.logcumsumexp(x, axis, exclusive, reverse)
                assert_scan_close(got, reference(x, axis, exclusive, reverse), 1e-10)


def test_numpy_leading_minus_inf_stays_on_the_fast_path(monkeypatch):
    """Lanes padded with -inf at the start need no exact redo (and give the same results)."""
    e = numpy_engine()
    calls = []
    original = e._exact
    monkeypatch.setattr(e, "_exact", lambda *a: calls.append(1) or original(*a))
    x = np.random.default_rng(23).normal(0, 10, (64, 700))
    x[:, :100] = -inf
    for axis, y in ((1, x), (0, np.ascontiguousarray(x.T))):
        got = xpops.logcumsumexp(y, axis=axis)
        assert_scan_close(got, reference(y, axis), 1e-10)
    assert not calls


# ---- properties -----------------------------------------------------------------------------

VALUES = st.one_of(
    st.floats(-50, 50),
    st.sampled_from([-inf, inf, nan, 1000.0, -1000.0, 710.0, -745.0, 0.0]),
)


@st.composite
def scan_cases(draw, max_size=9):
    """Random shapes, axes and flags; N(0, 30**2) values with special values dropped in."""
    shape = tuple(draw(st.lists(st.integers(0, max_size), min_size=1, max_size=3)))
    size = math.prod(shape)
    x = np.random.default_rng(draw(st.integers(0, 2**32 - 1))).standard_normal(size) * 30
    if size:
        places = st.tuples(st.integers(0, size - 1), VALUES)
        for i, value in draw(st.lists(places, max_size=min(size, 12))):
            x[i] = value
        x[: draw(st.integers(0, size))] = -inf if draw(st.booleans()) else x[0]
    axis = draw(st.one_of(st.none(), st.integers(-len(shape), len(shape) - 1)))
    return x.reshape(shape), axis, draw(st.booleans()), draw(st.booleans())


@settings(max_examples=60, deadline=None)
@given(case=scan_cases())
def test_property_numpy_matches_reference(case):
    x, axis, exclusive, reverse = case
    got = xpops.logcumsumexp(x, axis=axis, exclusive=exclusive, reverse=reverse)
    assert_scan_close(got, reference(x, axis, exclusive, reverse), 1e-11)


@settings(max_examples=30, deadline=None)
@given(case=scan_cases(max_size=6))
def test_property_generic_engine_matches_reference(case):
    import array_api_strict

    x, axis, exclusive, reverse = case
    got = xpops.logcumsumexp(
        array_api_strict.asarray(x), axis=axis, exclusive=exclusive, reverse=reverse
    )
    assert_scan_close(got, reference(x, axis, exclusive, reverse), 1e-11)


@settings(max_examples=25, deadline=None)
@given(case=scan_cases(max_size=40), data=st.data())
def test_property_numpy_small_blocks(case, data):
    """Random shapes and special values across many small blocks of the NumPy engine."""
    e = numpy_engine()
    x, axis, exclusive, reverse = case
    saved = (e._BLOCK, e._CHUNK, e._ROW_LANES)
    e._BLOCK, e._CHUNK = data.draw(st.sampled_from([(8, 3), (32, 5), (100, 32)]))
    e._ROW_LANES = 4
    try:
        got = xpops.logcumsumexp(x, axis=axis, exclusive=exclusive, reverse=reverse)
    finally:
        e._BLOCK, e._CHUNK, e._ROW_LANES = saved
    assert_scan_close(got, reference(x, axis, exclusive, reverse), 1e-10)


# ---- GPU-only accuracy ----------------------------------------------------------------------


def test_accuracy_float32_2_24_on_gpu(cupy_only):
    """2**24 float32 N(0, 10**2) values within 2e-5 of a long double reference."""
    cupy = cupy_only
    x = np.random.default_rng(16).normal(0, 10, 2**24).astype(np.float32)
    got = xpops.logcumsumexp(cupy.asarray(x)).get()
    assert got.dtype == np.float32
    want = long_double_reference(x.astype(np.float64))
    assert float(np.max(np.abs(got.astype(np.longdouble) - want))) < 2e-5


def test_accuracy_non_contiguous_on_gpu(cupy_only):
    cupy = cupy_only
    x = np.random.default_rng(17).normal(0, 10, (2**17, 8))
    got = xpops.logcumsumexp(cupy.asarray(x)[:, 3], axis=0).get()
    assert float(np.max(np.abs(got - long_double_reference(x[:, 3])))) < 1e-13
    got = xpops.logcumsumexp(cupy.asarray(x).T, axis=1).get()
    want = long_double_reference(x[:, 5])
    assert float(np.max(np.abs(got[5] - want))) < 1e-13


# ---- GPU-only: every kernel at its block and tile boundaries, poisoned memory, > 2**31 ---------


def _reference_along(x, axis, exclusive, reverse):
    """Reference by np.logaddexp.accumulate on a moved, possibly reversed view, in long double:
    a sequential float64 scan drifts by about 1e-11 over 500,000 elements."""
    y = np.moveaxis(np.asarray(x, dtype=np.longdouble), axis, -1)
    if reverse:
        y = y[..., ::-1]
    with np.errstate(invalid="ignore"):
        r = np.logaddexp.accumulate(y, axis=-1)
    if exclusive:
        r = np.concatenate([np.full((*r.shape[:-1], 1), -np.inf), r[..., :-1]], axis=-1)
    if reverse:
        r = r[..., ::-1]
    return np.moveaxis(r, -1, axis).astype(np.float64)


def _assert_scan_equal(got, want, atol):
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    inf = np.isinf(want)
    np.testing.assert_array_equal(got[inf], want[inf])
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=0, atol=atol)


def _poison_pool(cupy, nbytes):
    """Leave NaN-filled blocks in CuPy's memory pool so unwritten outputs show up as NaN."""
    junk = cupy.full(nbytes // 4 + 1024, np.nan, dtype=np.float32)
    del junk


def _kernel_cases():
    from xpops._cupy import cumulative as cc

    for name in ("float32", "float64"):
        chunk = cc.ROW_CHUNK[name]
        col = cc.COLUMN_ITEMS[name]
        for kind in ("tiles", "tiles_staged"):
            tile = cc.TILES_BLOCK * cc.tile_items(kind, name)
            # the last: rows long enough for the L2 prefetch
            tile_shapes = [
                (1,),
                (tile - 1,),
                (tile,),
                (tile + 1,),
                (3 * tile + 5,),
                (3, 2 * tile + 1),
                (2, (cc.TILES_PREFETCH_MIN_TILES + 3) * tile + 7),
            ]
            yield (kind, name, tile_shapes)
        yield (
            "rows",
            name,
            [
                (cc.ROWS_BLOCK - 1, chunk - 1),
                (cc.ROWS_BLOCK, chunk),
                (cc.ROWS_BLOCK + 1, chunk + 1),
                (5, 2 * chunk + 3),
                (300, 1),
            ],
        )
        yield (
            "columns",
            name,
            [
                (col - 1, 3),
                (col, cc.BLOCK),
                (col + 1, cc.BLOCK + 1),
                (2 * col + 3, 5, 7),
                (3, 1, 2),
            ],
        )
        run = cc.COLUMN_BLOCK_ITEMS[name]
        chunk_rows = cc.COLUMN_BLOCK_THREADS // 32 * run
        yield (
            "column_blocks",
            name,
            [
                (1, 3),
                (run - 1, 33),
                (chunk_rows, 32),
                (chunk_rows + 1, 31, 3),
                (2 * chunk_rows + run + 1, 65),
                (3, 1, 2),
            ],
        )


@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_kernels_at_boundaries(cupy_only, exclusive, reverse):
    from xpops._cupy import cumulative as cc

    cupy = cupy_only
    rng = np.random.default_rng(7)
    for kernel, name, shapes in _kernel_cases():
        atol = 1e-4 if name == "float32" else 1e-11  # results reach about 50
        for shape in shapes:
            axis = 0 if kernel.startswith("column") else len(shape) - 1
            x = (rng.standard_normal(shape) * 10).astype(name)
            _poison_pool(cupy, 2 * x.nbytes)
            got = cc.logcumsumexp(cupy.asarray(x), axis, exclusive, reverse, kernel=kernel)
            want = _reference_along(x, axis, exclusive, reverse)
            _assert_scan_equal(got.get(), want, atol)


@pytest.mark.parametrize("kernel", ["tiles", "tiles_staged", "rows", "columns", "column_blocks"])
def test_kernels_special_values(cupy_only, kernel):
    """NaN, +-inf and jumps of 2000 anywhere in a run take the exact path; results stay exact."""
    from xpops._cupy import cumulative as cc

    cupy = cupy_only
    rng = np.random.default_rng(11)
    shape = {"tiles": (20000,), "tiles_staged": (20000,), "rows": (200, 70)}.get(kernel, (300, 70))
    axis = 0 if kernel.startswith("column") else len(shape) - 1
    for name in ("float32", "float64"):
        x = (rng.standard_normal(shape) * 10).astype(name)
        flat = x.reshape(-1)
        idx = rng.permutation(flat.size)
        flat[idx[:40]] = -np.inf
        flat[idx[40:45]] = np.inf
        flat[idx[45:50]] = np.nan
        flat[idx[50:90]] = 1000.0
        flat[idx[90:130]] = -1000.0
        for exclusive in (False, True):
            for reverse in (False, True):
                got = cc.logcumsumexp(cupy.asarray(x), axis, exclusive, reverse, kernel=kernel)
                want = _reference_along(x, axis, exclusive, reverse)
                atol = 1e-4 if name == "float32" else 1e-11
                _assert_scan_equal(got.get(), want, atol)
        allneg = np.full(shape, -np.inf, dtype=name)
        got = cc.logcumsumexp(cupy.asarray(allneg), axis, False, False, kernel=kernel)
        assert bool(cupy.all(got == -np.inf))


@pytest.mark.parametrize("kernel", ["tiles", "tiles_staged"])
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_tiles_float64_exp_log_forms(cupy_only, kernel, exclusive, reverse):
    """The float64 tiles kernels' table exp and log over their whole range: exp of 0 down to
    -750 (below -707 the library exp, subnormal and zero results), log of sums from about
    e**-640 (exponents near -920) to thousands, against a long double reference."""
    from xpops._cupy import cumulative as cc

    cupy = cupy_only
    rng = np.random.default_rng(12)
    tile = cc.TILES_BLOCK * cc.tile_items(kernel, "float64")
    x = rng.uniform(-740.0, 10.0, 6 * tile + 3)
    starts = np.arange(0, x.size, tile)
    x[starts] = 0.0  # each tile starts within 650 of its maximum: the fast path
    # tile 0: a maximum 640 above its first element, so its first sums are near e**-640
    x[:tile] = rng.uniform(-1.0, 0.0, tile)
    x[0] = -640.0
    # tile 3 far below the prefix: sums of e**-600 added to a prefix of about 1
    x[3 * tile : 4 * tile] = rng.uniform(-620.0, -600.0, tile)
    # tiles 4, 5: many equal terms, sums in the thousands
    x[4 * tile : 6 * tile] = rng.uniform(-1e-3, 1e-3, 2 * tile)
    if reverse:  # the same patterns met in scan order
        x = x[::-1].copy()
    _poison_pool(cupy, 2 * x.nbytes)
    got = cc.logcumsumexp(cupy.asarray(x), 0, exclusive, reverse, kernel=kernel)
    want = _reference_along(x, 0, exclusive, reverse)
    _assert_scan_equal(got.get(), want, 1e-11)


def _carry_cases():
    """(shape, axis) per kernel family: tiles (float32) and tiles_staged (float64) take the
    carry in the kernel, rows and columns add it afterwards."""
    from xpops._cupy import cumulative as cc

    tile = cc.TILES_BLOCK * cc.tile_items("tiles", "float32")
    yield (1,), 0
    yield (3 * tile + 5,), 0
    yield (3, 2 * tile + 1), 1
    yield (cc.ROWS_KERNEL_MIN_ROWS, 5), 1  # rows
    yield (40, 3, 7), 0  # columns


@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_scan_from_carry_and_totals(cupy_only, exclusive, reverse, dtype):
    """The Dask engine's two CuPy helpers against a long double reference: the scan started
    from a carry (a scan of the carry placed before the data, the carry's output dropped) and
    the totals along the axis; carries and rows with NaN, +-inf, all -inf and jumps of 1000."""
    from xpops._cupy import cumulative as cc

    cupy = cupy_only
    rng = np.random.default_rng(13)
    atol = 1e-4 if dtype == "float32" else 1e-11
    specials = [0.0, -np.inf, np.inf, np.nan, 1000.0, -1000.0, 3.5]
    for shape, axis in _carry_cases():
        x = (rng.standard_normal(shape) * 10).astype(dtype)
        rows = np.moveaxis(x, axis, -1).reshape(-1, shape[axis])
        if rows.shape[0] >= 3 and rows.shape[1] >= 3:  # rows with special values
            rows[0, :] = -np.inf
            rows[1, rows.shape[1] // 2] = np.inf
            rows[2, 1] = np.nan
        x = np.moveaxis(rows.reshape(*np.delete(shape, axis), shape[axis]), -1, axis)
        x = np.ascontiguousarray(x)
        cshape = list(shape)
        cshape[axis] = 1
        carry = rng.choice(specials, size=cshape).astype(dtype)
        joined = np.concatenate([x, carry] if reverse else [carry, x], axis=axis)
        want = _reference_along(joined, axis, exclusive, reverse)
        keep = [slice(None)] * x.ndim
        keep[axis] = slice(0, -1) if reverse else slice(1, None)
        _poison_pool(cupy, 2 * x.nbytes)
        got = cc.logcumsumexp_from(cupy.asarray(x), cupy.asarray(carry), axis, exclusive, reverse)
        assert got.dtype == x.dtype
        assert got.shape == x.shape
        _assert_scan_equal(got.get(), want[tuple(keep)], atol)

        total = cc.total(cupy.asarray(x), axis, reverse)
        assert total.shape == tuple(cshape)
        with np.errstate(invalid="ignore"):
            want_total = np.logaddexp.reduce(x.astype(np.longdouble), axis=axis, keepdims=True)
        _assert_scan_equal(total.get(), want_total, atol)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_totals_of_long_rows(cupy_only, dtype):
    """The Dask engine's row totals where each block of the reduction takes many steps (rows of
    millions of elements), against a long double reference: a row with a NaN, one with +inf,
    one of -inf only, one with a jump of 1000, and a row start that is not vector-aligned."""
    from xpops._cupy import cumulative as cc

    cupy = cupy_only
    rng = np.random.default_rng(14)
    atol = 1e-4 if dtype == "float32" else 1e-11
    L = cc.TOTAL_BLOCKS_PER_SM * 200 * cc.TOTAL_ROUNDS * cc.TILES_BLOCK * 4 + 3
    x = (rng.standard_normal((5, L)) * 10).astype(dtype)
    x[0, L // 3] = np.nan
    x[1, 2 * L // 3] = np.inf
    x[2] = -np.inf
    x[3, L - 2] = 1000.0
    got = cc.total(cupy.asarray(x), 1, False).get()
    assert got.shape == (5, 1)
    with np.errstate(invalid="ignore"):
        want = np.logaddexp.reduce(x.astype(np.longdouble), axis=1, keepdims=True)
    _assert_scan_equal(got, want, atol)
    one = cc.total(cupy.asarray(x[4]), 0, True).get()
    _assert_scan_equal(one, want[4], atol)


def test_kernel_choice(cupy_only):
    from xpops._cupy.cumulative import choose_kernel

    assert choose_kernel((2**20,), 0) == "tiles"
    assert choose_kernel((2**20, 64), 1) == "rows"
    assert choose_kernel((64, 2**20), 1) == "tiles"
    assert choose_kernel((8192, 32768), 0) == "column_blocks"
    assert choose_kernel((2**20, 16), 0) == "columns"
    assert choose_kernel((4, 5, 6), 1) == "columns"


def test_non_contiguous_input_on_gpu(cupy_only):
    cupy = cupy_only
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((300, 500)) * 10).astype(np.float32)
    xd = cupy.asarray(x)
    for view, ref_view, axis in [
        (xd[:, ::2], x[:, ::2], 1),
        (xd.T, x.T, 0),
        (xd.T, x.T, 1),
        (xd[::3, 1:], x[::3, 1:], 0),
    ]:
        before = view.copy()
        got = xpops.logcumsumexp(view, axis=axis)
        _assert_scan_equal(got.get(), _reference_along(ref_view, axis, False, False), 1e-4)
        assert bool(cupy.array_equal(view, before))


def test_long_float32_scan_on_gpu(cupy_only):
    """2**29 + 7 float32 elements (more than 2**31 bytes) against a float64 cumsum on the GPU."""
    cupy = cupy_only
    n = 2**29 + 7
    x = cupy.random.default_rng(5).standard_normal(n, dtype=np.float32)
    got = xpops.logcumsumexp(x)
    want = cupy.log(cupy.cumsum(cupy.exp(x.astype(np.float64))))
    err = float(cupy.max(cupy.abs(got.astype(np.float64) - want)))
    assert err < 1e-4


@pytest.mark.slow
def test_more_than_2_31_elements_float16(cupy_only):
    """2**31 + 1000 float16 elements (accumulated in float32), checked chunk by chunk."""
    cupy = cupy_only
    n = 2**31 + 1000
    cupy.get_default_memory_pool().free_all_blocks()  # what earlier tests left cached
    free, _ = cupy.cuda.runtime.memGetInfo()
    if free < 40 * 2**30:
        pytest.skip("not enough GPU memory")
    x = cupy.random.default_rng(9).standard_normal(n, dtype=np.float32).astype(np.float16)
    got = xpops.logcumsumexp(x)
    assert got.dtype == np.float16
    assert got.shape == (n,)
    carry = 0.0
    step = 2**28
    for start in range(0, n, step):
        seg = x[start : start + step].astype(np.float64)
        sums = cupy.cumsum(cupy.exp(seg)) + carry
        carry = float(sums[-1])
        err = float(
            cupy.max(cupy.abs(got[start : start + step].astype(np.float64) - cupy.log(sums)))
        )
        assert err < 0.02, start  # float16 spacing at 22 is 0.0156
    del x, got
    cupy.get_default_memory_pool().free_all_blocks()
