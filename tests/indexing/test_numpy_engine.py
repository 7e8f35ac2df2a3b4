"""The NumPy engine's three ways (mask, repeat, parts) and the contract's fast path, against
NumPy's own functions: every way on every small shape (the size thresholds lowered), and
shapes on both sides of each threshold at their real values."""

import itertools
import types

import numpy as np
import pytest

import xpops
from xpops import _indexing
from xpops._indexing import _numpy as engine

REFERENCE = {False: np.tril_indices, True: np.triu_indices}

# (MASK_MAX, LONG_ROW, REPEAT_MAX): each way alone, and the parts path with every row long,
# every row short, and the split between them at several lengths
WAYS = {
    "mask": (10**9, 1024, 2**20),
    "repeat": (0, 1024, 10**9),
    "parts, long rows": (0, 1, 0),
    "parts, short rows": (0, 10**9, 0),
    "parts, split at 2": (0, 2, 0),
    "parts, split at 3": (0, 3, 0),
    "parts, split at 5": (0, 5, 0),
}


def _check(row, col, offset, upper, dtype):
    offset = min(max(offset, -row), col)  # as the contract clips it
    out = engine.triangle_indices(row, col, offset, upper, np.dtype(dtype))
    ref = np.stack(REFERENCE[upper](row, offset, col)).reshape(2, -1)
    assert out.dtype == dtype
    assert out.flags.c_contiguous
    np.testing.assert_array_equal(out, ref, err_msg=f"{(row, col, offset, upper)}")


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("upper", [False, True])
def test_every_way_on_small_shapes(monkeypatch, way, upper):
    for name, value in zip(("MASK_MAX", "LONG_ROW", "REPEAT_MAX"), WAYS[way], strict=True):
        monkeypatch.setattr(engine, name, value)
    monkeypatch.setattr(engine, "_BLOCK", 4)  # the repeat's subtraction: many blocks, ragged ends
    sizes = [0, 1, 2, 3, 5, 8, 13]
    for row, col in itertools.product(sizes, sizes):
        for offset in range(-col - 2, col + 3):
            for dtype in (np.int32, np.int64):
                _check(row, col, offset, upper, dtype)


