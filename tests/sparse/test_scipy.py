"""sparse.divide's SciPy engine: its row blocks, the helper thread, the fallback of SciPy's
compiled CSR addition, and N-D COO operands."""

import re

import numpy as np
import pytest
import scipy.sparse as sp

import xpops

from ._support import (
    assert_result,
    build,
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
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from xpops._lib import _scipy_sparse
    from xpops._lib._threads import Helper
    from xpops.sparse import _host as engine

    monkeypatch.setattr(engine, "BLOCK_ENTRIES", 37)
    monkeypatch.setattr(engine, "HELPER_MIN_ENTRIES", 0)
    pool = ThreadPoolExecutor(1)
    shared = Helper(pool) if helper != "none" else None
    monkeypatch.setattr(engine, "helper_thread", lambda: shared)
    release = threading.Event()
    if helper == "busy":
        assert shared.try_submit(release.wait, 30) is not None
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
        release.set()
        pool.shutdown()


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
