"""The NumPy engine of cholesky_solve: each of its paths forced, whatever the sizes, chunks
across a batch, and non-contiguous inputs."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import xpops

from ._common import (
    NUMPY_PATHS,
    assert_solution,
    check_property,
    make_factor,
    reference,
    systems,
)


@settings(max_examples=40, deadline=None)
@given(case=systems(), path=st.sampled_from(NUMPY_PATHS))
def test_property_numpy_every_path(case, path):
    """Each path of the NumPy engine, whatever the sizes."""
    from xpops.linalg import _numpy as engine

    saved = engine._PATH
    engine._PATH = path
    try:
        check_property(np, case)
    finally:
        engine._PATH = saved


@pytest.mark.parametrize("path", ["rows", "batch_last"])
@pytest.mark.parametrize("dtype_name", ["float64", "complex128"])
@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("k", [1, 3])
def test_numpy_vectorized_paths_across_chunks(path, dtype_name, upper, k):
    """Chunks of a few factors over a batch of 11 (the last chunk short), junk in the unused
    triangle; on the batch-last path each chunk's triangles gathered two factors at a time
    (the last of a chunk alone)."""
    from xpops.linalg import _numpy as engine

    rng = np.random.default_rng(17)
    factor, a, _ = make_factor(rng, (11,), 6, dtype_name, upper)
    b = rng.standard_normal((11, 6, k)).astype(dtype_name)
    saved = engine._PATH, engine._CHUNK_BYTES, engine._GATHER
    engine._PATH, engine._CHUNK_BYTES = path, 3 * 36 * factor.itemsize
    engine._GATHER = 2
    try:
        got = xpops.linalg.cholesky_solve(b, factor, upper=upper)
    finally:
        engine._PATH, engine._CHUNK_BYTES, engine._GATHER = saved
    assert_solution(got, reference(a, b), dtype_name)


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
            from xpops.linalg import _numpy as engine

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
