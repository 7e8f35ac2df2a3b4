"""sparse.divide on Dask arrays: lazy results equal to the in-memory ones (themselves tested
against independent references), several chunkings each, NumPy chunks and, with a GPU, CuPy
chunks."""

import numpy as np
import pytest
import scipy.sparse as sp

import xpops

from .._dask_support import da

nan, inf = np.nan, np.inf


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
