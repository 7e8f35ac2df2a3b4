"""tril_indices and triu_indices on Dask arrays: lazy results equal to the in-memory ones
(themselves tested against independent references), several chunkings each, NumPy
chunks and, with a GPU, CuPy chunks."""

import re

import numpy as np
import pytest

import xpops

from .._dask_support import (
    da,
    synchronous,  # noqa: F401 (autouse: the synchronous scheduler)
)

nan, inf = np.nan, np.inf


# ---- tril_indices / triu_indices -----------------------------------------------------------


@pytest.mark.parametrize("fn", ["tril", "triu"])
@pytest.mark.parametrize(
    ("row", "col", "k"), [(7, 5, 0), (7, 5, -2), (5, 9, 3), (0, 3, 0), (6, 6, 9)]
)
@pytest.mark.parametrize("chunks", [1, 4, 1000, None])
def test_triangle_indices(fn, row, col, k, chunks):
    f = getattr(xpops, f"{fn}_indices")
    got = f(row, col, k, xp=da, chunks=chunks)
    want = np.stack(getattr(np, f"{fn}_indices")(row, k, col))
    assert isinstance(got, da.Array)
    np.testing.assert_array_equal(got.compute(), want)
    got32 = f(row, col, k, xp=da, chunks=chunks, dtype=np.int32).compute()
    assert got32.dtype == np.int32
    np.testing.assert_array_equal(got32, want)


def test_triangle_chunks_only_with_dask():
    with pytest.raises(ValueError, match="dask"):
        xpops.tril_indices(3, xp=np, chunks=2)


def test_triangle_large_is_lazy_and_chunked():
    out = xpops.tril_indices(100_000, xp=da, chunks=1_000_000)  # 5e9 entries: never built
    assert out.shape == (2, 100_000 * 100_001 // 2)
    assert out.numblocks == (1, 5001)
    last = out[:, -3:].compute()
    np.testing.assert_array_equal(last, [[99_999] * 3, [99_997, 99_998, 99_999]])


@pytest.mark.parametrize("fn", ["tril", "triu"])
def test_task_names(fn):
    """Every task is ``xpops-<op>-<token>`` (Dask before 2025.9 appends a second token), one
    layer; the token follows the arguments."""
    f = getattr(xpops, f"{fn}_indices")
    out = f(9, 7, -1, xp=da, chunks=5)
    assert re.fullmatch(rf"xpops-{fn}_indices-[0-9a-f]+(-[0-9a-f]+)?", out.name)
    graph = out.__dask_graph__()
    assert list(graph.layers) == [out.name]
    assert {key[0] for key in dict(graph)} == {out.name}
    assert f(9, 7, -1, xp=da, chunks=5).name == out.name  # deterministic
    others = [f(9, 7, 0, xp=da, chunks=5), f(9, 7, -1, xp=da, chunks=4)]
    others.append(f(9, 7, -1, xp=da, chunks=5, dtype=np.int32))
    assert len({out.name, *(o.name for o in others)}) == 4
