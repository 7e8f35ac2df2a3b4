"""tril_indices / triu_indices on every backend, against NumPy and brute force."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import xpops
from xpops._lib._compat import array_namespace

from .._support import backend_name, library_of, to_numpy

FUNCS = {
    "tril": (xpops.tril_indices, np.tril_indices),
    "triu": (xpops.triu_indices, np.triu_indices),
}
SIZES = [0, 1, 2, 3, 5, 8]
OFFSETS = [-100, -9, -5, -3, -2, -1, 0, 1, 2, 3, 5, 9, 100]


def brute_force(row, col, offset, upper):
    """Row-major pairs by testing every entry of the matrix."""
    pairs = [
        (i, j)
        for i in range(row)
        for j in range(col)
        if (j >= i + offset if upper else j <= i + offset)
    ]
    return np.array(pairs, dtype=np.int64).reshape(-1, 2).T


def expected_count(row, col, offset, upper):
    """Entries of the triangle, counted row by row."""
    if upper:
        return sum(max(0, col - max(0, i + offset)) for i in range(row))
    return sum(min(col, max(0, i + offset + 1)) for i in range(row))


@pytest.mark.parametrize("name", FUNCS)
@pytest.mark.parametrize(("row", "col"), list(itertools.product(SIZES, SIZES)))
def test_matches_numpy(xp, name, row, col):
    ours, ref_fn = FUNCS[name]
    for offset in OFFSETS:
        out = ours(row, col, offset, xp=xp)
        ref = np.stack(ref_fn(row, offset, col)).reshape(2, -1)
        assert out.shape == ref.shape, (row, col, offset)
        np.testing.assert_array_equal(to_numpy(out), ref, err_msg=f"{(row, col, offset)}")


@pytest.mark.parametrize("name", FUNCS)
def test_col_defaults_to_row(xp, name):
    ours, ref_fn = FUNCS[name]
    np.testing.assert_array_equal(to_numpy(ours(6, xp=xp)), np.stack(ref_fn(6)))
    np.testing.assert_array_equal(to_numpy(ours(6, offset=-2, xp=xp)), np.stack(ref_fn(6, -2)))


@pytest.mark.parametrize("name", FUNCS)
def test_larger_shapes_against_brute_force(xp, name):
    upper = name == "triu"
    for row, col, offset in [(97, 31, 4), (31, 97, -7), (64, 64, 0), (200, 3, -150), (3, 200, 150)]:
        out = FUNCS[name][0](row, col, offset, xp=xp)
        np.testing.assert_array_equal(to_numpy(out), brute_force(row, col, offset, upper))


@pytest.mark.parametrize("name", FUNCS)
@pytest.mark.parametrize("dtype_name", ["int32", "int64", None])
def test_dtype_namespace_and_layout(xp, name, dtype_name):
    dtype = None if dtype_name is None else getattr(xp, dtype_name)
    out = FUNCS[name][0](7, 5, 1, dtype=dtype, xp=xp)
    assert out.dtype == (xp.int64 if dtype is None else dtype)
    assert backend_name(array_namespace(out)) in ("array_api_compat", backend_name(xp))
    assert library_of(out) == backend_name(xp)
    assert out.shape == (2, expected_count(7, 5, 1, name == "triu"))
    if backend_name(xp) in ("numpy", "cupy"):
        assert out.flags.c_contiguous


def test_default_namespace_is_used_without_xp():
    out = xpops.tril_indices(4)
    assert library_of(out) == xpops.default_namespace().__name__.split(".")[-1]


def test_numpy_integer_scalars_are_accepted(xp):
    out = xpops.tril_indices(np.int64(4), np.int32(3), np.int16(-1), xp=xp)
    np.testing.assert_array_equal(to_numpy(out), np.stack(np.tril_indices(4, -1, 3)))


@pytest.mark.parametrize("name", FUNCS)
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"row": True}, "`row` must be an integer, got bool True"),
        ({"row": 3.0}, "`row` must be an integer, got float 3.0"),
        ({"row": np.bool_(True)}, "`row` must be an integer, got bool"),
        ({"row": 3, "col": 2.5}, "`col` must be an integer, got float 2.5"),
        ({"row": 3, "col": "4"}, "`col` must be an integer, got str '4'"),
        ({"row": 3, "offset": 1.0}, "`offset` must be an integer, got float 1.0"),
        ({"row": 3, "offset": False}, "`offset` must be an integer, got bool False"),
        ({"row": np.float64(3)}, "`row` must be an integer, got float64"),
    ],
)
def test_bad_argument_types(name, kwargs, message):
    with pytest.raises(TypeError, match=message.replace("(", r"\(")):
        FUNCS[name][0](**kwargs, xp=np)


@pytest.mark.parametrize("name", FUNCS)
@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((-1,), "`row` must be non-negative, got -1"),
        ((3, -2), "`col` must be non-negative, got -2"),
    ],
)
def test_negative_sizes(name, args, message):
    with pytest.raises(ValueError, match=message):
        FUNCS[name][0](*args, xp=np)


@pytest.mark.parametrize("name", FUNCS)
def test_bad_dtypes(xp, name):
    bad = [xp.float32, xp.int16, xp.bool, xp.uint8, "int32"]
    if hasattr(xp, "uint64"):
        bad.append(xp.uint64)
    for dtype in bad:
        with pytest.raises(TypeError, match="`dtype` must be int32 or int64 of"):
            FUNCS[name][0](3, dtype=dtype, xp=xp)


def test_int32_overflow_is_refused(xp):
    big = 2**31 + 2
    # a single entry whose row (or column) index is 2**31 + 1: too big for int32
    with pytest.raises(ValueError, match="int32 cannot hold the index 2147483649"):
        xpops.tril_indices(big, 1, -(big - 1), dtype=xp.int32, xp=xp)
    with pytest.raises(ValueError, match="int32 cannot hold the index 2147483649"):
        xpops.triu_indices(1, big, big - 1, dtype=xp.int32, xp=xp)
    # the largest index that fits is fine, and int64 takes the rest
    edge = 2**31
    out = xpops.tril_indices(edge, 1, -(edge - 1), dtype=xp.int32, xp=xp)
    np.testing.assert_array_equal(to_numpy(out), [[edge - 1], [0]])
    out = xpops.triu_indices(1, big, big - 1, dtype=xp.int64, xp=xp)
    np.testing.assert_array_equal(to_numpy(out), [[0], [big - 1]])


def _computed(a):
    """A NumPy copy of `a`, computed first if it is lazy (Dask)."""
    return to_numpy(a.compute() if hasattr(a, "compute") else a)


def _engines(xp):
    """`xp` and, with it, Dask (whose chunks are NumPy), for the checks that every engine
    makes the same way before any work."""
    engines = [xp]
    if backend_name(xp) == "numpy":
        engines.append(pytest.importorskip("dask.array"))
    return engines


@pytest.mark.parametrize("name", ["tril", "triu"])
@pytest.mark.parametrize("dtype_name", ["int64", None, "int32"])
def test_int64_overflow_is_refused(xp, name, dtype_name):
    """An index past 2**63 - 1 is a ValueError naming the dtype and the index on every engine
    (NumPy's own functions raise OverflowError or "Maximum allowed size exceeded"; PyTorch
    would wrap it to a negative index), int32 or not.
    Two entries only: nothing is allocated before the check."""
    big = 2**64  # rows (tril) or columns (triu); the triangle's two entries sit at the far end
    for namespace in _engines(xp):
        dtype = None if dtype_name is None else getattr(namespace, dtype_name)
        fn = getattr(xpops, f"{name}_indices")
        args = (big, 1, -(big - 2)) if name == "tril" else (1, big, big - 2)
        width = "int32" if dtype_name == "int32" else "int64"
        message = rf"^`dtype` {width} cannot hold the index {big - 1} of this triangle"
        with pytest.raises(ValueError, match=message):
            fn(*args, dtype=dtype, xp=namespace)


# (row, col, offset) of small triangles at the far edge of int64, and their entries
EDGE = 2**63 - 1  # the largest `row` or `col`
EDGE_CASES = {
    "tril": [
        ((EDGE, 1, -(EDGE - 2)), [[EDGE - 2, EDGE - 1], [0, 0]]),
        ((EDGE, EDGE, -(EDGE - 2)), [[EDGE - 2, EDGE - 1, EDGE - 1], [0, 0, 1]]),
        ((2, EDGE, 0), [[0, 1, 1], [0, 0, 1]]),
    ],
    "triu": [
        ((1, EDGE, EDGE - 2), [[0, 0], [EDGE - 2, EDGE - 1]]),
        ((EDGE, EDGE, EDGE - 2), [[0, 0, 1], [EDGE - 2, EDGE - 1, EDGE - 1]]),
        ((EDGE, 2, 0), [[0, 0, 1], [0, 1, 1]]),
    ],
}


@pytest.mark.parametrize("name", ["tril", "triu"])
def test_int64_edge_is_exact(xp, name):
    """Sizes up to 2**63 - 1 work exactly on every engine, for triangles of a few entries
    (independent reference: the entries written out)."""
    fn = getattr(xpops, f"{name}_indices")
    for namespace in _engines(xp):
        for args, want in EDGE_CASES[name]:
            out = _computed(fn(*args, xp=namespace))
            assert out.dtype == np.int64
            np.testing.assert_array_equal(out, np.array(want, dtype=np.int64), err_msg=str(args))


@pytest.mark.parametrize("name", ["tril", "triu"])
def test_sizes_past_int64_are_refused(xp, name):
    """`row` or `col` past 2**63 - 1 is a ValueError naming it, even where no index of the
    triangle reaches that far (the engines take the sizes as int64)."""
    fn = getattr(xpops, f"{name}_indices")
    for namespace in _engines(xp):
        for args, which in (((2, 2**64, 0), "col"), ((2**63, 1, -(2**63 - 2)), "row")):
            if name == "triu":
                args = (args[1], args[0], -args[2])
                which = "row" if which == "col" else "col"
            value = max(args[0], args[1])
            message = rf"^`{which}` must be at most 2\*\*63 - 1 \(the range of int64\), "
            message += rf"got {value}$"
            with pytest.raises(ValueError, match=message):
                fn(*args, xp=namespace)


@pytest.mark.parametrize("name", ["tril", "triu"])
def test_more_entries_than_int64_counts_is_refused(xp, name):
    """Indices that fit int64 but more than 2**63 - 1 entries: a ValueError naming the sizes,
    before any work (nothing of that size is asked for)."""
    n = 2**40  # 2**79 entries, every index below 2**40
    fn = getattr(xpops, f"{name}_indices")
    for namespace in _engines(xp):
        message = (
            rf"^`row` = {n} and `col` = {n} \(offset 0\) give a triangle of "
            rf"{n * (n + 1) // 2} entries, more than int64 can number \(2\*\*63 - 1\)$"
        )
        with pytest.raises(ValueError, match=message):
            fn(n, xp=namespace)


@pytest.mark.parametrize("upper", [False, True])
def test_largest_index_against_brute_force(upper):
    """The largest row or column index (the int32 guard), -1 for an empty triangle, against
    NumPy's mask of every small shape and offset, far offsets included."""
    from xpops._indexing._layout import largest_index

    for row, col, offset in itertools.product(range(6), range(6), range(-8, 9)):
        mask = (np.triu if upper else np.tril)(np.ones((row, col), bool), offset)
        i, j = np.nonzero(mask)
        want = max(i.max(initial=-1), j.max(initial=-1))
        assert largest_index(row, col, offset, upper) == want, (row, col, offset)


