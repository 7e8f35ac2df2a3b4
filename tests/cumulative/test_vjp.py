"""The backward rule of logcumsumexp (`xpops.vjp` on every backend, the PyTorch binding),
against central finite differences of an independent float64 scan, a brute-force double sum of
``g_i exp(x_j - y_i)`` and PyTorch's own autograd of ``torch.logcumsumexp``."""

import itertools
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings

import xpops

from .._support import backend_name, to_numpy
from ._gradients import assert_close, assert_scaled, brute_force_vjp, finite_difference_vjp
from ._reference import scan_cases

nan, inf, E = np.nan, np.inf, np.e
FLAGS = list(itertools.product([False, True], repeat=2))  # (exclusive, reverse)


def pull(xp_x, xp_g, **kwargs):
    """The cotangent of `x` from `xpops.vjp`, with the forward result."""
    out, pullback = xpops.vjp(xpops.logcumsumexp, xp_x, **kwargs)
    (dx,) = pullback(xp_g)
    return out, dx


def lanes(rng, shape, dtype: Any = np.float64) -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype) * 3


# ---- every axis and flag, against finite differences ----------------------------------------


@pytest.mark.parametrize("shape", [(5,), (3, 4), (2, 3, 4)])
@pytest.mark.parametrize(("exclusive", "reverse"), FLAGS)
def test_every_axis_and_flag_finite_differences(xp, shape, exclusive, reverse):
    rng = np.random.default_rng(len(shape) + 2 * exclusive + 4 * reverse)
    x_np = lanes(rng, shape)
    for axis in [None, *range(-len(shape), len(shape))]:
        out_shape = (x_np.size,) if axis is None else shape
        g_np = rng.standard_normal(out_shape)  # both signs
        kwargs = {"axis": axis, "exclusive": exclusive, "reverse": reverse}
        out, dx = pull(xp.asarray(x_np), xp.asarray(g_np), **kwargs)
        assert dx.shape == x_np.shape
        assert dx.dtype == xp.asarray(x_np).dtype
        assert type(dx) is type(out)
        want = finite_difference_vjp(x_np, g_np, **kwargs)
        assert_close(dx, want, atol=1e-7)


@pytest.mark.parametrize(("exclusive", "reverse"), FLAGS)
def test_brute_force_every_flag(xp, exclusive, reverse):
    rng = np.random.default_rng(5)
    x_np = lanes(rng, (4, 7)) * 5
    g_np = rng.standard_normal((4, 7))
    _, dx = pull(xp.asarray(x_np), xp.asarray(g_np), axis=1, exclusive=exclusive, reverse=reverse)
    want, scale = brute_force_vjp(x_np, g_np, 1, exclusive, reverse)
    assert_scaled(dx, want, scale, 1e-13)


def test_softmax_of_the_last_output():
    x = np.array([0.0, 1.0, 2.0])
    _, dx = pull(x, np.array([0.0, 0.0, 1.0]))
    np.testing.assert_allclose(dx, np.exp(x) / np.exp(x).sum(), rtol=1e-15)


def test_axis_none_scans_row_major_and_keeps_the_shape(xp):
    rng = np.random.default_rng(6)
    x_np = lanes(rng, (3, 4))
    g_np = rng.standard_normal(12)
    _, dx = pull(xp.asarray(x_np), xp.asarray(g_np), reverse=True)
    want, _ = brute_force_vjp(x_np.reshape(-1), g_np, 0, False, True)
    assert dx.shape == (3, 4)
    np.testing.assert_allclose(to_numpy(dx), want.reshape(3, 4), atol=1e-13)


def test_zero_dimensional(xp):
    x = xp.asarray(2.5)
    g1 = xp.asarray(np.array([-3.0]))
    for axis in [None, 0, -1]:
        _, dx = pull(x, g1 if axis is None else xp.reshape(g1, ()), axis=axis)
        assert dx.shape == ()
        assert float(to_numpy(dx)) == pytest.approx(-3.0, rel=1e-15)  # d x / d x
        _, dx = pull(x, g1 if axis is None else xp.reshape(g1, ()), axis=axis, exclusive=True)
        assert float(to_numpy(dx)) == 0.0  # no output holds x


