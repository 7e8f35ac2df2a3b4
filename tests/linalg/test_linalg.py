"""linalg.cholesky_solve (and the internal triangular solve) on every backend.

References are independent: ``numpy.linalg.solve`` on A itself in float64/complex128,
``scipy.linalg.cho_solve`` and ``scipy.linalg.solve_triangular`` on a clean factor, and the
backward error ``||A X - B|| / (||A|| ||X||)`` for ill-conditioned A.
"""

import math
import re

import numpy as np
import pytest
import scipy.linalg
from hypothesis import given, settings
from hypothesis import strategies as st

import xpops
from xpops._lib._compat import array_namespace, device
from xpops.linalg._triangular import solve_triangular

from .._support import backend_name, to_numpy

nan, inf = np.nan, np.inf
DTYPES = ["float32", "float64", "complex64", "complex128"]


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


# ---- the contract's examples, references -----------------------------------------------------


def test_docstring_examples(xp):
    a = np.array([[4.0, 2.0], [2.0, 3.0]])
    lower = np.linalg.cholesky(a)
    out = xpops.linalg.cholesky_solve(asarray(xp, np.array([6.0, 5.0])), asarray(xp, lower))
    assert out.shape == (2,)
    np.testing.assert_allclose(to_numpy(out), [1.0, 1.0], atol=1e-15)
    upper = lower.T.copy()
    upper[1, 0] = nan
    out = xpops.linalg.cholesky_solve(
        asarray(xp, np.array([[6.0], [5.0]])), asarray(xp, upper), upper=True
    )
    np.testing.assert_allclose(to_numpy(out), [[1.0], [1.0]], atol=1e-15)
    assert xpops.linalg.cholesky_solve(asarray(xp, np.ones((3, 2, 4))), asarray(xp, lower)).shape
    out = xpops.linalg.cholesky_solve(
        asarray(xp, np.ones((2, 1))), asarray(xp, np.stack([lower, 2 * lower]))
    )
    assert tuple(out.shape) == (2, 2, 1)


@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize(("m", "k"), [(1, 1), (2, 3), (7, 1), (16, 4), (40, 2), (70, 9)])
def test_against_scipy_cho_solve(xp, upper, m, k):
    rng = np.random.default_rng(m * 10 + k)
    factor, _, clean = make_factor(rng, (), m, upper=upper)
    b = rng.standard_normal((m, k))
    want = scipy.linalg.cho_solve((clean, not upper), b)
    got = xpops.linalg.cholesky_solve(asarray(xp, b), asarray(xp, factor), upper=upper)
    assert_solution(got, want, "float64")


@pytest.mark.parametrize("dtype_name", DTYPES)
@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize(("batch", "m", "k"), [((3,), 5, 2), ((2, 2), 17, 1), ((2,), 33, 3)])
def test_against_numpy_solve_on_a(xp, dtype_name, upper, batch, m, k):
    rng = np.random.default_rng(m)
    factor, a, _ = make_factor(rng, batch, m, dtype_name, upper)
    b = rng.standard_normal((*batch, m, k))
    if dtype_name.startswith("complex"):
        b = b + 1j * rng.standard_normal((*batch, m, k))
    b = b.astype(dtype_name)
    got = xpops.linalg.cholesky_solve(asarray(xp, b), asarray(xp, factor), upper=upper)
    assert got.dtype == getattr(xp, dtype_name)
    assert_solution(got, reference(a, b), dtype_name)


# ---- broadcasting -------------------------------------------------------------------------------

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


@pytest.mark.parametrize(("bx", "by"), PATTERNS)
@pytest.mark.parametrize("upper", [False, True])
def test_broadcasting(xp, bx, by, upper):
    rng = np.random.default_rng(len(bx) * 7 + len(by))
    m, k = 4, 3
    factor, a, _ = make_factor(rng, by, m, upper=upper)
    b = rng.standard_normal((*bx, m, k))
    got = xpops.linalg.cholesky_solve(asarray(xp, b), asarray(xp, factor), upper=upper)
    batch = np.broadcast_shapes(bx, by)
    assert tuple(got.shape) == (*batch, m, k)
    assert is_c_contiguous(got)
    assert_solution(got, reference(a, b), "float64")


