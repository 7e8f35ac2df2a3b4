"""logcumsumexp on every backend, against float64 NumPy references."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import xpops

from ._support import backend_name, to_numpy


def reference(x, axis=None, exclusive=False, reverse=False):
    """float64 (or complex128) reference: sequential logaddexp along a moved, reversed view."""
    y = np.asarray(x)
    if axis is None:
        y = y.reshape(-1)
        axis = 0
    if y.ndim == 0:
        y = y.reshape(1)
    complex_ = np.iscomplexobj(y)
    y = np.moveaxis(y.astype(np.complex128 if complex_ else np.float64), axis, -1)
    if reverse:
        y = y[..., ::-1]
    if complex_:
        m = np.max(y.real, axis=-1, keepdims=True) if y.shape[-1] else 0
        r = np.log(np.cumsum(np.exp(y - m), axis=-1)) + m
    else:
        with np.errstate(invalid="ignore"):
            r = np.logaddexp.accumulate(y, axis=-1)
    if exclusive and r.shape[-1]:
        r = np.concatenate([np.full((*r.shape[:-1], 1), -np.inf), r[..., :-1]], axis=-1)
    if reverse:
        r = r[..., ::-1]
    return np.moveaxis(r, -1, axis)


def assert_scan_close(got, want, atol):
    got = to_numpy(got).astype(want.dtype)
    assert got.shape == want.shape
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    inf = np.isinf(want)
    np.testing.assert_array_equal(got[inf], want[inf])
    ok = np.isfinite(want)
    np.testing.assert_allclose(got[ok], want[ok], rtol=0, atol=atol)


def tolerance(dtype_name):
    return {"float16": 2e-2, "bfloat16": 1e-1, "float32": 2e-5, "float64": 1e-12}[dtype_name]


def test_docstring_examples():
    x = np.array([0.0, 0.0, np.log(2.0)])
    np.testing.assert_allclose(xpops.logcumsumexp(x), [0, np.log(2), np.log(4)], atol=1e-15)
    np.testing.assert_allclose(
        xpops.logcumsumexp(np.array([1000.0, 1000.0])), [1000, 1000 + np.log(2)], atol=1e-12
    )
    out = xpops.logcumsumexp(x, exclusive=True)
    assert out[0] == -np.inf
    np.testing.assert_allclose(out[1:], [0, np.log(2)], atol=1e-15)
    np.testing.assert_allclose(
        xpops.logcumsumexp(x, reverse=True), [np.log(4), np.log(3), np.log(2)], atol=1e-15
    )


@pytest.mark.parametrize("shape", [(7,), (5, 9), (3, 4, 6)])
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("dtype_name", ["float32", "float64"])
def test_every_axis_and_flag(xp, shape, exclusive, reverse, dtype_name):
    rng = np.random.default_rng(0)
    x_np = (rng.standard_normal(shape) * 10).astype(dtype_name)
    x = xp.asarray(x_np)
    for axis in [None, *range(-len(shape), len(shape))]:
        out = xpops.logcumsumexp(x, axis=axis, exclusive=exclusive, reverse=reverse)
        assert out.dtype == x.dtype
        want = reference(x_np, axis, exclusive, reverse)
        assert_scan_close(out, want, tolerance(dtype_name) * 10)


SPECIAL = [
    [0.0, np.nan, 1.0],
    [np.nan, 0.0, 1.0],
    [-np.inf, -np.inf],
    [-np.inf, 0.0, 1.0],
    [0.0, np.inf, 1.0],
    [0.0, np.inf, np.nan, 1.0],
    [1000.0, 1000.0],
    [-1000.0, -1000.0],
    [-1000.0, 1000.0],
    [1000.0, -1000.0, 1000.0],
    [-np.inf, 5.0, -np.inf],
]


@pytest.mark.parametrize("values", SPECIAL)
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_special_values(xp, values, exclusive, reverse):
    x_np = np.array(values)
    out = xpops.logcumsumexp(xp.asarray(x_np), exclusive=exclusive, reverse=reverse)
    assert_scan_close(out, reference(x_np, None, exclusive, reverse), 1e-12)


def test_special_values_table_exactly():
    nan, inf = np.nan, np.inf
    f = xpops.logcumsumexp
    np.testing.assert_array_equal(f(np.array([0.0, nan, 1.0]))[1:], [nan, nan])
    assert f(np.array([0.0, nan, 1.0]))[0] == 0.0
    np.testing.assert_array_equal(f(np.array([-inf, -inf])), [-inf, -inf])
    np.testing.assert_array_equal(f(np.array([0.0, inf, 1.0]))[1:], [inf, inf])
    np.testing.assert_array_equal(f(np.array([-inf, -inf]), exclusive=True), [-inf, -inf])


def test_complex(xp):
    if backend_name(xp) == "torch":
        pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    z = rng.standard_normal((4, 6)) + 1j * rng.standard_normal((4, 6)) * 3
    for axis in (None, 0, 1):
        out = xpops.logcumsumexp(xp.asarray(z), axis=axis)
        assert out.dtype == xp.complex128
        got = to_numpy(out)
        flat = z.reshape(-1) if axis is None else z
        want = np.log(np.cumsum(np.exp(flat), axis=0 if axis is None else axis))
        np.testing.assert_allclose(got, want, atol=1e-12)
        assert np.all(got.imag > -np.pi - 1e-12)
        assert np.all(got.imag <= np.pi + 1e-12)
    big = np.array([1000 + 1j, 1000 - 2j, 999.5 + 0.5j])
    got = to_numpy(xpops.logcumsumexp(xp.asarray(big)))
    want = np.log(np.cumsum(np.exp(big - 1000))) + 1000
    np.testing.assert_allclose(got, want, atol=1e-10)


def test_low_precision_accumulates_in_float32(xp):
    if not hasattr(xp, "float16"):
        pytest.skip(f"{backend_name(xp)} has no float16")
    rng = np.random.default_rng(2)
    x_np = (rng.standard_normal(5000) * 3).astype(np.float16)
    out = xpops.logcumsumexp(xp.asarray(x_np))
    assert out.dtype == xp.float16
    want = reference(x_np.astype(np.float64))
    got = to_numpy(out).astype(np.float64)
    # one float16 rounding of the result (spacing 2**-7 near 10), not 5000 of them
    np.testing.assert_allclose(got, want, atol=1.5e-2)
    if hasattr(xp, "bfloat16"):
        out = xpops.logcumsumexp(xp.asarray(x_np.astype(np.float32)), dtype=xp.bfloat16)
        assert out.dtype == xp.bfloat16


def test_integer_and_bool_inputs(xp):
    ints = xp.asarray(np.arange(6).reshape(2, 3))
    out = xpops.logcumsumexp(ints, axis=1)
    default = xp.float32 if backend_name(xp) == "torch" else xp.float64
    assert out.dtype == default
    assert_scan_close(out, reference(np.arange(6.0).reshape(2, 3), 1), 1e-6)
    out = xpops.logcumsumexp(xp.asarray(np.array([True, False, True])))
    assert out.dtype == default
    assert_scan_close(out, reference(np.array([1.0, 0.0, 1.0])), 1e-6)


def test_dtype_argument_casts_first(xp):
    x = xp.asarray(np.array([0.1, 0.2, 0.3]))
    out = xpops.logcumsumexp(x, dtype=xp.float32)
    assert out.dtype == xp.float32
    assert_scan_close(out, reference(np.array([0.1, 0.2, 0.3], dtype=np.float32)), 1e-6)
    out = xpops.logcumsumexp(xp.asarray(np.arange(3)), dtype=xp.complex128)
    assert out.dtype == xp.complex128


def test_zero_dimensional(xp):
    x = xp.asarray(2.5)
    out = xpops.logcumsumexp(x)
    assert out.shape == (1,)
    assert float(to_numpy(out)[0]) == 2.5
    for axis in (0, -1):
        out = xpops.logcumsumexp(x, axis=axis)
        assert out.shape == ()
        assert float(to_numpy(out)) == 2.5
    out = xpops.logcumsumexp(x, axis=0, exclusive=True)
    assert float(to_numpy(out)) == -np.inf


@pytest.mark.parametrize("shape", [(0,), (3, 0), (0, 4), (2, 0, 3)])
def test_empty(xp, shape):
    x = xp.asarray(np.zeros(shape))
    for axis in [None, *range(len(shape))]:
        out = xpops.logcumsumexp(x, axis=axis)
        assert out.shape == ((math.prod(shape),) if axis is None else shape)


def test_input_not_modified_and_same_namespace(xp):
    x_np = np.random.default_rng(4).standard_normal((6, 7))
    x = xp.asarray(x_np.copy())
    out = xpops.logcumsumexp(x, axis=1, reverse=True, exclusive=True)
    np.testing.assert_array_equal(to_numpy(x), x_np)
    assert type(out).__module__.split(".")[0] == backend_name(xp)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"axis": 2}, ValueError, "`axis` 2 is out of bounds for an array of dimension 2"),
        ({"axis": -3}, ValueError, "`axis` -3 is out of bounds for an array of dimension 2"),
        ({"axis": 1.0}, TypeError, "`axis` must be an integer or None, got float 1.0"),
        ({"axis": True}, TypeError, "`axis` must be an integer or None, got bool True"),
        ({"exclusive": 1}, TypeError, "`exclusive` must be a bool, got int 1"),
        ({"reverse": "yes"}, TypeError, "`reverse` must be a bool, got str 'yes'"),
    ],
)
def test_errors(xp, kwargs, error, message):
    with pytest.raises(error, match=message):
        xpops.logcumsumexp(xp.asarray(np.ones((2, 3))), **kwargs)


def test_dtype_errors(xp):
    with pytest.raises(TypeError, match="`dtype` must be a real floating or complex floating"):
        xpops.logcumsumexp(xp.asarray(np.ones(3)), dtype=xp.int64)


def test_not_an_array():
    with pytest.raises(TypeError, match=r"expected an array, got builtins\.list"):
        xpops.logcumsumexp([1.0, 2.0])
    with pytest.raises(TypeError, match="`x` must be an array, got float"):
        xpops.logcumsumexp(1.0)
    with pytest.raises(TypeError, match="`x` must have a numeric dtype"):
        xpops.logcumsumexp(np.array(["a", "b"]))


def test_accuracy_float64_long():
    """2**20 N(0, 10**2) values within 1e-13 of a long-double reference."""
    if np.finfo(np.longdouble).eps > 1e-18:
        pytest.skip("numpy.longdouble is not extended precision here")
    x = np.random.default_rng(5).normal(0, 10, 2**20)
    m = x.max()
    want = np.log(np.cumsum(np.exp(x.astype(np.longdouble) - m))) + m
    got = xpops.logcumsumexp(x)
    assert float(np.max(np.abs(got - want))) < 1e-13
    got32 = xpops.logcumsumexp(x.astype(np.float32))
    assert float(np.max(np.abs(got32.astype(np.longdouble) - want))) < 2e-5


@settings(max_examples=40, deadline=None)
@given(
    shape=st.lists(st.integers(0, 9), min_size=1, max_size=3),
    data=st.data(),
    exclusive=st.booleans(),
    reverse=st.booleans(),
)
def test_property_matches_reference(shape, data, exclusive, reverse):
    ndim = len(shape)
    axis = data.draw(st.one_of(st.none(), st.integers(-ndim, ndim - 1)))
    seed = data.draw(st.integers(0, 2**32 - 1))
    x = np.random.default_rng(seed).standard_normal(shape) * 30
    got = xpops.logcumsumexp(x, axis=axis, exclusive=exclusive, reverse=reverse)
    assert_scan_close(got, reference(x, axis, exclusive, reverse), 1e-11)


# ---- GPU-only: every kernel at its block and tile boundaries, poisoned memory, > 2**31 ---------


def _reference_along(x, axis, exclusive, reverse):
    """float64 reference by np.logaddexp.accumulate on a moved, possibly reversed view."""
    y = np.moveaxis(np.asarray(x, dtype=np.float64), axis, -1)
    if reverse:
        y = y[..., ::-1]
    with np.errstate(invalid="ignore"):
        r = np.logaddexp.accumulate(y, axis=-1)
    if exclusive:
        r = np.concatenate([np.full((*r.shape[:-1], 1), -np.inf), r[..., :-1]], axis=-1)
    if reverse:
        r = r[..., ::-1]
    return np.moveaxis(r, -1, axis)


def _assert_scan_equal(got, want, atol):
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    inf = np.isinf(want)
    np.testing.assert_array_equal(got[inf], want[inf])
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=0, atol=atol)


def _poison_pool(cupy, nbytes):
    """Leave NaN-filled blocks in CuPy's memory pool so unwritten outputs show up as NaN."""
    junk = cupy.full(nbytes // 4 + 1024, np.nan, dtype=np.float32)
    del junk


def _kernel_cases():
    from xpops._cupy import cumulative as cc

    for name in ("float32", "float64"):
        tile = cc.TILES_BLOCK * cc.TILE_ITEMS[name]
        chunk = cc.ROW_CHUNK[name]
        col = cc.COLUMN_ITEMS[name]
        yield (
            "tiles",
            name,
            [(1,), (tile - 1,), (tile,), (tile + 1,), (3 * tile + 5,), (3, 2 * tile + 1)],
        )
        yield (
            "rows",
            name,
            [
                (cc.ROWS_BLOCK - 1, chunk - 1),
                (cc.ROWS_BLOCK, chunk),
                (cc.ROWS_BLOCK + 1, chunk + 1),
                (5, 2 * chunk + 3),
                (300, 1),
            ],
        )
        yield (
            "columns",
            name,
            [
                (col - 1, 3),
                (col, cc.BLOCK),
                (col + 1, cc.BLOCK + 1),
                (2 * col + 3, 5, 7),
                (3, 1, 2),
            ],
        )


@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_kernels_at_boundaries(cupy_only, exclusive, reverse):
    from xpops._cupy import cumulative as cc

    cupy = cupy_only
    rng = np.random.default_rng(7)
    for kernel, name, shapes in _kernel_cases():
        atol = 1e-4 if name == "float32" else 1e-11  # results reach about 50
        for shape in shapes:
            axis = 0 if kernel == "columns" else len(shape) - 1
            x = (rng.standard_normal(shape) * 10).astype(name)
            _poison_pool(cupy, 2 * x.nbytes)
            got = cc.logcumsumexp(cupy.asarray(x), axis, exclusive, reverse, kernel=kernel)
            want = _reference_along(x, axis, exclusive, reverse)
            _assert_scan_equal(got.get(), want, atol)


@pytest.mark.parametrize("kernel", ["tiles", "rows", "columns"])
def test_kernels_special_values(cupy_only, kernel):
    """NaN, +-inf and jumps of 2000 anywhere in a run take the exact path; results stay exact."""
    from xpops._cupy import cumulative as cc

    cupy = cupy_only
    rng = np.random.default_rng(11)
    shape = (5000,) if kernel == "tiles" else ((200, 70) if kernel == "rows" else (70, 300))
    axis = 0 if kernel == "columns" else len(shape) - 1
    for name in ("float32", "float64"):
        x = (rng.standard_normal(shape) * 10).astype(name)
        flat = x.reshape(-1)
        idx = rng.permutation(flat.size)
        flat[idx[:40]] = -np.inf
        flat[idx[40:45]] = np.inf
        flat[idx[45:50]] = np.nan
        flat[idx[50:90]] = 1000.0
        flat[idx[90:130]] = -1000.0
        for exclusive in (False, True):
            for reverse in (False, True):
                got = cc.logcumsumexp(cupy.asarray(x), axis, exclusive, reverse, kernel=kernel)
                want = _reference_along(x, axis, exclusive, reverse)
                atol = 1e-4 if name == "float32" else 1e-11
                _assert_scan_equal(got.get(), want, atol)
        allneg = np.full(shape, -np.inf, dtype=name)
        got = cc.logcumsumexp(cupy.asarray(allneg), axis, False, False, kernel=kernel)
        assert bool(cupy.all(got == -np.inf))


def test_kernel_choice(cupy_only):
    from xpops._cupy.cumulative import choose_kernel

    assert choose_kernel((2**20,), 0) == "tiles"
    assert choose_kernel((2**20, 64), 1) == "rows"
    assert choose_kernel((64, 2**20), 1) == "tiles"
    assert choose_kernel((8192, 32768), 0) == "columns"
    assert choose_kernel((4, 5, 6), 1) == "columns"


def test_non_contiguous_input_on_gpu(cupy_only):
    cupy = cupy_only
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((300, 500)) * 10).astype(np.float32)
    xd = cupy.asarray(x)
    for view, ref_view, axis in [
        (xd[:, ::2], x[:, ::2], 1),
        (xd.T, x.T, 0),
        (xd.T, x.T, 1),
        (xd[::3, 1:], x[::3, 1:], 0),
    ]:
        before = view.copy()
        got = xpops.logcumsumexp(view, axis=axis)
        _assert_scan_equal(got.get(), _reference_along(ref_view, axis, False, False), 1e-4)
        assert bool(cupy.array_equal(view, before))


