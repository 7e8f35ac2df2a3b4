"""The NumPy engine of logcumsumexp: block boundaries, lanes that leave the fast path, the
helper thread, against independent float64 / long double references."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import xpops

from ._reference import (
    assert_scan_close,
    assert_single_terms_exact,
    reference,
    scan_cases,
    sparse_lanes,
)

nan, inf = np.nan, np.inf


def numpy_engine():
    from xpops._cumulative import _numpy

    return _numpy


# ---- NumPy engine: block boundaries, lanes that leave the fast path ------------------------


def _block_lengths():
    e = numpy_engine()
    bn = (e._BLOCK // e._CHUNK) * e._CHUNK
    return [bn - 1, bn, bn + 1, 2 * bn + 1]


@pytest.mark.parametrize("n", _block_lengths())
def test_numpy_lengths_around_the_block(n):
    rng = np.random.default_rng(n)
    x = rng.normal(0, 10, n)
    x[n // 3] = 1500.0  # a jump the fast path cannot take
    x[n // 2 : n // 2 + 3] = -3000.0  # terms that underflow: negligible, fine
    for exclusive, reverse in itertools.product([False, True], repeat=2):
        got = xpops.logcumsumexp(x, exclusive=exclusive, reverse=reverse)
        assert_scan_close(got, reference(x, 0, exclusive, reverse), 1e-9)


@pytest.fixture(params=[False, True], ids=["one_thread", "helper_thread"])
def small_blocks(request, monkeypatch):
    """Blocks of a few hundred elements, so that short inputs cross many of them; all work on
    the calling thread, or shared with a helper thread from any size."""
    e = numpy_engine()
    monkeypatch.setattr(e, "_BLOCK", 256)
    monkeypatch.setattr(e, "_CHUNK", 7)
    monkeypatch.setattr(e, "_ROW_LANES", 16)
    monkeypatch.setattr(e, "_TILE_LANES", 40)
    monkeypatch.setattr(e, "_TWO_LEVEL", 50)
    if not request.param:
        monkeypatch.setattr(e, "helper_thread", lambda: None)
        yield e
        return
    from concurrent.futures import ThreadPoolExecutor

    from xpops._lib._threads import Helper

    with ThreadPoolExecutor(1) as pool:
        monkeypatch.setattr(e, "helper_thread", lambda: Helper(pool))
        monkeypatch.setattr(e, "_THREAD_MIN", 0)
        yield e


def _mess_up(x, rng):
    """NaN, +-inf, huge jumps, very negative and -inf-only starts in some lanes."""
    lanes = np.moveaxis(x, 0, -1).reshape(-1, x.shape[0])  # a view: lanes along axis 0
    n = x.shape[0]
    lanes[0, n // 2] = nan
    lanes[1, n // 3] = inf
    lanes[2, : n // 2] = -inf
    lanes[3, n // 4] = 2000.0
    lanes[4, :] -= 5000.0
    lanes[5, :] += np.linspace(0, 900, n)  # drifting up: the carry is renormalized
    lanes[6, :] = -inf
    lanes[7, : n // 3] = -inf
    lanes[7, n // 3] = -700.0  # the first element above -inf underflows: exact path
    lanes[8, ::2] = -inf
    return x


@pytest.mark.parametrize("shape", [(600, 20), (600, 3, 9), (9, 600), (3, 600, 4), (600, 36)])
@pytest.mark.parametrize("dtype_name", ["float64", "float32", "complex128"])
def test_numpy_lanes_leaving_the_fast_path(small_blocks, shape, dtype_name):
    rng = np.random.default_rng(21)
    for axis in range(len(shape)):
        x = np.moveaxis(rng.normal(0, 10, shape), axis, 0).copy()
        x = np.moveaxis(_mess_up(x, rng), 0, axis)
        if dtype_name == "complex128":
            x = x + 1j * rng.normal(0, 2, shape)
        x = x.astype(dtype_name)
        for exclusive, reverse in itertools.product([False, True], repeat=2):
            got = xpops.logcumsumexp(x, axis=axis, exclusive=exclusive, reverse=reverse)
            want = reference(x, axis, exclusive, reverse)
            if dtype_name == "float32":  # outputs reach -5000: float32 spacing 5e-4 there
                assert_scan_close(got, want, 2e-5, rtol=2.4e-7)
            else:
                assert_scan_close(got, want, 1e-9)


LONG_LANE_CASES = {
    "plain": lambda x: x,
    "nan_in_first_part": lambda x: _put(x, 100, nan),
    "nan_in_rest": lambda x: _put(x, 900, nan),
    "inf_in_first_part": lambda x: _put(x, 100, inf),
    "inf_in_rest": lambda x: _put(x, 900, inf),
    "inf_then_nan": lambda x: _put(_put(x, 100, inf), 1100, nan),
    "first_part_all_minus_inf": lambda x: _put(x, slice(0, 800), -inf),
    "rest_all_minus_inf": lambda x: _put(x, slice(500, None), -inf),
    "all_minus_inf": lambda x: _put(x, slice(None), -inf),
    "large_total": lambda x: x + 1000.0,
    "small_total": lambda x: x - 1000.0,
    "total_near_200": lambda x: x + 190.0,
    "jump_after_the_split": lambda x: _put(x, 760, 2000.0),
}


def _put(x, where, value):
    x = x.copy()
    x[where] = value
    return x


@pytest.mark.parametrize("case", LONG_LANE_CASES)
@pytest.mark.parametrize("dtype_name", ["float64", "float32"])
def test_numpy_one_long_lane(small_blocks, case, dtype_name):
    """One lane of several blocks: with the helper thread the part after the calling thread's
    share starts from the exact total of that share, whatever it holds."""
    x = LONG_LANE_CASES[case](np.random.default_rng(24).normal(0, 10, 1300)).astype(dtype_name)
    for exclusive, reverse in itertools.product([False, True], repeat=2):
        got = xpops.logcumsumexp(x, exclusive=exclusive, reverse=reverse)
        want = reference(x, None, exclusive, reverse)
        if dtype_name == "float32":
            assert_scan_close(got, want, 2e-5, rtol=2.4e-7)
        else:
            assert_scan_close(got, want, 1e-10, rtol=1e-15)


def test_numpy_busy_helper_thread(monkeypatch):
    """A call that finds the helper thread busy with another call's work does all of its own
    work on the calling thread, with the same results."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from xpops._lib._threads import Helper

    e = numpy_engine()
    monkeypatch.setattr(e, "_BLOCK", 256)
    monkeypatch.setattr(e, "_THREAD_MIN", 0)
    with ThreadPoolExecutor(1) as pool:
        helper = Helper(pool)
        monkeypatch.setattr(e, "helper_thread", lambda: helper)
        release = threading.Event()
        blocker = helper.try_submit(release.wait, 30)
        assert blocker is not None
        assert helper.try_submit(lambda: None) is None  # busy: nothing queued
        try:
            rng = np.random.default_rng(25)
            for x, axis in [(rng.normal(0, 10, 1300), 0), (rng.normal(0, 10, (40, 300)), 1)]:
                for exclusive, reverse in itertools.product([False, True], repeat=2):
                    got = xpops.logcumsumexp(x, axis=axis, exclusive=exclusive, reverse=reverse)
                    assert_scan_close(got, reference(x, axis, exclusive, reverse), 1e-10)
        finally:
            release.set()
        assert blocker.result(timeout=30)
        assert helper.try_submit(int, "7").result(timeout=30) == 7  # free again