def test_vector_x_with_2d_y(xp):
    rng = np.random.default_rng(3)
    factor, a, _ = make_factor(rng, (), 6)
    b = rng.standard_normal(6)
    got = xpops.linalg.cholesky_solve(asarray(xp, b), asarray(xp, factor))
    assert tuple(got.shape) == (6,)
    assert_solution(got, np.linalg.solve(a, b), "float64")


# ---- which triangle is read, complex, dtypes -----------------------------------------------------


@pytest.mark.parametrize("junk", [nan, inf, -inf, 1e300, "random"])
@pytest.mark.parametrize("upper", [False, True])
def test_unused_triangle_is_never_read(xp, junk, upper):
    rng = np.random.default_rng(4)
    fill = rng.standard_normal() * 1e3 if junk == "random" else junk
    factor, a, _ = make_factor(rng, (3,), 9, upper=upper, junk=fill)
    if junk == "random":
        other = np.tril(np.ones((9, 9), bool), -1) if upper else np.triu(np.ones((9, 9), bool), 1)
        factor[..., other] = rng.standard_normal((3, int(other.sum()))) * 1e3
    b = rng.standard_normal((3, 9, 2))
    got = xpops.linalg.cholesky_solve(asarray(xp, b), asarray(xp, factor), upper=upper)
    assert np.isfinite(to_numpy(got)).all()
    assert_solution(got, reference(a, b), "float64")


@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("dtype_name", ["complex64", "complex128"])
def test_complex_uses_the_conjugate_transpose(xp, upper, dtype_name):
    rng = np.random.default_rng(5)
    factor, a, clean = make_factor(rng, (2,), 5, dtype_name, upper)
    assert np.abs(a - np.conj(np.swapaxes(a, -1, -2))).max() < 1e-12  # Hermitian
    assert np.abs(a.imag).max() > 0.1  # and not real
    b = (rng.standard_normal((2, 5, 3)) + 1j * rng.standard_normal((2, 5, 3))).astype(dtype_name)
    got = xpops.linalg.cholesky_solve(asarray(xp, b), asarray(xp, factor), upper=upper)
    assert_solution(got, reference(a, b), dtype_name)
    want = np.stack([scipy.linalg.cho_solve((clean[i], not upper), b[i]) for i in range(2)])
    assert_solution(got, want.astype(np.complex128), dtype_name)


def test_float16_computes_in_float32(xp):
    if not hasattr(xp, "float16"):
        pytest.skip(f"{backend_name(xp)} has no float16")
    rng = np.random.default_rng(6)
    factor, _, _ = make_factor(rng, (4,), 8)
    b = rng.standard_normal((4, 8, 2))
    f16, b16 = factor.astype(np.float16), b.astype(np.float16)
    got = xpops.linalg.cholesky_solve(asarray(xp, b16), asarray(xp, f16))
    assert got.dtype == xp.float16
    # the float32 solution of the float16 data, rounded once to float16
    lower = np.tril(f16.astype(np.float32))
    a32 = lower @ np.swapaxes(lower, -1, -2)
    want = np.linalg.solve(a32.astype(np.float64), b16.astype(np.float64))
    got64 = to_numpy(got).astype(np.float64)
    np.testing.assert_allclose(got64, want, rtol=2e-3, atol=2e-3 * np.abs(want).max())


def test_bfloat16(xp):
    if not hasattr(xp, "bfloat16"):
        pytest.skip(f"{backend_name(xp)} has no bfloat16")
    rng = np.random.default_rng(7)
    factor, _, _ = make_factor(rng, (3,), 6, "float32")
    b = rng.standard_normal((3, 6, 1)).astype(np.float32)
    bf, ff = xp.asarray(b).to(xp.bfloat16), xp.asarray(factor).to(xp.bfloat16)
    got = xpops.linalg.cholesky_solve(bf, ff)
    assert got.dtype == xp.bfloat16
    lower = np.tril(to_numpy(ff.to(xp.float32)).astype(np.float64))
    want = reference(lower @ np.swapaxes(lower, -1, -2), to_numpy(bf.to(xp.float32)))
    got64 = to_numpy(got.to(xp.float32)).astype(np.float64)
    np.testing.assert_allclose(got64, want, rtol=2e-2, atol=2e-2 * np.abs(want).max())
    mixed = xpops.linalg.cholesky_solve(bf, ff.to(xp.float16))
    assert mixed.dtype == xp.float32


