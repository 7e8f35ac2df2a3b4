"""Fixtures of the cholesky_solve tests."""

import pytest

from .._support import backend_name
from ._common import NUMPY_PATHS


@pytest.fixture(params=NUMPY_PATHS)
def numpy_path(request, xp):
    """Each path of the NumPy engine forced in turn, whatever the sizes (one run, with the
    engine's own choice, for the other backends)."""
    from xpops.linalg import _numpy as engine

    numpy_backend = backend_name(xp) == "numpy"
    if not numpy_backend and request.param != NUMPY_PATHS[0]:
        pytest.skip("the NumPy engine's paths: NumPy only")
    saved = engine._PATH
    engine._PATH = request.param if numpy_backend else None
    yield request.param
    engine._PATH = saved
