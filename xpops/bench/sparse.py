"""Benchmark cases of sparse.divide (compared with the copy rate).

The bytes that must move: both operands' indices, values and row pointers read once, and the
result's written once. The peers are the same merge done by the library's own ``x + y``
(cuSPARSE ``csrgeam`` in cupyx, compiled ``csr_plus_csr`` in SciPy) and the libraries' own
sparse division, which densifies (SciPy, cupyx) or refuses (PyTorch): the runner reports such
failures by exception name.
"""

import functools
import operator
import warnings
from collections.abc import Callable
from typing import Any

from ._case import Case

# (n, entries in each operand, dtype): the cases
GPU_CASES = [(100_000, 10_000_000, "float32"), (100_000, 10_000_000, "float64")]
CPU_CASES = [(20_000, 400_000, "float64"), (20_000, 400_000, "float32")]
# The default run on the CPU: SciPy's x/y densifies (3.2 GB a call at n = 20_000), so the
# default case is smaller; --full adds CPU_CASES.
CPU_DEFAULT_CASES = [(5_000, 100_000, "float64")]


def operands_gpu(n: int, nnz: int, dtype: str) -> tuple[Any, Any]:
    import cupy
    import cupyx.scipy.sparse as csp

    rng = cupy.random.default_rng(0)
    out = []
    for _ in range(2):
        keys = cupy.unique(rng.integers(0, n * n, nnz, dtype=cupy.int64))  # sorted, unique
        rows, cols = keys // n, (keys % n).astype(cupy.int32)
        indptr = cupy.searchsorted(rows, cupy.arange(n + 1)).astype(cupy.int32)
        data = (rng.random(keys.size, dtype=dtype) + 0.5).astype(dtype)
        m = csp.csr_matrix((data, cols, indptr), shape=(n, n))
        m.has_canonical_format = True
        out.append(m)
    return out[0], out[1]


def operands_cpu(n: int, nnz: int, dtype: str) -> tuple[Any, Any]:
    import numpy as np
    import scipy.sparse as sp

    rng = np.random.default_rng(0)
    density = nnz / n / n
    x, y = (_random_csr(sp, n, density, rng, dtype) for _ in range(2))
    x.data += 0.5  # no stored zeros
    y.data += 0.5
    return x, y


def _torch_peer(backend: str, x: Any, y: Any) -> dict[str, Any]:
    try:
        import torch
    except ImportError:
        return {}
    if backend == "cupy" and not torch.cuda.is_available():
        return {}

    def tensor(m: Any) -> Any:
        crow, col, val = (torch.from_dlpack(a) for a in (m.indptr, m.indices, m.data))
        with warnings.catch_warnings():  # torch's notes that sparse CSR is in beta
            warnings.simplefilter("ignore", UserWarning)
            return torch.sparse_csr_tensor(crow, col, val, size=m.shape, check_invariants=False)

    tx, ty = tensor(x), tensor(y)
    return {"torch": lambda: tx / ty}


def cases(backend: str, full: bool = False) -> list[Case]:
    import xpops

    out = []
    chosen = GPU_CASES if backend == "cupy" else CPU_DEFAULT_CASES + (CPU_CASES if full else [])
    for n, nnz, dtype in chosen:
        if backend == "cupy":
            x, y = operands_gpu(n, nnz, dtype)
            lib = "cupyx"
        else:
            x, y = operands_cpu(n, nnz, dtype)
            lib = "scipy"
        union = xpops.sparse.divide(x, y).nnz
        itemsize = 4 if dtype == "float32" else 8
        index = 4
        nbytes = (x.nnz + y.nnz + union) * (itemsize + index) + 3 * (n + 1) * index
        peers: dict[str, Callable[[], Any]] = {
            f"{lib} x+y": functools.partial(operator.add, x, y),
            f"{lib} x/y": functools.partial(operator.truediv, x, y),
        }
        peers.update(_torch_peer(backend, x, y))
        out.append(
            Case(
                op="sparse.divide",
                label=f"{n}x{n} CSR, {x.nnz / 1e6:.1f}M + {y.nnz / 1e6:.1f}M entries {dtype}",
                nbytes=nbytes,
                bandwidth="copy",
                run=functools.partial(xpops.sparse.divide, x, y),
                peers=peers,
            )
        )
    return out


def _random_csr(sp: Any, n: int, density: float, rng: Any, dtype: Any) -> Any:
    """A random n x n CSR array: SciPy takes the generator as `rng` from 1.15, as
    `random_state` before."""
    try:
        return sp.random_array((n, n), density=density, format="csr", rng=rng, dtype=dtype)
    except TypeError:
        return sp.random_array((n, n), density=density, format="csr", random_state=rng, dtype=dtype)
