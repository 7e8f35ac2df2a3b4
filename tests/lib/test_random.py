"""xpops._lib._random: the kinds of `rng`, the one check and its messages, host generators and
standard normals."""

import re
import sys

import array_api_strict
import numpy as np
import pytest

from xpops._lib._random import (
    ANY,
    CUPY,
    NUMPY,
    SEEDS,
    check_cupy_rng,
    check_numpy_rng,
    check_rng,
    check_seed,
    host_rng,
    is_cupy_generator,
    normal_as_float64,
    normal_in_dtype,
    rng_kind,
)

# ---- kinds ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rng", "kind"),
    [
        (None, "none"),
        (0, "seed"),
        (2**70, "seed"),
        (-3, "seed"),
        (np.int64(5), "seed"),
        (True, "bool"),
        (False, "bool"),
        (np.bool_(True), "other"),  # not a numbers.Integral
        (np.random.default_rng(0), "numpy"),
        (np.random.RandomState(0), "other"),
        (1.0, "other"),
        ("seed", "other"),
        ([1, 2], "other"),
    ],
)
def test_rng_kind(rng, kind):
    assert rng_kind(rng) == kind


def test_kind_sets():
    assert {"none", "seed"} == SEEDS
    assert {"none", "seed", "bool", "numpy"} == NUMPY  # numpy.random.default_rng takes a bool
    assert {"none", "seed", "cupy"} == CUPY
    assert ANY == NUMPY | CUPY


def test_not_a_cupy_generator_without_cupy(monkeypatch):
    monkeypatch.delitem(sys.modules, "cupy", raising=False)
    assert not is_cupy_generator(np.random.default_rng(0))
    assert rng_kind(object()) == "other"


# ---- the check and its messages ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("got", "text"),
    [("name", "str"), ("qualified", "builtins.str"), ("repr", "<class 'str'>")],
)
def test_check_rng_message(got, text):
    with pytest.raises(TypeError) as info:
        check_rng("x", SEEDS, "an int", got=got)
    assert str(info.value) == f"`rng` must be an int, got {text}"


def test_check_rng_where_and_accepted():
    with pytest.raises(TypeError, match=re.escape("with `chunks`, `rng` must be an int, got")):
        check_rng(1.5, SEEDS, "an int", where="with `chunks`")
    for rng in (None, 3):
        check_rng(rng, SEEDS, "an int")  # no error


def test_check_seed():
    for rng in (None, 0, np.int32(7), 2**80):
        check_seed(rng, "with Dask parameters")
    for rng, name in ((True, "bool"), (np.random.default_rng(0), "Generator"), (1.0, "float")):
        with pytest.raises(TypeError) as info:
            check_seed(rng, "with Dask parameters")
        want = f"with Dask parameters, `rng` must be None or an int seed, got {name}"
        assert str(info.value) == want


def test_check_numpy_rng():
    for rng in (None, 0, True, np.random.default_rng(0)):
        check_numpy_rng(rng)
    with pytest.raises(TypeError) as info:
        check_numpy_rng("s")
    want = "`rng` must be None, an int seed or a numpy.random.Generator, got builtins.str"
    assert str(info.value) == want
    with pytest.raises(TypeError) as info:
        check_numpy_rng(np.random.RandomState(0), got="repr")
    want = (
        "`rng` must be None, an int seed or a numpy.random.Generator, got "
        "<class 'numpy.random.mtrand.RandomState'>"
    )
    assert str(info.value) == want


def test_check_cupy_rng_rejects_numpy_generators_and_bools():
    for rng in (None, 0):
        check_cupy_rng(rng)
    for rng, text in ((np.random.default_rng(0), "numpy.random._generator.Generator"),
                      (True, "builtins.bool")):  # fmt: skip
        with pytest.raises(TypeError) as info:
            check_cupy_rng(rng)
        want = f"`rng` must be None, an int seed or a cupy.random.Generator for CuPy, got {text}"
        assert str(info.value) == want


def test_cupy_generators(cupy_only):
    cupy = cupy_only
    gen = cupy.random.default_rng(0)
    assert is_cupy_generator(gen)
    assert rng_kind(gen) == "cupy"
    check_cupy_rng(gen)
    check_rng(gen, ANY, "anything")
    with pytest.raises(TypeError, match=re.escape("numpy.random.Generator, got cupy")):
        check_numpy_rng(gen)
    with pytest.raises(TypeError, match="int seed, got Generator"):
        check_seed(gen, "here")


# ---- host generators --------------------------------------------------------------------------


def test_host_rng_passes_host_sources_through():
    gen = np.random.default_rng(0)
    for rng in (None, 3, gen):
        assert host_rng(rng) is rng


def test_host_rng_of_a_cupy_generator(cupy_only):
    """A CuPy generator gives a NumPy generator seeded by four words drawn from it: the same
    seed, the same host stream."""
    cupy = cupy_only
    a = host_rng(cupy.random.default_rng(5))
    b = host_rng(cupy.random.default_rng(5))
    assert isinstance(a, np.random.Generator)
    assert a.random() == b.random()


# ---- standard normals -------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_normal_in_dtype(dtype):
    x = normal_in_dtype(np, (3, 4), np.dtype(dtype), None, 7)
    assert x.dtype == dtype
    assert x.shape == (3, 4)
    want = np.random.default_rng(7).standard_normal((3, 4), dtype=dtype)
    np.testing.assert_array_equal(x, want)
    gen = np.random.default_rng(7)
    np.testing.assert_array_equal(normal_in_dtype(np, (3, 4), np.dtype(dtype), None, gen), want)


def test_normal_as_float64_converts():
    xp = array_api_strict
    x = normal_as_float64(xp, (2, 5), xp.float32, None, 1)
    assert type(x).__module__.startswith("array_api_strict")
    assert x.dtype == xp.float32
    want = np.random.default_rng(1).standard_normal((2, 5)).astype(np.float32)
    np.testing.assert_array_equal(np.from_dlpack(x), want)


def test_normals_check_the_rng():
    for draw in (normal_in_dtype, normal_as_float64):
        with pytest.raises(TypeError, match=re.escape("numpy.random.Generator, got builtins.str")):
            draw(np, (2,), np.float64, None, "seed")
