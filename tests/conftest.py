"""Backend fixtures (DESIGN.md §5).

`xp` runs a test once per available backend: numpy, array_api_strict, cupy (skipped with "no
CUDA device available" on machines without one) and torch (when installed). When
``XPOPS_BACKEND`` is set, only that backend runs.
"""

import importlib
import os

import pytest

ALL_BACKENDS = ("numpy", "array_api_strict", "cupy", "torch")


def _selected_backends() -> tuple[str, ...]:
    env = os.environ.get("XPOPS_BACKEND", "").strip().lower()
    return (env,) if env else ALL_BACKENDS


def _cuda_available() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def _load(name: str):
    if name == "cupy":
        if not _cuda_available():
            pytest.skip("no CUDA device available")
        import cupy

        return cupy
    if name == "torch":
        return pytest.importorskip("torch")
    return importlib.import_module(name)


@pytest.fixture(params=_selected_backends())
def xp(request):
    """The array library of the backend under test (a plain module: numpy, cupy, ...)."""
    return _load(request.param)


@pytest.fixture
def cupy_only():
    """CuPy, or skip: for GPU-only tests."""
    if "cupy" not in _selected_backends():
        pytest.skip("the CuPy backend is not selected")
    return _load("cupy")
