"""The latency cases: small calls of every op, timed back to back (`Case.per_call`), so that
the host's time per call shows; each against the same call of PyTorch (on the backend's
device) where PyTorch has one and, on the CPU, of NumPy or SciPy (NumPy's ``tril_indices``
and ``logaddexp.accumulate``, SciPy's ``multivariate_normal.logpdf``), and sparse.divide
against the sparse ``x + y`` of SciPy or cupyx, the cheapest pattern union there is."""

import functools
from collections.abc import Callable
from typing import Any

import xpops

from ._case import Case
from .gradients import _torch

OP = "latency"
TRIANGLE = 1000  # tril_indices(1000)
SCAN = (64, 4096)  # logcumsumexp along axis 1, float32
SOLVE = (100, 16)  # cholesky_solve of 100 systems of 16 unknowns, K = 1, float32
SPARSE = (1000, 10_000)  # sparse.divide, 1000 x 1000 with 1e4 + 1e4 entries, float64
POINTS = (1000, 16)  # MultivariateNormal.log_prob of 1000 points in 16 dimensions, float32


def _xp(backend: str) -> Any:
    if backend == "cupy":
        import cupy

        return cupy
    import numpy

    return numpy


def _arrays(backend: str) -> dict[str, Any]:
    """The inputs, made on the host and moved to the backend's device once."""
    import numpy as np

    rng = np.random.default_rng(0)
    n, m = SOLVE
    low = np.tril(rng.standard_normal((n, m, m))) / m**0.5
    low[:, range(m), range(m)] = np.abs(low[:, range(m), range(m)]) + 1.0
    p, d = POINTS
    host = {
        "scan": rng.standard_normal(SCAN).astype("float32"),
        "low": low.astype("float32"),
        "rhs": rng.standard_normal((n, m, 1)).astype("float32"),
        "loc": rng.standard_normal(d).astype("float32"),
        "scale": (np.tril(rng.standard_normal((d, d))) / d + 2 * np.eye(d)).astype("float32"),
        "points": rng.standard_normal((p, d)).astype("float32"),
    }
    xp = _xp(backend)
    return {k: xp.asarray(v) for k, v in host.items()}


def _sparse_operands(backend: str) -> tuple[Any, Any]:
    import numpy as np
    import scipy.sparse as sp

    n, nnz = SPARSE
    rng = np.random.default_rng(1)
    ops = []
    for _ in range(2):
        keys = np.unique(rng.integers(0, n * n, nnz))
        data = rng.random(keys.size) + 0.5
        ops.append(sp.csr_matrix((data, (keys // n, keys % n)), shape=(n, n)))
    if backend == "cupy":
        import cupyx.scipy.sparse as csp

        ops = [csp.csr_matrix(o) for o in ops]
    for o in ops:
        o.has_canonical_format = True
    return ops[0], ops[1]


def _torch_peers(torch: Any, backend: str, a: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """PyTorch's same calls on tensors sharing the inputs' memory (DLPack)."""
    device = "cuda" if backend == "cupy" else "cpu"
    t = {k: torch.from_dlpack(v) for k, v in a.items()}
    mvn = torch.distributions.MultivariateNormal
    return {
        "tril": {"torch": lambda: torch.tril_indices(TRIANGLE, TRIANGLE, device=device)},
        "scan": {"torch": lambda: torch.logcumsumexp(t["scan"], 1)},
        "solve": {"torch": lambda: torch.cholesky_solve(t["rhs"], t["low"])},
        "log_prob": {"torch": lambda: mvn(t["loc"], scale_tril=t["scale"]).log_prob(t["points"])},
    }


def _own_peers(backend: str, a: dict[str, Any], x: Any, y: Any) -> dict[str, dict[str, Any]]:
    """The library's own calls: NumPy and SciPy on the CPU, cupyx's x + y on the GPU."""
    peers: dict[str, dict[str, Any]] = {"sparse": {}}
    lib = "cupyx" if backend == "cupy" else "scipy"
    peers["sparse"][f"{lib} x+y"] = lambda: x + y
    if backend != "cupy":
        import numpy as np
        import scipy.stats

        logpdf = scipy.stats.multivariate_normal.logpdf
        cov = a["scale"] @ a["scale"].T
        peers["tril"] = {"numpy": functools.partial(np.tril_indices, TRIANGLE)}
        peers["scan"] = {"numpy": lambda: np.logaddexp.accumulate(a["scan"], axis=1)}
        peers["log_prob"] = {"scipy": lambda: logpdf(a["points"], a["loc"], cov)}
    return peers


def cases(backend: str, full: bool = False) -> list[Case]:
    """The five latency cases (the same with `full`)."""
    a = _arrays(backend)
    x, y = _sparse_operands(backend)
    xp = xpops.default_namespace()
    mvn = xpops.distributions.MultivariateNormal
    peers = _own_peers(backend, a, x, y)
    torch = _torch(backend)
    if torch is not None:
        for key, more in _torch_peers(torch, backend, a).items():
            peers.setdefault(key, {}).update(more)
    tri = TRIANGLE * (TRIANGLE + 1) // 2
    calls: list[tuple[str, str, int, Callable[[], Any]]] = [
        (
            "tril",
            f"tril_indices({TRIANGLE})",
            2 * tri * 8,
            functools.partial(xpops.tril_indices, TRIANGLE, xp=xp),
        ),
        (
            "scan",
            f"logcumsumexp {SCAN} float32 axis=1",
            2 * a["scan"].nbytes,
            functools.partial(xpops.logcumsumexp, a["scan"], 1),
        ),
        (
            "solve",
            f"cholesky_solve {(SOLVE[0], SOLVE[1], SOLVE[1])} K=1 float32",
            a["low"].nbytes + 2 * a["rhs"].nbytes,
            functools.partial(xpops.linalg.cholesky_solve, a["rhs"], a["low"]),
        ),
        (
            "sparse",
            f"sparse.divide {SPARSE[0]}x{SPARSE[0]}, 1e4 + 1e4 entries float64",
            3 * 12 * SPARSE[1],
            functools.partial(xpops.sparse.divide, x, y),
        ),
        (
            "log_prob",
            f"MultivariateNormal.log_prob {POINTS[0]} x {POINTS[1]} float32",
            a["points"].nbytes,
            lambda: mvn(a["loc"], scale_tril=a["scale"]).log_prob(a["points"]),
        ),
    ]
    return [
        Case(
            op=OP,
            label=f"{label}, per call",
            nbytes=nbytes,
            bandwidth="copy",
            run=run,
            peers=peers.get(key, {}),
            per_call=True,
        )
        for key, label, nbytes, run in calls
    ]
