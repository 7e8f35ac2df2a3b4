"""cholesky_solve on Dask arrays: lazy results equal to the in-memory ones (themselves tested
against independent references), several chunkings each, NumPy chunks and, with a GPU, CuPy
chunks."""

import re

import numpy as np
import pytest

import xpops

from .._dask_support import _factors, assert_same, da

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
