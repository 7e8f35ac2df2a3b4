"""Benchmark cases of logcumsumexp (read once, write once: compared with the copy rate)."""

import functools
from typing import Any

import xpops

from ._case import Case, import_jax

# (shape, axis, dtype): the cases named in the issue, and scaled-down ones for the CPU.
GPU_CASES = [
    ((2**28,), None, "float32"),
    ((8192, 32768), 1, "float32"),
    ((8192, 32768), 0, "float32"),
    ((2**20, 64), 1, "float32"),
    ((2**27,), None, "float64"),
]
CPU_CASES = [
    ((2**22,), None, "float64"),
    ((2048, 2048), 1, "float64"),
    ((2048, 2048), 0, "float64"),
    ((2**22,), None, "float32"),
]
CPU_DEFAULT = 2  # the default run takes the first two CPU cases; --full all of them


def _peers(backend: str, x: Any, axis: int | None) -> dict[str, Any]:
    peers: dict[str, Any] = {}
    dim = 0 if axis is None else axis
    try:
        import torch

        # DLPack takes NumPy and CuPy arrays alike (no copy)
        t = torch.from_dlpack(x) if backend != "cupy" or torch.cuda.is_available() else None
        if t is not None:
            if backend == "cupy":  # xpops on the CUDA tensor: our kernels through DLPack
                full = t
                peers["xpops via torch"] = lambda: xpops.logcumsumexp(full, axis)
            t = t.reshape(-1) if axis is None else t
            peers["torch"] = lambda: torch.logcumsumexp(t, dim)
    except ImportError:
        pass
    if backend == "cupy":
        try:
            jax = import_jax()
            j = jax.numpy.asarray(x.get())
            assert j.dtype == x.dtype, (j.dtype, x.dtype)
            j = j.reshape(-1) if axis is None else j
            scan = jax.jit(lambda a: jax.lax.cumlogsumexp(a, axis=dim))
            peers["jax"] = lambda: scan(j).block_until_ready()
            # xpops on the same JAX array, called as it is (the JAX binding compiles the call)
            jfull = jax.numpy.asarray(x.get())
            peers["xpops via jax"] = lambda: xpops.logcumsumexp(jfull, axis).block_until_ready()
        except ImportError:
            pass
    else:
        import numpy as np

        flat = x.reshape(-1) if axis is None else x
        peers["numpy"] = lambda: np.logaddexp.accumulate(flat, axis=dim)
    return peers


def cases(backend: str, full: bool = False) -> list[Case]:
    xp = xpops.default_namespace()
    out = []
    chosen = GPU_CASES if backend == "cupy" else CPU_CASES[: None if full else CPU_DEFAULT]
    for shape, axis, dtype in chosen:
        if backend == "cupy":
            import cupy

            x = cupy.random.default_rng(0).standard_normal(shape, dtype=dtype) * 10
        else:
            import numpy as np

            x = np.random.default_rng(0).standard_normal(shape).astype(dtype) * 10
        x = xp.asarray(x)
        itemsize = 4 if dtype == "float32" else 8
        shape_text = (
            "x".join(str(s) for s in shape) if len(shape) > 1 else f"2^{shape[0].bit_length() - 1}"
        )
        out.append(
            Case(
                op="logcumsumexp",
                label=f"{shape_text} axis={axis} {dtype}",
                nbytes=2 * x.size * itemsize,
                bandwidth="copy",
                run=functools.partial(xpops.logcumsumexp, x, axis=axis),
                peers=_peers(backend, x, axis),
            )
        )
    return out
