"""Fixtures of the sparse.divide tests: the sparse library under test, the device of PyTorch's
tensors."""

import pytest

from ._support import SPARSE_BACKENDS, Lib


@pytest.fixture(params=SPARSE_BACKENDS)
def lib(request):
    """The sparse library under test, once per selected backend (numpy or cupy)."""
    return Lib(request.param)


@pytest.fixture
def scipy_only():
    """The SciPy library, or skip: for tests of SciPy-only features (N-D COO, *_array)."""
    if "numpy" not in SPARSE_BACKENDS:
        pytest.skip("the NumPy backend is not selected")
    return Lib("numpy")


def _cuda_available() -> bool:
    import torch

    if not torch.cuda.is_available():
        return False
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


@pytest.fixture(params=["cpu", "cuda"])
def device(request):
    """The device of PyTorch tensors: the CPU, or the first CUDA device (skipped without a
    GPU and CuPy; the CUDA tensors go to CuPy's kernels)."""
    torch = pytest.importorskip("torch")
    if request.param == "cuda" and not _cuda_available():
        pytest.skip("no CUDA device available (or no CuPy)")
    return torch.device(request.param)