@pytest.mark.parametrize("shape", [(0,), (2, 0), (0, 3)])
def test_zero_size(xp, shape):
    x = xp.asarray(np.zeros(shape))
    for axis, (exclusive, reverse) in itertools.product([None, 0, -1], FLAGS):
        out, pullback = xpops.vjp(
            xpops.logcumsumexp, x, axis=axis, exclusive=exclusive, reverse=reverse
        )
        (dx,) = pullback(xp.zeros(out.shape, dtype=out.dtype))
        assert dx.shape == shape
        assert dx.dtype == x.dtype


def test_broadcast_cotangent():
    x = np.random.default_rng(7).standard_normal((3, 5))
    g = np.broadcast_to(np.array([1.0, -2.0, 0.5, 0.0, 3.0]), (3, 5))
    _, dx = pull(x, g, axis=1, reverse=True)
    want, _ = brute_force_vjp(x, np.array(g), 1, False, True)
    np.testing.assert_allclose(dx, want, atol=1e-13)


def test_list_input():
    _, dx = pull([0.0, 1.0], np.array([1.0, 1.0]))
    assert isinstance(dx, np.ndarray)
    np.testing.assert_allclose(dx, [1 + 1 / (1 + np.e), np.e / (1 + np.e)], rtol=1e-15)


# ---- special values ---------------------------------------------------------------------------


@pytest.mark.parametrize(("exclusive", "reverse"), FLAGS)
def test_minus_inf_prefix_gives_zero(xp, exclusive, reverse):
    x_np = np.array([-inf, -inf, 0.5, -inf, 1.0, -inf])
    if reverse:
        x_np = x_np[::-1].copy()
    g_np = np.array([2.0, -1.0, 3.0, -0.5, 1.5, 0.25])
    _, dx = pull(xp.asarray(x_np), xp.asarray(g_np), exclusive=exclusive, reverse=reverse)
    got = to_numpy(dx)
    assert np.isfinite(got).all()
    np.testing.assert_array_equal(got[x_np == -inf], 0.0)
    want, _ = brute_force_vjp(x_np, g_np, None, exclusive, reverse)
    np.testing.assert_allclose(got, want, atol=1e-15)


@pytest.mark.parametrize(("exclusive", "reverse"), FLAGS)
def test_all_minus_inf_lane_gives_zero(xp, exclusive, reverse):
    x_np = np.full((2, 4), -inf)
    x_np[1] = [0.0, 1.0, -2.0, 0.5]
    g_np = np.array([[1.0, -5.0, 1e300, 2.0], [1.0, 2.0, -1.0, 0.5]])
    _, dx = pull(xp.asarray(x_np), xp.asarray(g_np), axis=1, exclusive=exclusive, reverse=reverse)
    got = to_numpy(dx)
    np.testing.assert_array_equal(got[0], 0.0)
    want, _ = brute_force_vjp(x_np, g_np, 1, exclusive, reverse)
    np.testing.assert_allclose(got[1], want[1], atol=1e-14)


@pytest.mark.parametrize("reverse", [False, True])
def test_exclusive_first_output_contributes_nothing(xp, reverse):
    x_np = np.array([0.3, -1.0, 2.0, 0.7])
    first = -1 if reverse else 0
    g_np = np.array([1.0, -2.0, 0.5, 1.0])
    g_big = g_np.copy()
    g_big[first] = -1e300  # the cotangent of the -inf output
    _, dx = pull(xp.asarray(x_np), xp.asarray(g_np), exclusive=True, reverse=reverse)
    _, dx_big = pull(xp.asarray(x_np), xp.asarray(g_big), exclusive=True, reverse=reverse)
    np.testing.assert_array_equal(to_numpy(dx), to_numpy(dx_big))
    # the last input in scan order is summed into no output
    assert to_numpy(dx)[-1 if not reverse else 0] == 0.0


