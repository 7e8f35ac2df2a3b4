"""MultivariateNormal on Dask arrays: lazy results equal to the in-memory ones (themselves tested
against independent references), several chunkings each, NumPy chunks and, with a GPU, CuPy
chunks."""

import copy
import pickle

import numpy as np
import pytest

import xpops
from xpops.distributions import MultivariateNormal

from .._dask_support import (
    _dask_params,
    _factors,
    _mvn,
    assert_same,
    assert_same_gpu,
    da,
    synchronous,  # noqa: F401 (autouse: the synchronous scheduler)
)

nan, inf = np.nan, np.inf


# ---- MultivariateNormal -----------------------------------------------------------------------


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
    with pytest.raises(TypeError, match="`value` must hold real numbers, got dtype complex128"):
        lazy.log_prob(da.zeros((4, 3), dtype=complex))
    with pytest.raises(TypeError, match="`value` must hold real numbers, got dtype complex128"):
        lazy.cdf(np.zeros((4, 3), dtype=complex))
    with pytest.raises(TypeError, match="`value` must be an array or a list of numbers, got None"):
        lazy.log_prob(None)
    with pytest.raises(TypeError, match="`value` must hold real numbers, got dtype complex128"):
        _mvn(rng, (), 3).log_prob(da.zeros((4, 3), dtype=complex))  # a Dask value only


def test_mvn_numpy_next_to_dask():
    """NumPy operands (and lists, numbers) next to Dask arrays: one-chunk Dask arrays, as Dask
    combines them; the result equals the in-memory one."""
    rng = np.random.default_rng(16)
    loc, cov = rng.standard_normal((4, 3)), np.eye(3) + 0.3
    dist = MultivariateNormal(loc, covariance_matrix=cov)
    v = rng.standard_normal((5, 4, 3))
    for lazy in (
        MultivariateNormal(da.from_array(loc, chunks=(2, 3)), covariance_matrix=cov),
        MultivariateNormal(loc, covariance_matrix=da.from_array(np.broadcast_to(cov, (4, 3, 3)))),
        MultivariateNormal(loc.tolist(), covariance_matrix=da.from_array(cov)),
    ):
        assert isinstance(lazy.loc, da.Array)
        for value in (v, v.tolist(), da.from_array(v, chunks=(2, 4, 3))):
            assert_same(lazy.log_prob(value), dist.log_prob(v), 1e-12)
        assert_same(lazy.entropy(), dist.entropy(), 1e-12)
    strict = pytest.importorskip("array_api_strict")
    with pytest.raises(TypeError, match="cannot be mixed"):
        MultivariateNormal(strict.asarray(loc), covariance_matrix=da.from_array(cov))


@pytest.mark.parametrize("loc", ["dask", 0.0, [0.0, 0.0, 0.0]])
def test_mvn_float32_dask_parameters_compute_in_float32(loc):
    """float32 Dask parameters (a Python number or list as `loc`): every result float32, chunk by
    chunk, as the in-memory float32 distribution gives."""
    rng = np.random.default_rng(17)
    cov = (np.eye(3) + 0.3).astype(np.float32)
    mean = da.zeros((3,), dtype=np.float32, chunks=3) if loc == "dask" else loc
    lazy = MultivariateNormal(mean, covariance_matrix=da.from_array(cov))
    dist = MultivariateNormal(np.zeros(3, np.float32), covariance_matrix=cov)
    assert lazy.dtype == np.float32
    v = rng.standard_normal((6, 3)).astype(np.float32)
    assert_same(lazy.log_prob(v), dist.log_prob(v), 1e-6)
    assert_same(lazy.prob(v), dist.prob(v), 1e-6)
    assert_same(lazy.scale_tril, dist.scale_tril, 1e-6)
    assert_same(lazy.entropy(), dist.entropy(), 1e-6)
    assert_same(lazy.cdf(v, rng=1), dist.cdf(v, rng=1), 1e-3)
    assert lazy.sample((4,), rng=1).compute().dtype == np.float32
    assert lazy.kl_divergence(lazy).compute().dtype == np.float32


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
    from xpops.distributions._dask import _Carried

    dist = _mvn(np.random.default_rng(10), (2,), 3)
    carried = _Carried(dist)
    assert carried.arrive() is dist
    blob = pickle.dumps(carried)
    assert b"array_api_compat" in blob  # the namespace by name, not by cloudpickle
    again = pickle.loads(blob).arrive()
    assert again is not dist
    assert again._xp is dist._xp
    for name in ("loc", "scale_tril", "covariance_matrix"):
        np.testing.assert_array_equal(getattr(again, name), getattr(dist, name))
    v = np.random.default_rng(11).standard_normal((4, 2, 3))
    np.testing.assert_array_equal(again.log_prob(v), dist.log_prob(v))
    # the distribution itself takes the standard pickle, and a copy keeps its arrays
    same = pickle.loads(pickle.dumps(dist))
    assert same.batch_shape == dist.batch_shape
    assert same.dtype == dist.dtype
    np.testing.assert_array_equal(same.log_prob(v), dist.log_prob(v))
    shallow = copy.copy(dist)
    assert shallow.scale_tril.base is dist.scale_tril.base or np.shares_memory(
        shallow.scale_tril, dist.scale_tril
    )


def test_mvn_task_names():
    """Every graph layer of the engine is named xpops-multivariate_normal-<method>-<token>: no
    helper names (``_draw_chunk``, ``_method_block``) reach the dashboard."""
    rng = np.random.default_rng(18)
    dist = _mvn(rng, (4,), 3)
    lazy, _ = _dask_params(rng, (4,), 3, (2,))
    dv = da.from_array(rng.standard_normal((6, 4, 3)), chunks=(3, 4, 3))
    outs = {
        "log_prob": [dist.log_prob(dv), lazy.log_prob(dv)],
        "prob": [dist.prob(dv), lazy.prob(dv)],
        "cdf": [dist.cdf(dv, rng=1), lazy.cdf(dv, rng=1)],
        "logcdf": [dist.logcdf(dv, rng=1), lazy.logcdf(dv, rng=1)],
        "sample": [dist.sample((6,), rng=1, chunks=3), lazy.sample((6,), rng=1)],
        "kl_divergence": [lazy.kl_divergence(lazy)],
        "factor": [lazy.scale_tril],
    }
    for method, arrays in outs.items():
        for out in arrays:
            assert out.name.startswith(f"xpops-multivariate_normal-{method}-"), out.name
            for layer in out.__dask_graph__().layers:
                if not layer.startswith(("array-", "broadcast_to-", "rechunk-", "getitem-")):
                    assert layer.startswith("xpops-multivariate_normal-"), layer
    # a name is a token of the inputs: the same call, the same name; other values, another
    assert dist.log_prob(dv).name == dist.log_prob(dv).name
    assert dist.log_prob(dv).name != dist.log_prob(dv + 1).name
    assert dist.sample((6,), rng=1, chunks=3).name != dist.sample((6,), rng=2, chunks=3).name


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
    log_prob = MultivariateNormal._log_prob  # the chunks call the in-memory code

    def spy(self, value):
        if isinstance(value, np.ndarray):
            seen.append(value.__array_interface__["data"][0])
        return log_prob(self, value)

    monkeypatch.setattr(MultivariateNormal, "_log_prob", spy)
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
    from xpops.distributions._dask import _Carried

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
