"""The CuPy engine of cholesky_solve (skipped without a GPU): every kernel's size limits,
broadcasting, special values, large batches and large systems."""

import numpy as np
import pytest

import xpops

from ._common import PATTERNS, assert_solution, make_factor, reference

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


@pytest.mark.parametrize("dtype_name", ["float32", "float64", "complex64", "complex128"])
@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("extra", [9, 237])
def test_gpu_batches_of_large_systems(cupy_only, dtype_name, upper, extra):
    """More than one system past SMALL_MAX_M (cuBLAS's right-side batched solves on the
    result): every broadcast pattern, one and several right-hand sides, NaN in the unused
    triangle and in the memory pool."""
    cupy = cupy_only
    from xpops.linalg import _cupy

    rng = np.random.default_rng(17)
    m = _cupy.SMALL_MAX_M + extra
    for (bx, by), k in zip(PATTERNS, [1, 3, 2, 1, 5, 1, 2, 3, 1, 4], strict=True):
        factor, a, _ = make_factor(rng, by, m, dtype_name, upper)
        b = rng.standard_normal((*bx, m, k)).astype(dtype_name)
        if np.dtype(dtype_name).kind == "c":
            b = b + 1j * rng.standard_normal(b.shape).astype(dtype_name)
        junk = cupy.full(4 * (factor.size + b.size) + 1024, np.nan, dtype=np.float32)
        del junk
        got = xpops.linalg.cholesky_solve(cupy.asarray(b), cupy.asarray(factor), upper=upper)
        assert got.flags.c_contiguous
        assert got.dtype == np.dtype(dtype_name)
        assert_solution(got, reference(a, b), dtype_name)


@pytest.mark.parametrize("dtype_name", ["float64", "complex128"])
@pytest.mark.parametrize("upper", [False, True])
def test_gpu_large_systems_leave_their_inputs_alone(cupy_only, dtype_name, upper):
    """Past SMALL_MAX_M the solves run in place on a column-major copy of the right-hand sides:
    with one right-hand side the transposed view of `x` is C-contiguous too, and must still be
    copied. One system and a batch, a vector, a column and a matrix; forward and gradient."""
    cupy = cupy_only
    rng = np.random.default_rng(18)
    m = 100
    for batch, x_shape in [((), (m,)), ((), (m, 1)), ((3,), (3, m, 1)), ((3,), (3, m, 2))]:
        factor, a, _ = make_factor(rng, batch, m, dtype_name, upper)
        b = rng.standard_normal(x_shape).astype(dtype_name)
        x, y = cupy.asarray(b), cupy.asarray(factor)
        got = xpops.linalg.cholesky_solve(x, y, upper=upper)
        np.testing.assert_array_equal(x.get(), b)
        np.testing.assert_array_equal(y.get(), factor)  # NaN compares equal here
        column = b[..., None] if b.ndim == 1 else b
        want = reference(a, column)
        assert_solution(got.reshape(want.shape), want, dtype_name)
        _, pullback = xpops.vjp(xpops.linalg.cholesky_solve, x, y, upper=upper)
        g = cupy.asarray(rng.standard_normal(x_shape).astype(dtype_name))
        g0 = g.get()
        pullback(g)
        for arr, ref in ((x, b), (y, factor), (g, g0)):
            np.testing.assert_array_equal(arr.get(), ref)


def test_gpu_lists_and_mixed_libraries(cupy_only):
    """A list next to a CuPy array becomes a CuPy array on its device (not the fast path);
    NumPy with CuPy stays a TypeError, either way round."""
    cupy = cupy_only
    low = np.linalg.cholesky(np.array([[4.0, 2.0], [2.0, 3.0]]))
    got = xpops.linalg.cholesky_solve([6.0, 5.0], cupy.asarray(low))
    assert isinstance(got, cupy.ndarray)
    np.testing.assert_allclose(got.get(), [1.0, 1.0], rtol=1e-15)
    got = xpops.linalg.cholesky_solve(cupy.asarray([[6.0], [5.0]]), low.tolist())
    assert isinstance(got, cupy.ndarray)
    np.testing.assert_allclose(got.get(), [[1.0], [1.0]], rtol=1e-15)
    with pytest.raises(TypeError, match="arrays from different libraries cannot be mixed"):
        xpops.linalg.cholesky_solve(cupy.ones((2, 1)), low)
    with pytest.raises(TypeError, match="arrays from different libraries cannot be mixed"):
        xpops.linalg.cholesky_solve(np.ones((2, 1)), cupy.asarray(low))
