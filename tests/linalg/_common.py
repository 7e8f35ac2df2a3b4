"""Helpers of the cholesky_solve tests: factors with junk in the unused triangle, references
in float64/complex128, tolerances, and the random systems of the property tests."""

import math

import numpy as np
from hypothesis import strategies as st

import xpops

from .._support import to_numpy

nan = np.nan
DTYPES = ["float32", "float64", "complex64", "complex128"]
NUMPY_PATHS = ["blas", "rows", "batch_last"]  # the NumPy engine's three paths


def make_factor(rng, batch, m, dtype="float64", upper=False, junk=nan, cond=None):
    """A factor of a well-conditioned (or, with `cond`, ill-conditioned) A, junk elsewhere.

    Returns (factor, A, clean factor); A = L L^H in complex128/float64.
    """
    complex_ = np.dtype(dtype).kind == "c"
    g = rng.standard_normal((*batch, m, m))
    if complex_:
        g = g + 1j * rng.standard_normal((*batch, m, m))
    lower = np.tril(g) / max(m, 1) ** 0.5
    i = np.arange(m)
    if cond is None:
        lower[..., i, i] = np.abs(lower[..., i, i]) + 1.0
    else:  # diagonal from 1 down to cond**-0.5: A's condition number near `cond`
        lower[..., i, i] = np.logspace(0, -0.5 * math.log10(cond), m)
        lower = lower * np.where(i[:, None] > i[None, :], 1e-3, 1.0)
    a = lower @ np.conj(np.swapaxes(lower, -1, -2))
    clean = np.conj(np.swapaxes(lower, -1, -2)) if upper else lower
    factor = clean.copy()
    other = np.tril(np.ones((m, m), bool), -1) if upper else np.triu(np.ones((m, m), bool), 1)
    factor[..., other] = junk
    return factor.astype(dtype), a, clean.astype(dtype)


def reference(a, b):
    """numpy.linalg.solve on A, broadcasting, in float64/complex128."""
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    m = a.shape[-1]
    a = np.broadcast_to(a, (*batch, m, m))
    b = np.broadcast_to(b, (*batch, *b.shape[-2:]))
    wide = np.complex128 if np.iscomplexobj(a) or np.iscomplexobj(b) else np.float64
    return np.linalg.solve(a.astype(wide), b.astype(wide))


def tolerance(dtype_name):
    return {
        "float16": 5e-3,
        "bfloat16": 3e-2,
        "float32": 2e-5,
        "complex64": 2e-5,
        "float64": 1e-12,
        "complex128": 1e-12,
    }[dtype_name]


def assert_solution(got, want, dtype_name):
    got = to_numpy(got).astype(want.dtype)
    assert got.shape == want.shape
    scale = max(float(np.max(np.abs(want), initial=0.0)), 1.0)
    np.testing.assert_allclose(got, want, rtol=0, atol=tolerance(dtype_name) * scale)


def asarray(xp, a):
    return xp.asarray(np.ascontiguousarray(a))


def is_c_contiguous(a):
    name = type(a).__module__.split(".")[0]
    if name in ("numpy", "cupy"):
        return bool(a.flags.c_contiguous)
    if name == "torch":
        return bool(a.is_contiguous())
    return True  # array-api-strict has no notion of memory layout


PATTERNS = [
    ((4, 1), (5,)),
    ((), (6,)),
    ((6,), ()),
    ((2, 3), (3,)),
    ((2, 1), (1, 3)),
    ((1,), (4,)),
    ((4,), (1,)),
    ((3, 1, 2), (4, 1)),
    ((1, 1), ()),
    ((), ()),
]


@st.composite
def systems(draw):
    """Random M, K, batch shapes that broadcast (with size-1 and missing dimensions)."""
    m = draw(st.integers(1, 9))
    k = draw(st.integers(1, 4))
    nb = draw(st.integers(0, 3))
    batch = draw(st.lists(st.integers(1, 3), min_size=nb, max_size=nb))
    bx = [1 if draw(st.booleans()) else s for s in batch]
    by = [1 if draw(st.booleans()) else s for s in batch]
    bx = bx[draw(st.integers(0, len(bx))) :]
    by = by[draw(st.integers(0, len(by))) :]
    return m, k, tuple(bx), tuple(by), draw(st.booleans()), draw(st.integers(0, 2**32 - 1))


def check_property(namespace, case):
    m, k, bx, by, upper, seed = case
    rng = np.random.default_rng(seed)
    factor, a, _ = make_factor(rng, by, m, upper=upper)
    b = rng.standard_normal((*bx, m, k))
    got = xpops.linalg.cholesky_solve(asarray(namespace, b), asarray(namespace, factor), upper)
    assert tuple(got.shape) == (*np.broadcast_shapes(bx, by), m, k)
    assert_solution(got, reference(a, b), "float64")