def test_helper_thread_follows_omp_num_threads(monkeypatch):
    from xpops._lib import _threads

    _threads.helper_thread.cache_clear()
    try:
        monkeypatch.setenv("OMP_NUM_THREADS", "1")
        assert _threads.helper_thread() is None
        _threads.helper_thread.cache_clear()
        monkeypatch.setenv("OMP_NUM_THREADS", "2")
        monkeypatch.setattr(_threads.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
        assert _threads.helper_thread() is not None
    finally:
        _threads.helper_thread.cache_clear()


def test_numpy_engine_modes(small_blocks):
    """Short inputs through every layout of the engine, against the reference."""
    rng = np.random.default_rng(22)
    shapes = [(1,), (2,), (700,), (5, 300), (300, 5), (2, 300, 30), (30, 2, 300), (60, 60)]
    # one strided tile of enough lanes to be halved, along the leading or the trailing lanes
    for shape in [*shapes, (300, 36), (4, 300, 9)]:
        x = rng.normal(0, 30, shape)
        for axis in range(len(shape)):
            for exclusive, reverse in itertools.product([False, True], repeat=2):
                got = small_blocks.logcumsumexp(x, axis, exclusive, reverse)
                assert_scan_close(got, reference(x, axis, exclusive, reverse), 1e-10)


def test_numpy_leading_minus_inf_stays_on_the_fast_path(monkeypatch):
    """Lanes padded with -inf at the start need no exact redo (and give the same results)."""
    e = numpy_engine()
    calls = []
    original = e._exact
    monkeypatch.setattr(e, "_exact", lambda *a: calls.append(1) or original(*a))
    x = np.random.default_rng(23).normal(0, 10, (64, 700))
    x[:, :100] = -inf
    for axis, y in ((1, x), (0, np.ascontiguousarray(x.T))):
        got = xpops.logcumsumexp(y, axis=axis)
        assert_scan_close(got, reference(y, axis), 1e-10)
    assert not calls


def test_numpy_exp_floor():
    """`_exp` gives exactly 0 below the floor (-inf included), +inf as ``exp`` does, and
    ``exp`` elsewhere, from float32 or float64 exponents; blocks with nothing below the floor,
    or with a NaN, take the plain ``exp``."""
    e = numpy_engine()
    pool = [-inf, -1000.0, -745.5, -700.5, -700.0, -699.5, -20.0, 0.0, 3.0, 700.0, inf]
    for dtype in (np.float64, np.float32):
        for values, floored in ((pool, True), (pool[4:], False), ([*pool, nan], False)):
            arg = np.tile(np.array(values, dtype=dtype), 50)
            out = np.empty(arg.shape)
            e._exp(arg, out, np.float64)
            wide = arg.astype(np.float64)
            with np.errstate(over="ignore", under="ignore"):
                want = np.exp(wide)
            if floored:
                want[wide < e._EXP_FLOOR] = 0.0
            np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize(("shape", "axis"), [((3000,), 0), ((300, 40), 0), ((40, 300), 1)])
def test_numpy_terms_far_below_the_others(small_blocks, shape, axis):
    """Terms 690-760 below the others, -inf among them, and a lane made only of such terms:
    the scans of the reference (the terms below e**-700 of a block's reference count as 0 on
    the fast path; a prefix made of them alone is redone exactly)."""
    rng = np.random.default_rng(25)
    x = rng.normal(0, 3, shape)
    far = rng.random(shape) < 0.5
    x[far] -= rng.uniform(690, 760, int(far.sum()))
    x[rng.random(shape) < 0.2] = -inf
    lanes = np.moveaxis(x, axis, -1)
    lanes[(0,) * (x.ndim - 1)][: shape[axis] // 2] = rng.uniform(-760, -690, shape[axis] // 2)
    for exclusive, reverse in itertools.product([False, True], repeat=2):
        got = xpops.logcumsumexp(x, axis=axis, exclusive=exclusive, reverse=reverse)
        assert_scan_close(got, reference(x, axis, exclusive, reverse), 1e-10)


# ---- properties -----------------------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(case=scan_cases(max_size=40), data=st.data())
def test_property_numpy_small_blocks(case, data):
    """Random shapes and special values across many small blocks of the NumPy engine."""
    e = numpy_engine()
    x, axis, exclusive, reverse = case
    saved = (e._BLOCK, e._CHUNK, e._ROW_LANES)
    e._BLOCK, e._CHUNK = data.draw(st.sampled_from([(8, 3), (32, 5), (100, 32)]))
    e._ROW_LANES = 4
    try:
        got = xpops.logcumsumexp(x, axis=axis, exclusive=exclusive, reverse=reverse)
    finally:
        e._BLOCK, e._CHUNK, e._ROW_LANES = saved
    assert_scan_close(got, reference(x, axis, exclusive, reverse), 1e-10)


# ---- a prefix of a single finite term gives that term exactly (issue 22, item 5) --------------


@pytest.mark.parametrize(
    "shape", [(600, 20), (600, 3, 9), (9, 600), (3, 600, 4), (600, 36), (1300,)]
)
@pytest.mark.parametrize("dtype_name", ["float64", "float32", "complex128", "complex64"])
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_numpy_single_finite_term_exact(small_blocks, shape, dtype_name, exclusive, reverse):
    """Lanes of -inf with a few finite terms (1e-20 to 300) in every mode (strided, contiguous,
    one long lane split with the helper thread), across block boundaries: each output whose
    prefix holds one finite term is that term, bit for bit; the others match the reference."""
    rng = np.random.default_rng(55)
    for axis in range(len(shape)):
        x = sparse_lanes(rng, shape, axis, "float64", reverse)
        if dtype_name.startswith("complex"):
            x = x + 1j * rng.uniform(-3.0, 3.0, x.shape)
        x = x.astype(dtype_name)
        got = xpops.logcumsumexp(x, axis=axis, exclusive=exclusive, reverse=reverse)
        assert_single_terms_exact(got, x, axis, exclusive, reverse)
        tol = 2e-5 if dtype_name in ("float32", "complex64") else 1e-10
        assert_scan_close(got, reference(x, axis, exclusive, reverse), tol)


@pytest.mark.parametrize("where", [0, 100, 899, 900, 901, 1299])
def test_numpy_single_term_in_one_long_lane(small_blocks, where):
    """One long lane whose only finite term sits before, at or after the helper thread's split:
    every output from it on is the term (the part after the split starts from it exactly)."""
    for value in (1e-20, -1e-10, 0.3, 250.0):
        x = np.full(1300, -inf)
        x[where] = value
        for reverse in (False, True):
            xs = x[::-1].copy() if reverse else x
            got = xpops.logcumsumexp(xs, reverse=reverse)
            assert_single_terms_exact(got, xs, 0, False, reverse)
            lead = got[::-1] if reverse else got
            assert (lead[where:] == value).all()
            assert (lead[:where] == -inf).all()