def _default_float(xp):
    return xp.float32 if backend_name(xp) == "torch" else xp.float64


def test_integer_and_bool_inputs(xp):
    y = np.array([[2, 0], [1, 3]], dtype=np.int32)
    x = np.array([[1], [2]], dtype=np.int64)
    got = xpops.linalg.cholesky_solve(asarray(xp, x), asarray(xp, y))
    assert got.dtype == _default_float(xp)
    a = np.tril(y) @ np.tril(y).T
    assert_solution(got, np.linalg.solve(a, x), "float32")
    got = xpops.linalg.cholesky_solve(asarray(xp, np.array([[True], [False]])), asarray(xp, y))
    assert got.dtype == _default_float(xp)
    assert_solution(got, np.linalg.solve(a, [[1.0], [0.0]]), "float32")
    eye = np.eye(2, dtype=bool)
    got = xpops.linalg.cholesky_solve(asarray(xp, x), asarray(xp, eye))
    assert_solution(got, x.astype(np.float64), "float32")


@pytest.mark.parametrize(
    ("dx", "dy", "want"),
    [
        ("float32", "float64", "float64"),
        ("float64", "float32", "float64"),
        ("float32", "float32", "float32"),
        ("complex64", "float64", "complex128"),
        ("float32", "complex64", "complex64"),
        ("int32", "float32", None),  # the integer becomes the default float first
    ],
)
def test_dtype_promotion(xp, dx, dy, want):
    rng = np.random.default_rng(8)
    factor, _, _ = make_factor(rng, (), 3)
    factor = factor.astype(dy)
    b = (rng.standard_normal((3, 2)) * 4).astype(dx)
    got = xpops.linalg.cholesky_solve(asarray(xp, b), asarray(xp, factor))
    assert got.dtype == (getattr(xp, want) if want else _default_float(xp))
    clean = np.tril(factor.astype(np.complex128))
    ref = np.linalg.solve(clean @ np.conj(clean.T), b.astype(np.complex128))
    assert_solution(got, ref, "float32")


# ---- sizes --------------------------------------------------------------------------------------


def test_m_equal_1(xp):
    factor = np.array([[[2.0]], [[4.0]]])
    b = np.array([[[8.0, 4.0]], [[16.0, 32.0]]])
    got = xpops.linalg.cholesky_solve(asarray(xp, b), asarray(xp, factor))
    np.testing.assert_allclose(to_numpy(got), [[[2.0, 1.0]], [[1.0, 2.0]]])
    got = xpops.linalg.cholesky_solve(asarray(xp, b), asarray(xp, factor), upper=True)
    np.testing.assert_allclose(to_numpy(got), [[[2.0, 1.0]], [[1.0, 2.0]]])


@pytest.mark.parametrize(
    ("xs", "ys", "out"),
    [
        ((0, 3), (0, 0), (0, 3)),
        ((0,), (0, 0), (0,)),
        ((4, 0), (4, 4), (4, 0)),
        ((0, 4, 2), (4, 4), (0, 4, 2)),
        ((4, 2), (0, 4, 4), (0, 4, 2)),
        ((3, 1, 4, 2), (0, 4, 4), (3, 0, 4, 2)),
        ((2, 0, 1), (2, 0, 0), (2, 0, 1)),
        ((5, 4, 0), (1, 4, 4), (5, 4, 0)),
    ],
)
@pytest.mark.parametrize("dtype_name", ["float32", "float64", "int64"])
def test_empty(xp, xs, ys, out, dtype_name):
    x = xp.asarray(np.ones(xs, dtype=dtype_name))
    y = xp.asarray(np.ones(ys, dtype=dtype_name))
    got = xpops.linalg.cholesky_solve(x, y)
    assert tuple(got.shape) == out
    want = _default_float(xp) if dtype_name == "int64" else getattr(xp, dtype_name)
    assert got.dtype == want
    assert type(got).__module__.split(".")[0] == backend_name(xp)


NUMPY_PATHS = ["blas", "rows", "batch_last"]  # the NumPy engine's three paths


