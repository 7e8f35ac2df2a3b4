"""logcumsumexp on Dask arrays: lazy results equal to the in-memory ones (themselves tested
against independent references), several chunkings each, NumPy chunks and, with a GPU, CuPy
chunks."""

import numpy as np
import pytest

import xpops

from .._dask_support import (
    assert_same,
    assert_same_gpu,
    da,
    synchronous,  # noqa: F401 (autouse: the synchronous scheduler)
)

nan, inf = np.nan, np.inf


# ---- logcumsumexp -----------------------------------------------------------------------------

CHUNKINGS = {
    "one chunk": (9, 23),
    "uneven": ((2, 7), (10, 0, 5, 8)),
    "size one": ((1,) * 9, (1,) * 23),
    "mixed": (4, 6),
}


@pytest.mark.parametrize("chunks", list(CHUNKINGS.values()), ids=list(CHUNKINGS))
@pytest.mark.parametrize("axis", [0, 1, -1, None])
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_logcumsumexp(chunks, axis, exclusive, reverse):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((9, 23)) * 10
    dx = da.from_array(x, chunks=chunks)
    got = xpops.logcumsumexp(dx, axis=axis, exclusive=exclusive, reverse=reverse)
    want = xpops.logcumsumexp(x, axis=axis, exclusive=exclusive, reverse=reverse)
    assert_same(got, want)


@pytest.mark.parametrize("reverse", [False, True])
def test_logcumsumexp_special_values_across_chunks(reverse):
    x = np.array([-inf, -inf, 0.0, 1.0, nan, 2.0, -inf, 3.0, inf, 4.0, 5.0, -inf])
    x = np.concatenate([x, np.full(5, -inf), [1000.0, 1000.0, -1000.0]])
    for chunks in (1, 3, 7, x.size):
        got = xpops.logcumsumexp(da.from_array(x, chunks=chunks), reverse=reverse)
        want = xpops.logcumsumexp(x, reverse=reverse)
        assert_same(got, want)
        only_neg = np.full(6, -inf)
        assert_same(xpops.logcumsumexp(da.from_array(only_neg, chunks=2)), np.full(6, -inf))


def test_logcumsumexp_dtypes():
    rng = np.random.default_rng(1)
    z = rng.standard_normal(40) + 1j * rng.standard_normal(40) * 3
    assert_same(xpops.logcumsumexp(da.from_array(z, chunks=7)), xpops.logcumsumexp(z), 1e-11)
    f = rng.standard_normal(50).astype(np.float32)
    got = xpops.logcumsumexp(da.from_array(f, chunks=9))
    assert_same(got, xpops.logcumsumexp(f), 1e-5)
    i = np.arange(20)
    assert_same(xpops.logcumsumexp(da.from_array(i, chunks=6)), xpops.logcumsumexp(i))
    h = rng.standard_normal(30).astype(np.float16)
    assert_same(xpops.logcumsumexp(da.from_array(h, chunks=4)), xpops.logcumsumexp(h), 2e-3)


@pytest.mark.parametrize("reverse", [False, True])
def test_logcumsumexp_totals_come_first(reverse):
    """Up to 16 blocks along the axis: one total a block but the last in scan order, each row's
    ordered before every scan of the row (a worker scanning first would keep the next worker
    waiting for a total)."""
    from dask.order import order

    dx = da.from_array(np.arange(40.0).reshape(2, 20), chunks=(1, 4))
    out = xpops.logcumsumexp(dx, axis=1, reverse=reverse)
    graph = dict(out.__dask_graph__())
    priority = order(graph)
    totals = [k for k in graph if isinstance(k, tuple) and "-total-" in k[0]]
    scans = [k for k in graph if isinstance(k, tuple) and k[0] == out.name]
    assert sorted(k[1:] for k in totals) == [
        (r, b) for r in range(2) for b in range(5) if b != (0 if reverse else 4)
    ]
    assert len(scans) == 10
    for row in range(2):
        last_total = max(priority[k] for k in totals if k[1] == row)
        assert last_total < min(priority[k] for k in scans if k[1] == row)


def test_logcumsumexp_many_rows_of_blocks_scan_carries():
    """Beyond 4096 dependencies in all (here 300 rows of 10 blocks), one task a row scans the
    totals into carries instead of each block reading the totals itself."""
    x = np.random.default_rng(2).standard_normal((300, 20))
    out = xpops.logcumsumexp(da.from_array(x, chunks=(1, 2)), axis=1)
    layers = set(out.dask.layers)
    assert any(name.startswith("xpops-logcumsumexp-carries-") for name in layers)
    scans = [k for k in dict(out.__dask_graph__()) if isinstance(k, tuple) and k[0] == out.name]
    assert len(scans) == 3000
    assert_same(out, xpops.logcumsumexp(x, axis=1))


def test_logcumsumexp_is_lazy():
    calls = []

    def spy(block):
        if block.size:  # Dask also calls it on an empty meta block
            calls.append(block.shape)
        return block

    dx = da.from_array(np.ones(100), chunks=10).map_blocks(spy, dtype=float)
    out = xpops.logcumsumexp(dx)
    assert calls == []  # nothing computed yet
    out.compute()
    assert calls