@pytest.mark.parametrize(
    ("values", "g", "kwargs", "expected"),
    [
        # a NaN input: NaN for itself and the inputs its NaN outputs cover (nonzero cotangent)
        ([0.0, nan, 1.0], [1.0, 0.0, 0.0], {}, [1.0, nan, 0.0]),
        ([0.0, nan, 1.0], [1.0, 0.0, 1.0], {}, [nan, nan, nan]),
        ([0.0, nan, 1.0], [0.0, 0.0, 2.0], {"reverse": True}, [0.0, nan, 2.0]),
        ([1.0, nan, 2.0], [0.0, 1.0, 1.0], {"exclusive": True}, [nan, nan, 0.0]),
        (
            [1.0, 2.0, nan],
            [0.0, 1.0, 1.0],
            {"exclusive": True},
            [1 + 1 / (1 + E), E / (1 + E), nan],
        ),
        # +inf: NaN for itself, 0 for the finite inputs of its +inf outputs
        ([0.0, inf, 1.0], [1.0, 1.0, 1.0], {}, [1.0, nan, 0.0]),
        ([0.0, inf, 1.0], [1.0, 1.0, 1.0], {"reverse": True}, [0.0, nan, 1.0]),
        ([0.0, inf, 1.0], [1.0, 1.0, 1.0], {"exclusive": True}, [1.0, nan, 0.0]),
        # -inf: 0, and the identity for the others
        ([-inf, 0.0], [4.0, -3.0], {}, [0.0, -3.0]),
        ([0.0, -inf], [4.0, -3.0], {}, [1.0, 0.0]),
    ],
)
def test_special_values_exactly(xp, values, g, kwargs, expected):
    _, dx = pull(xp.asarray(np.array(values)), xp.asarray(np.array(g)), **kwargs)
    assert_close(dx, expected, atol=1e-15)


@pytest.mark.parametrize(("exclusive", "reverse"), FLAGS)
def test_large_magnitudes_float64(xp, exclusive, reverse):
    x_np = np.array([700.0, -700.0, 699.5, -699.0, 700.0, 710.0, -745.0, -710.0])
    g_np = np.array([1.0, -2.0, 0.5, 3.0, -1.0, 0.25, 2.0, -0.75])
    _, dx = pull(xp.asarray(x_np), xp.asarray(g_np), exclusive=exclusive, reverse=reverse)
    got = to_numpy(dx)
    assert np.isfinite(got).all()
    want, scale = brute_force_vjp(x_np, g_np, None, exclusive, reverse)
    assert_scaled(got, want, scale, 1e-12)


def test_large_magnitudes_float32(xp):
    x_np = np.array([80.0, -80.0, 79.0, -85.0, 88.0, -100.0], dtype=np.float32)
    g_np = np.array([1.0, -2.0, 0.5, 3.0, -1.0, 0.25], dtype=np.float32)
    for exclusive, reverse in FLAGS:
        _, dx = pull(xp.asarray(x_np), xp.asarray(g_np), exclusive=exclusive, reverse=reverse)
        assert dx.dtype == xp.float32
        got = to_numpy(dx).astype(np.float64)
        assert np.isfinite(got).all()
        want, scale = brute_force_vjp(x_np.astype(np.float64), g_np, None, exclusive, reverse)
        assert_scaled(got, want, scale, 1e-5, floor=1e-37)


@settings(max_examples=40, deadline=None)
@given(scan_cases(max_size=7))
def test_property_special_values_against_brute_force(case):
    x, axis, exclusive, reverse = case
    rng = np.random.default_rng(x.size)
    out_shape = (x.size,) if axis is None else x.shape
    g = rng.standard_normal(out_shape)
    g[rng.random(out_shape) < 0.2] = 0.0
    _, dx = pull(x, g, axis=axis, exclusive=exclusive, reverse=reverse)
    want, scale = brute_force_vjp(x, g, axis, exclusive, reverse)
    np.testing.assert_array_equal(np.isnan(dx), np.isnan(want))
    ok = ~np.isnan(want)
    assert (np.abs(dx - want)[ok] <= 1e-11 * scale[ok] + 1e-300).all()


