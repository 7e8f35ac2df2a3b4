"""The CuPy engine of logcumsumexp's backward (GPU only: skipped without a CUDA device): the
one-pass ``grad_tiles`` kernel at its tile boundaries and across many tiles (decoupled
look-back), on rows, with special values; ``grad_rows`` on short rows of every length around
its lanes and spans; the strided-axis kernels; all against float64 references computed on the
host; the kernel choice; more than 2**31 elements."""

import functools

import numpy as np
import pytest

import xpops

from ._gradients import brute_force_vjp
from ._reference import reference

FLAGS = [(False, False), (True, False), (False, True), (True, True)]


def _engine():
    from xpops._cumulative._cupy import _backward

    return _backward


def _pullback(cupy, x, g, axis, exclusive, reverse, kernel):
    """The engine's pull-back at the host arrays `x`, `g`, with the forward's flags; the
    forward's result computed in float64 on the host and cast to x's dtype. `kernel`: a name
    `real_pullback` takes, or a scan function of the strided-axis kernels."""
    y = reference(x.astype(np.float64), axis, exclusive, reverse).astype(x.dtype)
    xs, ys, gs = (cupy.asarray(a) for a in (x, y, g))
    if callable(kernel):
        return kernel(xs, ys, gs, axis, exclusive, not reverse).get()
    got = _engine().real_pullback(xs, ys, gs, axis, exclusive, not reverse, kernel=kernel)
    return got.get()


def _covering_sums(x, g, exclusive, reverse):
    """dx_k = exp(x_k) sum over the outputs l that hold x_k of g_l exp(-y_l), along the last
    axis, in float64 by cumulative sums (finite inputs of moderate size only)."""
    x = x.astype(np.float64)
    y = reference(x, -1, exclusive, reverse)
    c = np.where(y == -np.inf, 0.0, g * np.exp(-np.where(y == -np.inf, 0.0, y)))
    a = np.abs(c)
    if reverse:  # outputs at l <= k hold x_k
        s, m = np.cumsum(c, axis=-1), np.cumsum(a, axis=-1)
    else:  # outputs at l >= k
        s = np.cumsum(c[..., ::-1], axis=-1)[..., ::-1]
        m = np.cumsum(a[..., ::-1], axis=-1)[..., ::-1]
    if exclusive:  # strictly before or after: the sums shifted by one
        zero = np.zeros_like(s[..., :1])
        if reverse:
            s, m = (np.concatenate([zero, v[..., :-1]], axis=-1) for v in (s, m))
        else:
            s, m = (np.concatenate([v[..., 1:], zero], axis=-1) for v in (s, m))
    return np.exp(x) * s, np.exp(x) * m


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(("exclusive", "reverse"), FLAGS)
def test_grad_tiles_at_tile_boundaries(cupy_only, dtype, exclusive, reverse):
    """Rows of one element, around one tile, several tiles and more than 32 tiles (the look-back
    takes a second round), one and three rows, against float64 sums."""
    cupy = cupy_only
    tile = _engine().grad_tile_items(dtype)
    rng = np.random.default_rng(5)
    rtol = 2e-4 if dtype == "float32" else 1e-11
    for rows, L in [(1, 1), (3, 2), (1, tile - 1), (2, tile), (3, tile + 1), (1, 3 * tile + 5),
                    (2, 40 * tile + 3)]:  # fmt: skip
        x = rng.normal(0, 2, (rows, L)).astype(dtype)
        g = rng.normal(0, 1, (rows, L)).astype(dtype)
        got = _pullback(cupy, x, g, 1, exclusive, reverse, "grad_tiles")
        want, scale = _covering_sums(x, g.astype(np.float64), exclusive, reverse)
        assert got.dtype == dtype
        err = np.abs(got - want)
        assert (err <= rtol * scale + 1e-30).all(), (rows, L, float(np.max(err / (scale + 1e-300))))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(("exclusive", "reverse"), FLAGS)
