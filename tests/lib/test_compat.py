"""xpops._lib._compat.wrapped_namespace: array_api_compat's namespaces, imported on demand."""

import subprocess
import sys

import pytest

from xpops._lib._compat import wrapped_namespace


def test_numpy():
    import array_api_compat.numpy

    ns = wrapped_namespace("numpy")
    assert ns is array_api_compat.numpy
    assert wrapped_namespace("numpy") is ns
    assert array_api_compat.is_numpy_namespace(ns)


def test_dask():
    pytest.importorskip("dask.array")
    import array_api_compat.dask.array

    assert wrapped_namespace("dask.array") is array_api_compat.dask.array


def test_cupy(cupy_only):
    import array_api_compat.cupy

    assert wrapped_namespace("cupy") is array_api_compat.cupy


def test_unknown_library():
    with pytest.raises(ModuleNotFoundError):
        wrapped_namespace("no_such_library")


def test_imported_only_when_asked_for():
    code = (
        "import sys, xpops; from xpops._lib import _compat; "
        "assert 'array_api_compat.dask' not in sys.modules; "
        "_compat.wrapped_namespace('numpy'); "
        "assert 'array_api_compat.numpy' in sys.modules; "
        "assert 'array_api_compat.dask' not in sys.modules; print('ok')"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
