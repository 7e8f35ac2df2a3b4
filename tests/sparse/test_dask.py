"""sparse.divide on Dask arrays: lazy results equal to the in-memory ones (themselves tested
against independent references), several chunkings each, NumPy chunks and, with a GPU, CuPy
chunks."""

from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

import xpops

from .._dask_support import (
    da,
    synchronous,  # noqa: F401 (autouse: the synchronous scheduler)
)

nan, inf = np.nan, np.inf
_sp_random: Any = sp.random  # its stubs lack random_state, which every supported SciPy takes


# ---- sparse.divide --------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["csr", "coo"])
@pytest.mark.parametrize("chunks", [(40, 30), (10, 15), (7, 11)])
def test_sparse_divide(fmt, chunks):
    x = _sp_random(40, 30, density=0.1, format="csr", random_state=0)
    y = _sp_random(40, 30, density=0.1, format="csr", random_state=1)
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
    x = _sp_random(20, 10, density=0.2, format="csr", random_state=0)
    dx = da.from_array(x, chunks=(5, 10), asarray=False)
    with pytest.raises(ValueError, match="rechunk"):
        xpops.sparse.divide(dx, da.from_array(x, chunks=(10, 10), asarray=False))
    with pytest.raises(ValueError, match="same shape"):
        xpops.sparse.divide(dx, da.from_array(x[:10], chunks=(5, 10), asarray=False))
    with pytest.raises(TypeError, match="Dask array"):
        xpops.sparse.divide(dx, x)
    with pytest.raises(TypeError, match="Dask array"):
        xpops.sparse.divide(x, dx)


# ---- chunk types checked when the call is made ----------------------------------------------


def _csr_dask(seed=0):
    x = _sp_random(20, 10, density=0.2, format="csr", random_state=seed)
    return x, da.from_array(x, chunks=(5, 10), asarray=False)


def test_dense_chunks_refused_at_call_time():
    """Dense chunks show an ndarray meta, as COO matrices do: refused when the call is made."""
    x, dx = _csr_dask()
    dense = da.ones((20, 10), chunks=(5, 10))
    in_memory = r"must be a sparse array or matrix of scipy.sparse .*, got numpy.ndarray"
    with pytest.raises(TypeError, match=rf"`x`'s chunks {in_memory}"):
        xpops.sparse.divide(dense, dx)
    with pytest.raises(TypeError, match=rf"`x`'s chunks {in_memory}"):
        xpops.sparse.divide(dense, dense)
    with pytest.raises(TypeError, match=rf"`x`'s chunks {in_memory}"):
        xpops.sparse.divide(dense, 2.0)
    with pytest.raises(TypeError, match=rf"`x`'s chunks {in_memory}"):  # a dense meta given
        xpops.sparse.divide(dense.map_blocks(np.sin, meta=np.empty((0, 0))), 2.0)
    with pytest.raises(TypeError, match=rf"`x`'s chunks {in_memory}"):  # 0-d
        xpops.sparse.divide(da.asarray(2.0), 3)
    with pytest.raises(TypeError, match=r"`x` must be a sparse array .*got numpy.ndarray"):
        xpops.sparse.divide(np.ones((20, 10)), x)  # the in-memory message it mirrors


def test_other_chunk_types_refused_at_call_time():
    _, dx = _csr_dask()
    masked = da.ma.masked_array(da.ones((20, 10), chunks=(5, 10)))  # an ndarray subclass
    with pytest.raises(TypeError, match=r"`x`'s chunks must be a sparse .*MaskedArray"):
        xpops.sparse.divide(masked, 3)
    with pytest.raises(TypeError, match=r"`y`'s chunks must be a sparse .*MaskedArray"):
        xpops.sparse.divide(dx, masked)


@pytest.mark.parametrize("fmt", ["csc", "bsr", "lil", "dia"])
def test_other_scipy_formats_as_chunks(fmt):
    """Chunks of any SciPy format: x's format (CSR for the converted ones), chunk by chunk."""
    x, dx = _csr_dask()
    y, dy = _csr_dask(seed=1)
    meta = sp.csr_matrix((0, 0)).asformat(fmt)
    fx = dx.map_blocks(lambda b: b.asformat(fmt), meta=meta)
    got = xpops.sparse.divide(fx, dy).compute()
    want = xpops.sparse.divide(x.asformat(fmt), y)
    assert got.format == want.format
    np.testing.assert_array_equal(got.toarray(), want.toarray())


