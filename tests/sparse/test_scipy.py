"""sparse.divide's SciPy engine: its row blocks, the helper thread, the float encoding and its
rows divided again, operands of one pattern, the fallback of SciPy's compiled CSR addition,
operands converted on two threads, and N-D COO operands."""

import itertools
import re

import numpy as np
import pytest
import scipy.sparse as sp

import xpops

from ._support import (
    Entries,
    assert_result,
    build,
    dense,
    random_entries,
    reference,
    run_and_check,
)

# ---- the SciPy engine's row blocks and its fallback ----------------------------------------------


@pytest.mark.parametrize("helper", ["none", "free", "busy"])
@pytest.mark.parametrize("direct", [True, False], ids=["csr_plus_csr", "public_add"])
@pytest.mark.parametrize("zeros", [0.0, 0.2], ids=["values", "positions"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "complex128"])
def test_scipy_engine_blocks(scipy_only, monkeypatch, direct, zeros, dtype, helper):
    """Many small row blocks (rows longer than a block, empty rows), through SciPy's compiled
    addition called directly and through its public operator, with the second half of the
    blocks on the helper thread (moved down after the first) or all on the calling thread (no
    helper, or one busy with another call)."""
    from xpops._lib import _scipy_sparse
    from xpops.sparse import _host as engine

    monkeypatch.setattr(engine, "BLOCK_ENTRIES", 37)
    monkeypatch.setattr(engine, "FLOAT_BLOCK_ENTRIES", 37)
    monkeypatch.setattr(engine, "HELPER_MIN_ENTRIES", 0)
    stop = _helper(monkeypatch, engine, helper)
    if not direct:
        monkeypatch.setattr(_scipy_sparse, "sparsetools_csr_plus_csr", lambda: None)
    rng = np.random.default_rng(7)
    shape = (40, 300)
    rows = np.concatenate([np.arange(0, 40, 3), np.full(20, 5)])  # row 5 is long
    x = random_entries(rng, shape, 400, zeros=zeros, rows=rows)
    y = random_entries(rng, shape, 350, zeros=zeros, rows=rows[::2])
    try:
        run_and_check(scipy_only, "csr", x, dtype, "coo", y, dtype, shape)
    finally:
        stop()


