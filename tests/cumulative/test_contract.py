"""logcumsumexp through its contract on every backend: examples, axes and flags, special
values, complex, dtypes, shapes, errors and accuracy, against independent float64 / long double
references."""

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings

import xpops
from xpops._lib._compat import array_namespace

from .._support import backend_name, library_of, to_numpy
from ._reference import (
    assert_scan_close,
    assert_single_terms_exact,
    long_double_reference,
    reference,
    scan_cases,
    sparse_lanes,
    tolerance,
)

nan, inf = np.nan, np.inf


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
        assert library_of(out) == backend_name(xp)


def test_length_one_axis(xp):
    x_np = np.random.default_rng(6).standard_normal((3, 1, 4))
    x = xp.asarray(x_np)
    assert_scan_close(xpops.logcumsumexp(x, axis=1), x_np, 1e-15)
    out = xpops.logcumsumexp(x, axis=1, exclusive=True, reverse=True)
    assert_scan_close(out, np.full((3, 1, 4), -inf), 0)


@pytest.mark.parametrize("shape", [(1,), (3, 1), (5,)])
def test_result_is_a_new_array(xp, shape):
    if backend_name(xp) == "jax":
        pytest.skip("JAX arrays are immutable: a result cannot alias its input")
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
        assert library_of(out) == backend_name(xp)
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
    for bad, name in (("ab", "builtins.str"), ({1: 2}, "builtins.dict"), (None, "None")):
        with pytest.raises(TypeError, match=f"`x` must be an array, got {name}"):
            xpops.logcumsumexp(bad)
    with pytest.raises(TypeError, match="`x` must have a numeric dtype, got <U"):
        xpops.logcumsumexp([1, "a"])
    with pytest.raises(TypeError, match="`x` must have a numeric dtype, got <U1"):
        xpops.logcumsumexp(np.array(["a", "b"]))
    with pytest.raises(TypeError, match="`x` must have a numeric dtype, got object"):
        xpops.logcumsumexp(np.array([1.0, None]))


@pytest.mark.parametrize(
    ("value", "axis"),
    [
        ([0.0, 1.0], None),
        ((0.0, 1.0, -2.5), -1),
        ([[0.0, 1.0], [2.0, 3.0]], 0),
        ([[0.0, 1.0], [2.0, 3.0]], 1),
        ([1, 2, 3], None),
        ([True, False], None),
        ([1 + 2j, 3 - 1j], None),
        (3.0, None),
        (3.0, 0),
        (-7, None),
        (False, None),
        (2j, -1),
    ],
)
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_lists_and_python_scalars_are_numpy_arrays(value, axis, exclusive, reverse):
    """A list, tuple or Python scalar is taken as ``numpy.asarray`` of it (issue 22, item 11)."""
    got = xpops.logcumsumexp(value, axis=axis, exclusive=exclusive, reverse=reverse)
    want = xpops.logcumsumexp(np.asarray(value), axis=axis, exclusive=exclusive, reverse=reverse)
    assert type(got) is np.ndarray
    assert got.dtype == want.dtype
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_list_results_against_a_reference():
    got = np.asarray(xpops.logcumsumexp([0.0, 1.0]))
    np.testing.assert_allclose(got, [0.0, np.logaddexp(0.0, 1.0)])
    one = np.asarray(xpops.logcumsumexp(3.0))
    assert one.shape == (1,)
    assert one[0] == 3.0
    assert np.asarray(xpops.logcumsumexp(3.0, axis=0)).shape == ()
    assert np.asarray(xpops.logcumsumexp([1, 2], dtype=np.float32)).dtype == np.float32


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


# ---- properties -----------------------------------------------------------------------------


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


# ---- a prefix of a single finite term gives that term exactly (issue 22, items 5 and 6) --------


@pytest.mark.parametrize("value", [1e-20, 1e-10, -1e-10, 0.3, -7.5, 1000.0, -1000.0])
def test_one_term_is_exact(xp, value):
    """``[x]`` gives ``[x]``, and so does every output of one finite term among -inf, on every
    backend, exclusive and reversed (as ``numpy.logaddexp.accumulate`` and PyTorch do)."""
    for dtype_name in ("float64", "float32"):
        x = np.array([value], dtype=dtype_name)
        got = to_numpy(xpops.logcumsumexp(xp.asarray(x)))
        assert got[0] == x[0]
        y = np.array([-inf, value, -inf, -inf], dtype=dtype_name)
        for exclusive in (False, True):
            for reverse in (False, True):
                out = xpops.logcumsumexp(xp.asarray(y), exclusive=exclusive, reverse=reverse)
                assert_single_terms_exact(to_numpy(out), y, 0, exclusive, reverse)


@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_single_finite_terms_exact_every_backend(xp, exclusive, reverse):
    """Lanes of -inf with a few finite terms, followed by larger and smaller ones, real and
    complex (imaginary parts inside (-pi, pi]), along every axis."""
    rng = np.random.default_rng(5)
    for shape in [(40, 30), (30, 3, 17)]:
        for axis in range(len(shape)):
            x = sparse_lanes(rng, shape, axis, "float64", reverse)
            for z in (x, x + 1j * rng.uniform(-3.0, 3.0, shape)):
                got = xpops.logcumsumexp(
                    xp.asarray(z), axis=axis, exclusive=exclusive, reverse=reverse
                )
                got = to_numpy(got)
                assert_single_terms_exact(got, z, axis, exclusive, reverse)
                assert_scan_close(got, reference(z, axis, exclusive, reverse), 1e-10)


@pytest.mark.parametrize("chunks", [1, 4, 7, 30])
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_single_finite_terms_exact_dask(chunks, exclusive, reverse):
    """The Dask engine, with the single term in one block and -inf in the next ones (the
    carry is the term), or the term the carry of a block of larger terms."""
    da = pytest.importorskip("dask.array")
    rng = np.random.default_rng(6)
    for axis in (0, 1):
        x = sparse_lanes(rng, (30, 40), axis, "float64", reverse)
        for z in (x, x + 1j * rng.uniform(-3.0, 3.0, x.shape)):
            dz = da.from_array(z, chunks=chunks)
            got = xpops.logcumsumexp(dz, axis=axis, exclusive=exclusive, reverse=reverse)
            got = np.asarray(got.compute())
            assert_single_terms_exact(got, z, axis, exclusive, reverse)
            assert_scan_close(got, reference(z, axis, exclusive, reverse), 1e-10)
