"""Dask across the ops: xpops never imports Dask itself, the scale command, and a distributed
cluster of two worker processes running every op."""

import subprocess
import sys

import numpy as np
import pytest

import xpops

from ._dask_support import (
    _dask_params,
    _factors,
    _mvn,
    da,
    dask,
    synchronous,  # noqa: F401 (autouse: the synchronous scheduler)
)

nan, inf = np.nan, np.inf


def test_importing_xpops_does_not_import_dask():
    code = "import sys, xpops; print('dask' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


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
