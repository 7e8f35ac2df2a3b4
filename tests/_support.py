"""Helpers shared by the test modules."""

import numpy as np


def to_numpy(a) -> np.ndarray:
    """Copy any backend's array to NumPy (for comparison with references)."""
    mod = type(a).__module__
    if mod.startswith("cupy"):
        return a.get()
    if mod.startswith("torch"):
        return a.detach().cpu().numpy()
    if isinstance(a, np.ndarray):
        return a
    if mod.startswith("jax"):  # a GPU array gives NumPy no DLPack capsule: its own copy
        return np.asarray(a)
    try:
        return np.from_dlpack(a)
    except (BufferError, TypeError, ValueError, NotImplementedError):
        # NumPy 2.0 cannot take a read-only array by DLPack: a writable copy of its own
        # library can be taken
        return np.from_dlpack(a.__array_namespace__().asarray(a, copy=True))


def scipy_mvn_cdf(x, mean, cov, *, seed: int, log: bool = False, **kwargs):
    """``scipy.stats.multivariate_normal.cdf`` (or ``logcdf``) with its randomness seeded:
    by `rng` where SciPy takes it, else by NumPy's global generator, which older SciPy uses."""
    import inspect

    from scipy import stats

    method = stats.multivariate_normal.logcdf if log else stats.multivariate_normal.cdf
    if "rng" in inspect.signature(method).parameters:
        kwargs["rng"] = np.random.default_rng(seed)
    else:
        np.random.seed(seed)  # noqa: NPY002 - the generator SciPy before 1.15 draws from
    return method(x, mean, cov, **kwargs)


def backend_name(xp) -> str:
    return xp.__name__.split(".")[0]


def library_of(a) -> str:
    """The top-level package of an array's library, as `backend_name` names it (JAX's
    arrays are defined in ``jaxlib``)."""
    name = type(a).__module__.split(".")[0]
    return "jax" if name == "jaxlib" else name
