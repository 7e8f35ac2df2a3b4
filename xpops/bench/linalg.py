"""Benchmark cases of linalg.cholesky_solve (compared with the copy rate).

The bytes that must move: the used triangle of each distinct factor, ``M*(M+1)/2`` entries,
read once, the right-hand sides read once and the result written once.
"""

import functools
from typing import Any

import xpops

from ._case import Case, import_jax

# (batch, M, K, dtype): the cases named in the issue
GPU_CASES = [
    (100_000, 16, 1, "float32"),
    (100_000, 16, 1, "float64"),
    (10_000, 64, 8, "float32"),
    (10_000, 64, 8, "float64"),
    (64, 512, 64, "float32"),
    (64, 512, 64, "float64"),
    (1, 4096, 256, "float32"),
    (1, 4096, 256, "float64"),
]
CPU_CASES = [
    (10_000, 16, 1, "float64"),
    (1_000, 64, 8, "float64"),
    (1, 2048, 64, "float64"),
]
# The default run on the CPU: SciPy solves a batch one system at a time in Python (about 0.1 ms
# a system), so the batches are smaller; --full adds CPU_CASES.
CPU_DEFAULT_CASES = [
    (1_000, 16, 1, "float64"),
    (100, 64, 8, "float64"),
    (1, 2048, 64, "float64"),
]


def _inputs_numpy(batch: int, m: int, k: int, dtype: str) -> tuple[Any, Any]:
    import numpy as np

    rng = np.random.default_rng(0)
    factor = np.tril(rng.standard_normal((batch, m, m)) / m**0.5)
    i = np.arange(m)
    factor[:, i, i] = np.abs(factor[:, i, i]) + 1.0  # well conditioned, no zero pivot
    b = rng.standard_normal((batch, m, k))
    return b.astype(dtype), factor.astype(dtype)


def _inputs_cupy(batch: int, m: int, k: int, dtype: str) -> tuple[Any, Any]:
    import cupy

    rng = cupy.random.default_rng(0)
    factor = cupy.tril(rng.standard_normal((batch, m, m), dtype=dtype) / m**0.5)
    i = cupy.arange(m)
    factor[:, i, i] = cupy.abs(factor[:, i, i]) + 1.0
    b = rng.standard_normal((batch, m, k), dtype=dtype)
    return b, factor


def _torch_peer(backend: str, b: Any, factor: Any) -> dict[str, Any]:
    try:
        import torch
    except ImportError:
        return {}
    if backend == "cupy" and not torch.cuda.is_available():
        return {}
    tb, tl = torch.from_dlpack(b), torch.from_dlpack(factor)
    peers = {"torch": lambda: torch.cholesky_solve(tb, tl)}
    if backend == "cupy":  # xpops on the CUDA tensors: our kernels through DLPack
        peers["xpops via torch"] = lambda: xpops.linalg.cholesky_solve(tb, tl)
    return peers


def _gpu_peers(b: Any, factor: Any) -> dict[str, Any]:
    peers: dict[str, Any] = {}
    try:
        jax = import_jax()
        from jax.scipy.linalg import cho_solve as jax_cho_solve

        jb, jl = jax.numpy.asarray(b.get()), jax.numpy.asarray(factor.get())
        assert jb.dtype == b.dtype, (jb.dtype, b.dtype)
        solve = jax.jit(lambda lo, rhs: jax_cho_solve((lo, True), rhs))
        peers["jax"] = lambda: solve(jl, jb).block_until_ready()
        # xpops on the same JAX arrays, called as it is (the JAX binding compiles the call)
        ours = xpops.linalg.cholesky_solve
        peers["xpops via jax"] = lambda: ours(jb, jl).block_until_ready()
    except ImportError:
        pass
    import cupyx
    import cupyx.scipy.linalg

    for module in (getattr(cupyx, "linalg", None), cupyx.scipy.linalg):
        cho_solve = getattr(module, "cho_solve", None)
        if cho_solve is not None:
            # the whole batch: where it takes only 2-D operands, the runner reports the error
            if factor.shape[0] == 1:
                peers["cupyx"] = lambda f=cho_solve: f((factor[0], True), b[0])
            else:
                peers["cupyx"] = lambda f=cho_solve: f((factor, True), b)
            break
    trsm = cupyx.scipy.linalg.solve_triangular

    def two_trsm() -> Any:
        z = trsm(factor, b, lower=True)
        return trsm(factor, z, lower=True, trans="C")

    peers["cupyx-trsm"] = two_trsm
    return peers


def _cpu_peers(b: Any, factor: Any) -> dict[str, Any]:
    import scipy.linalg

    # batches in a Python loop (SciPy >= 1.15); an older SciPy rejects batches: reported
    return {"scipy": lambda: scipy.linalg.cho_solve((factor, True), b)}


def cases(backend: str, full: bool = False) -> list[Case]:
    xp = xpops.default_namespace()
    out = []
    big = [c for c in CPU_CASES if c not in CPU_DEFAULT_CASES] if full else []
    chosen = GPU_CASES if backend == "cupy" else CPU_DEFAULT_CASES + big
    for batch, m, k, dtype in chosen:
        if backend == "cupy":
            b, factor = _inputs_cupy(batch, m, k, dtype)
        else:
            b, factor = _inputs_numpy(batch, m, k, dtype)
        b, factor = xp.asarray(b), xp.asarray(factor)
        itemsize = 4 if dtype == "float32" else 8
        nbytes = (batch * m * (m + 1) // 2 + 2 * batch * m * k) * itemsize
        peers = _torch_peer(backend, b, factor)
        peers.update(_gpu_peers(b, factor) if backend == "cupy" else _cpu_peers(b, factor))
        out.append(
            Case(
                op="cholesky_solve",
                label=f"({batch}, {m}, {m}) K={k} {dtype}",
                nbytes=nbytes,
                bandwidth="copy",
                run=functools.partial(xpops.linalg.cholesky_solve, b, factor),
                peers=peers,
            )
        )
    return out