def test_grad_tiles_special_values_across_tiles(cupy_only, exclusive, reverse, dtype):
    """-inf, +inf and NaN inputs, cotangents of 0, NaN and both signs, and lanes of -inf over
    three tiles, against the brute-force double sum; NaN exactly where it is."""
    cupy = cupy_only
    tile = _engine().grad_tile_items(dtype)
    rtol = 2e-5 if dtype == "float32" else 1e-12
    rng = np.random.default_rng(6)
    L = 2 * tile + 37
    x = rng.normal(0, 3, (2, L))
    x[0, rng.random(L) < 0.3] = -np.inf
    x[1, : tile + 5] = -np.inf  # the first tile and more hold nothing
    x[0, tile + 3] = np.nan
    x[1, 2 * tile + 1] = np.inf
    g = rng.normal(0, 1, (2, L))
    g[rng.random((2, L)) < 0.2] = 0.0
    g[0, 100] = np.nan
    x, g = x.astype(dtype), g.astype(dtype)
    for row in range(2):
        got = _pullback(cupy, x[row : row + 1], g[row : row + 1], 1, exclusive, reverse,
                        "grad_tiles")[0]  # fmt: skip
        xr, gr = x[row].astype(np.float64), g[row].astype(np.float64)
        want, scale = brute_force_vjp(xr, gr, 0, exclusive, reverse)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        ok = ~np.isnan(want)
        assert (np.abs(got - want)[ok] <= rtol * scale[ok] + 1e-30).all()


def test_grad_tiles_large_magnitudes(cupy_only):
    """Inputs near +-700 in float64: no overflow (the links are at most 1)."""
    cupy = cupy_only
    x = np.linspace(-700.0, 700.0, 5001)
    g = np.random.default_rng(7).normal(0, 1, x.size)
    for exclusive, reverse in FLAGS:
        got = _pullback(cupy, x[None], g[None], 1, exclusive, reverse, "grad_tiles")[0]
        want, scale = brute_force_vjp(x, g, 0, exclusive, reverse)
        assert np.isfinite(got).all()
        assert (np.abs(got - want) <= 1e-12 * scale + 1e-300).all()


def _grad_rows(lanes=None, rounds=None):
    """The pull-back by grad_rows, `lanes` lanes a row and `rounds` chunks a lane a span (None:
    the kernel's choice)."""
    from xpops._cumulative._cupy import _grad_rows

    rounds = rounds or _grad_rows.GRAD_ROWS_ROUNDS
    return functools.partial(_grad_rows.grad_rows_scan, lanes=lanes, rounds=rounds)


