"""cholesky_solve's inputs beyond the arrays of one library: long double on every path of
every engine that has it, and Python lists and scalars taken as arrays."""

import re

import numpy as np
import pytest

import xpops

from .._support import to_numpy
from ._common import NUMPY_PATHS, assert_solution, make_factor, reference

LONG_DTYPES = ["longdouble", "clongdouble"]


def _long_residual_ok(x, factor, b, upper):
    """The residual ``A x - b`` of the solution, in long double (NumPy's matmul computes in
    it): a few long double epsilons of the scale, far below what float64 would reach."""
    ld = np.clongdouble if np.iscomplexobj(x) else np.longdouble
    f = np.triu(factor) if upper else np.tril(factor)
    f = f.astype(ld)
    fh = np.conj(np.swapaxes(f, -1, -2))
    a = fh @ f if upper else f @ fh
    r = a @ x.astype(ld) - b.astype(ld)
    scale = np.max(np.abs(a)) * np.max(np.abs(x)) * a.shape[-1]
    eps = np.finfo(np.longdouble).eps
    return float(np.max(np.abs(r)) / scale) <= 64 * eps


# (batch of the right-hand sides, batch of the factors, M, K): sizes for which the NumPy engine
# chooses each of its paths by itself (BLAS for large M or few factors; batch last and rows)
CHOSEN = [((), (), 60, 3), ((2, 1), (3,), 40, 1), ((3000,), (3000,), 4, 2), ((900,), (), 5, 1)]


@pytest.mark.parametrize("dtype_name", LONG_DTYPES)
@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("path", [*NUMPY_PATHS, None])
def test_long_double_every_numpy_path(dtype_name, upper, path):
    """Long double is computed in long double on every path, forced or chosen by the sizes
    (SciPy's BLAS has no long double trsm: the BLAS choice falls back to a substitution)."""
    from xpops.linalg import _numpy as engine

    dtype = np.dtype(dtype_name)
    rng = np.random.default_rng(21)
    cases = CHOSEN if path is None else [((4,), (4,), 7, 3), ((), (), 9, 1), ((2, 3), (3,), 5, 2)]
    saved = engine._PATH
    engine._PATH = path
    try:
        for bx, by, m, k in cases:
            factor, a, _ = make_factor(rng, by, m, "complex128" if dtype.kind == "c" else "float64")
            factor = factor.astype(dtype)
            if upper:
                factor = np.conj(np.swapaxes(factor, -1, -2)).copy()
            b = rng.standard_normal((*bx, m, k)).astype(dtype)
            got = xpops.linalg.cholesky_solve(b, factor, upper=upper)
            assert got.dtype == dtype
            assert_solution(got, reference(a, b.astype(np.complex128)), "float64")
            assert _long_residual_ok(got, factor, b, upper), (bx, by, m, k)
    finally:
        engine._PATH = saved


@pytest.mark.parametrize("dtype_name", LONG_DTYPES)
def test_long_double_with_other_dtypes_and_dask(dtype_name):
    """Long double promotes float64 and ints to long double; Dask with NumPy chunks computes
    it chunk by chunk the same way; the internal triangular solve takes it too."""
    da = pytest.importorskip("dask.array")
    from xpops.linalg._triangular import solve_triangular

    dtype = np.dtype(dtype_name)
    rng = np.random.default_rng(22)
    factor, _, clean = make_factor(rng, (6,), 40)
    b = rng.standard_normal((6, 40, 2))
    got = xpops.linalg.cholesky_solve(b.astype(dtype), factor)
    assert got.dtype == dtype
    assert _long_residual_ok(got, factor, b, upper=False)
    got = xpops.linalg.cholesky_solve(np.arange(40), factor[0].astype(dtype))
    assert got.dtype == dtype
    lazy = xpops.linalg.cholesky_solve(
        da.from_array(b.astype(dtype), chunks=(2, 40, 2)), da.from_array(factor, chunks=(3, 40, 40))
    )
    assert lazy.dtype == dtype
    computed = lazy.compute()
    assert computed.dtype == dtype
    np.testing.assert_array_equal(computed, xpops.linalg.cholesky_solve(b.astype(dtype), factor))
    xp = xpops.get_namespace(b)
    z = solve_triangular(clean.astype(dtype), b.astype(dtype), lower=True, xp=xp)
    assert z.dtype == dtype
    r = clean.astype(dtype) @ z - b.astype(dtype)
    assert np.max(np.abs(r)) <= 64 * 40 * np.finfo(np.longdouble).eps * np.max(np.abs(b))


