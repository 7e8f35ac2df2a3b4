"""The NumPy engine of logcumsumexp's real pull-back (`_numpy_vjp`, one cumulative sum against
a reference a row): where it applies, against the brute-force double sum and float64 sums of
an independent scan; where it does not (it returns None and the generic rule runs), the public
result against the brute-force sum."""

import itertools

import numpy as np
import pytest

import xpops
from xpops._cumulative import _numpy_vjp

from ._gradients import brute_force_vjp
from ._reference import reference

FLAGS = list(itertools.product([False, True], repeat=2))  # (exclusive, reverse)


def _engine(x, g, axis, exclusive, reverse):
    """The engine at `x`, `g` with the forward's flags and the forward's own result."""
    y = xpops.logcumsumexp(x, axis=axis, exclusive=exclusive, reverse=reverse)
    return _numpy_vjp.real_pullback(x, y, g, axis, exclusive, not reverse)


def _public(x, g, **kwargs):
    _, pullback = xpops.vjp(xpops.logcumsumexp, x, **kwargs)
    return pullback(g)[0]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(("exclusive", "reverse"), FLAGS)
@pytest.mark.parametrize(
    ("shape", "axis"), [((1,), 0), ((2,), 0), ((1500,), 0), ((7, 200), 1), ((200, 7), 0),
                        ((4, 5, 6), 1)]
)  # fmt: skip
def test_against_brute_force(dtype, exclusive, reverse, shape, axis):
    """Finite rows of every flag and axis: the engine applies, and matches the double sum of
    ``g_i exp(x_j - y_i)`` (float64, with y from an independent scan) relative to the sum of
    the terms' magnitudes; float32 is rounded once, from float64 sums."""
    rng = np.random.default_rng(len(shape) + 10 * exclusive + 20 * reverse)
    x = (rng.standard_normal(shape) * 3).astype(dtype)
    g = rng.standard_normal(shape).astype(dtype)
    if exclusive and shape[axis] == 1:
        assert _engine(x, g, axis, exclusive, reverse) is None  # no output holds a term
        return
    got = _engine(x, g, axis, exclusive, reverse)
    assert got is not None
    assert got.dtype == dtype
    assert got.shape == shape
    assert got.flags.c_contiguous  # as the generic rule's (torch.from_numpy takes it)
    want, scale = brute_force_vjp(x.astype(np.float64), g.astype(np.float64), axis, exclusive,
                                  reverse)  # fmt: skip
    rtol = 1e-5 if dtype == "float32" else 1e-13
    assert (np.abs(got - want) <= rtol * scale + 1e-300).all()


def test_long_float32_row_sums_in_float64():
    """A float32 row of 2**17: its sums are taken in float64, so the error stays that of the
    forward's float32 outputs, far below a float32 running sum's."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal(2**17).astype(np.float32)
    g = rng.standard_normal(2**17).astype(np.float32)
    got = _engine(x, g, 0, False, False)
    assert got is not None
    x64, g64 = x.astype(np.float64), g.astype(np.float64)
    y = reference(x64, 0, False, False)
    terms = g64 * np.exp(-y)  # y stays below 15: no overflow
    want = np.exp(x64) * np.cumsum(terms[::-1])[::-1]
    scale = np.exp(x64) * np.cumsum(np.abs(terms)[::-1])[::-1]
    assert (np.abs(got - want) <= 2e-5 * scale).all()


@pytest.mark.parametrize(("exclusive", "reverse"), FLAGS)
def test_minus_inf_outputs_hold_no_term(exclusive, reverse):
    """Rows with a prefix of -inf inputs (so -inf outputs, whose cotangents are large or NaN),
    a row of -inf only: the engine applies; those inputs get 0, the rest the double sum."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3, 50)) * 2
    first = slice(-20, None) if reverse else slice(0, 20)
    x[0, first] = -np.inf
    x[1] = -np.inf
    g = rng.standard_normal(x.shape)
    # cotangents of -inf outputs: no term, whatever their value
    y = xpops.logcumsumexp(x, axis=1, exclusive=exclusive, reverse=reverse)
    g[y == -np.inf] = np.nan
    got = _numpy_vjp.real_pullback(x, y, g, 1, exclusive, not reverse)
    assert got is not None
    want, scale = brute_force_vjp(x, g, 1, exclusive, reverse)
    assert not np.isnan(want).any()
    assert (np.abs(got - want) <= 1e-13 * scale + 1e-300).all()
    assert (got[0, first] == 0).all()
    assert (got[1] == 0).all()


