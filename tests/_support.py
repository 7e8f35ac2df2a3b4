"""Helpers shared by the test modules."""

import numpy as np


def to_numpy(a) -> np.ndarray:
    """Copy any backend's array to NumPy (for comparison with references)."""
    mod = type(a).__module__
    if mod.startswith("cupy"):
        return a.get()
    if mod.startswith("torch"):
        return a.detach().cpu().numpy()
    return np.from_dlpack(a) if not isinstance(a, np.ndarray) else a


def backend_name(xp) -> str:
    return xp.__name__.split(".")[0]