@pytest.fixture(params=NUMPY_PATHS)
def numpy_path(request, xp):
    """Each path of the NumPy engine forced in turn, whatever the sizes (one run, with the
    engine's own choice, for the other backends)."""
    from xpops._numpy import linalg as engine

    numpy_backend = backend_name(xp) == "numpy"
    if not numpy_backend and request.param != NUMPY_PATHS[0]:
        pytest.skip("the NumPy engine's paths: NumPy only")
    saved = engine._PATH
    engine._PATH = request.param if numpy_backend else None
    yield request.param
    engine._PATH = saved


# ---- special values -----------------------------------------------------------------------------


@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("where", [0, 3, 6])
@pytest.mark.parametrize("m", [7, 60])
def test_zero_on_the_diagonal_affects_only_its_system(xp, numpy_path, upper, where, m):
    """LAPACK-like: inf/NaN in the system whose factor has a zero pivot, no error, no
    warning (warnings are errors in this suite), the other systems exact."""
    rng = np.random.default_rng(9)
    factor, a, _ = make_factor(rng, (3,), m, upper=upper)
    factor[1, where, where] = 0.0
    b = rng.standard_normal((3, m, 2))
    got = to_numpy(xpops.linalg.cholesky_solve(asarray(xp, b), asarray(xp, factor), upper=upper))
    assert not np.isfinite(got[1]).all()
    assert not np.isfinite(got[1, where]).any()
    assert_solution(got[[0, 2]], reference(a[[0, 2]], b[[0, 2]]), "float64")


def test_nan_in_x_stays_in_its_system(xp, numpy_path):
    rng = np.random.default_rng(10)
    factor, a, _ = make_factor(rng, (), 5)
    b = rng.standard_normal((3, 5, 1))
    b[1, 2, 0] = nan
    got = to_numpy(xpops.linalg.cholesky_solve(asarray(xp, b), asarray(xp, factor)))
    assert np.isnan(got[1]).any()
    assert_solution(got[[0, 2]], reference(a, b[[0, 2]]), "float64")


@pytest.mark.parametrize("dtype_name", ["float32", "float64", "complex128"])
@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("m", [5, 30, 90])
def test_backward_error_ill_conditioned(xp, numpy_path, dtype_name, upper, m):
    """||A X - B|| / (||A|| ||X||) <= c M eps with cond(A) near 1e12 (1e6 in float32)."""
    rng = np.random.default_rng(m)
    cond = 1e6 if dtype_name == "float32" else 1e12
    factor, _, clean = make_factor(rng, (2,), m, dtype_name, upper, cond=cond)
    c = clean.astype(np.complex128 if dtype_name.startswith("c") else np.float64)
    ch = np.conj(np.swapaxes(c, -1, -2))
    a = ch @ c if upper else c @ ch  # A of the rounded factor
    assert np.linalg.cond(a[0]) > cond / 100
    b = rng.standard_normal((2, m, 3)).astype(dtype_name)
    got = to_numpy(xpops.linalg.cholesky_solve(asarray(xp, b), asarray(xp, factor), upper=upper))
    eps = np.finfo(np.dtype(dtype_name)).eps
    for i in range(2):
        x = got[i].astype(a.dtype)
        resid = np.linalg.norm(a[i] @ x - b[i], 2)
        bound = 4 * m * eps * np.linalg.norm(a[i], 2) * np.linalg.norm(x, 2)
        assert resid <= bound, (resid, bound)


# ---- properties ---------------------------------------------------------------------------------


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


def _check_property(namespace, case):
    m, k, bx, by, upper, seed = case
    rng = np.random.default_rng(seed)
    factor, a, _ = make_factor(rng, by, m, upper=upper)
    b = rng.standard_normal((*bx, m, k))
    got = xpops.linalg.cholesky_solve(asarray(namespace, b), asarray(namespace, factor), upper)
    assert tuple(got.shape) == (*np.broadcast_shapes(bx, by), m, k)
    assert_solution(got, reference(a, b), "float64")


@settings(max_examples=60, deadline=None)
@given(case=systems())
def test_property_numpy(case):
    _check_property(np, case)


@settings(max_examples=40, deadline=None)
@given(case=systems())
def test_property_generic_engine(case):
    import array_api_strict

    _check_property(array_api_strict, case)