@pytest.mark.parametrize("upper", [False, True])
def test_shapes_around_the_thresholds(upper):
    side = int(engine.MASK_MAX**0.5)  # the largest square read off a mask, and the next
    shapes = [(side, side, 0), (side + 1, side + 1, 0), (side, side + 1, -3)]
    # the largest square triangle of one repeat, the next, and shapes with and without
    # long rows beyond it
    n = int((2 * engine.REPEAT_MAX) ** 0.5)
    while n * (n + 1) // 2 > engine.REPEAT_MAX:
        n -= 1
    shapes += [(n, n, 0), (n + 1, n + 1, 0), (n + 1, n + 1, 5), (n + 1, n + 1, -5)]
    long_row = engine.LONG_ROW
    shapes += [
        (long_row + 200, 3 * long_row, -2),  # growing rows cross LONG_ROW, none full
        (3 * long_row, long_row + 1, 0),  # full rows of LONG_ROW + 1 entries
        (engine.REPEAT_MAX // 300 + 50, 300, -7),  # full rows, all short, past REPEAT_MAX
        (600, 600, 700),  # nothing but full rows (offset past the edge)
        (2000, 1000, -500),  # empty rows first (tril) or last (triu)
    ]
    for row, col, offset in shapes:
        for dtype in (np.int32, np.int64):
            _check(row, col, offset, upper, dtype)


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize(
    ("big", "dtype"), [(2**40, np.int64), (2**31, np.int32)], ids=["int64", "int32 edge"]
)
def test_far_corners_in_every_way(monkeypatch, way, big, dtype):
    """Triangles of a few entries in the far corner of a huge matrix: indices past 2**31
    (int64), or up to 2**31 - 1 (int32, whose intermediate positions would not fit it),
    against the entries written out by brute force over that corner."""
    for name, value in zip(("MASK_MAX", "LONG_ROW", "REPEAT_MAX"), WAYS[way], strict=True):
        monkeypatch.setattr(engine, name, value)
    k = 4
    # (row, col, offset, upper): the last k rows (tril) or last k columns (triu) hold entries
    for row, col, offset, upper in [
        (big, k, -(big - k), False),
        (big, big, -(big - k), False),
        (k, big, big - k, True),
        (big, big, big - k, True),
    ]:
        rows = range(row - k, row) if not upper else range(min(row, k))
        cols = range(col - k, col) if upper else range(min(col, k))
        want = [
            (i, j) for i in rows for j in cols if (j >= i + offset if upper else j <= i + offset)
        ]
        out = engine.triangle_indices(row, col, offset, upper, np.dtype(dtype))
        assert out.dtype == dtype
        assert [tuple(map(int, p)) for p in out.T] == want, (way, row, col, offset, upper)


def test_fast_path_matches_the_general_path():
    """Python-int calls with nothing else given take the fast path; it gives NumPy's own
    indices, and the same array as the general path (a dtype given)."""
    for row, col, offset in [(0, None, 0), (1, None, 0), (7, None, -2), (7, 5, 1), (50, 90, 200)]:
        for fn, ref in (
            (xpops.tril_indices, np.tril_indices),
            (xpops.triu_indices, np.triu_indices),
        ):
            fast = fn(row, col, offset, xp=np)  # with no `xp`, XPOPS_BACKEND's (maybe CuPy)
            general = fn(row, col, offset, dtype=np.int64, xp=np)
            assert type(fast) is np.ndarray
            assert fast.dtype == np.int64
            np.testing.assert_array_equal(fast, np.stack(ref(row, offset, col)))
            np.testing.assert_array_equal(fast, general)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"row": True},
        {"row": 3.0},
        {"row": np.int64(3)},
        {"col": -1},
        {"offset": True},
        {"row": 2**31 + 1, "offset": -(2**31)},
        {"dtype": np.int32},
        {"device": "cpu"},
        {"xp": types.ModuleType("array_api_strict")},
    ],
)
def test_fast_path_declines_what_it_does_not_check(kwargs):
    """Anything but Python ints in range, and no dtype, device or chunks, goes to the general
    path, which validates it."""
    args = {"row": 3, "col": None, "offset": 0, "dtype": None, "device": None, "xp": np}
    args.update(kwargs)
    assert _indexing._fast_path(**args, chunks=None, upper=False) is None


def test_fast_path_takes_the_array_api_wrappers():
    """``xpops.default_namespace()`` and array-api-compat's NumPy namespace take the fast path
    of the library they wrap, with its result."""
    import array_api_compat.numpy as compat_numpy

    args = {"col": None, "offset": -1, "dtype": None, "device": None, "chunks": None}
    for xp in (compat_numpy, xpops.get_namespace(np.ones(1))):
        got = _indexing._fast_path(6, xp=xp, upper=True, **args)
        assert type(got) is np.ndarray
        np.testing.assert_array_equal(got, np.stack(np.triu_indices(6, -1)))


def test_fast_path_follows_the_default_backend(monkeypatch):
    """With ``XPOPS_BACKEND=cupy`` the fast path gives CuPy's result, or the general path's
    RuntimeError where CuPy cannot be used; ``xp=numpy`` still gets NumPy's."""
    from xpops import _backend

    monkeypatch.setattr(_backend, "_DEFAULT_BACKEND", "cupy")
    args = {"col": None, "offset": 0, "dtype": None, "device": None, "chunks": None}
    assert isinstance(_indexing._fast_path(3, xp=np, upper=False, **args), np.ndarray)
    if _backend.cupy_unavailable_reason() is not None:
        with pytest.raises(RuntimeError, match="CuPy backend was requested"):
            _indexing._fast_path(3, xp=None, upper=False, **args)
        with pytest.raises(RuntimeError, match="CuPy backend was requested"):
            xpops.tril_indices(3)
    else:
        got = _indexing._fast_path(3, xp=None, upper=False, **args)
        assert type(got).__module__.startswith("cupy")
        np.testing.assert_array_equal(got.get(), np.tril_indices(3))