@pytest.mark.parametrize("reverse", [False, True])
def test_uncovered_input_far_above_the_outputs(reverse):
    """An exclusive scan's input held by no output, 500 above the others: 0, not inf * 0; at
    700 (the row too wide) the generic rule gives the same 0."""
    x = np.zeros(6)
    last = 0 if reverse else -1
    g = np.ones(6)
    for height, applies in ((500.0, True), (700.0, False)):
        x[last] = height
        assert (_engine(x, g, 0, True, reverse) is not None) == applies
        dx = _public(x, g, exclusive=True, reverse=reverse)
        assert dx[last] == 0.0
        want, _ = brute_force_vjp(x, g, 0, True, reverse)
        np.testing.assert_allclose(dx, want, rtol=1e-14)


@pytest.mark.parametrize(
    ("case", "x", "g"),
    [
        ("NaN input", [0.5, np.nan, 1.0], [1.0, 1.0, 1.0]),
        ("+inf input", [0.5, np.inf, 1.0], [1.0, 1.0, 1.0]),
        ("NaN cotangent", [0.5, 0.2, 1.0], [1.0, np.nan, 1.0]),
        ("inf cotangent", [0.5, 0.2, 1.0], [1.0, np.inf, 1.0]),
        ("huge cotangent", [0.5, 0.2, 1.0], [1.0, 1e300, -1e300]),
        ("row wider than RANGE", np.linspace(-400.0, 400.0, 9), np.ones(9)),
    ],
)
def test_falls_back_to_the_generic_rule(case, x, g):
    """Special values and rows the closed form cannot sum: the engine declines, and the
    public result is the generic rule's (NaN exactly where the double sum has it)."""
    x, g = np.asarray(x, dtype=np.float64), np.asarray(g, dtype=np.float64)
    assert _engine(x, g, 0, False, False) is None, case
    dx = _public(x, g)
    want, scale = brute_force_vjp(x, g)
    finite = np.isfinite(want)
    np.testing.assert_array_equal(dx[~finite], want[~finite])  # NaN and inf where they are
    assert (np.abs(dx[finite] - want[finite]) <= 1e-13 * scale[finite] + 1e-300).all(), case


def test_weights_below_the_normal_range():
    """An input 740 below the others with a cotangent of 1e37: its weight exp(-740) is
    subnormal in float64, so it is applied in log space; against the sum in long double."""
    x = np.array([0.0, -740.0, 0.0, -np.inf, 1.0])
    g = np.array([1e37, 1e37, -1e37, 2.0, 1e37])
    got = _engine(x, g, 0, False, False)
    assert got is not None
    xl, gl = x.astype(np.longdouble), g.astype(np.longdouble)
    yl = np.log(np.cumsum(np.exp(xl)))
    want = [np.sum(gl[j:] * np.exp(xl[j] - yl[j:])) for j in range(x.size)]
    np.testing.assert_allclose(got, np.array(want, dtype=np.float64), rtol=1e-14)
    assert got[3] == 0.0


def test_outputs_beyond_the_float_range_fall_back_quietly():
    """Finite inputs whose outputs span more than the float range: no warning (the tests run
    with warnings as errors), and the generic rule runs."""
    for dtype, big in (("float64", 1.7e308), ("float32", 3e38)):
        x = np.array([-big, 0.0, big], dtype=dtype)
        g = np.ones(3, dtype=dtype)
        for exclusive in (False, True):
            assert _engine(x, g, 0, exclusive, False) is None
            assert _public(x, g, exclusive=exclusive).dtype == dtype


@pytest.mark.parametrize("dtype", ["float16", "longdouble"])
def test_other_dtypes_take_the_generic_rule(dtype):
    x = np.linspace(-1, 1, 7).astype(dtype)
    y = xpops.logcumsumexp(x)
    assert _numpy_vjp.real_pullback(x, y, np.ones_like(y), 0, False, True) is None


def test_inputs_unmodified():
    rng = np.random.default_rng(5)
    x, g = rng.standard_normal((4, 30)), rng.standard_normal((4, 30))
    y = xpops.logcumsumexp(x, axis=1, exclusive=True)
    copies = [a.copy() for a in (x, y, g)]
    assert _numpy_vjp.real_pullback(x, y, g, 1, True, True) is not None
    for a, b in zip((x, y, g), copies, strict=True):
        np.testing.assert_array_equal(a, b)
