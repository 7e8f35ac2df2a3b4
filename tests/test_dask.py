"""Every op on Dask arrays (NumPy chunks on the CPU): lazy results equal to the in-memory ones.

The reference is the in-memory xpops result (itself tested against independent references in
the other modules), computed on the same data; several chunkings each, with the synchronous
scheduler and, once, a distributed cluster of two worker processes.
"""

import pickle
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp

import xpops
from xpops.distributions import MultivariateNormal

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")

nan, inf = np.nan, np.inf


@pytest.fixture(autouse=True)
def synchronous():
    with dask.config.set(scheduler="synchronous"):
        yield


def assert_same(got, want, rtol=1e-12):
    assert isinstance(got, da.Array)
    got = np.asarray(got.compute())
    assert got.shape == want.shape
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-300, equal_nan=True)


def test_importing_xpops_does_not_import_dask():
    code = "import sys, xpops; print('dask' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


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
    assert not any("-total-" in k[0] for k in dict(out.__dask_graph__()) if isinstance(k, tuple))
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


# ---- cholesky_solve -------------------------------------------------------------------------


def _factors(rng, batch, m):
    g = rng.standard_normal((*batch, m, m))
    return np.tril(g) / m + 2 * np.eye(m)


@pytest.mark.parametrize(
    ("bx", "by", "cx", "cy"),
    [
        ((6,), (6,), 2, 3),
        ((4, 1), (5,), (3, 1), 2),
        ((), (7,), (), 3),
        ((6,), (), 4, ()),
        ((6,), (6,), 1, 1),
    ],
)
@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_solve(bx, by, cx, cy, upper):
    rng = np.random.default_rng(2)
    m, k = 4, 3
    low = _factors(rng, by, m)
    factor = np.swapaxes(low, -1, -2).copy() if upper else low
    b = rng.standard_normal((*bx, m, k))
    cx = cx if isinstance(cx, tuple) else (cx,) * len(bx)
    cy = cy if isinstance(cy, tuple) else (cy,) * len(by)
    got = xpops.linalg.cholesky_solve(
        da.from_array(b, chunks=(*cx, m, k)), da.from_array(factor, chunks=(*cy, m, m)), upper
    )
    assert_same(got, xpops.linalg.cholesky_solve(b, factor, upper), 1e-12)


def test_cholesky_solve_vector_and_errors():
    rng = np.random.default_rng(3)
    low = _factors(rng, (), 5)
    v = rng.standard_normal(5)
    assert_same(
        xpops.linalg.cholesky_solve(da.from_array(v, chunks=5), da.from_array(low)),
        xpops.linalg.cholesky_solve(v, low),
    )
    b = da.from_array(rng.standard_normal((4, 5, 2)), chunks=(2, 3, 2))
    with pytest.raises(ValueError, match=r"rechunk"):
        xpops.linalg.cholesky_solve(b, da.from_array(low))


# ---- MultivariateNormal -----------------------------------------------------------------------


def _mvn(rng, batch, d):
    g = rng.standard_normal((*batch, d, d))
    cov = g @ np.swapaxes(g, -1, -2) / d + np.eye(d)
    return MultivariateNormal(rng.standard_normal((*batch, d)), covariance_matrix=cov)


@pytest.mark.parametrize(
    ("batch", "vshape", "chunks"),
    [
        ((), (30, 3), (7, 3)),
        ((4,), (10, 4, 3), (3, 2, 3)),
        ((4,), (10, 1, 3), (4, 1, 3)),
        ((2, 3), (5, 2, 3, 3), (2, 1, 3, 3)),
        ((4,), (4, 3), (1, 3)),
    ],
)
def test_mvn_log_prob_and_cdf(batch, vshape, chunks):
    rng = np.random.default_rng(4)
    d = _mvn(rng, batch, 3)
    v = rng.standard_normal(vshape)
    dv = da.from_array(v, chunks=chunks)
    assert_same(d.log_prob(dv), d.log_prob(v))
    assert_same(d.prob(dv), d.prob(v))
    assert_same(d.cdf(dv, rng=1), d.cdf(v, rng=1), 1e-3)
    assert_same(d.logcdf(dv, rng=1), d.logcdf(v, rng=1), 1e-3)
    val, err = d.cdf(dv, rng=1, return_error=True)
    want_val, _ = d.cdf(v, rng=1, return_error=True)
    assert_same(val, want_val, 1e-3)
    assert np.all(err.compute() >= 0)
    lower = -np.ones(3)
    assert_same(d.cdf(dv, lower_limit=lower, rng=2), d.cdf(v, lower_limit=lower, rng=2), 1e-3)


