"""Fixtures of the sparse.divide tests: the sparse library under test."""

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
