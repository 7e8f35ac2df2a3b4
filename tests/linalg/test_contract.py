"""linalg.cholesky_solve (and the internal triangular solve) on every backend.

References are independent: ``numpy.linalg.solve`` on A itself in float64/complex128,
``scipy.linalg.cho_solve`` and ``scipy.linalg.solve_triangular`` on a clean factor, and the
backward error ``||A X - B|| / (||A|| ||X||)`` for ill-conditioned A.
"""

import re

import numpy as np
import pytest
import scipy.linalg
from hypothesis import given, settings

import xpops
from xpops._lib._compat import array_namespace, device
from xpops.linalg._triangular import solve_triangular

from .._support import backend_name, library_of, to_numpy
from ._common import (
    DTYPES,
    PATTERNS,
    asarray,
    assert_solution,
    check_property,
    is_c_contiguous,
    make_factor,
    reference,
    systems,
)

nan, inf = np.nan, np.inf


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

    def cast(a, dtype):  # PyTorch's tensors have no astype, JAX's arrays no `to`
        return a.to(dtype) if hasattr(a, "to") else a.astype(dtype)

    bf, ff = cast(xp.asarray(b), xp.bfloat16), cast(xp.asarray(factor), xp.bfloat16)
    got = xpops.linalg.cholesky_solve(bf, ff)
    assert got.dtype == xp.bfloat16
    lower = np.tril(to_numpy(cast(ff, xp.float32)).astype(np.float64))
    want = reference(lower @ np.swapaxes(lower, -1, -2), to_numpy(cast(bf, xp.float32)))
    got64 = to_numpy(cast(got, xp.float32)).astype(np.float64)
    np.testing.assert_allclose(got64, want, rtol=2e-2, atol=2e-2 * np.abs(want).max())
    mixed = xpops.linalg.cholesky_solve(bf, cast(ff, xp.float16))
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
    assert library_of(got) == backend_name(xp)


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


@settings(max_examples=60, deadline=None)
@given(case=systems())
def test_property_numpy(case):
    check_property(np, case)


@settings(max_examples=40, deadline=None)
@given(case=systems())
def test_property_generic_engine(case):
    import array_api_strict

    check_property(array_api_strict, case)


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
    """Lists and Python scalars are arrays (see test_inputs); anything else is refused."""
    with pytest.raises(TypeError, match=r"^`x` must be an array, got builtins\.str$"):
        xpops.linalg.cholesky_solve("ab", np.eye(2))
    with pytest.raises(TypeError, match=r"^`y` must be an array, got builtins\.dict$"):
        xpops.linalg.cholesky_solve(np.ones(2), {})


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
        assert library_of(out) == backend_name(xp)
        assert backend_name(array_namespace(out)) in ("array_api_compat", backend_name(xp))
        assert device(out) == device(x)
        want = _default_float(xp) if dtype_name == "int64" else getattr(xp, dtype_name)
        assert out.dtype == want
        assert tuple(out.shape) == ((5,) if vector else (2, 3, 5, 2))
        assert is_c_contiguous(out)


def test_result_is_a_new_array(xp):
    if backend_name(xp) == "jax":
        pytest.skip("JAX arrays are immutable: a result cannot alias its input")
    x = asarray(xp, np.ones((1, 1)))
    y = asarray(xp, np.ones((1, 1)))
    out = xpops.linalg.cholesky_solve(x, y)
    out[...] = 5.0
    np.testing.assert_array_equal(to_numpy(x), [[1.0]])


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