def test_mvn_dask_errors():
    rng = np.random.default_rng(5)
    d = _mvn(rng, (4,), 3)
    with pytest.raises(ValueError, match="event shape"):
        d.log_prob(da.zeros((5, 2), chunks=2))
    with pytest.raises(NotImplementedError, match="lower_limit"):
        d.cdf(da.zeros((4, 3), chunks=2), lower_limit=np.zeros((4, 3)))
    with pytest.raises(TypeError, match="rng"):
        d.cdf(da.zeros((4, 3), chunks=2), rng=np.random.default_rng(0))
    bad = d.log_prob(da.from_array(np.full((4, 3), np.nan), chunks=2))  # checked per chunk
    with pytest.raises(ValueError, match="finite"):
        bad.compute()


# ---- MultivariateNormal with Dask parameters (chunked along batch dimensions) -----------------


def _dask_params(rng, batch, d, chunks, param="covariance_matrix"):
    g = rng.standard_normal((*batch, d, d))
    cov = g @ np.swapaxes(g, -1, -2) / d + np.eye(d)
    loc = rng.standard_normal((*batch, d))
    matrix = {
        "covariance_matrix": cov,
        "precision_matrix": np.linalg.inv(cov),
        "scale_tril": np.linalg.cholesky(cov),
    }[param]
    lazy = MultivariateNormal(
        da.from_array(loc, chunks=(*chunks, d)),
        **{param: da.from_array(matrix, chunks=(*chunks, d, d))},
    )
    return lazy, MultivariateNormal(loc, **{param: matrix})


@pytest.mark.parametrize("param", ["covariance_matrix", "precision_matrix", "scale_tril"])
@pytest.mark.parametrize(
    ("batch", "chunks", "vshape", "vchunks"),
    [
        ((6,), (6,), (5, 6, 3), (5, 6, 3)),  # one chunk
        ((6,), (4,), (5, 6, 3), (2, 3, 3)),  # uneven, and unlike the value's
        ((6,), (1,), (5, 1, 3), (5, 1, 3)),  # size 1, value broadcast along the batch
        ((2, 3), (1, 2), (4, 2, 3, 3), (4, 2, 3, 3)),
    ],
)
def test_mvn_dask_parameters(param, batch, chunks, vshape, vchunks):
    rng = np.random.default_rng(12)
    lazy, dist = _dask_params(rng, batch, 3, chunks, param)
    assert lazy.batch_shape == dist.batch_shape
    v = rng.standard_normal(vshape)
    for value in (v, da.from_array(v, chunks=vchunks)):
        assert_same(lazy.log_prob(value), dist.log_prob(v), 1e-10)
        assert_same(lazy.prob(value), dist.prob(v), 1e-10)
    assert_same(lazy.cdf(v, rng=1, abseps=1e-4), dist.cdf(v, rng=1, abseps=1e-4), 1e-3)
    val, err = lazy.logcdf(v, rng=1, return_error=True)
    assert_same(val, dist.logcdf(v, rng=1), 1e-3)
    assert np.all(err.compute() >= 0)
    assert_same(lazy.entropy(), dist.entropy(), 1e-10)
    for prop in ("mean", "variance", "scale_tril", "covariance_matrix", "precision_matrix"):
        assert_same(getattr(lazy, prop), getattr(dist, prop), 1e-9)
    q = _dask_params(np.random.default_rng(13), batch[-1:], 3, chunks[-1:])
    assert_same(xpops.distributions.kl_divergence(lazy, q[0]), dist.kl_divergence(q[1]), 1e-9)


