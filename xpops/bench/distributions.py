"""Benchmark cases of distributions.MultivariateNormal.

log_prob and sample move the points once (read or written) and the parameters once; the cdf
case is compute-bound and reported against SciPy's ``multivariate_normal.cdf`` per point.
"""

import functools
from collections.abc import Callable
from typing import Any

from ._case import Case, import_jax

# (points, D, dtype)
CPU_DENSITY_CASES = [(2**20, 16, "float64"), (2**20, 16, "float32")]  # the 2**20 x 16
SLOW_PEER_S = 0.5
CUPY_DENSITY_CASES = [(1_000_000, 16, "float32"), (1_000_000, 16, "float64")]
CPU_CDF_CASES = [(100, 10, 1e-4)]  # (problems, D, abseps): SciPy takes ms a problem
# The default run on the CPU: fewer points and problems; --full adds the cases above.
CPU_DEFAULT_DENSITY_CASES = [(100_000, 16, "float64")]
CPU_DEFAULT_CDF_CASES = [(20, 10, 1e-4)]


def _covariance(rng: Any, d: int) -> Any:
    import numpy as np

    g = rng.standard_normal((d, d))
    return g @ g.T / d + np.eye(d)


def _scipy_cdf(covs: Any, upper: Any, abseps: float) -> list[Any]:
    """SciPy's cdf of each problem (zero mean, upper bounds), one call a problem."""
    import numpy as np
    import scipy.stats

    return [
        scipy.stats.multivariate_normal(np.zeros(len(u)), c, abseps=abseps, releps=0).cdf(
            u, rng=np.random.default_rng(0)
        )
        for c, u in zip(covs, upper, strict=True)
    ]


def _torch_peers(loc: Any, cov: Any, x: Any, n: int) -> dict[str, Callable[[], Any]]:
    try:
        import torch
    except ImportError:
        return {}
    dist = torch.distributions.MultivariateNormal(
        torch.from_dlpack(loc), covariance_matrix=torch.from_dlpack(cov)
    )
    tx = torch.from_dlpack(x)
    return {
        "torch log_prob": functools.partial(dist.log_prob, tx),
        "torch sample": functools.partial(dist.sample, (n,)),
    }


def _one_call_s(fn: Callable[[], Any]) -> float:
    """Seconds of one call of a peer after a first (compiling) call."""
    import time

    import cupy

    fn()
    cupy.cuda.Device().synchronize()
    start = time.perf_counter()
    fn()
    cupy.cuda.Device().synchronize()
    return time.perf_counter() - start


def _fast_peers(
    peers: dict[str, Callable[[], Any]],
) -> tuple[dict[str, Callable[[], Any]], list[str]]:
    """The peers that take under SLOW_PEER_S a call, and a note on those left out (the runner
    would call them a dozen times)."""
    fast, slow = {}, []
    for name, fn in peers.items():
        seconds = _one_call_s(fn)
        if seconds < SLOW_PEER_S:
            fast[name] = fn
        else:
            slow.append(f"{name} {seconds:.2f} s a call, timed once")
    return fast, slow


def _cupy_density_peers(loc: Any, cov: Any, x: Any, n: int) -> dict[str, Callable[[], Any]]:
    peers: dict[str, Callable[[], Any]] = {}
    try:
        import torch

        if torch.cuda.is_available():
            dist = torch.distributions.MultivariateNormal(
                torch.from_dlpack(loc), covariance_matrix=torch.from_dlpack(cov)
            )
            peers["torch log_prob"] = functools.partial(dist.log_prob, torch.from_dlpack(x))
            peers["torch sample"] = functools.partial(dist.sample, (n,))
            # xpops on the same CUDA tensors: the fused kernels through DLPack
            from ..distributions import MultivariateNormal

            ours = MultivariateNormal(dist.loc, covariance_matrix=torch.from_dlpack(cov))
            peers["xpops via torch log_prob"] = functools.partial(
                ours.log_prob, torch.from_dlpack(x)
            )
    except ImportError:
        pass
    try:
        jax = import_jax()
        from jax.scipy.stats import multivariate_normal as jax_mvn

        jloc, jcov, jx = (jax.numpy.asarray(a.get()) for a in (loc, cov, x))
        assert jx.dtype == x.dtype, (jx.dtype, x.dtype)
        logpdf = jax.jit(jax_mvn.logpdf)
        peers["jax log_prob"] = lambda: logpdf(jx, jloc, jcov).block_until_ready()
        # xpops on the same JAX arrays (checks included, as in the row's own call)
        from ..distributions import MultivariateNormal

        ours = MultivariateNormal(jloc, covariance_matrix=jcov)
        peers["xpops via jax log_prob"] = lambda: ours.log_prob(jx).block_until_ready()
        peers.update(_numpyro_peers(jax, jloc, jcov, jx))
        jl = jax.numpy.linalg.cholesky(jcov)

        @jax.jit
        def draw(key: Any) -> Any:  # what NumPyro's sample does: loc + eps L^T
            eps = jax.random.normal(key, (n, jl.shape[-1]), dtype=jl.dtype)
            return jloc + eps @ jl.T

        key = jax.random.key(0)
        peers["jax sample"] = lambda: draw(key).block_until_ready()
    except ImportError:
        pass
    return peers