@pytest.mark.parametrize("axis", [0, 1, None])
@pytest.mark.parametrize(("exclusive", "reverse"), [(False, False), (True, True)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_cupy_chunks_logcumsumexp(cupy_only, axis, exclusive, reverse, dtype):
    cupy = cupy_only
    x = cupy.random.default_rng(7).standard_normal((300, 700), dtype=dtype) * 10
    x[5, 17] = cupy.nan
    x[100:120, 300] = -cupy.inf
    dx = da.from_array(x, chunks=(64, (100, 1, 299, 300)))
    got = xpops.logcumsumexp(dx, axis=axis, exclusive=exclusive, reverse=reverse)
    want = xpops.logcumsumexp(x, axis=axis, exclusive=exclusive, reverse=reverse)
    # results are logs: the contract's absolute accuracy (chunks sum in another order)
    assert_same_gpu(got, want, 0, 2e-5 if dtype == "float32" else 1e-13)


# ---- task names (issue 22, item 19) ------------------------------------------------------------

# Layers of the result that are Dask's own operations, not tasks of ours.
_DASK_LAYERS = ("rechunk-",)


@pytest.mark.parametrize(
    ("shape", "chunks", "axis"),
    [
        ((30,), 30, 0),  # one block along the axis
        ((30,), 7, 0),  # each scan reads the totals itself
        ((2, 20), (1, 4), 1),
        ((60, 20), (1, 2), 1),  # totals scanned into carries first
        ((20, 3), (1, 3), 0),
    ],
)
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_logcumsumexp_task_names(shape, chunks, axis, exclusive, reverse):
    """Every layer and task the op adds to the graph is named ``xpops-logcumsumexp-<token>``
    (or ``xpops-logcumsumexp-<part>-<token>``); the token depends on the arguments."""
    x = np.arange(float(np.prod(shape))).reshape(shape)
    dx = da.from_array(x, chunks=chunks)
    out = xpops.logcumsumexp(dx, axis=axis, exclusive=exclusive, reverse=reverse)
    added = set(out.dask.layers) - set(dx.dask.layers)
    ours = {name for name in added if not name.startswith(_DASK_LAYERS)}
    assert out.name in ours
    assert all(name.startswith("xpops-logcumsumexp-") for name in ours), ours
    keys = {k[0] for k in dict(out.__dask_graph__()) if isinstance(k, tuple)}
    inputs = {k[0] for k in dict(dx.__dask_graph__()) if isinstance(k, tuple)}
    assert all(k.startswith(("xpops-logcumsumexp-", *_DASK_LAYERS)) for k in keys - inputs)
    other = xpops.logcumsumexp(dx, axis=axis, exclusive=not exclusive, reverse=reverse)
    assert other.name != out.name
    assert_same(out, xpops.logcumsumexp(x, axis=axis, exclusive=exclusive, reverse=reverse))


# ---- complex special values across chunks (issue 22, item 3) ------------------------------------


def _special_complex(rng, shape):
    """Complex values with real parts of +inf in two phases, -inf, NaN and non-finite imaginary
    parts among finite ones."""
    pool = np.array(
        [
            complex(inf, 1.0),
            complex(inf, 2.0),
            complex(inf, -3.0),
            complex(-inf, 5.0),
            complex(nan, 0.0),
            complex(1.0, inf),
            complex(inf, nan),
            1.5 + 0.5j,
            -2.0 + 4.0j,
            0.25 - 1.0j,
        ]
    )
    weights = np.array([3, 3, 1, 4, 0.3, 0.3, 0.3, 6, 6, 6])
    return rng.choice(pool, size=shape, p=weights / weights.sum())


@pytest.mark.parametrize("chunks", [1, 2, 3, 5, 40])
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_complex_two_infinities_across_chunks(chunks, exclusive, reverse):
    """After two +inf real parts of different phases the output is inf+nanj on either side of
    a chunk boundary, as in memory, with one block (16 or fewer along the axis, the totals read
    by each block) or many (the totals scanned into carries)."""
    z = np.array([1.0, complex(inf, 1.0), complex(inf, 2.0), 3.0, -inf, 2.0j, 5.0])
    for dtype in (np.complex128, np.complex64):
        x = np.tile(z, 6).astype(dtype)  # 42 elements: 42 blocks of one
        got = xpops.logcumsumexp(
            da.from_array(x, chunks=chunks), exclusive=exclusive, reverse=reverse
        )
        want = xpops.logcumsumexp(x, exclusive=exclusive, reverse=reverse)
        _assert_same_parts(got, want)
        computed = got.compute()
        if not reverse:
            lead = 3 if exclusive else 2
            assert np.isinf(computed[lead:].real).all()
            assert np.isnan(computed[lead:].imag).all()


@pytest.mark.parametrize("chunks", [(3, 1), (3, 4), (1, 17), (5, 2)])
@pytest.mark.parametrize("axis", [0, 1, None])
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_complex_special_values_across_chunks(chunks, axis, exclusive, reverse):
    """Random complex special values: every chunking gives the in-memory result, NaN and inf
    parts in the same places."""
    rng = np.random.default_rng(3)
    x = _special_complex(rng, (6, 34))
    got = xpops.logcumsumexp(
        da.from_array(x, chunks=chunks), axis=axis, exclusive=exclusive, reverse=reverse
    )
    want = xpops.logcumsumexp(x, axis=axis, exclusive=exclusive, reverse=reverse)
    _assert_same_parts(got, want)


def _assert_same_parts(got, want):
    """The real and the imaginary parts each: NaN and inf in the same places, the rest close
    (a complex NaN check would not tell inf+nanj from nan+nanj)."""
    computed = got.compute()
    assert computed.dtype == want.dtype
    rtol = 1e-5 if want.dtype == np.complex64 else 1e-12
    for part in (np.real, np.imag):
        a, b = part(computed), part(want)
        np.testing.assert_array_equal(np.isnan(a), np.isnan(b))
        np.testing.assert_array_equal(a[np.isinf(b)], b[np.isinf(b)])
        np.testing.assert_allclose(a, b, rtol=rtol, atol=1e-6 if rtol > 1e-6 else 1e-12)