@pytest.mark.parametrize("rounds", [1, 2])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(("exclusive", "reverse"), FLAGS)
def test_grad_rows_lengths(cupy_only, dtype, exclusive, reverse, rounds):
    """Rows of 1 to GRAD_ROWS_MAX_LEN elements around a vector, a lane's chunks and a span, and
    longer ones (many long rows take this kernel); one row and enough rows that a warp's last
    groups have none (rows of odd lengths are read element by element); with the kernel's
    lanes and with one, two and 32 lanes a row (many spans, a span wider than the row), one
    and two chunks a lane a span; against float64 sums."""
    from xpops._cumulative._cupy._grad_rows import GRAD_ROWS_MAX_LEN

    cupy = cupy_only
    rng = np.random.default_rng(12)
    rtol = 2e-4 if dtype == "float32" else 1e-11
    lengths = [1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 63, 64, 65, 100, 255, 256, 257, 1000,
               GRAD_ROWS_MAX_LEN - 1, GRAD_ROWS_MAX_LEN, 2049, 5000]  # fmt: skip
    for L in lengths:
        for rows in (1, 37):
            x = rng.normal(0, 2, (rows, L)).astype(dtype)
            g = rng.normal(0, 1, (rows, L)).astype(dtype)
            want, scale = _covering_sums(x, g.astype(np.float64), exclusive, reverse)
            for lanes in (None, 1, 2, 32):
                got = _pullback(cupy, x, g, 1, exclusive, reverse, _grad_rows(lanes, rounds))
                assert got.dtype == dtype
                err = np.abs(got - want)
                assert (err <= rtol * scale + 1e-30).all(), (L, rows, lanes)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_grad_rows_unaligned_and_batched(cupy_only, dtype):
    """Inputs one element past a vector boundary (element-wise loads and stores although the
    rows are a whole number of vectors), with leading batch dimensions."""
    cupy = cupy_only
    rng = np.random.default_rng(13)
    rtol = 2e-4 if dtype == "float32" else 1e-11
    shape = (3, 5, 64)
    x = rng.normal(0, 2, shape).astype(dtype)
    g = rng.normal(0, 1, shape).astype(dtype)

    def unaligned(a):
        view = cupy.full(a.size + 1, np.nan, dtype=dtype)[1:].reshape(shape)
        view[...] = cupy.asarray(a)
        assert view.data.ptr % 16 != 0
        return view

    for exclusive in (False, True):
        y = reference(x.astype(np.float64), -1, exclusive, False).astype(dtype)
        views = [unaligned(a) for a in (x, y, g)]
        got = _grad_rows()(*views, 2, exclusive, True).get()  # the forward's reverse=False
        want, scale = _covering_sums(x, g.astype(np.float64), exclusive, False)
        assert (np.abs(got - want) <= rtol * scale + 1e-30).all(), exclusive


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(("exclusive", "reverse"), FLAGS)
def test_grad_rows_special_values(cupy_only, exclusive, reverse, dtype):
    """-inf, +inf and NaN inputs, cotangents of 0 and NaN, rows all -inf and rows whose first
    half is -inf, in rows of 200 walked by one lane (a span a chunk) and by the kernel's lanes
    (one chunk each, then two: spans of 128 and 256 float32, 64 and 128 float64), against the
    brute-force double sum; NaN exactly where it is."""
    cupy = cupy_only
    rtol = 2e-5 if dtype == "float32" else 1e-12
    rng = np.random.default_rng(14)
    rows, L = 40, 200
    x = rng.normal(0, 3, (rows, L))
    x[rng.random(x.shape) < 0.2] = -np.inf
    x[3] = -np.inf
    x[4, :100] = -np.inf
    x[5, 77] = np.nan
    x[6, 150] = np.inf
    x[7, 0] = np.inf
    g = rng.normal(0, 1, x.shape)
    g[rng.random(x.shape) < 0.2] = 0.0
    g[8, 30] = np.nan
    x, g = x.astype(dtype), g.astype(dtype)
    want, scale = brute_force_vjp(x.astype(np.float64), g.astype(np.float64), 1, exclusive,
                                  reverse)  # fmt: skip
    ok = ~np.isnan(want)
    for lanes, rounds in ((1, None), (None, None), (None, 2)):
        got = _pullback(cupy, x, g, 1, exclusive, reverse, _grad_rows(lanes, rounds))
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        assert (np.abs(got - want)[ok] <= rtol * scale[ok] + 1e-30).all(), (lanes, rounds)


def test_grad_rows_large_magnitudes(cupy_only):
    """Rows of inputs near +-700 in float64: no overflow (the links are at most 1)."""
    cupy = cupy_only
    x = np.stack([np.linspace(-700.0, 700.0, 1000), np.linspace(700.0, -700.0, 1000)])
    g = np.random.default_rng(15).normal(0, 1, x.shape)
    for exclusive, reverse in FLAGS:
        got = _pullback(cupy, x, g, 1, exclusive, reverse, _grad_rows())
        want, scale = brute_force_vjp(x, g, 1, exclusive, reverse)
        assert np.isfinite(got).all()
        assert (np.abs(got - want) <= 1e-12 * scale + 1e-300).all()