def _numpyro_peers(jax: Any, loc: Any, cov: Any, x: Any) -> dict[str, Callable[[], Any]]:
    """NumPyro's ``MultivariateNormal.log_prob`` under ``jax.jit``, where NumPyro is
    installed."""
    try:
        import numpyro.distributions as numpyro_dist
    except ImportError:
        return {}
    dist = numpyro_dist.MultivariateNormal(loc, covariance_matrix=cov)
    log_prob = jax.jit(dist.log_prob)
    return {"numpyro log_prob": lambda: log_prob(x).block_until_ready()}


def _cupy_density_cases() -> list[Case]:
    import cupy
    import numpy as np

    from ..distributions import MultivariateNormal

    out = []
    rng = np.random.default_rng(0)
    for n, d, dtype in CUPY_DENSITY_CASES:
        cov = cupy.asarray(_covariance(rng, d), dtype=dtype)
        loc = cupy.asarray(rng.standard_normal(d), dtype=dtype)
        x = cupy.random.default_rng(1).standard_normal((n, d), dtype=dtype)
        itemsize = np.dtype(dtype).itemsize
        peers, slow = _fast_peers(_cupy_density_peers(loc, cov, x, n))
        for validate in (True, False):
            dist = MultivariateNormal(loc, covariance_matrix=cov, validate_args=validate)
            note = "" if validate else ", validate_args=False"
            if validate and any("log_prob" in t for t in slow):
                note += " (" + "; ".join(t for t in slow if "log_prob" in t) + ")"
            out.append(
                Case(
                    op="MultivariateNormal.log_prob",
                    label=f"{n} points, D={d} {dtype}{note}",
                    nbytes=n * d * itemsize + n * itemsize,
                    bandwidth="copy",
                    run=functools.partial(dist.log_prob, x),
                    peers={k: v for k, v in peers.items() if "log_prob" in k} if validate else {},
                )
            )
        out.append(
            Case(
                op="MultivariateNormal.sample",
                label=f"{n} points, D={d} {dtype}"
                + "".join(f" ({t})" for t in slow if "sample" in t),
                nbytes=n * d * itemsize,
                bandwidth="fill",
                run=functools.partial(dist.sample, (n,), rng=1),
                peers={k: v for k, v in peers.items() if "sample" in k},
            )
        )
    return out


CUPY_CDF_CASES = [(1000, 10, 1e-4)]  # (problems, D, abseps)
CUPY_CDF_SCIPY_PROBLEMS = 10  # SciPy (about 7 ms a problem) is timed on this many of them


def _cupy_cdf_cases() -> list[Case]:
    """cdf on the GPU against SciPy on a few of the problems (scale its time by problems) and
    the NumPy engine (CPU) on all of them."""
    import cupy
    import numpy as np

    from ..distributions import MultivariateNormal

    out = []
    rng = np.random.default_rng(0)
    for problems, d, abseps in CUPY_CDF_CASES:
        covs = np.stack([_covariance(rng, d) for _ in range(problems)])
        upper = rng.standard_normal((problems, d))
        dist = MultivariateNormal(cupy.zeros(d), covariance_matrix=cupy.asarray(covs))
        dist_np = MultivariateNormal(np.zeros(d), covariance_matrix=covs)
        k = CUPY_CDF_SCIPY_PROBLEMS

        out.append(
            Case(
                op="MultivariateNormal.cdf",
                label=f"{problems} problems, D={d}, abseps={abseps:g}",
                nbytes=upper.nbytes,
                bandwidth="copy",
                run=functools.partial(dist.cdf, cupy.asarray(upper), abseps=abseps, rng=0),
                peers={
                    f"scipy cdf ({k} of the {problems} problems)": functools.partial(
                        _scipy_cdf, covs[:k], upper[:k], abseps
                    ),
                    "xpops NumPy engine (CPU)": functools.partial(
                        dist_np.cdf, upper, abseps=abseps, rng=0
                    ),
                },
            )
        )
    return out


def cases(backend: str, full: bool = False) -> list[Case]:
    if backend == "cupy":
        return _cupy_density_cases() + _cupy_cdf_cases()
    import numpy as np
    import scipy.stats

    from ..distributions import MultivariateNormal

    out = []
    rng = np.random.default_rng(0)
    for n, d, dtype in CPU_DEFAULT_DENSITY_CASES + (CPU_DENSITY_CASES if full else []):
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
    for problems, d, abseps in CPU_DEFAULT_CDF_CASES + (CPU_CDF_CASES if full else []):
        covs = np.stack([_covariance(rng, d) for _ in range(problems)])
        upper = rng.standard_normal((problems, d))
        dist = MultivariateNormal(np.zeros(d), covariance_matrix=covs)

        out.append(
            Case(
                op="MultivariateNormal.cdf",
                label=f"{problems} problems, D={d}, abseps={abseps:g}",
                nbytes=upper.nbytes,
                bandwidth="copy",
                run=functools.partial(dist.cdf, upper, abseps=abseps, rng=0),
                peers={"scipy cdf": functools.partial(_scipy_cdf, covs, upper, abseps)},
            )
        )
    return out
