"""cholesky_solve on Dask arrays: lazy results equal to the in-memory ones (themselves tested
against independent references), several chunkings each, NumPy chunks and, with a GPU, CuPy
chunks."""

import re

import numpy as np
import pytest

import xpops

from .._dask_support import (
    _factors,
    assert_same,
    da,
    synchronous,  # noqa: F401 (autouse: the synchronous scheduler)
)

nan, inf = np.nan, np.inf


# ---- cholesky_solve -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bx", "by", "cx", "cy"),
    [
        ((6,), (6,), 2, 3),
        ((4, 1), (5,), (3, 1), 2),
        ((), (7,), (), 3),
        ((6,), (), 4, ()),
        ((6,), (6,), 1, 1),
    ],
)
@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_solve(bx, by, cx, cy, upper):
    rng = np.random.default_rng(2)
    m, k = 4, 3
    low = _factors(rng, by, m)
    factor = np.swapaxes(low, -1, -2).copy() if upper else low
    b = rng.standard_normal((*bx, m, k))
    cx = cx if isinstance(cx, tuple) else (cx,) * len(bx)
    cy = cy if isinstance(cy, tuple) else (cy,) * len(by)
    got = xpops.linalg.cholesky_solve(
        da.from_array(b, chunks=(*cx, m, k)), da.from_array(factor, chunks=(*cy, m, m)), upper
    )
    assert_same(got, xpops.linalg.cholesky_solve(b, factor, upper), 1e-12)


def test_cholesky_solve_vector_and_errors():
    rng = np.random.default_rng(3)
    low = _factors(rng, (), 5)
    v = rng.standard_normal(5)
    assert_same(
        xpops.linalg.cholesky_solve(da.from_array(v, chunks=5), da.from_array(low)),
        xpops.linalg.cholesky_solve(v, low),
    )
    b = da.from_array(rng.standard_normal((4, 5, 2)), chunks=(2, 3, 2))
    with pytest.raises(ValueError, match=r"rechunk"):
        xpops.linalg.cholesky_solve(b, da.from_array(low))


def test_cholesky_solve_core_chunk_messages():
    """The whole message: which operand, how many chunks along which axes, how to rechunk."""
    b = da.from_array(np.ones((4, 5, 2)), chunks=(2, 3, 2))
    want = (
        "`x` must hold its last 2 dimensions in one chunk (the solve needs whole matrices), "
        "got 2 chunks along axis -2; rechunk first, e.g. x.rechunk({-2: -1, -1: -1})"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(want)}$"):
        xpops.linalg.cholesky_solve(b, da.from_array(np.eye(5)))
    y = da.from_array(np.eye(5), chunks=(2, 2))
    want = (
        "`y` must hold its last 2 dimensions in one chunk (the solve needs whole matrices), "
        "got 3 chunks along axis -2, -1; rechunk first, e.g. y.rechunk({-2: -1, -1: -1})"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(want)}$"):
        xpops.linalg.cholesky_solve(da.from_array(np.ones((5, 2))), y)


# ---- NumPy operands next to Dask ones; task names -----------------------------------------------


@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_solve_numpy_with_dask(upper):
    """A NumPy factor with a Dask right-hand side and the reverse (each batched and
    broadcast, and the 1-D case), lists included: lazy results equal to the in-memory ones,
    as Dask itself combines NumPy arrays with Dask arrays."""
    rng = np.random.default_rng(4)
    m = 4
    for bx, by in [((6,), (6,)), ((6,), ()), ((), (6,)), ((3, 1), (2,))]:
        low = _factors(rng, by, m)
        factor = np.swapaxes(low, -1, -2).copy() if upper else low
        b = rng.standard_normal((*bx, m, 2))
        want = xpops.linalg.cholesky_solve(b, factor, upper)
        lazy_b = da.from_array(b, chunks=(*(1,) * len(bx), m, 2))
        lazy_y = da.from_array(factor, chunks=(*(2,) * len(by), m, m))
        assert_same(xpops.linalg.cholesky_solve(lazy_b, factor, upper), want)
        assert_same(xpops.linalg.cholesky_solve(b, lazy_y, upper), want)
        assert_same(xpops.linalg.cholesky_solve(b.tolist(), lazy_y, upper), want)
    v = rng.standard_normal(m)
    low = _factors(rng, (), m)
    want = xpops.linalg.cholesky_solve(v, low)
    assert_same(xpops.linalg.cholesky_solve(da.from_array(v), low), want)
    assert_same(xpops.linalg.cholesky_solve(v, da.from_array(low)), want)
    assert_same(xpops.linalg.cholesky_solve(v.tolist(), da.from_array(low)), want)