def test_offsets_far_outside(xp):
    for name, (ours, _) in FUNCS.items():
        full = ours(4, 3, 10**18 if name == "tril" else -(10**18), xp=xp)
        assert full.shape == (2, 12)
        empty = ours(4, 3, -(10**18) if name == "tril" else 10**18, xp=xp)
        assert empty.shape == (2, 0)


def test_numpy_device_argument():
    assert xpops.tril_indices(3, device="cpu", xp=np).shape == (2, 6)
    with pytest.raises(ValueError, match="the NumPy backend only has the device 'cpu'"):
        xpops.tril_indices(3, device="cuda", xp=np)


def test_bad_namespace():
    with pytest.raises(TypeError, match="`xp` must be an array namespace"):
        xpops.tril_indices(3, xp="numpy")
    import json

    with pytest.raises(TypeError, match="`xp` must be an array namespace, got module 'json'"):
        xpops.tril_indices(3, xp=json)


@settings(max_examples=60, deadline=None)
@given(
    row=st.integers(0, 40),
    col=st.integers(0, 40),
    offset=st.integers(-50, 50),
    upper=st.booleans(),
)
def test_properties(row, col, offset, upper):
    out = to_numpy((xpops.triu_indices if upper else xpops.tril_indices)(row, col, offset, xp=np))
    i, j = out
    assert out.shape == (2, expected_count(row, col, offset, upper))
    if out.size:
        assert 0 <= i.min() <= i.max() < row
        assert 0 <= j.min() <= j.max() < col
    assert np.all(j >= i + offset) if upper else np.all(j <= i + offset)
    linear = i * col + j
    assert np.all(np.diff(linear) > 0)  # row-major and free of duplicates


