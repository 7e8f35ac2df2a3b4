"""The CuPy engine of logcumsumexp (GPU only: skipped without a CUDA device): accuracy, every
kernel at its block and tile boundaries on poisoned memory, special values, the Dask engine's
CuPy helpers, the kernel choice and more than 2**31 elements."""

import numpy as np
import pytest

import xpops

from ._reference import (
    assert_single_terms_exact,
    long_double_reference,
    single_term_outputs,
    sparse_lanes,
)

# ---- GPU-only accuracy ----------------------------------------------------------------------


def test_accuracy_float32_2_24_on_gpu(cupy_only):
    """2**24 float32 N(0, 10**2) values within 2e-5 of a long double reference."""
    cupy = cupy_only
    x = np.random.default_rng(16).normal(0, 10, 2**24).astype(np.float32)
    got = xpops.logcumsumexp(cupy.asarray(x)).get()
    assert got.dtype == np.float32
    want = long_double_reference(x.astype(np.float64))
    assert float(np.max(np.abs(got.astype(np.longdouble) - want))) < 2e-5


def test_accuracy_non_contiguous_on_gpu(cupy_only):
    cupy = cupy_only
    x = np.random.default_rng(17).normal(0, 10, (2**17, 8))
    got = xpops.logcumsumexp(cupy.asarray(x)[:, 3], axis=0).get()
    assert float(np.max(np.abs(got - long_double_reference(x[:, 3])))) < 1e-13
    got = xpops.logcumsumexp(cupy.asarray(x).T, axis=1).get()
    want = long_double_reference(x[:, 5])
    assert float(np.max(np.abs(got[5] - want))) < 1e-13


# ---- GPU-only: every kernel at its block and tile boundaries, poisoned memory, > 2**31 ---------


def _reference_along(x, axis, exclusive, reverse):
    """Reference by np.logaddexp.accumulate on a moved, possibly reversed view, in long double:
    a sequential float64 scan drifts by about 1e-11 over 500,000 elements."""
    y = np.moveaxis(np.asarray(x, dtype=np.longdouble), axis, -1)
    if reverse:
        y = y[..., ::-1]
    with np.errstate(invalid="ignore"):
        r = np.logaddexp.accumulate(y, axis=-1)
    if exclusive:
        r = np.concatenate([np.full((*r.shape[:-1], 1), -np.inf), r[..., :-1]], axis=-1)
    if reverse:
        r = r[..., ::-1]
    return np.moveaxis(r, -1, axis).astype(np.float64)


def _assert_scan_equal(got, want, atol):
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    inf = np.isinf(want)
    np.testing.assert_array_equal(got[inf], want[inf])
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=0, atol=atol)