@settings(max_examples=40, deadline=None)
@given(case=systems(), path=st.sampled_from(NUMPY_PATHS))
def test_property_numpy_every_path(case, path):
    """Each path of the NumPy engine, whatever the sizes."""
    from xpops._numpy import linalg as engine

    saved = engine._PATH
    engine._PATH = path
    try:
        _check_property(np, case)
    finally:
        engine._PATH = saved


@pytest.mark.parametrize("path", ["rows", "batch_last"])
@pytest.mark.parametrize("dtype_name", ["float64", "complex128"])
@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("k", [1, 3])
def test_numpy_vectorized_paths_across_chunks(path, dtype_name, upper, k):
    """Chunks of a few factors over a batch of 11 (the last chunk short), junk in the unused
    triangle."""
    from xpops._numpy import linalg as engine

    rng = np.random.default_rng(17)
    factor, a, _ = make_factor(rng, (11,), 6, dtype_name, upper)
    b = rng.standard_normal((11, 6, k)).astype(dtype_name)
    saved = engine._PATH, engine._CHUNK_BYTES
    engine._PATH, engine._CHUNK_BYTES = path, 3 * 36 * factor.itemsize
    try:
        got = xpops.linalg.cholesky_solve(b, factor, upper=upper)
    finally:
        engine._PATH, engine._CHUNK_BYTES = saved
    assert_solution(got, reference(a, b), dtype_name)


# ---- errors -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("xs", "ys", "message"),
    [
        ((3, 1), (3, 4), "`y` must be square in its last two dimensions"),
        ((3, 1), (2, 3, 2), "`y` must be square in its last two dimensions"),
        ((4, 1), (3, 3), r"`x` and `y` must agree on M \(x.shape\[-2\] == y.shape\[-1\]\)"),
        ((4,), (3, 3), r"`x` and `y` must agree on M \(x.shape\[0\] == y.shape\[-1\]\)"),
        ((2, 3, 3, 1), (5, 3, 3), r"the batch shapes \(2, 3\) of `x` and \(5,\) of `y`"),
        ((4, 3, 1), (5, 3, 3), r"the batch shapes \(4,\) of `x` and \(5,\) of `y`"),
        ((3,), (3,), "`y` must have at least 2 dimensions"),
        ((), (3, 3), "`x` must have at least 1 dimension"),
        ((3,), (2, 3, 3), "a 1-D `x` needs a 2-D `y`"),
    ],
)
def test_shape_errors(xp, xs, ys, message):
    x = xp.asarray(np.ones(xs))
    y = xp.asarray(np.ones(ys))
    with pytest.raises(ValueError, match=message) as info:
        xpops.linalg.cholesky_solve(x, y)
    assert f"got shapes {xs} for `x` and {ys} for `y`" in str(info.value)


def test_non_numeric_dtypes():
    y = np.eye(2)
    for bad in (np.array(["a", "b"]), np.array([1.0, None]), np.array(["2020-01-01"] * 2, "M8")):
        with pytest.raises(TypeError, match="`x` and `y` must have numeric dtypes") as info:
            xpops.linalg.cholesky_solve(bad, y)
        assert "got shapes (2,) for `x` and (2, 2) for `y`" in str(info.value)
        with pytest.raises(TypeError, match=re.escape(f"got float64 and {bad.dtype}")):
            xpops.linalg.cholesky_solve(np.ones(2), np.stack([bad, bad]))


def test_not_arrays():
    with pytest.raises(TypeError, match=r"expected an array, got builtins\.list"):
        xpops.linalg.cholesky_solve([1.0, 2.0], np.eye(2))
    with pytest.raises(TypeError, match="`x` must be an array, got float"):
        xpops.linalg.cholesky_solve(1.0, np.eye(2))
    with pytest.raises(TypeError, match="`y` must be an array, got int"):
        xpops.linalg.cholesky_solve(np.ones(2), 3)


@pytest.mark.parametrize("bad", [1, None, "yes", np.bool_(True)])
def test_upper_must_be_a_bool(xp, bad):
    name = type(bad).__name__
    with pytest.raises(TypeError, match=f"`upper` must be a bool, got {name}"):
        xpops.linalg.cholesky_solve(xp.asarray(np.ones((2, 1))), xp.asarray(np.eye(2)), bad)


