"""xpops._lib._names.type_name: ``library.Class`` in error messages."""

import array_api_strict
import numpy as np
import pytest

from xpops._lib._names import type_name


class _Outer:
    class Inner:
        pass


@pytest.mark.parametrize(
    ("obj", "name"),
    [
        (np.ones(2), "numpy.ndarray"),
        (np.float64(1.0), "numpy.float64"),
        (np.ones(2).view(np.ma.MaskedArray), "numpy.MaskedArray"),
        (array_api_strict.ones(2), "array_api_strict.Array"),
        ([1, 2], "builtins.list"),
        (None, "builtins.NoneType"),
        (True, "builtins.bool"),
        ("s", "builtins.str"),
        (np, "builtins.module"),
        (_Outer.Inner(), "tests._Outer.Inner"),  # the qualified name of a nested class
    ],
)
def test_type_name(obj, name):
    assert type_name(obj) == name


def test_type_name_sparse():
    sp = pytest.importorskip("scipy.sparse")
    assert type_name(sp.csr_array((2, 2))) == "scipy.csr_array"
    assert type_name(sp.coo_matrix((2, 2))) == "scipy.coo_matrix"


def test_type_name_cupy(cupy_only):
    assert type_name(cupy_only.ones(2)) == "cupy.ndarray"