def test_mvn_dask_parameters_sample():
    rng = np.random.default_rng(14)
    lazy, dist = _dask_params(rng, (4,), 3, (3,))
    draws = lazy.sample((20000,), rng=5, chunks=7000)
    assert isinstance(draws, da.Array)
    assert draws.chunks == ((7000, 7000, 6000), (3, 1), (3,))
    got = draws.compute()
    np.testing.assert_array_equal(got, lazy.sample((20000,), rng=5, chunks=7000).compute())
    assert not np.array_equal(got, lazy.sample((20000,), rng=6, chunks=7000).compute())
    cov = np.asarray(dist.covariance_matrix)
    for b in range(4):
        sd = np.sqrt(np.diag(cov[b]))
        assert np.all(np.abs(got[:, b].mean(0) - np.asarray(dist.loc)[b]) < 5 * sd / np.sqrt(20000))
        se = np.sqrt((cov[b] ** 2 + np.outer(np.diag(cov[b]), np.diag(cov[b]))) / 20000)
        assert np.all(np.abs(np.cov(got[:, b].T) - cov[b]) < 6 * se)
    assert lazy.rsample(rng=1).compute().shape == (4, 3)
    with pytest.raises(TypeError, match="rng"):
        lazy.sample((3,), rng=np.random.default_rng(0))


def test_mvn_dask_parameters_errors():
    rng = np.random.default_rng(15)
    cov = np.broadcast_to(np.eye(3), (4, 3, 3)).copy()
    cov[3] = -np.eye(3)  # not positive definite: found when its chunk is computed
    lazy = MultivariateNormal(
        da.zeros((4, 3), chunks=(2, 3)), covariance_matrix=da.from_array(cov, chunks=(2, 3, 3))
    )
    v = rng.standard_normal((4, 3))
    with pytest.raises(ValueError, match="positive definite"):
        lazy.log_prob(v).compute()
    loc = da.from_array(np.array([[0.0, np.inf, 0.0]] * 4), chunks=(2, 3))
    lazy = MultivariateNormal(loc, covariance_matrix=da.from_array(np.eye(3)))
    with pytest.raises(ValueError, match="`loc` must be finite"):
        lazy.log_prob(v).compute()
    with pytest.raises(ValueError, match=r"rechunk"):
        MultivariateNormal(da.zeros(3), covariance_matrix=da.from_array(np.eye(3), chunks=2))
    with pytest.raises(ValueError, match="event shape"):
        lazy.log_prob(np.zeros((4, 2)))
    with pytest.raises(TypeError):
        MultivariateNormal(np.zeros(3), covariance_matrix=da.from_array(np.eye(3)))


# ---- sparse.divide --------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["csr", "coo"])
@pytest.mark.parametrize("chunks", [(40, 30), (10, 15), (7, 11)])
def test_sparse_divide(fmt, chunks):
    x = sp.random(40, 30, density=0.1, format="csr", random_state=0)
    y = sp.random(40, 30, density=0.1, format="csr", random_state=1)
    dx = da.from_array(x, chunks=chunks, asarray=False)
    dy = da.from_array(y, chunks=chunks, asarray=False)
    if fmt == "coo":  # COO chunks (Dask cannot slice a COO matrix itself)
        meta = sp.coo_matrix((0, 0))
        dx = dx.map_blocks(sp.coo_matrix, meta=meta)
        dy = dy.map_blocks(sp.coo_matrix, meta=meta)
        x, y = x.tocoo(), y.tocoo()
    out = xpops.sparse.divide(dx, dy)
    assert isinstance(out, da.Array)
    got = out.compute()
    want = xpops.sparse.divide(x, y)
    assert sp.issparse(got)
    assert got.nnz == want.nnz
    np.testing.assert_array_equal(got.toarray(), want.toarray())
    got_s = xpops.sparse.divide(dx, 4.0).compute()
    np.testing.assert_array_equal(got_s.toarray(), xpops.sparse.divide(x, 4.0).toarray())


def test_sparse_divide_dask_errors():
    x = sp.random(20, 10, density=0.2, format="csr", random_state=0)
    dx = da.from_array(x, chunks=(5, 10), asarray=False)
    with pytest.raises(ValueError, match="rechunk"):
        xpops.sparse.divide(dx, da.from_array(x, chunks=(10, 10), asarray=False))
    with pytest.raises(ValueError, match="same shape"):
        xpops.sparse.divide(dx, da.from_array(x[:10], chunks=(5, 10), asarray=False))
    with pytest.raises(TypeError, match="Dask array"):
        xpops.sparse.divide(dx, x)
    with pytest.raises(TypeError, match="Dask array"):
        xpops.sparse.divide(x, dx)
    dense = xpops.sparse.divide(da.ones((20, 10), chunks=(5, 10)), dx)  # checked per chunk:
    with pytest.raises(TypeError, match="COO or CSR"):  # Dask hides COO chunks behind ndarrays
        dense.compute()


