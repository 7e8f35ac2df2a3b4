"""Benchmark cases of sparse.divide (compared with the copy rate).

The bytes that must move: both operands' indices, values and row pointers read once, and the
result's written once. The peers are the same merge done by the library's own ``x + y``
(cuSPARSE ``csrgeam`` in cupyx, compiled ``csr_plus_csr`` in SciPy, numba-compiled in pydata
sparse, PyTorch's sparse addition) and the libraries' own sparse division, which densifies
(SciPy, cupyx), keeps the dense semantics with a ``nan`` fill value (pydata) or refuses
(PyTorch): the runner reports such failures by exception name.

On the GPU, the cupyx operands are also divided as PyTorch tensors on the same memory (COO and
CSR), next to PyTorch's own ``x + y`` on them: the cost of the PyTorch engine's layout work
around the same kernels.
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
# pydata sparse, on the CPU: (shape, entries in each operand), the 3-D COO case. Its
# x / y peer (1.7 s a call on two cores) runs with --full.
PYDATA_CASES = [((1000, 1000, 100), 1_000_000)]


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

    tx, ty = torch_csr(torch, x), torch_csr(torch, y)
    return {"torch": lambda: tx / ty}


def torch_csr(torch: Any, m: Any) -> Any:
    """A PyTorch CSR tensor on the memory of cupyx CSR matrix `m` (its int32 indices)."""
    crow, col, val = (torch.from_dlpack(a) for a in (m.indptr, m.indices, m.data))
    with warnings.catch_warnings():  # torch's notes that sparse CSR is in beta
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(crow, col, val, size=m.shape, check_invariants=False)


def torch_coo(torch: Any, m: Any) -> Any:
    """A coalesced PyTorch COO tensor of canonical cupyx CSR matrix `m` (int64 indices made
    from its arrays, its values' memory)."""
    import cupy

    rows = cupy.searchsorted(m.indptr[1:], cupy.arange(m.nnz), side="right")
    indices = cupy.stack([rows.astype(cupy.int64), m.indices.astype(cupy.int64)])
    return torch.sparse_coo_tensor(
        torch.from_dlpack(indices), torch.from_dlpack(m.data), size=m.shape,
        is_coalesced=True, check_invariants=False,
    )  # fmt: skip


def _torch_cases(x: Any, y: Any, label: str, nbytes: int) -> list[Case]:
    """The cupyx operands `x`, `y` (canonical CSR) as PyTorch CUDA tensors on their memory:
    COO (int64 indices, coalesced) and CSR (cupyx's int32 indices); PyTorch's x + y peers."""
    try:
        import torch
    except ImportError:
        return []
    if not torch.cuda.is_available():
        return []
    import xpops

    out = []
    for layout, make in (("COO", torch_coo), ("CSR", torch_csr)):
        tx, ty = make(torch, x), make(torch, y)
        out.append(
            Case(
                op="sparse.divide",
                label=label.replace("CSR", f"torch {layout}"),
                nbytes=nbytes,
                bandwidth="copy",
                run=functools.partial(xpops.sparse.divide, tx, ty),
                peers={"torch x+y": functools.partial(operator.add, tx, ty)},
            )
        )
    return out


def _pydata_cases(full: bool) -> list[Case]:
    """pydata sparse COO arrays (skipped without pydata sparse installed)."""
    try:
        import sparse
    except ImportError:
        return []
    import numpy as np

    import xpops

    out = []
    for shape, nnz in PYDATA_CASES:
        rng = np.random.default_rng(0)

        def values(k: int, rng: Any = rng) -> Any:
            return rng.random(k) + 0.5  # no stored zeros

        x, y = (
            sparse.random(shape, nnz=nnz, random_state=seed, data_rvs=values) for seed in (0, 1)
        )
        union = xpops.sparse.divide(x, y).nnz
        nbytes = (x.nnz + y.nnz + union) * (8 + 8 * len(shape))  # values and coordinates
        peers: dict[str, Callable[[], Any]] = {"pydata x+y": functools.partial(operator.add, x, y)}
        if full:
            peers["pydata x/y"] = functools.partial(_quiet_divide, x, y)
        label = f"{'x'.join(map(str, shape))} pydata COO, {nnz / 1e6:.1f}M + {nnz / 1e6:.1f}M "
        out.append(
            Case(
                op="sparse.divide",
                label=label + "entries float64",
                nbytes=nbytes,
                bandwidth="copy",
                run=functools.partial(xpops.sparse.divide, x, y),
                peers=peers,
            )
        )
    return out


def _quiet_divide(x: Any, y: Any) -> Any:
    import numpy as np

    with np.errstate(divide="ignore", invalid="ignore"):
        return x / y


def cases(backend: str, full: bool = False) -> list[Case]:
    import xpops

    out = [] if backend == "cupy" else _pydata_cases(full)
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
        label = f"{n}x{n} CSR, {x.nnz / 1e6:.1f}M + {y.nnz / 1e6:.1f}M entries {dtype}"
        out.append(
            Case(
                op="sparse.divide",
                label=label,
                nbytes=nbytes,
                bandwidth="copy",
                run=functools.partial(xpops.sparse.divide, x, y),
                peers=peers,
            )
        )
        if backend == "cupy":
            out.extend(_torch_cases(x, y, label, nbytes))
    return out


def _random_csr(sp: Any, n: int, density: float, rng: Any, dtype: Any) -> Any:
    """A random n x n CSR array: SciPy takes the generator as `rng` from 1.15, as
    `random_state` before."""
    try:
        return sp.random_array((n, n), density=density, format="csr", rng=rng, dtype=dtype)
    except TypeError:
        return sp.random_array((n, n), density=density, format="csr", random_state=rng, dtype=dtype)