# ---- dtypes ------------------------------------------------------------------------------------


def test_float32_kept(xp):
    rng = np.random.default_rng(9)
    x_np = lanes(rng, (3, 6), np.float32)
    g_np = rng.standard_normal((3, 6)).astype(np.float32)
    for exclusive, reverse in FLAGS:
        out, dx = pull(
            xp.asarray(x_np), xp.asarray(g_np), axis=1, exclusive=exclusive, reverse=reverse
        )
        assert out.dtype == xp.float32
        assert dx.dtype == xp.float32
        want, scale = brute_force_vjp(x_np.astype(np.float64), g_np, 1, exclusive, reverse)
        assert_scaled(dx, want, scale, 1e-5, floor=1e-37)


def test_float16_computes_in_float32(xp):
    if not hasattr(xp, "float16"):
        pytest.skip(f"{backend_name(xp)} has no float16")
    rng = np.random.default_rng(10)
    x_np = lanes(rng, (40,), np.float16)
    g_np = rng.standard_normal(40).astype(np.float16)
    out, dx = pull(xp.asarray(x_np), xp.asarray(g_np))
    assert out.dtype == xp.float16
    assert dx.dtype == xp.float16
    want, scale = brute_force_vjp(x_np.astype(np.float64), g_np.astype(np.float64))
    # one rounding to float16 at the end (not one per step): half an ulp of the result's scale
    assert_scaled(dx, want, scale, 1e-3, floor=6e-8)


def test_dtype_argument(xp):
    rng = np.random.default_rng(11)
    x32 = lanes(rng, (2, 5), np.float32)
    x64 = x32.astype(np.float64)
    g = rng.standard_normal((2, 5))
    want, scale = brute_force_vjp(x64, g, 1)
    # float32 x scanned in float64: a float32 gradient of float64 accuracy
    out, dx = pull(xp.asarray(x32), xp.asarray(g), axis=1, dtype=xp.float64)
    assert out.dtype == xp.float64
    assert dx.dtype == xp.float32
    np.testing.assert_allclose(to_numpy(dx), want, rtol=1e-6)
    # float64 x scanned in float32: a float64 gradient of float32 accuracy
    out, dx = pull(xp.asarray(x64), xp.asarray(g.astype(np.float32)), axis=1, dtype=xp.float32)
    assert out.dtype == xp.float32
    assert dx.dtype == xp.float64
    assert_scaled(dx, want, scale, 1e-5, floor=1e-37)
    # float64 x scanned as float16 (computed in float32), the gradient passed through the cast
    if not hasattr(xp, "float16"):
        return
    g16 = g.astype(np.float16)
    out, dx = pull(xp.asarray(x64), xp.asarray(g16), axis=1, dtype=xp.float16)
    assert out.dtype == xp.float16
    assert dx.dtype == xp.float64
    want16, scale16 = brute_force_vjp(x64.astype(np.float16).astype(np.float64), g16, 1)
    assert_scaled(dx, want16, scale16, 1e-5, floor=1e-37)


def test_cotangent_of_another_floating_dtype(xp):
    x = xp.asarray(np.array([0.0, 1.0, 2.0], dtype=np.float32))
    _, dx = pull(x, xp.asarray(np.array([0.0, 0.0, 1.0])))  # float64 cotangent
    assert dx.dtype == xp.float32
    np.testing.assert_allclose(to_numpy(dx), [0.09003057, 0.24472847, 0.66524096], rtol=1e-6)


@pytest.mark.parametrize(("exclusive", "reverse"), FLAGS)
def test_complex_finite_differences(xp, exclusive, reverse):
    rng = np.random.default_rng(12)
    x_np = lanes(rng, (2, 4)) + 1j * lanes(rng, (2, 4))
    g_np = rng.standard_normal((2, 4)) + 1j * rng.standard_normal((2, 4))
    for axis in [None, 0, 1]:
        g = g_np.reshape(-1) if axis is None else g_np
        kwargs = {"axis": axis, "exclusive": exclusive, "reverse": reverse}
        _, dx = pull(xp.asarray(x_np), xp.asarray(g), **kwargs)
        assert dx.dtype == xp.complex128
        assert_close(dx, finite_difference_vjp(x_np, g, **kwargs), atol=1e-7)