def test_kernel_choice(cupy_only, monkeypatch):
    """Rows along the contiguous axis take grad_rows up to GRAD_ROWS_MAX_LEN elements, or
    longer ones with GRAD_ROWS_MIN_ROWS_PER_SM rows an SM, and grad_tiles otherwise; a strided
    axis of many columns grad_column_blocks or grad_columns (by the columns an SM), few columns
    the two scans (the public call's result checked against the host reference either way)."""
    cupy = cupy_only
    engine = _engine()
    calls = []
    for name in ("_grad_tiles_scan", "grad_rows_scan", "grad_columns_scan",
                 "grad_column_blocks_scan"):  # fmt: skip
        original = getattr(engine, name)

        def spy(*args, _name=name, _original=original):
            calls.append(_name)
            return _original(*args)

        monkeypatch.setattr(engine, name, spy)
    from xpops._cumulative._cupy._grad_columns import column_block_shape
    from xpops._cumulative._cupy._grad_rows import GRAD_ROWS_MIN_ROWS_PER_SM
    from xpops._lib._cuda import multiprocessors

    many = GRAD_ROWS_MIN_ROWS_PER_SM * multiprocessors()  # long rows that fill the GPU

    rng = np.random.default_rng(8)

    def strided(lanes):  # the kernel of a strided axis of many columns (float64)
        blocks = column_block_shape(lanes, "float64") is not None
        return ["grad_column_blocks_scan" if blocks else "grad_columns_scan"]

    cases = [((5000,), 0, ["_grad_tiles_scan"]), ((4, 3000), 1, ["_grad_tiles_scan"]),
             ((3, 1025), 1, ["_grad_tiles_scan"]), ((3, 1024), 1, ["grad_rows_scan"]),
             ((1000,), 0, ["grad_rows_scan"]), ((20000, 8), 1, ["grad_rows_scan"]),
             ((many, 1025), 1, ["grad_rows_scan"]), ((many - 1, 1025), 1, ["_grad_tiles_scan"]),
             ((40, 4096), 0, strided(4096)), ((3, 20, 2048), 1, strided(6144)),
             ((20, 65536), 0, strided(65536)), ((3000, 4), 0, []), ((300, 64), 0, [])]  # fmt: skip
    assert strided(65536) == ["grad_column_blocks_scan"]  # up to 500 SMs
    for shape, axis, kernels in cases:
        calls.clear()
        x = rng.normal(0, 1, shape)
        g = rng.normal(0, 1, shape)
        _, pullback = xpops.vjp(xpops.logcumsumexp, cupy.asarray(x), axis=axis)
        (got,) = pullback(cupy.asarray(g))
        assert calls == kernels, shape
        moved_x, moved_g = np.moveaxis(x, axis, -1), np.moveaxis(g, axis, -1)
        want, scale = _covering_sums(moved_x, moved_g, False, False)
        err = np.abs(np.moveaxis(got.get(), axis, -1) - want)
        assert (err <= 1e-11 * scale).all()


@pytest.mark.slow
def test_grad_tiles_more_than_2_31_elements(cupy_only):
    """A float32 row of 2**31 + 4099 elements, finite only in its last 3000 (forward order):
    the gradient there from offsets past 2**31, zeros before it."""
    cupy = cupy_only
    n, tail = 2**31 + 4099, 3000
    free = cupy.cuda.Device().mem_info[0]
    if free < 6 * n * 4:
        pytest.skip("needs about 52 GB of free GPU memory")
    rng = np.random.default_rng(9)
    xt = rng.normal(0, 2, tail).astype(np.float32)
    gt = rng.normal(0, 1, tail).astype(np.float32)
    x = cupy.full(n, -np.inf, dtype=cupy.float32)
    x[-tail:] = cupy.asarray(xt)
    g = cupy.full(n, 0.5, dtype=cupy.float32)  # outputs of -inf: no term
    g[-tail:] = cupy.asarray(gt)
    _, pullback = xpops.vjp(xpops.logcumsumexp, x)
    del x
    (dx,) = pullback(g)
    del g, pullback
    head = dx[:-tail]
    assert int(cupy.count_nonzero(head)) == 0
    got = dx[-tail:].get()
    want, scale = brute_force_vjp(xt.astype(np.float64), gt.astype(np.float64))
    assert (np.abs(got - want) <= 1e-4 * scale + 1e-30).all()