def _helper(monkeypatch, engine, helper):
    """The helper thread of `engine` (a module that calls ``helper_thread``): none, a free
    one or one busy with another call; returns a function that releases and stops it."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from xpops._lib._threads import Helper

    pool = ThreadPoolExecutor(1)
    shared = Helper(pool) if helper != "none" else None
    monkeypatch.setattr(engine, "helper_thread", lambda: shared)
    release = threading.Event()
    if helper == "busy":
        assert shared.try_submit(release.wait, 30) is not None

    def stop():
        release.set()
        pool.shutdown()

    return stop


def _special_entries(rng, shape, n, positions=None, dtype="float64"):
    """`n` entries at random distinct positions (or at `positions`, row-major keys), half of
    them special values of `dtype`: signed zeros, infinities, NaN, subnormals, the largest
    and the smallest normal numbers."""
    size = shape[0] * shape[1]
    keys = rng.choice(size, n, replace=False) if positions is None else positions
    vals = rng.integers(1, 9, keys.size) * rng.choice([-0.25, 0.25], keys.size)
    info = np.finfo(dtype if np.dtype(dtype).kind == "f" else "float64")
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, info.smallest_subnormal, -info.tiny]
    special += [float(info.max), -float(info.smallest_subnormal) * 3]
    chosen = rng.random(keys.size) < 0.5
    vals[chosen] = rng.choice(np.array(special, dtype=np.float64), int(chosen.sum()))
    return Entries(vals, np.unravel_index(keys, shape))


def _reference_in(x, y, dtype, shape):
    """(mask, expected) of the brute-force reference computed in the result dtype of two
    `dtype` operands itself: quotients of huge and tiny values overflow and underflow in
    float32 where float64 would not."""
    wide = (np.ones(1, dtype) / np.ones(1, dtype)).dtype
    xv, xm = dense(x, dtype, shape, wide)
    yv, ym = dense(y, dtype, shape, wide)
    with np.errstate(all="ignore"):
        return xm | ym, np.where(xm | ym, xv / yv, 0)


@pytest.mark.parametrize("helper", ["none", "free"])
@pytest.mark.parametrize("block", [23, 1 << 18], ids=["small_blocks", "one_block"])
@pytest.mark.parametrize("share", [0.0, 0.25, 1.0])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_float_encoding(scipy_only, monkeypatch, helper, block, share, dtype):
    """The float encoding on special values stored on one side and on both (rows divided
    again by the complex encodings), in blocks (a share of such positions above which a
    block is merged again by the complex encodings: 0 always, 1 never), on one thread and
    two; the values of each operand are cast to `dtype` first."""
    from xpops.sparse import _host as engine

    monkeypatch.setattr(engine, "FLOAT_BLOCK_ENTRIES", block)
    monkeypatch.setattr(engine, "OVERLAP_SHARE", share)
    monkeypatch.setattr(engine, "HELPER_MIN_ENTRIES", 0)
    stop = _helper(monkeypatch, engine, helper)
    rng = np.random.default_rng(11)
    shape = (60, 50)
    x = _special_entries(rng, shape, 700, dtype=dtype)
    y = _special_entries(rng, shape, 600, dtype=dtype)
    mask, want = _reference_in(x, y, dtype, shape)
    try:
        for fx, fy in [("csr", "csr"), ("coo", "csr")]:
            xs, ys = (
                build(scipy_only, fx, x, shape, dtype=dtype),
                build(scipy_only, fy, y, shape, dtype=dtype),
            )
            out = xpops.sparse.divide(xs, ys)
            assert_result(scipy_only, out, xs, mask, want, dtype)
    finally:
        stop()


def _csr_with_bits(entries, values, shape, dtype):
    """A canonical CSR array of `dtype` with `values` at `entries` (row-major), the values
    given as floats or as bit patterns (Python ints: NaNs of chosen payloads)."""
    bits = np.dtype(np.uint32 if dtype == "float32" else np.uint64)
    data = np.empty(len(values), dtype=dtype)
    for i, v in enumerate(values):
        data[i : i + 1] = np.array([v], bits).view(dtype) if isinstance(v, int) else v
    rows, cols = (np.array(c) for c in zip(*entries, strict=True))
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=shape[0]))])
    return sp.csr_array((data, cols.astype(np.int32), indptr.astype(np.int32)), shape=shape)


@pytest.mark.parametrize("share", [0.0, 100.0], ids=["complex_again", "rows_again"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_float_encoding_nan_payloads(scipy_only, monkeypatch, dtype, share):
    """NaNs of several payloads (signalling, every bit set, the sign set) stored in x alone
    and on both sides, next to values whose codes could cancel theirs: NaN in the result
    (the rows with positions stored on both sides merged again, or the whole block)."""
    from xpops.sparse import _host as engine

    monkeypatch.setattr(engine, "OVERLAP_SHARE", share)
    width, mant = (32, 23) if dtype == "float32" else (64, 52)
    ones = (1 << (width - 1 - mant)) - 1  # the exponent of a NaN
    nans = [(ones << mant) | 1, (1 << width) - 1, (1 << (width - 1)) | (ones << mant) | 3]
    shape = (3, 8)
    # row 0: x's NaNs alone; row 1: x's NaNs on both sides, against -1, +1, -0.0 and a NaN;
    # row 2: y's NaNs alone
    x_at = [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2), (1, 3), (1, 4), (1, 5)]
    x_vals = [*nans, *nans, 2.0, nans[0], 5.0]
    y_at = [(1, 0), (1, 1), (1, 2), (1, 3), (1, 5), (2, 0), (2, 1), (2, 2), (2, 7)]
    y_vals = [-1.0, 1.0, -0.0, nans[1], 0.0, *nans, -4.0]
    xs = _csr_with_bits(x_at, x_vals, shape, dtype)
    ys = _csr_with_bits(y_at, y_vals, shape, dtype)
    floats = [[np.nan if isinstance(v, int) else v for v in vals] for vals in (x_vals, y_vals)]
    x, y = (
        Entries(np.array(f), tuple(np.array(c) for c in zip(*at, strict=True)))
        for f, at in zip(floats, (x_at, y_at), strict=True)
    )
    mask, want = _reference_in(x, y, dtype, shape)
    assert_result(scipy_only, xpops.sparse.divide(xs, ys), xs, mask, want, dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex128", "int64"])
@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
def test_same_pattern(scipy_only, dtype, fmt):
    """Operands that store the same positions (explicit zeros and special values included)
    are divided entry by entry, without a merge; a result sharing no memory with them."""
    rng = np.random.default_rng(5)
    shape = (30, 40)
    keys = rng.choice(shape[0] * shape[1], 300, replace=False)
    x = _special_entries(rng, shape, 0, positions=keys, dtype=dtype)
    y = _special_entries(rng, shape, 0, positions=keys, dtype=dtype)
    if np.dtype(dtype).kind == "i":  # small integers, zeros included
        x = Entries(rng.integers(-3, 4, keys.size).astype(np.float64), x.coords)
        y = Entries(rng.integers(-3, 4, keys.size).astype(np.float64), y.coords)
    xs = build(scipy_only, "csr", x, shape, dtype=dtype)
    ys = build(scipy_only, "csr", y, shape, dtype=dtype)
    if fmt != "csr":
        xs, ys = xs.asformat(fmt), ys.asformat(fmt)
    xs0 = (xs.data.copy(), *(a.copy() for a in _index_of(xs)))
    out = xpops.sparse.divide(xs, ys)
    mask, want = _reference_in(x, y, dtype, shape)
    assert_result(scipy_only, out, xs, mask, want, want.dtype)
    for a in (out.data, *_index_of(out)):
        assert not any(np.may_share_memory(a, b) for b in (xs.data, ys.data, *_index_of(xs)))
    for before, after in zip(xs0, (xs.data, *_index_of(xs)), strict=True):
        np.testing.assert_array_equal(before, after)
    mask, want = _reference_in(x, x, dtype, shape)  # x divided by itself
    assert_result(scipy_only, xpops.sparse.divide(xs, xs), xs, mask, want, want.dtype)


def _index_of(a):
    if a.format in ("csr", "csc"):
        return (a.indices, a.indptr)
    return tuple(a.coords) if hasattr(a, "coords") else (a.row, a.col)


@pytest.mark.parametrize("probe", [0, 50])
@pytest.mark.parametrize("counts", [[], [0, 0], [5] * 300, [0, 900, 3, 0, 7, 400, 1]])
def test_row_blocks(counts, probe):
    """Row blocks cover every row once, in order, with about `entries` entries each (a long
    row crossing a cut adds to its block); with a probe the first and the last block hold
    about that many."""
    from xpops.sparse._host import _row_blocks

    before = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])
    bounds = _row_blocks(before, 200, probe)
    assert bounds[0] == 0
    assert bounds[-1] == len(counts)
    assert (np.diff(bounds) > 0).all()
    sizes = np.diff(before[bounds])
    big = np.array([max(counts[a:b], default=0) for a, b in itertools.pairwise(bounds)])
    assert (sizes <= 200 + big).all()
    if probe and before[-1] > 4 * probe:
        assert sizes[0] <= probe + big[0]
        assert sizes[-1] <= probe + big[-1]


def test_nearly_same_pattern(scipy_only, monkeypatch):
    """Operands of nearly one pattern: the float encoding's first block finds positions
    stored on both sides in most rows and goes, with the further blocks, to the complex
    encodings."""
    from xpops.sparse import _host as engine

    monkeypatch.setattr(engine, "FLOAT_BLOCK_ENTRIES", 100)
    monkeypatch.setattr(engine, "HELPER_MIN_ENTRIES", 0)
    stop = _helper(monkeypatch, engine, "free")
    rng = np.random.default_rng(9)
    shape = (80, 30)
    keys = rng.choice(shape[0] * shape[1], 900, replace=False)
    x = _special_entries(rng, shape, 0, positions=keys)
    y = _special_entries(rng, shape, 0, positions=np.concatenate([keys[:-20], [keys[-1]]]))
    try:
        run_and_check(scipy_only, "csr", x, "float64", "csr", y, "float64", shape)
    finally:
        stop()


@pytest.mark.parametrize("helper", ["none", "free", "busy"])
@pytest.mark.parametrize(
    ("fx", "fy"),
    [("coo", "coo"), ("csr", "coo"), ("coo", "csc"), ("csc", "coo"), ("coo", "lil")],
)
def test_operands_converted_on_two_threads(scipy_only, monkeypatch, helper, fx, fy):
    """Operands that both need a conversion (COO with duplicates, unsorted CSR rows, another
    format than x's layout) are converted on two threads when the helper is free."""
    from xpops.sparse import _scipy as engine

    monkeypatch.setattr(engine, "HELPER_MIN_ENTRIES", 0)
    stop = _helper(monkeypatch, engine, helper)
    rng = np.random.default_rng(3)
    shape = (25, 35)
    x = random_entries(rng, shape, 300, zeros=0.1).shuffled(rng)
    y = random_entries(rng, shape, 250, zeros=0.1).shuffled(rng)
    xs = build(scipy_only, "coo" if fx == "coo" else "csr", x, shape)
    ys = build(scipy_only, "coo", y, shape).asformat(fy)
    if fx == "csc":
        xs = xs.tocsc()
    try:
        out = xpops.sparse.divide(xs, ys)
    finally:
        stop()
    mask, want = reference(x, "float64", y, "float64", shape)
    assert_result(scipy_only, out, xs, mask, want, "float64")


# ---- N-D COO (SciPy) -----------------------------------------------------------------------------


def _scipy_has_nd_coo():
    try:
        sp.coo_array((np.ones(1), (np.zeros(1, int),) * 3), shape=(2, 2, 2))
    except Exception:
        return False
    return True


@pytest.mark.parametrize("shape", [(3, 4, 5), (2, 1, 3, 4), (2, 0, 3), (7,), (0,)])
@pytest.mark.parametrize("zeros", [0.0, 0.3])
def test_nd_coo(scipy_only, shape, zeros):
    if not _scipy_has_nd_coo():
        pytest.skip("this SciPy has no N-D COO")
    lib = scipy_only
    rng = np.random.default_rng(len(shape))
    x, y = random_entries(rng, shape, 30, zeros=zeros), random_entries(rng, shape, 25, zeros=zeros)
    run_and_check(lib, "coo", x, "float64", "coo", y, "float64", shape)
    xs = build(lib, "coo", x, shape)
    mask, want = reference(x, "float64", 0.5, None, shape)
    assert_result(lib, xpops.sparse.divide(xs, 0.5), xs, mask, want, "float64")
    mask, want = reference(x, "float64", 0, None, shape)
    assert_result(lib, xpops.sparse.divide(xs, 0), xs, mask, want, "float64")


def test_nd_coo_shape_mismatch(scipy_only):
    if not _scipy_has_nd_coo():
        pytest.skip("this SciPy has no N-D COO")
    x = sp.coo_array((np.ones(1), (np.zeros(1, int),) * 3), shape=(2, 3, 4))
    y = sp.coo_array((np.ones(1), (np.zeros(1, int),) * 3), shape=(2, 4, 3))
    with pytest.raises(ValueError, match=re.escape("(2, 3, 4) and (2, 4, 3)")):
        xpops.sparse.divide(x, y)