def test_complex_large_real_parts_and_minus_inf(xp):
    x_np = np.array([700 + 1j, -700 - 2j, complex(-inf, 0.5), 699 + 3j, 710 - 1j])
    g_np = np.array([1 - 1j, 2.0, -1j, 0.5 + 0.5j, -1.0])
    for exclusive, reverse in FLAGS:
        _, dx = pull(xp.asarray(x_np), xp.asarray(g_np), exclusive=exclusive, reverse=reverse)
        got = to_numpy(dx)
        assert np.isfinite(got).all()
        assert got[2] == 0
        want, scale = brute_force_vjp(x_np, g_np, None, exclusive, reverse)
        assert_scaled(got, want, scale, 1e-12)


@pytest.mark.parametrize(
    ("values", "g", "expected"),
    [
        # real part -inf: 0, whatever the imaginary part
        ([complex(-inf, 3), 1 + 1j, complex(-inf, inf)], [1, 1j, 2], [0, 2 + 1j, 0]),
        ([1 + 0j, complex(nan, 1)], [1, 0], [1, complex(nan, nan)]),
        ([1 + 0j, complex(inf, 0.5), 2j], [1, 1, 1], [1, complex(nan, nan), 0]),
    ],
)
def test_complex_special_values(xp, values, g, expected):
    x = xp.asarray(np.array(values, dtype=np.complex128))
    _, dx = pull(x, xp.asarray(np.array(g, dtype=np.complex128)))
    assert_close(dx, np.array(expected, dtype=np.complex128), atol=1e-15)


def test_complex64_kept(xp):
    rng = np.random.default_rng(13)
    x_np = (lanes(rng, (6,)) + 1j * lanes(rng, (6,))).astype(np.complex64)
    g_np = (rng.standard_normal(6) + 1j * rng.standard_normal(6)).astype(np.complex64)
    _, dx = pull(xp.asarray(x_np), xp.asarray(g_np))
    assert dx.dtype == xp.complex64
    want, scale = brute_force_vjp(x_np.astype(np.complex128), g_np)
    assert_scaled(dx, want, scale, 1e-5, floor=1e-37)


def test_real_input_complex_dtype(xp):
    rng = np.random.default_rng(14)
    x_np = lanes(rng, (5,))
    g_np = rng.standard_normal(5) + 1j * rng.standard_normal(5)
    out, dx = pull(xp.asarray(x_np), xp.asarray(g_np), dtype=xp.complex128, reverse=True)
    assert out.dtype == xp.complex128
    assert dx.dtype == xp.float64
    want = np.real(finite_difference_vjp(x_np.astype(np.complex128), g_np, reverse=True))
    assert_close(dx, want, atol=1e-7)
    # a real cotangent for a complex output
    _, dx = pull(xp.asarray(x_np), xp.asarray(np.real(g_np)), dtype=xp.complex128)
    assert_close(dx, finite_difference_vjp(x_np, np.real(g_np)), atol=1e-7)


def test_complex_input_real_dtype():
    x = np.array([1 + 2j, -1 + 0.5j, 0.25 - 1j])
    g = np.array([1.0, -2.0, 0.5])
    with pytest.warns(np.exceptions.ComplexWarning):  # NumPy's, for the forward cast
        _, pullback = xpops.vjp(xpops.logcumsumexp, x, dtype=np.float64)
    (dx,) = pullback(g)  # no warning
    assert dx.dtype == np.complex128
    np.testing.assert_array_equal(np.imag(dx), 0.0)
    np.testing.assert_allclose(np.real(dx), finite_difference_vjp(np.real(x), g), atol=1e-7)


# ---- errors and inputs -----------------------------------------------------------------------