# ---- lists and Python scalars -----------------------------------------------------------------


def test_lists_as_numpy_arrays():
    """Without an array, lists are NumPy arrays (SciPy's rule), either argument or both."""
    low = np.linalg.cholesky(np.array([[4.0, 2.0], [2.0, 3.0]]))
    want = np.array([1.0, 1.0])
    for x, y in (
        ([6.0, 5.0], low),
        (np.array([6.0, 5.0]), low.tolist()),
        ([6, 5], low.tolist()),
        ((6.0, 5.0), tuple(map(tuple, low))),
    ):
        got = xpops.linalg.cholesky_solve(x, y)
        assert type(got) is np.ndarray
        assert got.dtype == np.float64
        np.testing.assert_allclose(got, want, rtol=1e-15)
    got = xpops.linalg.cholesky_solve([[6.0, 0.0], [5.0, 0.0]], low, upper=False)
    np.testing.assert_allclose(got, [[1.0, 0.0], [1.0, 0.0]], rtol=1e-15, atol=0)
    # a complex list promotes; a 1 x 1 system from nested scalars
    got = xpops.linalg.cholesky_solve([2j], [[2.0]])
    np.testing.assert_allclose(got, [0.5j])


def test_lists_take_the_other_arguments_library(xp):
    """A list next to an array becomes an array of its library, on its device, with that
    library's default dtype (PyTorch: float32), then promotes as arrays do."""
    rng = np.random.default_rng(23)
    factor, _, _ = make_factor(rng, (), 4, junk=0.0)
    b = rng.standard_normal((4, 2))
    y, x = xp.asarray(factor), xp.asarray(b)
    for got, rhs, low in (
        (xpops.linalg.cholesky_solve(b.tolist(), y), xp.asarray(b.tolist()), y),
        (xpops.linalg.cholesky_solve(x, factor.tolist()), x, xp.asarray(factor.tolist())),
    ):
        assert type(got) is type(y)
        assert got.device == y.device
        # the reference: the operands as the library made them, solved in float64
        low64 = to_numpy(low).astype(np.float64)
        want = reference(low64 @ low64.T, to_numpy(rhs).astype(np.float64))
        assert_solution(got, want, "float64" if got.dtype == y.dtype else "float32")


def test_python_scalars_are_zero_dimensional_arrays():
    """A Python scalar is a 0-d array: the shape rules then refuse it, naming the argument."""
    with pytest.raises(ValueError, match=r"^`x` must have at least 1 dimension.*got shapes \(\)"):
        xpops.linalg.cholesky_solve(1.0, np.eye(2))
    with pytest.raises(
        ValueError, match=r"^`y` must have at least 2 dimensions.*\(2,\) for `x` and \(\) for `y`"
    ):
        xpops.linalg.cholesky_solve([1.0, 2.0], 3)


@pytest.mark.parametrize("bad", ["ab", b"ab", {"a": 1}, None, object()])
def test_not_array_like(bad):
    name = "None" if bad is None else f"builtins.{type(bad).__name__}"
    for args, which in (((bad, np.eye(2)), "x"), ((np.ones(2), bad), "y")):
        with pytest.raises(TypeError, match=f"^`{which}` must be an array, got {re.escape(name)}$"):
            xpops.linalg.cholesky_solve(*args)


def test_list_of_strings_is_not_numeric():
    with pytest.raises(TypeError, match="`x` and `y` must have numeric dtypes"):
        xpops.linalg.cholesky_solve(["a", "b"], np.eye(2))