def test_upper_is_positional_or_keyword():
    out = xpops.linalg.cholesky_solve(np.ones((2, 1)), np.eye(2), True)
    np.testing.assert_array_equal(out, np.ones((2, 1)))
    with pytest.raises(TypeError):
        xpops.linalg.cholesky_solve(x=np.ones((2, 1)), y=np.eye(2))


def test_mixed_namespaces():
    import array_api_strict

    with pytest.raises(TypeError, match="arrays from different libraries cannot be mixed"):
        xpops.linalg.cholesky_solve(np.ones((2, 1)), array_api_strict.eye(2))
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match="arrays from different libraries cannot be mixed"):
        xpops.linalg.cholesky_solve(torch.ones((2, 1)), np.eye(2))


# ---- inputs and result ---------------------------------------------------------------------------


@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("dtype_name", ["float32", "float64", "int64"])
def test_inputs_unmodified_and_result_layout(xp, upper, dtype_name):
    rng = np.random.default_rng(11)
    factor, _, _ = make_factor(rng, (2, 1), 5, upper=upper, junk=7.0)
    factor = (factor * 3).astype(dtype_name)
    b = (rng.standard_normal((3, 5, 2)) * 5).astype(dtype_name)
    x, y = asarray(xp, b), asarray(xp, factor)
    for vector in (False, True):
        xx, yy = (x[0, :, 0], y[0, 0, ...]) if vector else (x, y)
        out = xpops.linalg.cholesky_solve(xx, yy, upper=upper)
        np.testing.assert_array_equal(to_numpy(x), b)
        np.testing.assert_array_equal(to_numpy(y), factor)
        assert type(out).__module__.split(".")[0] == backend_name(xp)
        assert backend_name(array_namespace(out)) in ("array_api_compat", backend_name(xp))
        assert device(out) == device(x)
        want = _default_float(xp) if dtype_name == "int64" else getattr(xp, dtype_name)
        assert out.dtype == want
        assert tuple(out.shape) == ((5,) if vector else (2, 3, 5, 2))
        assert is_c_contiguous(out)


def test_result_is_a_new_array(xp):
    x = asarray(xp, np.ones((1, 1)))
    y = asarray(xp, np.ones((1, 1)))
    out = xpops.linalg.cholesky_solve(x, y)
    out[...] = 5.0
    np.testing.assert_array_equal(to_numpy(x), [[1.0]])


def test_non_contiguous_numpy_inputs():
    rng = np.random.default_rng(12)
    factor, _, _ = make_factor(rng, (4,), 6)
    b = rng.standard_normal((6, 4, 3))
    views = [
        (np.swapaxes(b, 0, 1), np.asfortranarray(factor)),
        (np.swapaxes(b, 0, 1)[:, :, ::2], factor[::-1]),
        (np.swapaxes(b, 0, 1), np.swapaxes(np.swapaxes(factor, 1, 2).copy(), 1, 2)),
    ]
    for x, y in views:
        before = (x.copy(), y.copy())
        for path in NUMPY_PATHS:
            from xpops._numpy import linalg as engine

            saved = engine._PATH
            engine._PATH = path
            try:
                got = xpops.linalg.cholesky_solve(x, y)
            finally:
                engine._PATH = saved
            assert got.flags.c_contiguous
            ys = np.tril(np.asarray(y))
            assert_solution(got, reference(ys @ np.swapaxes(ys, -1, -2), x), "float64")
        np.testing.assert_array_equal(x, before[0])
        np.testing.assert_array_equal(y, before[1])


# ---- the internal triangular solve --------------------------------------------------------------