# ---- GPU-only: kernel edges, poisoned outputs, more than 2**31 entries ----------------------


def _check_kernel_against_numpy(cupy, row, col, offset, upper, dtype):
    from xpops._indexing import _cupy as cuda_indexing

    n = expected_count(row, col, offset, upper)
    out = cupy.full((2, n), -7, dtype=dtype)  # poison: every element must be overwritten
    cuda_indexing.triangle_indices(row, col, offset, upper, dtype, out=out)
    ref = np.stack((np.triu_indices if upper else np.tril_indices)(row, offset, col))
    np.testing.assert_array_equal(out.get(), ref.reshape(2, -1), err_msg=f"{(row, col, offset)}")


@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_kernel_block_boundaries(cupy_only, upper, dtype):
    from xpops._indexing._cupy import BLOCK, ITEMS

    per_block = BLOCK * ITEMS[dtype]
    # triangles of n entries with n around one and two blocks' worth (n = m(m+1)/2 for square)
    shapes = [
        (1, per_block - 1, 0),
        (1, per_block, 0),
        (1, per_block + 1, 0),
        (per_block + 1, 1, 0),
    ]
    shapes += [(m, m, 0) for m in (44, 45, 63, 64, 65, 90, 91)]
    shapes += [(3 * per_block + 5, 7, -2), (7, 3 * per_block + 5, 2), (300, 257, -3), (257, 300, 3)]
    for row, col, offset in shapes:
        _check_kernel_against_numpy(cupy_only, row, col, offset, upper, getattr(np, dtype))