@pytest.mark.parametrize("divisor", ["sparse", "scalar", "dense"])
@pytest.mark.parametrize("fmt", ["coo", "gcxs"])
def test_pydata_sparse_chunks(fmt, divisor):
    """Dask arrays of pydata chunks (whose meta shows them), N-D, chunk by chunk. The chunks
    are made from dense ones (slicing pydata arrays compiles numba code for seconds)."""
    sparse = pytest.importorskip("sparse")
    rng = np.random.default_rng(0)
    shape, chunks = (12, 10, 6), (5, 4, 6)
    xd = np.where(rng.random(shape) < 0.2, rng.integers(-3, 4, shape) / 2.0, 0.0)
    yd = np.where(rng.random(shape) < 0.2, rng.integers(-3, 4, shape) / 2.0, 0.0)
    cls = sparse.COO if fmt == "coo" else sparse.GCXS
    meta = cls.from_numpy(np.zeros((0, 0, 0)))

    def lazy(d):
        return da.from_array(d, chunks=chunks).map_blocks(cls.from_numpy, meta=meta)

    x = cls.from_numpy(xd)
    dx = lazy(xd)
    dense = rng.integers(1, 4, shape) / 2.0
    ys, dys = {
        "sparse": (cls.from_numpy(yd), lazy(yd)),
        "scalar": (2.0, 2.0),
        "dense": (dense, da.from_array(dense, chunks=chunks)),
    }[divisor]
    out = xpops.sparse.divide(dx, dys)
    assert isinstance(out._meta, sparse.SparseArray)
    got = out.compute()
    want = xpops.sparse.divide(x, ys)
    assert isinstance(got, sparse.SparseArray)
    assert got.nnz == want.nnz
    np.testing.assert_array_equal(got.todense(), want.todense())


def test_pydata_and_scipy_chunks_not_mixed():
    sparse = pytest.importorskip("sparse")
    _, dx = _csr_dask()
    meta = sparse.COO.from_numpy(np.zeros((0, 0)))
    pydata = da.ones((20, 10), chunks=(5, 10)).map_blocks(sparse.COO.from_numpy, meta=meta)
    with pytest.raises(TypeError, match=r"chunks of the same library"):
        xpops.sparse.divide(pydata, dx)
    with pytest.raises(TypeError, match=r"chunks of the same library"):
        xpops.sparse.divide(dx, pydata)


def test_dense_dask_divisor():
    """A Dask array of dense NumPy chunks divides x's stored values, chunk by chunk."""
    x, dx = _csr_dask()
    yd = np.random.default_rng(3).integers(-2, 3, (20, 10)) / 2.0
    got = xpops.sparse.divide(dx, da.from_array(yd, chunks=(5, 10))).compute()
    want = xpops.sparse.divide(x, yd)
    assert got.nnz == want.nnz
    np.testing.assert_array_equal(got.toarray(), want.toarray())
    with pytest.raises(ValueError, match="rechunk"):
        xpops.sparse.divide(dx, da.from_array(yd, chunks=(10, 5)))
    with pytest.raises(ValueError, match="a dense `y` is not broadcast"):
        xpops.sparse.divide(dx, da.ones((1, 10), chunks=(1, 10)))


def test_coo_matrix_chunks_behind_an_ndarray_meta():
    """SciPy COO matrices are not sliceable: Dask shows an ndarray meta; they still work."""
    x, dx = _csr_dask()
    dcoo = dx.map_blocks(sp.coo_matrix, meta=sp.coo_matrix((0, 0)))
    assert isinstance(dcoo._meta, np.ndarray)
    want = xpops.sparse.divide(x.tocoo(), x.tocoo())
    got = xpops.sparse.divide(dcoo, dcoo).compute()
    assert got.nnz == want.nnz
    np.testing.assert_array_equal(got.toarray(), want.toarray())
    np.testing.assert_array_equal(
        xpops.sparse.divide(dcoo, 2).compute().toarray(), (x / 2).toarray()
    )


def test_sparse_meta_computes_nothing_at_call_time():
    _, dx = _csr_dask()
    calls = []

    def traced(block):
        calls.append(1)
        return block

    traced_dx = dx.map_blocks(traced, meta=dx._meta)
    calls.clear()
    out = xpops.sparse.divide(traced_dx, traced_dx)
    xpops.sparse.divide(traced_dx, 2.0)
    assert calls == []
    out.compute()
    assert calls