# ---- a cluster of two worker processes ----------------------------------------------------------


def test_scale_command_runs():
    """``python -m xpops scale`` on a one-worker CPU cluster, tiny sizes: it reports every
    workload against its in-memory baseline and Dask's own cost."""
    pytest.importorskip("distributed")
    args = ["--workers", "1", "--scan-log2", "12", "--chunk-log2", "10", "--points-log2", "10"]
    out = subprocess.run(
        [sys.executable, "-m", "xpops", "scale", *args, "--repeats", "1"],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stdout
    rows = [line for line in out.splitlines() if line.startswith("- ")]
    assert len(rows) == 3, out
    for row in rows[:2]:
        assert "in-memory" in row, out
        assert "threaded scheduler" in row, out
        assert "1 worker(s)" in row, out
        assert "x the time" in row, out
    assert "no-op" in rows[2], out
    assert "1 worker(s)" in rows[2], out


def test_distributed_local_cluster():
    distributed = pytest.importorskip("distributed")
    rng = np.random.default_rng(6)
    x = rng.standard_normal((6, 50))
    low = _factors(rng, (8,), 4)
    b = rng.standard_normal((8, 4, 2))
    d = _mvn(rng, (), 3)
    v = rng.standard_normal((40, 3))
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
        dask.config.set(scheduler=client),
    ):
        lcse = xpops.logcumsumexp(da.from_array(x, chunks=(3, 7)), axis=1, reverse=True)
        solve = xpops.linalg.cholesky_solve(
            da.from_array(b, chunks=(3, 4, 2)), da.from_array(low, chunks=(3, 4, 4))
        )
        lp = d.log_prob(da.from_array(v, chunks=(9, 3)))
        tri = xpops.triu_indices(30, 20, 2, xp=da, chunks=50)
        lazy, dist = _dask_params(rng, (6,), 3, (4,))  # Dask parameters
        vb = rng.standard_normal((10, 6, 3))
        lp_params = lazy.log_prob(da.from_array(vb, chunks=(5, 3, 3)))
        draws = lazy.sample((50,), rng=4, chunks=20)
        got = dask.compute(lcse, solve, lp, tri, lp_params, draws)
        again = draws.compute()
    np.testing.assert_allclose(got[0], xpops.logcumsumexp(x, axis=1, reverse=True), rtol=1e-12)
    np.testing.assert_allclose(got[1], xpops.linalg.cholesky_solve(b, low), rtol=1e-12)
    np.testing.assert_allclose(got[2], d.log_prob(v), rtol=1e-12)
    np.testing.assert_array_equal(got[3], np.stack(np.triu_indices(30, 2, 20)))
    np.testing.assert_allclose(got[4], dist.log_prob(vb), rtol=1e-10)
    assert got[5].shape == (50, 6, 3)
    np.testing.assert_array_equal(got[5], again)  # same seed and chunking on the cluster
    np.testing.assert_array_equal(got[5], draws.compute(scheduler="synchronous"))


def test_mvn_sample_in_chunks():
    rng = np.random.default_rng(7)
    d = _mvn(rng, (2,), 3)
    s = d.sample((1000,), rng=5, chunks=300)
    assert isinstance(s, da.Array)
    assert s.chunks == ((300, 300, 300, 100), (2,), (3,))
    a = s.compute()
    np.testing.assert_array_equal(a, d.sample((1000,), rng=5, chunks=300).compute())
    assert not np.array_equal(a, d.sample((1000,), rng=6, chunks=300).compute())
    blocks = [a[i : i + 300] for i in range(0, 1000, 300)]
    assert not any(np.array_equal(blocks[0], b) for b in blocks[1:3])  # independent streams
    cov = to_cov(d)
    for b in range(2):
        se = np.sqrt(np.diag(cov[b]) / 1000)
        assert np.all(np.abs(a[:, b].mean(0) - to_loc(d)[b]) < 5 * se)
    assert d.sample((4, 6), rng=1, chunks=(2, 3)).compute().shape == (4, 6, 2, 3)
    with pytest.raises(TypeError, match="rng"):
        d.sample((4,), rng=np.random.default_rng(0), chunks=2)