@pytest.mark.parametrize("dtype_name", ["int64", "int32", "bool"])
def test_integer_input_has_no_gradient(xp, dtype_name):
    x = xp.asarray(np.arange(3).astype(dtype_name))
    with pytest.raises(TypeError, match=r"`x` of dtype .* has no gradient"):
        xpops.vjp(xpops.logcumsumexp, x)


def test_contract_errors_come_first():
    x = np.zeros(3)
    with pytest.raises(ValueError, match="out of bounds"):
        xpops.vjp(xpops.logcumsumexp, x, axis=1)
    with pytest.raises(TypeError, match="`exclusive` must be a bool"):
        xpops.vjp(xpops.logcumsumexp, x, exclusive=1)
    with pytest.raises(TypeError, match="`dtype` must be"):
        xpops.vjp(xpops.logcumsumexp, x, dtype=np.int32)
    with pytest.raises(TypeError, match="`x` must be an array, got None"):
        xpops.vjp(xpops.logcumsumexp, None)


def test_cotangent_errors(xp):
    x = xp.asarray(np.array([0.0, 1.0]))
    _, pullback = xpops.vjp(xpops.logcumsumexp, x)
    with pytest.raises(TypeError, match="`cotangent` must have a real floating dtype"):
        pullback(xp.asarray(np.array([1, 2])))
    with pytest.raises(TypeError, match="`cotangent` must have a real floating dtype"):
        pullback(xp.asarray(np.array([1 + 0j, 2])))
    with pytest.raises(ValueError, match="shape of the output"):
        pullback(xp.asarray(np.zeros(3)))
    other = np.zeros(2) if backend_name(xp) != "numpy" else pytest.importorskip("torch").zeros(2)
    with pytest.raises(TypeError, match="`cotangent` must be an array of the output's namespace"):
        pullback(other)
    _, pullback = xpops.vjp(xpops.logcumsumexp, xp.asarray(np.array([1j, 0.0])))
    with pytest.raises(TypeError, match="`cotangent` must have a real or complex floating"):
        pullback(xp.asarray(np.array([1, 2])))


def test_cotangent_not_an_array():
    _, pullback = xpops.vjp(xpops.logcumsumexp, np.zeros(2))
    with pytest.raises(TypeError, match="`cotangent` must be an array"):
        pullback([1.0, 2.0])


def test_inputs_unmodified(xp):
    rng = np.random.default_rng(15)
    x_np = lanes(rng, (3, 4))
    x_np[0, 0] = -inf
    g_np = rng.standard_normal((3, 4))
    x, g = xp.asarray(x_np.copy()), xp.asarray(g_np.copy())
    for axis, (exclusive, reverse) in itertools.product([0, 1], FLAGS):
        pull(x, g, axis=axis, exclusive=exclusive, reverse=reverse)
        np.testing.assert_array_equal(to_numpy(x), x_np)
        np.testing.assert_array_equal(to_numpy(g), g_np)


def test_dask():
    da = pytest.importorskip("dask.array")
    rng = np.random.default_rng(16)
    x_np = lanes(rng, (6, 5))
    x_np[:2, :3] = -inf
    g_np = rng.standard_normal((6, 5))
    _, pullback = xpops.vjp(xpops.logcumsumexp, da.from_array(x_np, chunks=2), axis=0)
    (dx,) = pullback(da.from_array(g_np, chunks=3))
    assert isinstance(dx, da.Array)
    want, _ = brute_force_vjp(x_np, g_np, 0)
    np.testing.assert_allclose(dx.compute(), want, atol=1e-13)


# ---- PyTorch: its own autograd, and gradcheck through the binding ----------------------------


def torch_scan(torch, x, axis=None, exclusive=False, reverse=False):
    """logcumsumexp from ``torch.logcumsumexp`` (autograd by PyTorch), flips and a shift."""
    if axis is None:
        x, axis = x.reshape(-1), 0
    if reverse:
        x = torch.flip(x, (axis,))
    y = torch.logcumsumexp(x, axis)
    if exclusive:
        first = torch.full_like(y.narrow(axis, 0, 1), -inf)
        y = torch.cat([first, y.narrow(axis, 0, y.shape[axis] - 1)], axis)
    return torch.flip(y, (axis,)) if reverse else y