def test_cholesky_solve_numpy_with_dask_still_checks():
    """The NumPy operand is checked as the Dask one is: shapes, and whole core chunks of the
    Dask one."""
    with pytest.raises(ValueError, match=r"`x` and `y` must agree on M"):
        xpops.linalg.cholesky_solve(da.ones((3, 1)), np.eye(2))
    with pytest.raises(ValueError, match=r"^`x` must hold its last 2 dimensions in one chunk"):
        xpops.linalg.cholesky_solve(da.ones((4, 2), chunks=(2, 2)), np.eye(4))


def test_cholesky_solve_dask_with_other_libraries():
    """Only NumPy operands join Dask ones: any other library is a TypeError."""
    import array_api_strict

    with pytest.raises(TypeError, match="arrays from different libraries cannot be mixed"):
        xpops.linalg.cholesky_solve(da.ones((2, 1)), array_api_strict.eye(2))
    with pytest.raises(TypeError, match="arrays from different libraries cannot be mixed"):
        xpops.linalg.cholesky_solve(array_api_strict.ones((2, 1)), da.eye(2))


def test_cholesky_solve_task_names():
    """The solve's tasks are ``xpops-cholesky_solve-<token>``, never a helper's name; the
    token follows the operands and `upper` (Dask before 2025.9 appends a second token)."""
    rng = np.random.default_rng(5)
    low = _factors(rng, (4,), 3)
    x = da.from_array(rng.standard_normal((4, 3, 2)), chunks=(2, 3, 2))
    y = da.from_array(low, chunks=(2, 3, 3))
    out = xpops.linalg.cholesky_solve(x, y)
    assert re.fullmatch(r"xpops-cholesky_solve-[0-9a-f]+(-[0-9a-f]+)?", out.name)
    layers = list(out.__dask_graph__().layers)
    assert not [name for name in layers if "solve" in name and name != out.name]
    assert xpops.linalg.cholesky_solve(x, y).name == out.name
    assert xpops.linalg.cholesky_solve(x, y, upper=True).name != out.name
    assert xpops.linalg.cholesky_solve(x + 1, y).name != out.name
    # a 1-D right-hand side: the solve layer is named so too (Dask reshapes it afterwards)
    v = xpops.linalg.cholesky_solve(da.ones(3), da.from_array(low[0]))
    solve = [n for n in v.__dask_graph__().layers if "cholesky_solve" in n]
    assert len(solve) == 1
    assert re.fullmatch(r"xpops-cholesky_solve-[0-9a-f]+(-[0-9a-f]+)?", solve[0])


def test_cupy_chunks_on_worker_threads(cupy_only):
    """CuPy chunks solved on Dask's threaded scheduler: the kernels launch from worker threads
    that may have made no CUDA call before."""
    cupy = cupy_only
    rng = np.random.default_rng(21)
    low = cupy.asarray(_factors(rng, (16,), 6))
    b = cupy.asarray(rng.standard_normal((16, 6, 1)))
    lazy = xpops.linalg.cholesky_solve(
        da.from_array(b, chunks=(2, 6, 1)), da.from_array(low, chunks=(2, 6, 6))
    )
    got = lazy.compute(scheduler="threads", num_workers=4)
    assert isinstance(got, cupy.ndarray)
    np.testing.assert_allclose(got.get(), xpops.linalg.cholesky_solve(b, low).get(), rtol=1e-12)