@pytest.mark.parametrize(("d", "once"), [(3, False), (64, True)])
def test_mvn_parameters_enter_the_graph(d, once):
    """Small parameters go into every chunk's task (no task ahead of the chunks); large ones
    (over 64 KiB) are one input of the graph (fetched once by each worker), not a constant
    pickled into every task. Either way the chunks' tasks take the standard pickle."""
    cloudpickle = pytest.importorskip("cloudpickle")
    rng = np.random.default_rng(8)
    dist = _mvn(rng, (4,), d)
    dv = da.from_array(rng.standard_normal((40, 4, d)), chunks=(5, 4, d))
    factor = np.ascontiguousarray(dist.scale_tril).tobytes()
    for out in (dist.log_prob(dv), dist.cdf(dv, rng=1), dist.sample((40,), rng=1, chunks=5)):
        graph = dict(out.__dask_graph__())
        holders = [k for k, v in graph.items() if factor in cloudpickle.dumps(v)]
        chunk_tasks = [k for k in graph if isinstance(k, tuple) and k[0] == out.name]
        assert len(chunk_tasks) == 8
        for k in chunk_tasks:  # the standard pickle, not Distributed's cloudpickle fallback
            pickle.dumps(graph[k])
        if once:
            assert len(holders) == 1, holders
            assert holders[0] not in chunk_tasks
        else:
            assert sorted(holders) == sorted(chunk_tasks)


def test_mvn_carried_parameters():
    """Small parameters in the tasks: in this process the distribution itself; pickled (for a
    cluster), a copy taken by the standard pickle, with the same parameters and namespace."""
    from xpops.distributions._mvn import _Carried

    dist = _mvn(np.random.default_rng(10), (2,), 3)
    carried = _Carried(dist)
    assert carried.arrive() is dist
    again = pickle.loads(pickle.dumps(carried)).arrive()
    assert again is not dist
    assert again._xp is dist._xp
    for name in ("loc", "scale_tril", "covariance_matrix"):
        np.testing.assert_array_equal(getattr(again, name), getattr(dist, name))
    v = np.random.default_rng(11).standard_normal((4, 2, 3))
    np.testing.assert_array_equal(again.log_prob(v), dist.log_prob(v))


def test_mvn_methods_get_the_chunks_themselves(monkeypatch):
    """Each chunk of points reaches the in-memory method as the stored block, not a copy
    (Dask's blockwise with concatenate=True copies a block along a dimension it drops), with
    in-memory and with Dask parameters (chunked as the points are)."""
    rng = np.random.default_rng(9)
    d = _mvn(rng, (2,), 3)
    v = rng.standard_normal((40, 2, 3))
    want = d.log_prob(v)
    lazy = MultivariateNormal(
        da.from_array(to_loc(d), chunks=(1, 3)),
        covariance_matrix=da.from_array(to_cov(d), chunks=(1, 3, 3)),
    )
    seen = []
    log_prob = MultivariateNormal.log_prob

    def spy(self, value):
        if isinstance(value, np.ndarray):
            seen.append(value.__array_interface__["data"][0])
        return log_prob(self, value)

    monkeypatch.setattr(MultivariateNormal, "log_prob", spy)
    for dist, chunks in ((d, (10, 2, 3)), (lazy, (10, 1, 3))):
        dv = da.from_array(v, chunks=chunks).persist()
        stored = {b.__array_interface__["data"][0] for b in dict(dv.dask).values()}
        seen.clear()
        np.testing.assert_allclose(dist.log_prob(dv).compute(), want, rtol=1e-12)
        assert sorted(seen) == sorted(stored)


def to_cov(d):
    return np.asarray(d.covariance_matrix)


def to_loc(d):
    return np.asarray(d.loc)


# ---- CuPy chunks (one GPU) ------------------------------------------------------------------


def assert_same_gpu(got, want, rtol=1e-12, atol=1e-300):
    """A lazy Dask array of CuPy chunks equal to the in-memory CuPy result."""
    import cupy

    assert isinstance(got, da.Array)
    computed = got.compute()
    assert isinstance(computed, cupy.ndarray)
    assert computed.dtype == want.dtype
    np.testing.assert_allclose(computed.get(), want.get(), rtol=rtol, atol=atol, equal_nan=True)


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