def test_first_chunks_computed_once_at_call_time():
    """Chunks behind an ndarray meta: the call computes the first chunk of each operand once,
    to check it (a Dask array of COO matrices, built by a function that counts its calls)."""
    x, dx = _csr_dask()
    calls = []

    def counted(tag):
        def to_coo(block, block_id=None):
            calls.append((tag, block_id))
            return sp.coo_matrix(block)

        return to_coo

    meta = sp.coo_matrix((0, 0))
    cx = dx.map_blocks(counted("x"), meta=meta)
    cy = (dx * 2).map_blocks(counted("y"), meta=meta)
    assert isinstance(cx._meta, np.ndarray)
    out = xpops.sparse.divide(cx, cy)
    assert sorted(calls) == [("x", (0, 0)), ("y", (0, 0))]
    calls.clear()
    xpops.sparse.divide(cx, 2.0)
    assert calls == [("x", (0, 0))]
    want = xpops.sparse.divide(x.tocoo(), (x * 2).tocoo())
    got = out.compute()
    assert got.nnz == want.nnz
    np.testing.assert_array_equal(got.toarray(), want.toarray())


# ---- task names ------------------------------------------------------------------------------


def test_task_names():
    _, dx = _csr_dask()
    _, dy = _csr_dask(seed=1)
    out = xpops.sparse.divide(dx, dy)
    assert out.name.startswith("xpops-sparse.divide-")
    assert all(key[0] == out.name for key in _keys(out.__dask_keys__()))
    assert xpops.sparse.divide(dx, dy).name == out.name  # deterministic
    scalar = xpops.sparse.divide(dx, 2.0)
    assert scalar.name.startswith("xpops-sparse.divide-")
    assert scalar.name != out.name
    assert xpops.sparse.divide(dx, 3.0).name != scalar.name
    layers = out.__dask_graph__().layers
    assert out.name in layers
    assert not any("_divide_chunk" in name for name in layers)


def _keys(nested):
    for k in nested:
        if isinstance(k, list):
            yield from _keys(k)
        else:
            yield k


# ---- Python ints beyond int64 ----------------------------------------------------------------


@pytest.mark.parametrize("y", [10**30, 2**64, -(2**64)])
def test_big_int_divisor(y):
    x, dx = _csr_dask()
    x32 = x.astype(np.float32)
    for a, da_ in ((x, dx), (x32, dx.astype(np.float32))):
        out = xpops.sparse.divide(da_, y)
        want = xpops.sparse.divide(a, y)
        assert out.dtype == want.dtype == (a.data / y).dtype
        got = out.compute()
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got.toarray(), want.toarray())
    with pytest.raises(OverflowError, match=r"`y` must be a Python int that converts"):
        xpops.sparse.divide(dx, 10**400)


def test_cupy_chunks_sparse_divide(cupy_only):
    cupy = cupy_only
    import cupyx.scipy.sparse as csp

    x = _sp_random(40, 30, density=0.1, format="csr", random_state=0, dtype=np.float32)
    y = _sp_random(40, 30, density=0.1, format="csr", random_state=1, dtype=np.float32)
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


def test_cupy_coo_chunks_and_big_int_divisor(cupy_only):
    """cupyx COO chunks show an ndarray meta too; a Python int past int64 divides them."""
    cupy = cupy_only
    import cupyx.scipy.sparse as csp

    x = _sp_random(40, 30, density=0.1, format="csr", random_state=0, dtype=np.float32)
    dx = da.from_array(x, chunks=(10, 15), asarray=False).map_blocks(
        lambda b: csp.coo_matrix(csp.csr_matrix(b)), meta=csp.coo_matrix((0, 0), dtype=np.float32)
    )
    got = xpops.sparse.divide(dx, dx).compute()
    want = xpops.sparse.divide(x.tocoo(), x.tocoo())
    assert csp.issparse(got)
    np.testing.assert_array_equal(cupy.asnumpy(got.toarray()), want.toarray())
    got = xpops.sparse.divide(dx, 2**64).compute()
    assert got.dtype == np.float32
    want = xpops.sparse.divide(x, 2**64)  # NumPy's x.data / 2**64, checked in test_operands
    np.testing.assert_array_equal(cupy.asnumpy(got.toarray()), want.toarray())
    dense = da.ones((40, 30), chunks=(10, 15)).map_blocks(cupy.asarray)
    with pytest.raises(TypeError, match=r"`x`'s chunks must be a sparse .*cupy.ndarray"):
        xpops.sparse.divide(dense, dx)
