"""Benchmark cases of tril_indices / triu_indices (write-only: compared with the fill rate)."""

import functools
from typing import Any

import xpops

from .._indexing._layout import triangle_size
from ._case import Case

GPU_SHAPES = [(20000, 20000, 0), (30000, 10000, -5), (1000, 1000, 0)]
# The CPU cases are smaller: NumPy's own function builds a row x col mask. The default run
# takes the first shape; --full all of them.
CPU_SHAPES = [(4000, 4000, 0), (6000, 2000, -5), (1000, 1000, 0)]


def _peer_calls(backend: str, name: str, row: int, col: int, k: int, dtype: str) -> dict[str, Any]:
    peers: dict[str, Any] = {}
    fn_name = f"{name}_indices"
    try:
        import torch

        device = "cuda" if backend == "cupy" else "cpu"
        if device == "cpu" or torch.cuda.is_available():
            tdtype = getattr(torch, dtype)
            tfn = getattr(torch, fn_name)
            peers["torch"] = lambda: tfn(row, col, k, dtype=tdtype, device=device)
    except ImportError:
        pass
    if backend == "cupy":
        import cupy

        if dtype == "int64":  # cupy.tril_indices has no dtype: it always gives int64
            cfn = getattr(cupy, fn_name)
            peers["cupy"] = lambda: cfn(row, k, col)
    else:
        import numpy as np

        if dtype == "int64":
            nfn = getattr(np, fn_name)
            peers["numpy"] = lambda: nfn(row, k, col)
    return peers


def cases(backend: str, full: bool = False) -> list[Case]:
    out = []
    xp = xpops.default_namespace()
    shapes = GPU_SHAPES if backend == "cupy" else CPU_SHAPES[: None if full else 1]
    for name, fn in (("tril", xpops.tril_indices), ("triu", xpops.triu_indices)):
        for row, col, k in shapes:
            for dtype in ("int64", "int32"):
                if name == "triu" and (row, col, k) != shapes[0]:
                    continue  # triu shares the kernel; one shape shows it
                n = triangle_size(row, col, k, upper=name == "triu")
                itemsize = 8 if dtype == "int64" else 4
                dt = getattr(xp, dtype)
                out.append(
                    Case(
                        op=f"{name}_indices",
                        label=f"({row}, {col}, {k}) {dtype}",
                        nbytes=2 * n * itemsize,
                        bandwidth="fill",
                        run=functools.partial(fn, row, col, k, dtype=dt),
                        peers=_peer_calls(backend, name, row, col, k, dtype),
                    )
                )
    return out
