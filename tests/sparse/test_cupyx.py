"""sparse.divide's cupyx engine on the GPU (skipped without one): large skewed matrices, rows
around block and warp sizes, results written into poisoned memory."""

import itertools

import numpy as np
import pytest

import xpops

from ._support import (
    FORMATS,
    Entries,
    Lib,
    assert_result,
    assert_values,
    build,
    canonical,
    random_entries,
    reference,
)

# ---- GPU only: large skewed matrices, rows around block and warp sizes, poisoned memory -------


def _poison_pool(cupy, nbytes):
    """Leave NaN-filled blocks in CuPy's memory pool so unwritten outputs show up."""
    junk = cupy.full(nbytes // 4 + 1024, np.nan, dtype=np.float32)
    del junk


def _power_law_lengths(rng, nrows, ncols, total):
    """Row lengths with a heavy (Pareto) tail capped at ncols, about `total` in all; about 10%
    of the rows empty and a few full."""
    raw = rng.pareto(1.1, nrows)
    raw[rng.random(nrows) < 0.1] = 0
    raw[rng.integers(0, nrows, 3)] = np.inf  # full rows
    scale = total / raw[np.isfinite(raw)].sum()
    for _ in range(30):  # the cap makes the sum sublinear in the scale: iterate
        lengths = np.minimum(np.floor(raw * scale), ncols).astype(np.int64)
        scale *= total / lengths.sum()
    return lengths


def _device_keys(cupy, rs, lengths, ncols):
    """Sorted unique row-major keys: per row `lengths[i]` random columns, collisions dropped."""
    offsets = cupy.asarray(np.cumsum(lengths))
    total = int(lengths.sum())
    rows = cupy.searchsorted(offsets, cupy.arange(total, dtype=cupy.int64), side="right")
    cols = rs.randint(0, ncols, size=total, dtype=np.int64)
    return cupy.unique(rows.astype(cupy.int64) * ncols + cols)


def _device_values(cupy, rs, n, zero_fraction):
    vals = rs.uniform(0.5, 2.0, size=n, dtype=np.float64).astype(np.float32)
    vals *= cupy.where(rs.random_sample(n) < 0.5, -1, 1).astype(np.float32)
    vals[rs.random_sample(n) < zero_fraction] = 0
    return vals


def _row_reference(rows, cols, vals, i, ncols):
    """Dense row i (duplicates summed from -0.0) and its stored mask, from sorted-by-row COO."""
    lo, hi = np.searchsorted(rows, [i, i + 1])
    out = np.full(ncols, -0.0)
    np.add.at(out, cols[lo:hi], vals[lo:hi].astype(np.float64))
    mask = np.zeros(ncols, dtype=bool)
    mask[cols[lo:hi]] = True
    out[~mask] = 0.0
    return out, mask


# The fill kernel writes a tile's slots step by step up to SLOTS_CAP slots, lane by lane past
# it: the default, every tile lane by lane (0), and no tile lane by lane (long runs in a step).
SLOTS_CAPS = {"cap": None, "lanes": 0, "steps": 2**30}


@pytest.fixture(params=list(SLOTS_CAPS), ids=list(SLOTS_CAPS))
def slots_cap(request, monkeypatch):
    if request.param != "cap":
        from xpops.sparse import _cupyx as engine

        monkeypatch.setattr(engine, "SLOTS_CAP", SLOTS_CAPS[request.param])


@pytest.mark.parametrize("fmt", FORMATS)
def test_large_power_law_on_gpu(cupy_only, fmt, slots_cap):
    """1e5 x 1e5, about 1e7 entries each, power-law row lengths; the COO case is shuffled and
    has duplicates. Checked row by row on the host for a sample of rows."""
    cupy = cupy_only
    csp = Lib("cupy").sparse
    n = 10**5
    rng = np.random.default_rng(10)
    rs = cupy.random.RandomState(11)
    ops = []
    for k in range(2):
        keys = _device_keys(cupy, rs, _power_law_lengths(rng, n, n, 10**7), n)
        vals = _device_values(cupy, rs, keys.size, zero_fraction=1e-3 * k)
        if fmt == "coo":  # shuffled, and 1% of the entries once more (at most 2 per position)
            dup = rs.permutation(keys.size)[: keys.size // 100]
            keys = cupy.concatenate([keys, keys[dup]])
            vals = cupy.concatenate([vals, _device_values(cupy, rs, dup.size, 0)])
            perm = rs.permutation(keys.size)
            keys, vals = keys[perm], vals[perm]
        rows, cols = (keys // n).astype(cupy.int32), (keys % n).astype(cupy.int32)
        if fmt == "coo":
            a = csp.coo_matrix((vals, (rows, cols)), shape=(n, n))
        else:
            indptr = cupy.concatenate(
                [cupy.zeros(1, cupy.int32), cupy.cumsum(cupy.bincount(rows, minlength=n))]
            ).astype(cupy.int32)
            a = csp.csr_matrix((vals, cols, indptr), shape=(n, n))
        ops.append((a, keys))
    (x, xkeys), (y, ykeys) = ops
    union = int(cupy.unique(cupy.concatenate([xkeys, ykeys])).size)
    del xkeys, ykeys
    _poison_pool(cupy, 16 * union + 4 * n)
    out = xpops.sparse.divide(x, y)
    assert type(out) is type(x)
    assert out.format == fmt
    assert out.dtype == np.float32
    assert out.has_canonical_format
    assert int(out.nnz) == union
    if fmt == "csr":
        indptr = out.indptr.get()
        assert indptr[0] == 0
        assert indptr[-1] == union
        assert (np.diff(indptr) >= 0).all()
        out_rows = np.repeat(np.arange(n), np.diff(indptr))
        out_cols = out.indices.get()
    else:
        out_rows, out_cols = out.row.get(), out.col.get()
    okeys = out_rows.astype(np.int64) * n + out_cols
    assert (np.diff(okeys) > 0).all()
    assert ((out_cols >= 0) & (out_cols < n)).all()
    out_data = out.data.get()

    def host_coo(a):
        if fmt == "csr":
            ip = a.indptr.get()
            return np.repeat(np.arange(n), np.diff(ip)), a.indices.get(), a.data.get()
        r, c, v = a.row.get(), a.col.get(), a.data.get()
        order = np.argsort(r, kind="stable")
        return r[order], c[order], v[order]

    hx, hy = host_coo(x), host_coo(y)
    lengths = np.bincount(hx[0], minlength=n) + np.bincount(hy[0], minlength=n)
    sample = np.concatenate(
        [
            rng.choice(n, 300, replace=False),
            np.argsort(lengths)[-5:],
            np.flatnonzero(lengths == 0)[:5],
        ]
    )
    for i in sample:
        xr, xm = _row_reference(*hx, i, n)
        yr, ym = _row_reference(*hy, i, n)
        mask = xm | ym
        lo, hi = np.searchsorted(out_rows, [i, i + 1])
        np.testing.assert_array_equal(out_cols[lo:hi], np.flatnonzero(mask), f"row {i}")
        with np.errstate(all="ignore"):
            want = (xr / yr)[mask]
        assert_values(out_data[lo:hi], want, "float32")


BOUNDARY_LENGTHS = [0, 1, 31, 32, 33, 255, 256, 257, 1023, 1024, 1025, 5000]


def _boundary_operands(rng):
    """Rows for every pair of lengths (random overlap), plus identical and disjoint rows."""
    ncols = 12000  # even and odd columns hold 5000 each
    x_rows, y_rows = [], []
    for lx, ly in itertools.product(BOUNDARY_LENGTHS, repeat=2):
        x_rows.append(rng.choice(ncols, lx, replace=False))
        y_rows.append(rng.choice(ncols, ly, replace=False))
    for n in BOUNDARY_LENGTHS:
        cols = rng.choice(ncols, n, replace=False)
        x_rows.append(cols)
        y_rows.append(rng.permutation(cols))
        x_rows.append(2 * rng.choice(ncols // 2, n, replace=False))
        y_rows.append(2 * rng.choice(ncols // 2, n, replace=False) + 1)
    shape = (len(x_rows), ncols)

    def entries(rows):
        r = np.concatenate([np.full(len(c), i) for i, c in enumerate(rows)])
        c = np.concatenate(rows)
        vals = rng.integers(1, 9, c.size) * rng.choice([-1.0, 1.0], c.size) / 4
        vals[rng.random(c.size) < 0.01] = 0.0
        return Entries(vals, (r, c))

    return entries(x_rows), entries(y_rows), shape


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex128"])
@pytest.mark.parametrize("canonical_input", [False, True], ids=["raw", "canonical"])
@pytest.mark.parametrize("fmts", [("csr", "csr"), ("coo", "coo"), ("csr", "coo")])
def test_row_lengths_at_block_boundaries_on_gpu(cupy_only, fmts, canonical_input, dtype, slots_cap):
    lib = Lib("cupy")
    rng = np.random.default_rng(12)
    x, y, shape = _boundary_operands(rng)
    if canonical_input:
        x, y = canonical(x, shape), canonical(y, shape)
    if dtype.startswith("complex"):
        x.data = x.data + 1j * rng.integers(-3, 4, x.data.size)
        y.data = y.data - 1j * rng.integers(1, 4, y.data.size)
    xs = build(lib, fmts[0], x, shape, dtype=dtype)
    ys = build(lib, fmts[1], y, shape, dtype=dtype)
    _poison_pool(cupy_only, 64 * (x.data.size + y.data.size) + 8 * shape[0])
    out = xpops.sparse.divide(xs, ys)
    mask, want = reference(x, dtype, y, dtype, shape)
    assert_result(lib, out, xs, mask, want, dtype)


@pytest.mark.parametrize("fmt", FORMATS)
def test_scalar_divisor_poisoned_on_gpu(cupy_only, fmt):
    lib = Lib("cupy")
    rng = np.random.default_rng(13)
    x, _, shape = _boundary_operands(rng)
    xs = build(lib, fmt, x, shape, dtype="float32")
    for y in (3.0, 0.0, cupy_only.asarray(-2.0, dtype=np.float32)):
        _poison_pool(cupy_only, 32 * x.data.size + 8 * shape[0])
        out = xpops.sparse.divide(xs, y)
        y_host = y.get() if hasattr(y, "get") else y
        mask, want = reference(x, "float32", y_host, None, shape)
        assert_result(lib, out, xs, mask, want, "float32")


@pytest.mark.parametrize("dtype", ["float32", "complex128"])
@pytest.mark.parametrize("canonical_input", [False, True], ids=["raw", "canonical"])
@pytest.mark.parametrize("fy", ["csc", "csr", "coo", "dia"])
def test_csc_at_block_boundaries_on_gpu(cupy_only, fy, canonical_input, dtype, slots_cap):
    """A CSC x (merged column by column on its own arrays; the transposed operands of
    `_boundary_operands`) with a y of each format: a CSC result, against the reference."""
    from .test_formats import make

    lib = Lib("cupy")
    rng = np.random.default_rng(14)
    x, y, shape = _boundary_operands(rng)
    x, y = Entries(x.data, x.coords[::-1]), Entries(y.data, y.coords[::-1])  # long columns
    shape = shape[::-1]
    if canonical_input:
        x, y = canonical(x, shape), canonical(y, shape)
    if dtype.startswith("complex"):
        x.data = x.data + 1j * rng.integers(-3, 4, x.data.size)
        y.data = y.data - 1j * rng.integers(1, 4, y.data.size)
    if fy == "dia":  # a diagonal (DIA stores whole diagonals), nonzero
        k = np.arange(min(shape))
        y = Entries(k + 1.0, (k, k))
    xs = make(lib, "csc", x, shape, dtype=dtype)
    ys = make(lib, fy, y, shape, dtype=dtype)
    _poison_pool(cupy_only, 64 * (x.data.size + y.data.size) + 8 * shape[1])
    out = xpops.sparse.divide(xs, ys)
    assert out.format == "csc"
    mask, want = reference(x, dtype, y, dtype, shape)
    assert_result(lib, out, xs, mask, want, dtype)


def test_large_csc_matches_the_host_on_gpu(cupy_only):
    """CSC operands of 1e6 entries (not canonical: duplicates, unsorted rows in each column):
    the GPU's result equals SciPy's engine's, entry for entry."""
    import scipy.sparse as sp

    from .test_formats import make

    host, lib = Lib("numpy"), Lib("cupy")
    rng = np.random.default_rng(15)
    shape = (3000, 4000)
    x = random_entries(rng, shape, 10**6, zeros=1e-3)
    y = random_entries(rng, shape, 10**6, zeros=1e-3)
    xh, yh = make(host, "csc", x, shape, kind="matrix"), make(host, "csc", y, shape, kind="matrix")
    want = xpops.sparse.divide(xh, yh)
    got = xpops.sparse.divide(lib.sparse.csc_matrix(xh), lib.sparse.csc_matrix(yh))
    assert isinstance(want, sp.csc_matrix)
    assert got.format == "csc"
    np.testing.assert_array_equal(lib.host(got.indptr), want.indptr)
    np.testing.assert_array_equal(lib.host(got.indices), want.indices)
    np.testing.assert_array_equal(lib.host(got.data), want.data)


# ---- small operands: the merge-path kernels against the tiled pipeline ------------------------

# Operands of both paths: (rows, ncols, entries of x, entries of y, pattern). The small
# kernels take rows <= SMALL_ROWS and nx + ny <= SMALL_ENTRIES (threads of SMALL_ITEMS
# entries of the merged sequence, blocks of SMALL_BLOCK threads: counts around multiples of
# both, fewer entries than one thread takes, every entry in one row, empty rows first and
# last, the limits themselves).
SMALL_CASES = {
    "one-each": (1, 5, 1, 1, "random"),
    "fewer-than-a-thread": (4, 4, 3, 4, "random"),
    "x-only": (3, 7, 4, 0, "random"),
    "fewer-than-threads": (40, 50, 300, 400, "random"),
    "block-multiples": (1000, 1000, 1024, 3072, "random"),
    "past-a-block": (500, 500, 1025, 1024, "random"),
    "one-row": (1, 100_000, 30_000, 30_000, "random"),
    "identical": (257, 300, 5000, 5000, "identical"),
    "disjoint": (256, 400, 4000, 4000, "disjoint"),
    "empty-ends": (2047, 500, 2000, 2000, "middle"),
    "shifted": (300, 300, 4001, 4000, "shifted"),
    "at-the-limit": (2047, 3000, 32768, 32768, "random"),
    "past-the-limit": (2047, 3000, 32769, 32768, "random"),
    "rows-past-the-limit": (2048, 10, 100, 100, "random"),
}


def _small_operands(rng, rows, ncols, nx, ny, pattern):
    """Canonical host entries of x and y with nx and ny entries (or fewer: collisions)."""

    def keys(n, lo=0, hi=rows * ncols):
        return np.sort(rng.choice(hi - lo, n, replace=False) + lo).astype(np.int64)

    if pattern == "identical":
        kx = ky = keys(nx)
    elif pattern == "disjoint":  # x on even keys, y on odd ones
        kx, ky = 2 * (keys(nx) // 2), 2 * (keys(ny) // 2) + 1
        kx, ky = np.unique(kx), np.unique(ky[ky < rows * ncols])
    elif pattern == "shifted":  # x: y's positions and one before them all, so that every
        # stretch of the merged sequence starts on an entry of y divided into x's
        ky = keys(ny, 1)
        kx = np.concatenate([[0], ky])
    elif pattern == "middle":  # the first and last tenth of the rows empty
        lo, hi = rows // 10 * ncols, (rows - rows // 10) * ncols
        kx, ky = keys(nx, lo, hi), keys(ny, lo, hi)
    else:
        kx, ky = keys(nx), keys(ny)

    def entries(k):
        vals = rng.integers(1, 9, k.size) * rng.choice([-1.0, 1.0], k.size) / 4
        special = rng.random(k.size)
        vals[special < 0.02] = 0.0
        vals[(special >= 0.02) & (special < 0.03)] = -0.0
        vals[(special >= 0.03) & (special < 0.035)] = np.nan
        vals[(special >= 0.035) & (special < 0.04)] = -np.inf
        return Entries(vals, (k // ncols, k % ncols))

    return entries(kx), entries(ky)


@pytest.fixture(params=["merge-path", "tiles"])
def union_path(request, monkeypatch):
    """The union of small operands by the small kernels (the default), or by the tiles: the
    path's name and the list of the small kernels' uses, which the test checks."""
    from xpops.sparse import _cupyx as engine

    if request.param == "tiles":
        monkeypatch.setattr(engine, "SMALL_ENTRIES", -1)
    uses: list[tuple] = []
    small_kernels = engine.small_kernels

    def counted(*args):
        uses.append(args)
        return small_kernels(*args)

    monkeypatch.setattr(engine, "small_kernels", counted)
    return request.param, uses


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex128"])
@pytest.mark.parametrize("case", list(SMALL_CASES))
def test_small_operands_on_gpu(cupy_only, case, dtype, union_path):
    lib = Lib("cupy")
    rows, ncols, nx, ny, pattern = SMALL_CASES[case]
    rng = np.random.default_rng(16)
    x, y = _small_operands(rng, rows, ncols, nx, ny, pattern)
    if dtype.startswith("complex"):
        x.data = x.data + 1j * rng.integers(-3, 4, x.data.size)
        y.data = y.data - 1j * rng.integers(1, 4, y.data.size)
    shape = (rows, ncols)
    xs, ys = build(lib, "csr", x, shape, dtype=dtype), build(lib, "csr", y, shape, dtype=dtype)
    xs.has_canonical_format = ys.has_canonical_format = True
    _poison_pool(cupy_only, 64 * (x.data.size + y.data.size) + 16 * rows)
    out = xpops.sparse.divide(xs, ys)
    from xpops.sparse._cupyx_small import SMALL_ENTRIES, SMALL_ROWS

    path, uses = union_path
    small = rows <= SMALL_ROWS and x.data.size + y.data.size <= SMALL_ENTRIES
    assert len(uses) == (path == "merge-path" and small)
    mask, want = reference(x, dtype, y, dtype, shape)
    assert_result(lib, out, xs, mask, want, dtype)


@pytest.mark.parametrize("index", ["int32", "int64"])
def test_small_operands_of_wide_indices_on_gpu(cupy_only, index, union_path):
    """The arrays of PyTorch's tensors (`divide_csr`): int64 indices where a column index
    does not fit int32, against the quotient on the union computed on the host."""
    from xpops.sparse import _cupyx as engine

    cupy = cupy_only
    rng = np.random.default_rng(17)
    rows, ncols = 300, 2**33 if index == "int64" else 10**6
    parts = []
    for n in (3000, 2000):
        keys = np.unique(rng.integers(0, rows * ncols, n))
        keys[: n // 10] = keys[: n // 10] // ncols * ncols + ncols - 1  # the last column
        keys = np.unique(keys)
        rows_of = keys // ncols
        ptr = np.concatenate([[0], np.cumsum(np.bincount(rows_of, minlength=rows))])
        parts.append((keys, ptr, keys % ncols, rng.standard_normal(keys.size)))
    (kx, px, cx, vx), (ky, py, cy, vy) = parts
    ky[:100] = kx[:100]  # shared positions, then re-sorted with y's arrays
    ky, order = np.unique(ky, return_index=True)
    vy = vy[order]
    py = np.concatenate([[0], np.cumsum(np.bincount(ky // ncols, minlength=rows))])
    cy = ky % ncols
    dev = [cupy.asarray(a, dtype=np.int64) for a in (px, cx, py, cy)]
    indptr, indices, data = engine.divide_csr(
        dev[0], dev[1], cupy.asarray(vx), dev[2], dev[3], cupy.asarray(vy), ncols, np.float64
    )
    assert indices.dtype == np.dtype(index)
    assert len(union_path[1]) == (union_path[0] == "merge-path")
    union = np.union1d(kx, ky)
    want_indptr = np.searchsorted(union // ncols, np.arange(rows + 1))
    np.testing.assert_array_equal(indptr.get(), want_indptr)
    np.testing.assert_array_equal(indices.get(), union % ncols)
    xv = np.zeros(union.size)
    yv = np.zeros(union.size)
    xv[np.searchsorted(union, kx)] = vx
    yv[np.searchsorted(union, ky)] = vy
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(data.get(), xv / yv)
