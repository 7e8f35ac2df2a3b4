"""References and comparisons shared by the logcumsumexp tests: float64 / long double scans
independent of xpops, and random scan cases for the property tests."""

import cmath
import math

import numpy as np
from hypothesis import strategies as st

from .._support import to_numpy

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


def single_term_outputs(x, axis, exclusive=False, reverse=False):
    """``(mask, term)`` of the outputs whose prefix holds exactly one finite term (real part
    finite; every other element -inf, as real part): those must equal that term exactly, on
    every engine. `term` holds, where `mask`, the term as the scan gives it alone (complex:
    the imaginary part wrapped into (-pi, pi]); elsewhere 0. Both of the shape of `x`."""
    y = np.moveaxis(np.asarray(x), axis, -1)
    if reverse:
        y = y[..., ::-1]
    re = np.real(y)
    finite = np.isfinite(re) & np.isfinite(np.imag(y))
    special = ~finite & (re != -np.inf)  # NaN, +inf, non-finite imaginary parts
    count = np.cumsum(finite, axis=-1)
    spoiled = np.cumsum(special, axis=-1) > 0
    if exclusive:
        zero = np.zeros((*count.shape[:-1], 1), dtype=count.dtype)
        count = np.concatenate([zero, count[..., :-1]], axis=-1)
        spoiled = np.concatenate([zero.astype(bool), spoiled[..., :-1]], axis=-1)
    mask = (count == 1) & ~spoiled
    first = np.take_along_axis(y, np.argmax(finite, axis=-1)[..., None], axis=-1)
    if np.iscomplexobj(first):
        angle = np.imag(first)
        wrapped = np.where(
            (angle > -np.pi) & (angle <= np.pi),
            angle,
            np.pi - np.remainder(np.pi - angle, 2 * np.pi),
        )
        first = (np.real(first) + 1j * wrapped).astype(first.dtype)
    term = np.where(mask, first, 0).astype(y.dtype)
    if reverse:
        mask, term = mask[..., ::-1], term[..., ::-1]
    return np.moveaxis(mask, -1, axis), np.moveaxis(term, -1, axis)


def sparse_lanes(rng, shape, axis, dtype, reverse=False):
    """Lanes of -inf with a few finite terms each (none, one, two or three; some lanes dense)
    at random places, of magnitudes from 1e-20 to 300: prefixes of one finite term, followed by
    -inf or by larger or smaller terms, in every position of blocks, tiles and runs."""
    n = shape[axis]
    y = np.full(shape, -np.inf)
    lanes = np.moveaxis(y, axis, -1).reshape(-1, n)
    values = np.array([1e-20, -1e-10, 0.3, -7.5, 2.5, 40.0, -300.0, 300.0])
    for i, lane in enumerate(lanes):
        if i % 7 == 6:  # a dense lane
            lane[:] = rng.standard_normal(n) * 10
            continue
        k = i % 4
        at = rng.choice(n, size=min(k, n), replace=False)
        lane[at] = rng.choice(values, size=at.size) * rng.choice([1.0, 1.0 + 2**-20], size=at.size)
    out = np.moveaxis(lanes.reshape(np.moveaxis(y, axis, -1).shape), -1, axis)
    if reverse:  # the same patterns met in scan order
        out = np.flip(out, axis=axis)
    return np.ascontiguousarray(out).astype(dtype)


def assert_single_terms_exact(got, x, axis, exclusive, reverse):
    """Outputs of one finite term equal it exactly (issue 22, items 5 and 6)."""
    mask, term = single_term_outputs(x, axis, exclusive, reverse)
    got = np.asarray(got)
    np.testing.assert_array_equal(got[mask], term[mask].astype(got.dtype))