@pytest.mark.parametrize("lower", [False, True])
@pytest.mark.parametrize("conjugate_transpose", [False, True])
@pytest.mark.parametrize("dtype_name", ["float64", "complex128", "float32"])
def test_solve_triangular_helper(xp, numpy_path, lower, conjugate_transpose, dtype_name):
    rng = np.random.default_rng(13)
    factor, _, clean = make_factor(rng, (3,), 8, dtype_name, upper=not lower)
    b = rng.standard_normal((2, 1, 8, 2)).astype(dtype_name)
    cxp = array_namespace(asarray(xp, b))
    got = solve_triangular(
        asarray(xp, factor),
        asarray(xp, b),
        lower=lower,
        conjugate_transpose=conjugate_transpose,
        xp=cxp,
    )
    assert tuple(got.shape) == (2, 3, 8, 2)
    trans = 2 if conjugate_transpose else 0
    want = np.stack(
        [
            np.stack(
                [
                    scipy.linalg.solve_triangular(clean[j], b[i, 0], lower=lower, trans=trans)
                    for j in range(3)
                ]
            )
            for i in range(2)
        ]
    )
    assert_solution(got, want.astype(np.complex128), dtype_name)


# ---- GPU only -----------------------------------------------------------------------------------


@pytest.mark.parametrize("m", [1, 2, 3, 15, 16, 17, 31, 32, 33, 63, 64, 65, 128])
@pytest.mark.parametrize("dtype_name", ["float32", "float64"])
@pytest.mark.parametrize("upper", [False, True])
def test_gpu_sizes_around_block_boundaries(cupy_only, m, dtype_name, upper):
    cupy = cupy_only
    rng = np.random.default_rng(m)
    for batch, k in [((), 1), ((5,), 3), ((37,), 1)]:
        factor, a, _ = make_factor(rng, batch, m, dtype_name, upper)
        b = rng.standard_normal((*batch, m, k)).astype(dtype_name)
        junk = cupy.full(4 * factor.size + 1024, np.nan, dtype=np.float32)
        del junk  # leave NaN in the memory pool: unwritten outputs show up
        got = xpops.linalg.cholesky_solve(cupy.asarray(b), cupy.asarray(factor), upper=upper)
        assert got.flags.c_contiguous
        assert got.dtype == np.dtype(dtype_name)
        assert_solution(got, reference(a, b), dtype_name)


def test_gpu_broadcasting_and_special_values(cupy_only):
    cupy = cupy_only
    rng = np.random.default_rng(14)
    for bx, by in PATTERNS:
        factor, a, _ = make_factor(rng, by, 6)
        b = rng.standard_normal((*bx, 6, 2))
        got = xpops.linalg.cholesky_solve(cupy.asarray(b), cupy.asarray(factor))
        assert got.flags.c_contiguous
        assert_solution(got, reference(a, b), "float64")
    factor, a, _ = make_factor(rng, (3,), 40)
    factor[1, 7, 7] = 0.0
    b = rng.standard_normal((3, 40, 2))
    got = xpops.linalg.cholesky_solve(cupy.asarray(b), cupy.asarray(factor)).get()
    assert not np.isfinite(got[1]).all()
    assert_solution(got[[0, 2]], reference(a[[0, 2]], b[[0, 2]]), "float64")


def test_gpu_a_million_small_systems(cupy_only):
    cupy = cupy_only
    rng = np.random.default_rng(15)
    n, m = 10**6, 4
    factor, a, _ = make_factor(rng, (n,), m)
    b = rng.standard_normal((n, m, 1))
    got = xpops.linalg.cholesky_solve(cupy.asarray(b), cupy.asarray(factor)).get()
    pick = rng.choice(n, 2000, replace=False)
    pick = np.concatenate([pick, [0, n - 1]])
    assert_solution(got[pick], reference(a[pick], b[pick]), "float64")
    assert np.isfinite(got).all()


@pytest.mark.parametrize("dtype_name", ["float32", "float64", "complex64", "complex128"])
@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("m", [512, 1000, 1537])
def test_gpu_one_large_system(cupy_only, dtype_name, upper, m):
    cupy = cupy_only
    rng = np.random.default_rng(16)
    k = 64
    factor, a, _ = make_factor(rng, (1,), m, dtype_name, upper)  # NaN in the unused triangle
    b = rng.standard_normal((1, m, k)).astype(dtype_name)
    got = xpops.linalg.cholesky_solve(cupy.asarray(b), cupy.asarray(factor), upper=upper).get()
    x = got[0].astype(np.complex128)
    resid = np.linalg.norm(a[0] @ x - b[0], 2)
    eps = np.finfo(np.dtype(dtype_name)).eps
    assert resid <= 4 * m * eps * np.linalg.norm(a[0], 2) * np.linalg.norm(x, 2)