def test_cupy_chunks_cholesky_solve_and_mvn(cupy_only):
    cupy = cupy_only
    rng = np.random.default_rng(8)
    low = cupy.asarray(_factors(rng, (12,), 5))
    b = cupy.asarray(rng.standard_normal((12, 5, 2)))
    got = xpops.linalg.cholesky_solve(
        da.from_array(b, chunks=(5, 5, 2)), da.from_array(low, chunks=(5, 5, 5))
    )
    assert_same_gpu(got, xpops.linalg.cholesky_solve(b, low))
    g = rng.standard_normal((3, 3))
    dist = MultivariateNormal(
        cupy.asarray(rng.standard_normal(3)), covariance_matrix=cupy.asarray(g @ g.T + np.eye(3))
    )
    v = cupy.asarray(rng.standard_normal((50, 3)))
    dv = da.from_array(v, chunks=(16, 3))
    assert_same_gpu(dist.log_prob(dv), dist.log_prob(v))
    assert_same_gpu(dist.prob(dv), dist.prob(v))
    draws = dist.sample((40,), rng=3, chunks=15)
    first, again = draws.compute(), draws.compute()
    assert isinstance(first, cupy.ndarray)
    assert first.shape == (40, 3)
    assert cupy.array_equal(first, again)  # same seed and chunking, same draws
    # Dask parameters with CuPy chunks: the fused kernels run chunk by chunk
    gs = rng.standard_normal((6, 16, 16))
    cov = cupy.asarray(gs @ np.swapaxes(gs, -1, -2) / 16 + np.eye(16))
    loc = cupy.asarray(rng.standard_normal((6, 16)))
    lazy = MultivariateNormal(
        da.from_array(loc, chunks=(4, 16)), covariance_matrix=da.from_array(cov, chunks=(4, 16, 16))
    )
    dist = MultivariateNormal(loc, covariance_matrix=cov)
    v = cupy.asarray(rng.standard_normal((100, 6, 16)))
    assert_same_gpu(lazy.log_prob(da.from_array(v, chunks=(30, 3, 16))), dist.log_prob(v), 1e-10)
    assert_same_gpu(lazy.entropy(), dist.entropy(), 1e-10)
    draws = lazy.sample((1000,), rng=2, chunks=400).compute()
    assert isinstance(draws, cupy.ndarray)
    assert draws.shape == (1000, 6, 16)


def test_cupy_mvn_carried_parameters(cupy_only):
    """Pickled for a cluster, small CuPy parameters travel as NumPy copies and return to the
    GPU when a task runs."""
    from xpops.distributions._mvn import _Carried

    cupy = cupy_only
    rng = np.random.default_rng(12)
    g = rng.standard_normal((3, 3))
    dist = MultivariateNormal(
        cupy.asarray(rng.standard_normal(3)), covariance_matrix=cupy.asarray(g @ g.T + np.eye(3))
    )
    blob = pickle.dumps(_Carried(dist))
    again = pickle.loads(blob).arrive()
    assert isinstance(again.scale_tril, cupy.ndarray)
    v = cupy.asarray(rng.standard_normal((20, 3)))
    np.testing.assert_array_equal(again.log_prob(v).get(), dist.log_prob(v).get())


def test_cupy_chunks_sparse_divide(cupy_only):
    cupy = cupy_only
    import cupyx.scipy.sparse as csp

    x = sp.random(40, 30, density=0.1, format="csr", random_state=0, dtype=np.float32)
    y = sp.random(40, 30, density=0.1, format="csr", random_state=1, dtype=np.float32)
    dx = da.from_array(x, chunks=(10, 15), asarray=False).map_blocks(
        csp.csr_matrix, meta=csp.csr_matrix((0, 0), dtype=np.float32)
    )
    dy = da.from_array(y, chunks=(10, 15), asarray=False).map_blocks(
        csp.csr_matrix, meta=csp.csr_matrix((0, 0), dtype=np.float32)
    )
    got = xpops.sparse.divide(dx, dy).compute()
    assert csp.issparse(got)
    want = xpops.sparse.divide(x, y)
    assert got.nnz == want.nnz
    np.testing.assert_array_equal(cupy.asnumpy(got.toarray()), want.toarray())