def test_long_float32_scan_on_gpu(cupy_only):
    """2**29 + 7 float32 elements (more than 2**31 bytes) against a float64 cumsum on the GPU."""
    cupy = cupy_only
    n = 2**29 + 7
    x = cupy.random.default_rng(5).standard_normal(n, dtype=np.float32)
    got = xpops.logcumsumexp(x)
    want = cupy.log(cupy.cumsum(cupy.exp(x.astype(np.float64))))
    err = float(cupy.max(cupy.abs(got.astype(np.float64) - want)))
    assert err < 1e-4


@pytest.mark.slow
def test_more_than_2_31_elements_float16(cupy_only):
    """2**31 + 1000 float16 elements (accumulated in float32), checked chunk by chunk."""
    cupy = cupy_only
    n = 2**31 + 1000
    cupy.get_default_memory_pool().free_all_blocks()  # what earlier tests left cached
    free, _ = cupy.cuda.runtime.memGetInfo()
    if free < 40 * 2**30:
        pytest.skip("not enough GPU memory")
    x = cupy.random.default_rng(9).standard_normal(n, dtype=np.float32).astype(np.float16)
    got = xpops.logcumsumexp(x)
    assert got.dtype == np.float16
    assert got.shape == (n,)
    carry = 0.0
    step = 2**28
    for start in range(0, n, step):
        seg = x[start : start + step].astype(np.float64)
        sums = cupy.cumsum(cupy.exp(seg)) + carry
        carry = float(sums[-1])
        err = float(
            cupy.max(cupy.abs(got[start : start + step].astype(np.float64) - cupy.log(sums)))
        )
        assert err < 0.02, start  # float16 spacing at 22 is 0.0156
    del x, got
    cupy.get_default_memory_pool().free_all_blocks()
