"""Benchmark cases of distributions.MultivariateNormal (CPU only until its CuPy path is tested).

log_prob and sample move the points once (read or written) and the parameters once; the cdf
case is compute-bound and reported against SciPy's ``multivariate_normal.cdf`` per point.
"""

import functools
from collections.abc import Callable
from typing import Any

from ._case import Case

# (points, D, dtype)
CPU_DENSITY_CASES = [(1_000_000, 16, "float64"), (1_000_000, 16, "float32")]
CPU_CDF_CASES = [(100, 10, 1e-4)]  # (problems, D, abseps): SciPy takes ms a problem


def _covariance(rng: Any, d: int) -> Any:
    import numpy as np

    g = rng.standard_normal((d, d))
    return g @ g.T / d + np.eye(d)


def _torch_peers(loc: Any, cov: Any, x: Any, n: int) -> dict[str, Callable[[], Any]]:
    try:
        import torch
    except ImportError:
        return {}
    dist = torch.distributions.MultivariateNormal(
        torch.from_numpy(loc), covariance_matrix=torch.from_numpy(cov)
    )
    tx = torch.from_numpy(x)
    return {
        "torch log_prob": functools.partial(dist.log_prob, tx),
        "torch sample": functools.partial(dist.sample, (n,)),
    }


def cases(backend: str) -> list[Case]:
    if backend == "cupy":
        return []
    import numpy as np
    import scipy.stats

    from ..distributions import MultivariateNormal

    out = []
    rng = np.random.default_rng(0)
    for n, d, dtype in CPU_DENSITY_CASES:
        cov = _covariance(rng, d).astype(dtype)
        loc = rng.standard_normal(d).astype(dtype)
        x = rng.standard_normal((n, d)).astype(dtype)
        dist = MultivariateNormal(loc, covariance_matrix=cov)
        itemsize = np.dtype(dtype).itemsize
        ref = scipy.stats.multivariate_normal(loc, cov)
        peers: dict[str, Callable[[], Any]] = {"scipy log_prob": functools.partial(ref.logpdf, x)}
        peers.update(_torch_peers(loc, cov, x, n))
        out.append(
            Case(
                op="MultivariateNormal.log_prob",
                label=f"{n} points, D={d} {dtype}",
                nbytes=n * d * itemsize + n * itemsize,
                bandwidth="copy",
                run=functools.partial(dist.log_prob, x),
                peers={k: v for k, v in peers.items() if "sample" not in k},
            )
        )
        sample_peers: dict[str, Callable[[], Any]] = {
            "scipy sample": functools.partial(ref.rvs, n, random_state=1)
        }
        sample_peers.update({k: v for k, v in peers.items() if "sample" in k})
        out.append(
            Case(
                op="MultivariateNormal.sample",
                label=f"{n} points, D={d} {dtype}",
                nbytes=n * d * itemsize,
                bandwidth="fill",
                run=functools.partial(dist.sample, (n,), rng=1),
                peers=sample_peers,
            )
        )
    for problems, d, abseps in CPU_CDF_CASES:
        covs = np.stack([_covariance(rng, d) for _ in range(problems)])
        upper = rng.standard_normal((problems, d))
        dist = MultivariateNormal(np.zeros(d), covariance_matrix=covs)

        def scipy_cdf(covs: Any = covs, upper: Any = upper, d: int = d, eps: float = abseps) -> Any:
            return [
                scipy.stats.multivariate_normal(np.zeros(d), c, abseps=eps, releps=0).cdf(
                    u, rng=np.random.default_rng(0)
                )
                for c, u in zip(covs, upper, strict=True)
            ]

        out.append(
            Case(
                op="MultivariateNormal.cdf",
                label=f"{problems} problems, D={d}, abseps={abseps:g}",
                nbytes=upper.nbytes,
                bandwidth="copy",
                run=functools.partial(dist.cdf, upper, abseps=abseps, rng=0),
                peers={"scipy cdf": scipy_cdf},
            )
        )
    return out
