"""xpops._lib._dask: graph-layer names, chunk libraries, single blocks, core-chunk checks and
per-chunk seeds."""

import re

import numpy as np
import pytest

from xpops._lib._dask import block_library, check_core_chunks, child_seed, single_block, task_name

da = pytest.importorskip("dask.array")


# ---- task_name ------------------------------------------------------------------------------


def test_task_name_format():
    name = task_name("logcumsumexp", 3, "a", (1, 2))
    assert re.fullmatch(r"xpops-logcumsumexp-[0-9a-f]+", name), name


def test_task_name_is_deterministic():
    x = np.arange(6.0)
    assert task_name("op", x, 1, "b") == task_name("op", x.copy(), 1, "b")
    assert task_name("op", 1) != task_name("op", 2)
    assert task_name("op", x) != task_name("op", x + 1)
    # the token is of the arguments alone: two ops given the same arguments share it
    token_a = task_name("a", 1, 2).removeprefix("xpops-a-")
    token_b = task_name("b", 1, 2).removeprefix("xpops-b-")
    assert token_a == token_b


# ---- single_block and block_library ---------------------------------------------------------


def test_single_block_unwraps_nested_lists():
    x = np.ones(3)
    assert single_block(x) is x
    assert single_block([x]) is x
    assert single_block([[[x]]]) is x


def test_single_block_refuses_several_blocks():
    with pytest.raises(ValueError, match="too many values to unpack"):
        single_block([np.ones(1), np.ones(1)])
    with pytest.raises(ValueError, match="not enough values to unpack"):
        single_block([])


def test_block_library_numpy():
    assert block_library(np.ones(3)) is np
    assert block_library(np.ones(3).view(np.ma.MaskedArray)) is np  # subclasses included


def test_block_library_other_library():
    import array_api_strict

    assert block_library(array_api_strict.ones(3)) is array_api_strict


def test_block_library_cupy(cupy_only):
    assert block_library(cupy_only.ones(3)) is cupy_only


# ---- check_core_chunks ----------------------------------------------------------------------


def test_check_core_chunks_accepts_whole_core_dimensions():
    a = da.ones((6, 4, 5), chunks=(2, 4, 5))
    check_core_chunks(a, "a", 2, "the solve needs whole matrices")
    check_core_chunks(a, "a", 1, "why")
    check_core_chunks(da.ones((6, 5), chunks=(1, 5)), "x", 1, "why")


def test_check_core_chunks_one_dimension():
    x = da.ones((6, 10), chunks=(6, 4))
    message = (
        "`x` must hold its last dimension in one chunk (the scan needs whole rows), got 3 chunks "
        "along axis -1; rechunk first, e.g. x.rechunk({-1: -1})"
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        check_core_chunks(x, "x", 1, "the scan needs whole rows")


def test_check_core_chunks_two_dimensions():
    a = da.ones((3, 6, 6), chunks=(1, 2, 6))
    message = (
        "`a` must hold its last 2 dimensions in one chunk (the solve needs whole matrices), got "
        "3 chunks along axis -2; rechunk first, e.g. a.rechunk({-2: -1, -1: -1})"
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        check_core_chunks(a, "a", 2, "the solve needs whole matrices")


def test_check_core_chunks_names_every_split_axis():
    a = da.ones((6, 6), chunks=(3, 2))
    message = (
        "`b` must hold its last 2 dimensions in one chunk (why), got 2 chunks along axis -2, "
        "-1; rechunk first, e.g. b.rechunk({-2: -1, -1: -1})"
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        check_core_chunks(a, "b", 2, "why")


# ---- child_seed -----------------------------------------------------------------------------


@pytest.mark.parametrize("entropy", [0, 12345, 2**100 + 7])
def test_child_seed_is_the_spawned_child_state(entropy):
    for i in (0, 1, 7, 10_000):
        child = np.random.SeedSequence(entropy, spawn_key=(i,))
        state = int(child.generate_state(1, dtype=np.uint64)[0])
        seed = child_seed(entropy, i)
        assert seed == state >> 1
        assert 0 <= seed < 2**63
        assert type(seed) is int


def test_child_seed_differs_across_chunks_and_is_deterministic():
    seeds = [child_seed(42, i) for i in range(100)]
    assert len(set(seeds)) == 100
    assert seeds == [child_seed(42, i) for i in range(100)]
    assert child_seed(42, 0) != child_seed(43, 0)
    # not the root's own state: a chunk's stream is not the unchunked one
    root = int(np.random.SeedSequence(42).generate_state(1, dtype=np.uint64)[0]) >> 1
    assert root not in seeds


def test_chunk_engine_by_library():
    import array_api_strict
    import scipy.sparse as sp

    from xpops._lib._dask import chunk_engine
    from xpops._lib._dispatch import Engines

    engines = Engines(
        None,
        numpy=lambda: "numpy",
        cupy=lambda: "cupy",
        dask=lambda: "dask",
        generic=lambda: "generic",
    )
    assert chunk_engine(engines, np.ones(2))() == "numpy"
    assert chunk_engine(engines, sp.csr_array(np.eye(2)))() == "numpy"
    assert chunk_engine(engines, array_api_strict.asarray([1.0]))() == "generic"