def test_kernel_large_against_numpy(cupy_only):
    for upper in (False, True):
        _check_kernel_against_numpy(cupy_only, 4001, 3999, 17, upper, np.int64)
        _check_kernel_against_numpy(cupy_only, 3000, 9000, -1234, upper, np.int32)


@pytest.mark.parametrize("name", ["tril_indices", "triu_indices"])
def test_cupy_fast_path_matches_general_path(cupy_only, name):
    """Python int arguments take the CuPy fast path (no `dtype`, or NumPy's int32 or int64
    type); NumPy integer sizes take the general path. Both give NumPy's pairs, in the asked
    dtype, on the GPU."""
    cupy = cupy_only
    fn = getattr(xpops, name)
    for row, col, offset in [(0, 0, 0), (1, 1, 0), (5, 3, -9), (7, 11, 2), (300, 257, -3)]:
        want = np.stack(getattr(np, name)(row, offset, col))
        for dtype in (None, cupy.int32, cupy.int64):
            fast = fn(row, col, offset, dtype=dtype, xp=cupy)
            wrapped = fn(row, col, offset, dtype=dtype, xp=xpops.get_namespace(cupy.ones(1)))
            general = fn(np.int64(row), np.int64(col), np.int64(offset), dtype=dtype, xp=cupy)
            for got in (fast, wrapped, general):
                assert isinstance(got, cupy.ndarray)
                assert got.dtype == (dtype or np.int64)
                assert got.flags.c_contiguous
                np.testing.assert_array_equal(got.get(), want.reshape(2, -1))


def test_kernel_device_argument(cupy_only):
    out = xpops.tril_indices(5, device=cupy_only.cuda.Device(0), xp=cupy_only)
    assert out.device.id == 0
    out = xpops.triu_indices(5, device=0, xp=cupy_only)
    assert out.device.id == 0


@pytest.mark.slow
@pytest.mark.parametrize("upper", [False, True])
def test_more_than_2_31_entries(cupy_only, upper):
    """tril/triu(66000, 66000) int32: about 2.18e9 entries, checked row block by row block
    against an independent reference built with cupy.repeat."""
    cupy = cupy_only
    n_side = 66000
    cupy.get_default_memory_pool().free_all_blocks()  # what earlier tests left cached
    free, _ = cupy.cuda.runtime.memGetInfo()
    n = n_side * (n_side + 1) // 2
    if free < 2 * n * 4 + 12 * 2**30:
        pytest.skip("not enough GPU memory for 2.18e9 entries")
    # poison the memory pool so that the output's block starts out as garbage
    poison = cupy.full(2 * n, -7, dtype=cupy.int32)
    del poison
    fn = xpops.triu_indices if upper else xpops.tril_indices
    out = fn(n_side, dtype=cupy.int32, xp=cupy)
    assert n > 2**31
    assert out.shape == (2, n)
    counts = np.arange(n_side, 0, -1) if upper else np.arange(1, n_side + 1)
    ends = np.cumsum(counts)
    block = 4096
    for r0 in range(0, n_side, block):
        r1 = min(r0 + block, n_side)
        s0, s1 = int(ends[r0] - counts[r0]), int(ends[r1 - 1])
        seg_counts = cupy.asarray(counts[r0:r1])
        seg_rows = cupy.repeat(cupy.arange(r0, r1), counts[r0:r1].tolist())
        seg_starts = cupy.asarray(ends[r0:r1] - counts[r0:r1] - s0)
        first_col = seg_rows if upper else cupy.zeros_like(seg_rows)
        seg_cols = cupy.arange(s1 - s0) - cupy.repeat(seg_starts, seg_counts.get().tolist())
        seg_cols += first_col
        assert bool((out[0, s0:s1] == seg_rows).all()), (r0, r1)
        assert bool((out[1, s0:s1] == seg_cols).all()), (r0, r1)
    del out
    cupy.get_default_memory_pool().free_all_blocks()