@pytest.mark.parametrize(("exclusive", "reverse"), FLAGS)
@pytest.mark.parametrize("complex_", [False, True])
def test_torch_autograd_reference(exclusive, reverse, complex_):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(17)
    x_np = lanes(rng, (3, 5))
    g_np = rng.standard_normal((3, 5))
    if complex_:
        x_np = x_np + 1j * lanes(rng, (3, 5))
        g_np = g_np + 1j * rng.standard_normal((3, 5))
    for axis in [None, 0, 1]:
        kwargs = {"axis": axis, "exclusive": exclusive, "reverse": reverse}
        g = g_np.reshape(-1) if axis is None else g_np
        t = torch.tensor(x_np, requires_grad=True)
        (want,) = torch.autograd.grad(torch_scan(torch, t, **kwargs), t, torch.tensor(g))
        _, dx = pull(x_np, g, **kwargs)  # NumPy through xpops.vjp
        want = want.resolve_conj().numpy()
        np.testing.assert_allclose(dx, want, rtol=1e-12, atol=1e-14)
        t = torch.tensor(x_np, requires_grad=True)  # tensors through the binding
        xpops.logcumsumexp(t, **kwargs).backward(torch.tensor(g))
        np.testing.assert_allclose(t.grad.numpy(), want, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"axis": 0},
        {"axis": -1, "exclusive": True},
        {"axis": 1, "reverse": True},
        {"axis": 0, "exclusive": True, "reverse": True},
        {"axis": None, "reverse": True},
    ],
)
@pytest.mark.parametrize("dtype_name", ["float64", "complex128"])
def test_torch_gradcheck(kwargs, dtype_name):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(18)
    x_np = lanes(rng, (3, 4)).astype(dtype_name)
    if dtype_name == "complex128":
        x_np = x_np + 1j * lanes(rng, (3, 4))
    x = torch.tensor(x_np, requires_grad=True)
    out = xpops.logcumsumexp(x, **kwargs)
    assert out.grad_fn is not None

    def finite_outputs(t):
        # an exclusive scan's first output is the constant -inf, which finite differences
        # cannot take: left out
        y = xpops.logcumsumexp(t, **kwargs)
        if not kwargs.get("exclusive"):
            return y
        axis = kwargs.get("axis", 0) or 0
        start = 0 if kwargs.get("reverse") else 1
        return y.narrow(axis, start, y.shape[axis] - 1)

    assert torch.autograd.gradcheck(finite_outputs, (x,))


def test_torch_gradcheck_dtype_and_minus_inf():
    torch = pytest.importorskip("torch")
    x = torch.tensor([[0.5, -1.0, 2.0], [-inf, -inf, 0.3]], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda t: xpops.logcumsumexp(t, axis=1, dtype=torch.complex128),
        (x[:1].detach().requires_grad_(),),
    )
    out = xpops.logcumsumexp(x, axis=1)
    out.sum().backward()  # an expanded cotangent (stride 0)
    assert x.grad is not None
    np.testing.assert_array_equal(x.grad.numpy()[1, :2], 0.0)
    want, _ = brute_force_vjp(x.detach().numpy(), np.ones((2, 3)), 1)
    np.testing.assert_allclose(x.grad.numpy(), want, atol=1e-14)


@pytest.mark.parametrize("dtype_name", ["float16", "bfloat16", "float32"])
def test_torch_low_precision_grad(dtype_name):
    torch = pytest.importorskip("torch")
    dtype = getattr(torch, dtype_name)
    rng = np.random.default_rng(19)
    x_np = lanes(rng, (20,))
    x = torch.tensor(x_np, dtype=dtype, requires_grad=True)
    out = xpops.logcumsumexp(x, reverse=True)
    assert out.dtype == dtype
    out.backward(torch.ones(20, dtype=dtype))
    assert x.grad.dtype == dtype
    want, scale = brute_force_vjp(x.detach().double().numpy(), np.ones(20), None, False, True)
    tol = {"float16": 2e-3, "bfloat16": 2e-2, "float32": 1e-5}[dtype_name]
    assert_scaled(x.grad.double(), want, scale, tol, floor=6e-8)


