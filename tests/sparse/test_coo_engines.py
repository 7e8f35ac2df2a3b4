"""The engines of PyTorch's 2-D COO operands on plain arrays (NumPy: `_host`, CuPy: `_cupyx`):
``divide_coo`` (row pointers, union, coordinates in one call) and ``coo_indices``, against a
dense NumPy reference; no PyTorch needed."""

import numpy as np
import pytest

from ._support import Lib


def _engine(lib: Lib):
    if lib.name == "cupy":
        from xpops.sparse import _cupyx

        return _cupyx
    from xpops.sparse import _host

    return _host


def _operand(rng, shape, n, block=(), rows=None):
    """Sorted unique coordinates (2, k) int64 of about `n` random positions (in `rows` only,
    when given) and values of shape (k, *block), none zero."""
    nrows, ncols = shape
    pick = np.arange(nrows) if rows is None else np.asarray(rows)
    if pick.size == 0 or ncols == 0 or n == 0:
        return np.zeros((2, 0), np.int64), np.zeros((0, *block))
    keys = np.unique(rng.choice(pick, n) * ncols + rng.integers(0, ncols, n))
    coords = np.stack([keys // ncols, keys % ncols]).astype(np.int64)
    values = rng.integers(1, 9, (keys.size, *block)) * rng.choice([-1.0, 1.0], (keys.size, *block))
    return coords, values / 4


def _dense(coords, values, shape):
    out = np.zeros((*shape, *values.shape[1:]))
    mask = np.zeros(shape, bool)
    out[tuple(coords)] = values
    mask[tuple(coords)] = True
    return out, mask


CASES = [  # (shape, entries of x, entries of y, block, rows of x, rows of y)
    ((4, 300), 700, 700, (), None, None),  # rows longer than a warp
    ((1000, 5), 200, 200, (), None, None),  # mostly empty rows
    ((6, 40), 150, 150, (3,), None, None),  # blocks of values (hybrid tensors)
    ((50, 20), 60, 60, (), range(45, 50), range(40, 50)),  # nothing before row 40
    ((50, 20), 60, 60, (), range(3), range(5)),  # nothing after row 4
    ((50, 20), 0, 60, (), None, None),  # x empty
    ((50, 20), 60, 0, (), None, None),  # y empty
    ((5, 0), 0, 0, (), None, None),  # no columns
]


@pytest.mark.parametrize(("shape", "nx", "ny", "block", "rx", "ry"), CASES, ids=str)
def test_divide_coo(lib, shape, nx, ny, block, rx, ry):
    rng = np.random.default_rng(sum(shape) + nx + 7 * ny)
    xc, xv = _operand(rng, shape, nx, block, rx)
    yc, yv = _operand(rng, shape, ny, block, ry)
    args = [lib.asarray(a) for a in (xc, xv, yc, yv)]
    coords, values = _engine(lib).divide_coo(*args, shape, "float64")
    coords, values = lib.host(coords), lib.host(values)
    (dx, mx), (dy, my) = _dense(xc, xv, shape), _dense(yc, yv, shape)
    want_mask = mx | my
    assert coords.dtype == np.int64
    assert coords.shape == (2, int(want_mask.sum()))
    keys = coords[0] * shape[1] + coords[1]
    assert (np.diff(keys) > 0).all()  # sorted, unique: coalesced
    got_mask = np.zeros(shape, bool)
    got_mask[tuple(coords)] = True
    np.testing.assert_array_equal(got_mask, want_mask)
    with np.errstate(divide="ignore", invalid="ignore"):
        want = dx / dy
    np.testing.assert_array_equal(values, want[tuple(coords)])


@pytest.mark.parametrize("index", ["int32", "int64"])
@pytest.mark.parametrize("counts", [[0, 3, 0, 0, 70, 1, 0], [0, 0, 0], [33], []], ids=str)
def test_coo_indices(lib, counts, index):
    """Each entry's row and column from CSR arrays, rows of every length (empty ones too)."""
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(index)
    n = int(indptr[-1])
    indices = np.random.default_rng(len(counts)).integers(0, 1000, n).astype(index)
    out = lib.host(_engine(lib).coo_indices(lib.asarray(indptr), lib.asarray(indices)))
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out[0], np.repeat(np.arange(len(counts)), counts))
    np.testing.assert_array_equal(out[1], indices)