def _poison_pool(cupy, nbytes):
    """Leave NaN-filled blocks in CuPy's memory pool so unwritten outputs show up as NaN."""
    junk = cupy.full(nbytes // 4 + 1024, np.nan, dtype=np.float32)
    del junk


def _kernel_cases():
    from xpops._cumulative._cupy import _columns, _rows, _tiles

    for name in ("float32", "float64"):
        chunk = _rows.ROW_CHUNK[name]
        col = _columns.COLUMN_ITEMS[name]
        for kind in ("tiles", "tiles_staged"):
            tile = _tiles.TILES_BLOCK * _tiles.tile_items(kind, name)
            # the last: rows long enough for the L2 prefetch
            tile_shapes = [
                (1,),
                (tile - 1,),
                (tile,),
                (tile + 1,),
                (3 * tile + 5,),
                (3, 2 * tile + 1),
                (2, (_tiles.TILES_PREFETCH_MIN_TILES + 3) * tile + 7),
            ]
            yield (kind, name, tile_shapes)
        yield (
            "rows",
            name,
            [
                (_rows.ROWS_BLOCK - 1, chunk - 1),
                (_rows.ROWS_BLOCK, chunk),
                (_rows.ROWS_BLOCK + 1, chunk + 1),
                (5, 2 * chunk + 3),
                (300, 1),
            ],
        )
        most = _rows.group_rows_max_len(name)
        vec = 16 // np.dtype(name).itemsize
        yield (
            "group_rows",
            name,
            # lengths around the lane groups' and rounds' sizes, rows around a block's
            [
                (9, 1),
                (17, vec - 1),
                (5, vec),
                (33, vec + 1),
                (65, 2 * vec),
                (11, 2 * vec + 1),
                (129, 8 * vec + 1),
                (3, 16 * vec - 1),
                (1001, 32 * vec),
                (7, 32 * vec + 1),
                (6, 64 * vec + 1),
                (2, most // 2 + 3),
                (300, most - 1),
                (4, most),
            ],
        )
        yield (
            "columns",
            name,
            [
                (col - 1, 3),
                (col, _columns.BLOCK),
                (col + 1, _columns.BLOCK + 1),
                (2 * col + 3, 5, 7),
                (3, 1, 2),
            ],
        )
        run = _columns.COLUMN_BLOCK_ITEMS[name]
        chunk_rows = _columns.COLUMN_BLOCK_THREADS // 32 * run
        yield (
            "column_blocks",
            name,
            [
                (1, 3),
                (run - 1, 33),
                (chunk_rows, 32),
                (chunk_rows + 1, 31, 3),
                (2 * chunk_rows + run + 1, 65),
                (3, 1, 2),
            ],
        )


@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_kernels_at_boundaries(cupy_only, exclusive, reverse):
    from xpops._cumulative import _cupy as cc

    cupy = cupy_only
    rng = np.random.default_rng(7)
    for kernel, name, shapes in _kernel_cases():
        atol = 1e-4 if name == "float32" else 1e-11  # results reach about 50
        for shape in shapes:
            axis = 0 if kernel.startswith("column") else len(shape) - 1
            x = (rng.standard_normal(shape) * 10).astype(name)
            _poison_pool(cupy, 2 * x.nbytes)
            got = cc.logcumsumexp(cupy.asarray(x), axis, exclusive, reverse, kernel=kernel)
            want = _reference_along(x, axis, exclusive, reverse)
            _assert_scan_equal(got.get(), want, atol)


@pytest.mark.parametrize(
    "kernel", ["tiles", "tiles_staged", "rows", "group_rows", "columns", "column_blocks"]
)
def test_kernels_special_values(cupy_only, kernel):
    """NaN, +-inf and jumps of 2000 anywhere in a run take the exact path; results stay exact."""
    from xpops._cumulative import _cupy as cc

    cupy = cupy_only
    rng = np.random.default_rng(11)
    shape = {
        "tiles": (20000,),
        "tiles_staged": (20000,),
        "rows": (200, 70),
        "group_rows": (200, 70),
    }.get(kernel, (300, 70))
    axis = 0 if kernel.startswith("column") else len(shape) - 1
    for name in ("float32", "float64"):
        x = (rng.standard_normal(shape) * 10).astype(name)
        flat = x.reshape(-1)
        idx = rng.permutation(flat.size)
        flat[idx[:40]] = -np.inf
        flat[idx[40:45]] = np.inf
        flat[idx[45:50]] = np.nan
        flat[idx[50:90]] = 1000.0
        flat[idx[90:130]] = -1000.0
        for exclusive in (False, True):
            for reverse in (False, True):
                got = cc.logcumsumexp(cupy.asarray(x), axis, exclusive, reverse, kernel=kernel)
                want = _reference_along(x, axis, exclusive, reverse)
                atol = 1e-4 if name == "float32" else 1e-11
                _assert_scan_equal(got.get(), want, atol)
        allneg = np.full(shape, -np.inf, dtype=name)
        got = cc.logcumsumexp(cupy.asarray(allneg), axis, False, False, kernel=kernel)
        assert bool(cupy.all(got == -np.inf))


@pytest.mark.parametrize("kernel", ["tiles", "tiles_staged", "columns", "column_blocks"])
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_float64_exp_log_forms(cupy_only, kernel, exclusive, reverse):
    """The float64 table exp and log (TileMath) of the tiles and columns kernels over their
    whole range: exp of 0 down to -750 (below -707 the library exp, subnormal and zero
    results), log of sums from about e**-640 (exponents near -920) to thousands, against a long
    double reference. A "tile" below is the unit summed against one maximum: a tiles kernel's
    tile, a columns kernel's run of one column (the input is one column along axis 0)."""
    from xpops._cumulative import _cupy as cc
    from xpops._cumulative._cupy import _columns, _tiles

    cupy = cupy_only
    rng = np.random.default_rng(12)
    if kernel == "columns":
        tile = _columns.COLUMN_ITEMS["float64"]
    elif kernel == "column_blocks":
        tile = _columns.COLUMN_BLOCK_ITEMS["float64"]
    else:
        tile = _tiles.TILES_BLOCK * _tiles.tile_items(kernel, "float64")
    x = rng.uniform(-740.0, 10.0, 6 * tile + 3)
    starts = np.arange(0, x.size, tile)
    x[starts] = 0.0  # each tile starts within 650 of its maximum: the fast path
    # tile 0: a maximum 640 above its first element, so its first sums are near e**-640
    x[:tile] = rng.uniform(-1.0, 0.0, tile)
    x[0] = -640.0
    # tile 3 far below the prefix: sums of e**-600 added to a prefix of about 1
    x[3 * tile : 4 * tile] = rng.uniform(-620.0, -600.0, tile)
    # tiles 4, 5: many equal terms, sums in the thousands
    x[4 * tile : 6 * tile] = rng.uniform(-1e-3, 1e-3, 2 * tile)
    if reverse:  # the same patterns met in scan order
        x = x[::-1].copy()
    if kernel.startswith("column"):
        x = x[:, None]
    _poison_pool(cupy, 2 * x.nbytes)
    got = cc.logcumsumexp(cupy.asarray(x), 0, exclusive, reverse, kernel=kernel)
    want = _reference_along(x, 0, exclusive, reverse)
    _assert_scan_equal(got.get(), want, 1e-11)


@pytest.mark.parametrize("kernel", ["tiles", "tiles_staged"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_row_first_tile_far_below_its_maximum(cupy_only, kernel, dtype):
    """A row's first tile whose first element lies from just past the fast path's threshold
    (60 float32, 650 float64) to far past the headroom of its sums below the tile's maximum,
    with a second element near it (an output summed far below the maximum), on poisoned
    memory, against a long double reference; the carry of a Dask block too."""
    from xpops._cumulative import _cupy as cc
    from xpops._cumulative._cupy import _tiles

    cupy = cupy_only
    rng = np.random.default_rng(13)
    tile = _tiles.TILES_BLOCK * _tiles.tile_items(kernel, dtype)
    limit = 60.0 if dtype == "float32" else 650.0
    gaps = [limit + 0.5, limit + 20, 2 * limit + 5, 2 * limit + 15, 2 * limit + 40, 4 * limit]
    x = rng.uniform(-1.0, 1.0, (len(gaps), 2 * tile + 7))
    x[:, tile // 2] = 2.0  # the first tile's maximum
    x[:, 0] = 2.0 - np.array(gaps)
    x[:, 1] = x[:, 0] + 1.5
    x = x.astype(dtype)
    atol = 1e-4 if dtype == "float32" else 1e-11
    for exclusive in (False, True):
        for reverse in (False, True):
            xs = np.ascontiguousarray(x[:, ::-1]) if reverse else x
            _poison_pool(cupy, 2 * xs.nbytes)
            got = cc.logcumsumexp(cupy.asarray(xs), 1, exclusive, reverse, kernel=kernel).get()
            want = _reference_along(xs, 1, exclusive, reverse)
            _assert_scan_equal(got, want, atol)
            # the first term alone is exact
            first = got[:, -2 if exclusive else -1] if reverse else got[:, 1 if exclusive else 0]
            np.testing.assert_array_equal(first, xs[:, -1] if reverse else xs[:, 0])
    carry = np.full((len(gaps), 1), -5.0, dtype=dtype)
    got = cc.logcumsumexp_from(cupy.asarray(x), cupy.asarray(carry), 1, False, False).get()
    want = _reference_along(np.concatenate([carry, x], axis=1), 1, False, False)[:, 1:]
    _assert_scan_equal(got, want, atol)


def _carry_cases():
    """(shape, axis) per kernel family: tiles (float32) and tiles_staged (float64) take the
    carry in the kernel, rows and columns add it afterwards."""
    from xpops._cumulative import _cupy as cc
    from xpops._cumulative._cupy import _tiles

    tile = _tiles.TILES_BLOCK * _tiles.tile_items("tiles", "float32")
    yield (1,), 0
    yield (3 * tile + 5,), 0
    yield (3, 2 * tile + 1), 1
    yield (cc.ROWS_KERNEL_MIN_ROWS, 5), 1  # group_rows
    yield (40, 3, 7), 0  # columns


@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_scan_from_carry_and_totals(cupy_only, exclusive, reverse, dtype):
    """The Dask engine's two CuPy helpers against a long double reference: the scan started
    from a carry (a scan of the carry placed before the data, the carry's output dropped) and
    the totals along the axis; carries and rows with NaN, +-inf, all -inf and jumps of 1000."""
    from xpops._cumulative import _cupy as cc

    cupy = cupy_only
    rng = np.random.default_rng(13)
    atol = 1e-4 if dtype == "float32" else 1e-11
    specials = [0.0, -np.inf, np.inf, np.nan, 1000.0, -1000.0, 3.5]
    for shape, axis in _carry_cases():
        x = (rng.standard_normal(shape) * 10).astype(dtype)
        rows = np.moveaxis(x, axis, -1).reshape(-1, shape[axis])
        if rows.shape[0] >= 3 and rows.shape[1] >= 3:  # rows with special values
            rows[0, :] = -np.inf
            rows[1, rows.shape[1] // 2] = np.inf
            rows[2, 1] = np.nan
        x = np.moveaxis(rows.reshape(*np.delete(shape, axis), shape[axis]), -1, axis)
        x = np.ascontiguousarray(x)
        cshape = list(shape)
        cshape[axis] = 1
        carry = rng.choice(specials, size=cshape).astype(dtype)
        joined = np.concatenate([x, carry] if reverse else [carry, x], axis=axis)
        want = _reference_along(joined, axis, exclusive, reverse)
        keep = [slice(None)] * x.ndim
        keep[axis] = slice(0, -1) if reverse else slice(1, None)
        _poison_pool(cupy, 2 * x.nbytes)
        got = cc.logcumsumexp_from(cupy.asarray(x), cupy.asarray(carry), axis, exclusive, reverse)
        assert got.dtype == x.dtype
        assert got.shape == x.shape
        _assert_scan_equal(got.get(), want[tuple(keep)], atol)

        total = cc.total(cupy.asarray(x), axis, reverse)
        assert total.shape == tuple(cshape)
        with np.errstate(invalid="ignore"):
            want_total = np.logaddexp.reduce(x.astype(np.longdouble), axis=axis, keepdims=True)
        _assert_scan_equal(total.get(), want_total, atol)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_totals_of_long_rows(cupy_only, dtype):
    """The Dask engine's row totals where each block of the reduction takes many steps (rows of
    millions of elements), against a long double reference: a row with a NaN, one with +inf,
    one of -inf only, one with a jump of 1000, and a row start that is not vector-aligned."""
    from xpops._cumulative import _cupy as cc
    from xpops._cumulative._cupy import _totals

    cupy = cupy_only
    rng = np.random.default_rng(14)
    atol = 1e-4 if dtype == "float32" else 1e-11
    L = _totals.TOTAL_BLOCKS_PER_SM * 200 * _totals.TOTAL_ROUNDS * _totals.TOTAL_THREADS * 4 + 3
    x = (rng.standard_normal((5, L)) * 10).astype(dtype)
    x[0, L // 3] = np.nan
    x[1, 2 * L // 3] = np.inf
    x[2] = -np.inf
    x[3, L - 2] = 1000.0
    got = cc.total(cupy.asarray(x), 1, False).get()
    assert got.shape == (5, 1)
    with np.errstate(invalid="ignore"):
        want = np.logaddexp.reduce(x.astype(np.longdouble), axis=1, keepdims=True)
    _assert_scan_equal(got, want, atol)
    one = cc.total(cupy.asarray(x[4]), 0, True).get()
    _assert_scan_equal(one, want[4], atol)


def test_kernel_choice(cupy_only):
    from xpops._cumulative._cupy import choose_kernel

    assert choose_kernel((2**20,), 0) == "tiles"
    assert choose_kernel((2**20, 64), 1) == "rows"
    assert choose_kernel((64, 2**20), 1) == "tiles"
    assert choose_kernel((8192, 32768), 0) == "column_blocks"
    assert choose_kernel((2**20, 16), 0) == "columns"
    assert choose_kernel((4, 5, 6), 1) == "columns"


def test_kernel_choice_by_dtype(cupy_only):
    """group_rows takes contiguous rows it can hold, however many; longer rows keep the rows
    and tiles kernels."""
    from xpops._cumulative._cupy import _kind

    assert _kind((2**20, 64), 1, "float32") == "group_rows"
    assert _kind((10, 1024), 1, "float32") == "group_rows"
    assert _kind((2**20,), 0, "float32") == "tiles"
    assert _kind((2**14, 1000), 1, "float64") == "rows"
    assert _kind((10, 1000), 1, "float64") == "tiles_staged"
    assert _kind((2**14, 512), 1, "float64") == "group_rows"
    assert _kind((8192, 32768), 0, "float32") == "column_blocks"


def test_non_contiguous_input_on_gpu(cupy_only):
    cupy = cupy_only
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((300, 500)) * 10).astype(np.float32)
    xd = cupy.asarray(x)
    for view, ref_view, axis in [
        (xd[:, ::2], x[:, ::2], 1),
        (xd.T, x.T, 0),
        (xd.T, x.T, 1),
        (xd[::3, 1:], x[::3, 1:], 0),
    ]:
        before = view.copy()
        got = xpops.logcumsumexp(view, axis=axis)
        _assert_scan_equal(got.get(), _reference_along(ref_view, axis, False, False), 1e-4)
        assert bool(cupy.array_equal(view, before))


def test_long_float32_scan_on_gpu(cupy_only):
    """2**29 + 7 float32 elements (more than 2**31 bytes) against a float64 cumsum on the GPU."""
    cupy = cupy_only
    n = 2**29 + 7
    x = cupy.random.default_rng(5).standard_normal(n, dtype=np.float32)
    got = xpops.logcumsumexp(x)
    want = cupy.log(cupy.cumsum(cupy.exp(x.astype(np.float64))))
    err = float(cupy.max(cupy.abs(got.astype(np.float64) - want)))
    assert err < 1e-4


def test_group_rows_past_2_31_bytes_on_gpu(cupy_only):
    """group_rows over 2**23 + 3 rows of 65 float32 (more than 2**31 bytes, rows that are not
    vector-aligned) and 2**23 + 5 rows of 64 (vector rows): rows near the end against a float64
    cumsum on the GPU."""
    cupy = cupy_only
    for rows, L in [(2**23 + 3, 65), (2**23 + 5, 64)]:
        x = cupy.random.default_rng(6).standard_normal((rows, L), dtype=np.float32)
        got = xpops.logcumsumexp(x, axis=1)
        for part in (slice(0, 1000), slice(rows - 1000, rows)):
            want = cupy.log(cupy.cumsum(cupy.exp(x[part].astype(np.float64)), axis=1))
            err = float(cupy.max(cupy.abs(got[part].astype(np.float64) - want)))
            assert err < 1e-5, (rows, L, part)
        del x, got
    cupy.get_default_memory_pool().free_all_blocks()


@pytest.mark.slow
def test_more_than_2_31_elements_float16(cupy_only):
    """2**31 + 1000 float16 elements (accumulated in float32), checked chunk by chunk."""
    cupy = cupy_only
    n = 2**31 + 1000
    cupy.get_default_memory_pool().free_all_blocks()  # what earlier tests left cached
    free, _ = cupy.cuda.runtime.memGetInfo()
    if free < 40 * 2**30:
        pytest.skip("not enough GPU memory")
    x = cupy.random.default_rng(9).standard_normal(n, dtype=np.float32).astype(np.float16)
    got = xpops.logcumsumexp(x)
    assert got.dtype == np.float16
    assert got.shape == (n,)
    carry = 0.0
    step = 2**28
    for start in range(0, n, step):
        seg = x[start : start + step].astype(np.float64)
        sums = cupy.cumsum(cupy.exp(seg)) + carry
        carry = float(sums[-1])
        err = float(
            cupy.max(cupy.abs(got[start : start + step].astype(np.float64) - cupy.log(sums)))
        )
        assert err < 0.02, start  # float16 spacing at 22 is 0.0156
    del x, got
    cupy.get_default_memory_pool().free_all_blocks()


# ---- a prefix of a single finite term gives that term exactly (issue 22, item 6) --------------


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_single_finite_term_exact_public(cupy_only, dtype):
    """``[-inf, -inf, 0.0]`` reversed, exclusive, and along either axis of a 2-D array: each
    output of one finite term is that term, bit for bit."""
    cupy = cupy_only
    x = np.array([-np.inf, -np.inf, 0.0], dtype=dtype)
    for exclusive in (False, True):
        for reverse in (False, True):
            got = xpops.logcumsumexp(cupy.asarray(x), exclusive=exclusive, reverse=reverse).get()
            assert_single_terms_exact(got, x, 0, exclusive, reverse)
            want = _reference_along(x, 0, exclusive, reverse)
            np.testing.assert_array_equal(got, want.astype(dtype))
    for value in (1e-20, -1e-10, 0.3, -7.5, 300.0):
        one = np.array([value], dtype=dtype)
        assert xpops.logcumsumexp(cupy.asarray(one)).get()[0] == one[0]
    m = np.array([[-np.inf, 0.0, 1e-20], [-np.inf, -np.inf, -np.inf], [0.0, 5.0, -np.inf]])
    m = m.astype(dtype)
    for axis in (0, 1):
        for exclusive in (False, True):
            for reverse in (False, True):
                got = xpops.logcumsumexp(
                    cupy.asarray(m), axis=axis, exclusive=exclusive, reverse=reverse
                ).get()
                assert_single_terms_exact(got, m, axis, exclusive, reverse)


@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_single_finite_term_exact_every_kernel(cupy_only, exclusive, reverse):
    """Every kernel (tiles, tiles_staged, rows, columns, column_blocks), float32 and float64,
    at its block, tile and run boundaries: lanes of -inf with a few finite terms each, so that
    prefixes of one term start anywhere in a tile or run, after an empty or a one-term prefix,
    and are followed by -inf, larger or smaller terms. Those outputs are the term exactly; the
    others match the reference."""
    from xpops._cumulative import _cupy as cc

    cupy = cupy_only
    rng = np.random.default_rng(22)
    for kernel, name, shapes in _kernel_cases():
        atol = 1e-4 if name == "float32" else 1e-11
        for shape in [*shapes, *_more_lanes(kernel, shapes)]:
            axis = 0 if kernel.startswith("column") else len(shape) - 1
            x = sparse_lanes(rng, shape, axis, name, reverse)
            got = cc.logcumsumexp(cupy.asarray(x), axis, exclusive, reverse, kernel=kernel).get()
            assert_single_terms_exact(got, x, axis, exclusive, reverse)
            _assert_scan_equal(got, _reference_along(x, axis, exclusive, reverse), atol)


def _more_lanes(kernel, shapes):
    """Shapes with many lanes of the longest length of `shapes`: more random placements."""
    if kernel.startswith("column"):
        return [(max(s[0] for s in shapes), 64)]
    return [(64, max(s[-1] for s in shapes if s[-1] <= 100_000))]


@pytest.mark.parametrize("kernel", ["tiles", "tiles_staged"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_single_finite_term_exact_across_tiles(cupy_only, kernel, dtype):
    """The tiles kernels where one finite term meets a tile boundary: the term first in a
    tile, with a larger term later in the same tile; last in a tile, with a larger term in the
    next; and the carry of a Dask block (`logcumsumexp_from`) as the only term before a tile."""
    from xpops._cumulative import _cupy as cc
    from xpops._cumulative._cupy import _tiles

    cupy = cupy_only
    tile = _tiles.TILES_BLOCK * _tiles.tile_items(kernel, dtype)
    n = 3 * tile + 5
    x = np.full((5, n), -np.inf)
    x[0, tile] = 1e-20
    x[1, 0], x[1, 10] = 0.3, 5.0
    x[2, tile - 1], x[2, tile + 100] = -1e-10, 50.0
    x[3, 2 * tile + 3], x[3, 2 * tile + 4] = -7.5, 7.5
    x[4, 5], x[4, 2 * tile] = 2.5, 1.0
    x = x.astype(dtype)
    for exclusive in (False, True):
        for reverse in (False, True):
            xs = np.ascontiguousarray(x[:, ::-1]) if reverse else x
            got = cc.logcumsumexp(cupy.asarray(xs), 1, exclusive, reverse, kernel=kernel).get()
            assert_single_terms_exact(got, xs, 1, exclusive, reverse)
    carry = np.array([[0.25], [-np.inf], [1e-20], [3.0], [-1.0]], dtype=dtype)
    y = np.full((5, n), -np.inf, dtype=dtype)
    y[3, tile + 7] = 10.0
    got = cc.logcumsumexp_from(cupy.asarray(y), cupy.asarray(carry), 1, False, False).get()
    joined = np.concatenate([carry, y], axis=1)
    mask, term = single_term_outputs(joined, 1)
    np.testing.assert_array_equal(got[mask[:, 1:]], term[:, 1:][mask[:, 1:]])