def _column_kernel(cupy, dtype, shape_index):
    """The pull-back of a strided axis by grad_columns (`shape_index` None) or by
    grad_column_blocks of its `shape_index`-th shape (skipped where the dtype has fewer)."""
    from xpops._cumulative._cupy import _grad_columns

    if shape_index is None:
        return "grad_columns", _grad_columns.grad_columns_scan, None
    shapes = _grad_columns.COLUMN_BLOCK_SHAPES[dtype]
    if shape_index >= len(shapes):
        pytest.skip(f"{dtype} has {len(shapes)} grad_column_blocks shapes")
    _, items, threads = shapes[shape_index]
    scan = functools.partial(_grad_columns.grad_column_blocks_scan, shape=(items, threads))
    return "grad_column_blocks", scan, items * threads // 32


COLUMN_KERNELS = [None, 0, 1, 2]  # grad_columns, then grad_column_blocks' shapes


@pytest.mark.parametrize("shape_index", COLUMN_KERNELS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(("exclusive", "reverse"), FLAGS)
def test_grad_columns_at_segment_boundaries(cupy_only, shape_index, dtype, exclusive, reverse):
    """Strided axes of 1 to 300 columns (partial blocks), one to a few hundred segments (or
    chunks of a block's runs) of various lengths, around a chunk, leading and trailing
    dimensions, against float64 sums."""
    cupy = cupy_only
    _, scan, chunk = _column_kernel(cupy, dtype, shape_index)
    rng = np.random.default_rng(10)
    rtol = 2e-4 if dtype == "float32" else 1e-11
    shapes = [((1, 32), 0), ((15, 40), 0), ((17, 33), 0), ((1000, 300), 0), ((3, 4097, 64), 1),
              ((2, 50, 2, 40), 1)]  # fmt: skip
    if chunk:
        shapes += [((chunk, 3), 0), ((chunk + 1, 70), 0), ((3 * chunk - 5, 2, 20), 0)]
    for shape, axis in shapes:
        x = rng.normal(0, 2, shape).astype(dtype)
        g = rng.normal(0, 1, shape).astype(dtype)
        got = _pullback(cupy, x, g, axis, exclusive, reverse, scan)
        want, scale = _covering_sums(
            np.moveaxis(x, axis, -1),
            np.moveaxis(g, axis, -1).astype(np.float64),
            exclusive,
            reverse,
        )
        assert got.dtype == dtype
        err = np.abs(np.moveaxis(got, axis, -1) - want)
        assert (err <= rtol * scale + 1e-30).all(), (shape, float(np.max(err / (scale + 1e-300))))


@pytest.mark.parametrize("shape_index", COLUMN_KERNELS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(("exclusive", "reverse"), FLAGS)
def test_grad_columns_special_values(cupy_only, shape_index, dtype, exclusive, reverse):
    """-inf, +inf and NaN inputs and cotangents of 0 and NaN in 40 columns of 3000 (many
    segments), against the brute-force sum column by column; NaN exactly where it is."""
    cupy = cupy_only
    rng = np.random.default_rng(11)
    x = rng.normal(0, 3, (3000, 40))
    x[rng.random(x.shape) < 0.2] = -np.inf
    x[:1500, 3] = -np.inf
    x[700, 5] = np.nan
    x[2100, 6] = np.inf
    g = rng.normal(0, 1, x.shape)
    g[rng.random(x.shape) < 0.2] = 0.0
    g[1200, 7] = np.nan
    _, scan, _ = _column_kernel(cupy, dtype, shape_index)
    x, g = x.astype(dtype), g.astype(dtype)
    got = _pullback(cupy, x, g, 0, exclusive, reverse, scan)
    rtol, atol = (2e-4, 1e-30) if dtype == "float32" else (1e-12, 1e-300)
    for c in (0, 3, 5, 6, 7):
        want, scale = brute_force_vjp(x[:, c].astype(np.float64), g[:, c].astype(np.float64),
                                      0, exclusive, reverse)  # fmt: skip
        np.testing.assert_array_equal(np.isnan(got[:, c]), np.isnan(want))
        ok = ~np.isnan(want)
        assert (np.abs(got[:, c] - want)[ok] <= rtol * scale[ok] + atol).all()
