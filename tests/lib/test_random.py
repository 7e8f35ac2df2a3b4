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
    as_seed,
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
        (np.bool_(True), "bool"),
        (np.random.SeedSequence(1), "seedsequence"),
        (np.random.PCG64(1), "bitgenerator"),
        (np.random.MT19937(1), "bitgenerator"),
        (np.random.default_rng(0), "numpy"),
        (np.random.RandomState(0), "other"),
        (1.0, "other"),
        ("seed", "other"),
        ([1, 2], "seedsequence"),  # the entropy of a SeedSequence, as default_rng takes it
        ((3,), "seedsequence"),
        (np.array([1, 2]), "seedsequence"),
        ([], "other"),
        ([1.0, 2.0], "other"),
        ([True], "other"),
        (np.array([[1, 2]]), "other"),
    ],
)
def test_rng_kind(rng, kind):
    assert rng_kind(rng) == kind


def test_kind_sets():
    assert {"none", "seed", "seedsequence"} == SEEDS
    # what numpy.random.default_rng takes, bools refused (default_rng takes True as seed 1)
    assert {"none", "seed", "seedsequence", "bitgenerator", "numpy"} == NUMPY
    assert {"none", "seed", "seedsequence", "cupy"} == CUPY
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
    for rng in (None, 0, np.int32(7), 2**80, np.random.SeedSequence(2)):
        check_seed(rng, "with Dask parameters")
    for rng, name in (
        (True, "bool"),
        (np.random.default_rng(0), "Generator"),
        (np.random.PCG64(0), "PCG64"),
        (1.0, "float"),
    ):
        with pytest.raises(TypeError) as info:
            check_seed(rng, "with Dask parameters")
        want = (
            "with Dask parameters, `rng` must be None, an int seed or a "
            f"numpy.random.SeedSequence, got {name}"
        )
        assert str(info.value) == want


def test_negative_seeds():
    for check in (check_seed, check_numpy_rng, check_cupy_rng):
        args = ("here",) if check is check_seed else ()
        with pytest.raises(ValueError, match="`rng` as an int seed must be non-negative, got -1"):
            check(-1, *args)
        with pytest.raises(ValueError, match="non-negative, got -3"):
            check(np.int64(-3), *args)


def test_check_numpy_rng():
    sources = (None, 0, np.random.default_rng(0), np.random.SeedSequence(0), np.random.PCG64(0))
    for rng in sources:
        check_numpy_rng(rng)
        np.random.default_rng(rng)  # all taken by NumPy
    want = (
        "`rng` must be None, an int seed or a numpy.random SeedSequence, BitGenerator or "
        "Generator, got "
    )
    for rng, text in (("s", "builtins.str"), (True, "builtins.bool")):
        with pytest.raises(TypeError) as info:
            check_numpy_rng(rng)
        assert str(info.value) == want + text
    with pytest.raises(TypeError) as info:
        check_numpy_rng(np.random.RandomState(0), got="repr")
    assert str(info.value) == want + "<class 'numpy.random.mtrand.RandomState'>"


def test_check_cupy_rng_rejects_numpy_generators_and_bools():
    for rng in (None, 0, np.random.SeedSequence(0)):
        check_cupy_rng(rng)
    for rng, text in (
        (np.random.default_rng(0), "numpy.random._generator.Generator"),
        (np.random.PCG64(0), "numpy.random._pcg64.PCG64"),
        (True, "builtins.bool"),
    ):
        with pytest.raises(TypeError) as info:
            check_cupy_rng(rng)
        want = (
            "`rng` must be None, an int seed, a numpy.random.SeedSequence or a "
            f"cupy.random.Generator for CuPy, got {text}"
        )
        assert str(info.value) == want


def test_as_seed():
    for rng in (None, 5, np.random.default_rng(0)):
        assert as_seed(rng) is rng
    seed = as_seed(np.random.SeedSequence(9))
    assert isinstance(seed, int)
    assert 0 <= seed < 2**63
    assert seed == as_seed(np.random.SeedSequence(9))
    assert seed != as_seed(np.random.SeedSequence(10))
    pair = as_seed([9, 10])
    assert pair == as_seed(np.random.SeedSequence([9, 10])) == as_seed(np.array([9, 10]))
    assert pair != seed


def test_negative_entries_of_a_sequence():
    for rng in ([1, -2], (-1,), np.array([3, -4])):
        with pytest.raises(ValueError, match="`rng` as a sequence of ints must hold non-negative"):
            check_numpy_rng(rng)


def test_cupy_generators(cupy_only):
    cupy = cupy_only
    gen = cupy.random.default_rng(0)
    assert is_cupy_generator(gen)
    assert rng_kind(gen) == "cupy"
    check_cupy_rng(gen)
    check_rng(gen, ANY, "anything")
    with pytest.raises(TypeError, match=re.escape("BitGenerator or Generator, got cupy")):
        check_numpy_rng(gen)
    with pytest.raises(TypeError, match="SeedSequence, got Generator"):
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
        with pytest.raises(
            TypeError, match=re.escape("BitGenerator or Generator, got builtins.str")
        ):
            draw(np, (2,), np.float64, None, "seed")