def test_torch_grad_not_recorded_without_requires_grad():
    torch = pytest.importorskip("torch")
    x = torch.zeros(3, dtype=torch.float64)
    assert xpops.logcumsumexp(x).grad_fn is None
    with torch.no_grad():
        assert xpops.logcumsumexp(x.requires_grad_()).grad_fn is None


# ---- CuPy: the fused pull-back on every scan kernel ------------------------------------------


def _cumulative_reference(x, g, axis, exclusive, reverse):
    """``dx_j = exp(x_j) * sum_{i covers j} g_i exp(-y_i)`` in long double by NumPy's
    cumulative sums (inputs of moderate size, so nothing overflows): independent of the scans.
    Long double, as float64 cumulative sums of a million terms carry errors of about
    sqrt(n) ulp, as large as the float64 scan's own."""
    wide = np.longdouble
    x, g = np.moveaxis(x.astype(wide), axis, -1), np.moveaxis(g.astype(wide), axis, -1)
    if reverse:
        x, g = x[..., ::-1], g[..., ::-1]
    y = np.logaddexp.accumulate(x, axis=-1)
    if exclusive:
        y = np.concatenate([np.full_like(y[..., :1], -inf), y[..., :-1]], axis=-1)
    with np.errstate(over="ignore"):
        w = np.where(np.isneginf(y), 0.0, g * np.exp(-y))
    suffix = np.cumsum(w[..., ::-1], axis=-1)[..., ::-1]
    scale = np.cumsum(np.abs(w)[..., ::-1], axis=-1)[..., ::-1]
    if exclusive:  # output i covers the inputs before it
        suffix = np.concatenate([suffix[..., 1:], np.zeros_like(suffix[..., :1])], axis=-1)
        scale = np.concatenate([scale[..., 1:], np.zeros_like(scale[..., :1])], axis=-1)
    dx, scale = np.exp(x) * suffix, np.exp(x) * scale
    if reverse:
        dx, scale = dx[..., ::-1], scale[..., ::-1]
    dx, scale = dx.astype(np.float64), scale.astype(np.float64)
    return np.moveaxis(dx, -1, axis), np.moveaxis(scale, -1, axis)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(
    ("shape", "axis"),
    [((1 << 20,), 0), ((20000, 64), 1), ((200, 20000), 0), ((64, 300, 40), 1), ((70000, 3), 0)],
    ids=["tiles", "rows", "column_blocks", "inner", "columns"],
)
@pytest.mark.parametrize(("exclusive", "reverse"), FLAGS)
def test_cupy_every_scan_kernel(cupy_only, dtype, shape, axis, exclusive, reverse):
    """The CuPy pull-back (two fused kernels around one scan of both signs) on shapes that
    take each scan kernel, against NumPy's float64 cumulative sums; a poisoned cotangent
    region checks that every element is written."""
    cp = cupy_only
    rng = np.random.default_rng(18)
    x = rng.uniform(-2, 2, shape).astype(dtype)
    g = rng.standard_normal(shape).astype(dtype)
    want, scale = _cumulative_reference(x, g, axis, exclusive, reverse)
    _, dx = pull(cp.asarray(x), cp.asarray(g), axis=axis, exclusive=exclusive, reverse=reverse)
    assert dx.dtype == np.dtype(dtype)
    got = cp.asnumpy(dx)
    assert np.isfinite(got).all()
    # float64: the scan kernels' short exp and log are within a few ulp, of exponents up
    # to log(n) and more
    tol = {"float32": 64, "float64": 1024}[dtype] * np.finfo(dtype).eps
    assert (np.abs(got - want) <= tol * (scale + np.abs(want)) + 1e-300).all()
