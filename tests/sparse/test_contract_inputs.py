"""sparse.divide's contract on SciPy (numpy backend) and cupyx (cupy backend) operands, the
inputs it takes: dtypes, containers, index dtypes, scalar divisors, inputs left alone, errors,
each against the brute-force reference of `_support` (values and patterns: `test_contract`)."""

import itertools
import re

import numpy as np
import pytest
import scipy.sparse as sp

import xpops

from ._support import (
    FORMATS,
    Entries,
    assert_result,
    build,
    canonical,
    dense,
    index_arrays,
    random_entries,
    reference,
    run_and_check,
    wide_dtype,
)

nan, inf = np.nan, np.inf


# ---- dtypes, containers, index dtypes ------------------------------------------------------------

DTYPE_PAIRS = [
    ("int32", "int32", "float64"),
    ("int64", "int64", "float64"),
    ("int32", "int64", "float64"),
    ("int8", "uint16", "float64"),
    ("bool", "bool", "float64"),
    ("bool", "float32", "float32"),
    ("int32", "float32", "float64"),
    ("float32", "float32", "float32"),
    ("float64", "float64", "float64"),
    ("float32", "float64", "float64"),
    ("float64", "float32", "float64"),
    ("complex64", "complex64", "complex64"),
    ("complex128", "complex128", "complex128"),
    ("float32", "complex64", "complex64"),
    ("complex64", "float64", "complex128"),
    ("int64", "complex128", "complex128"),
]


@pytest.mark.parametrize("zeros", [0.0, 0.3], ids=["no_zeros", "zeros"])
@pytest.mark.parametrize("fmts", [("csr", "csr"), ("coo", "coo"), ("coo", "csr")])
@pytest.mark.parametrize(("dx", "dy", "dout"), DTYPE_PAIRS)
def test_dtypes(lib, dx, dy, dout, fmts, zeros):
    lib.require(dx, dy)
    rng = np.random.default_rng(DTYPE_PAIRS.index((dx, dy, dout)))
    shape = (6, 7)
    x = random_entries(rng, shape, 25, zeros=zeros, integer=True)
    y = random_entries(rng, shape, 25, zeros=zeros, integer=True)
    if "bool" in (dx, dy):  # bool sums of duplicates saturate: keep single entries
        x, y = canonical(x, shape), canonical(y, shape)
    for e, d in ((x, dx), (y, dy)):
        if np.dtype(d).kind == "u":
            e.data = np.abs(e.data)
        if np.dtype(d).kind == "c":
            e.data = e.data + 1j * rng.integers(-4, 5, e.data.size) / 2
    run_and_check(lib, fmts[0], x, dx, fmts[1], y, dy, shape, out_dtype=dout)


@pytest.mark.parametrize("fmts", [("csr", "csr"), ("coo", "coo"), ("csr", "coo"), ("coo", "csr")])
@pytest.mark.parametrize(("kx", "ky"), list(itertools.product(["array", "matrix"], repeat=2)))
def test_container_kinds_and_mixed_formats(lib, kx, ky, fmts):
    """The result takes x's format and container kind (*_array or *_matrix)."""
    if lib.name == "cupy" and "array" in (kx, ky):
        pytest.skip("cupyx has only *_matrix classes")
    rng = np.random.default_rng(1)
    shape = (5, 6)
    x, y = random_entries(rng, shape, 15, zeros=0.2), random_entries(rng, shape, 15)
    out, _, _ = run_and_check(
        lib, fmts[0], x, "float64", fmts[1], y, "float64", shape, kx=kx, ky=ky
    )
    if lib.name == "numpy":
        assert isinstance(out, sp.spmatrix) == (kx == "matrix")
        assert isinstance(out, sp.sparray) == (kx == "array")


@pytest.mark.parametrize("fmt_y", FORMATS)
@pytest.mark.parametrize("fmt_x", FORMATS)
@pytest.mark.parametrize(
    ("ix", "iy", "iout"),
    [
        ("int32", "int32", "int32"),
        ("int64", "int32", "int64"),
        ("int32", "int64", "int64"),
        ("int64", "int64", "int64"),
    ],
)
@pytest.mark.parametrize("empty", [False, True])
def test_index_dtype(lib, ix, iy, iout, fmt_x, fmt_y, empty):
    if lib.name == "cupy" and "int64" in (ix, iy):
        pytest.skip("cupyx indexes with int32 only")
    rng = np.random.default_rng(2)
    shape = (5, 6)
    x = Entries.empty() if empty else random_entries(rng, shape, 12)
    y = Entries.empty() if empty else random_entries(rng, shape, 12)
    xs = build(lib, fmt_x, x, shape, index_dtype=ix)
    ys = build(lib, fmt_y, y, shape, index_dtype=iy)
    assert all(a.dtype == ix for a in index_arrays(xs))
    assert all(a.dtype == iy for a in index_arrays(ys))
    out = xpops.sparse.divide(xs, ys)
    assert [a.dtype.name for a in index_arrays(out)] == [iout] * len(index_arrays(out))
    mask, want = reference(x, "float64", y, "float64", shape)
    assert_result(lib, out, xs, mask, want, "float64")
    out = xpops.sparse.divide(xs, 2.0)
    assert [a.dtype.name for a in index_arrays(out)] == [ix] * len(index_arrays(out))


# ---- scalar divisors -----------------------------------------------------------------------------

SCALARS = {
    "int": lambda lib: 3,
    "float": lambda lib: 2.5,
    "negative_float": lambda lib: -0.5,
    "complex": lambda lib: 1 - 2j,
    "bool": lambda lib: True,
    "np_float32": lambda lib: np.float32(4),
    "np_float64": lambda lib: np.float64(-4),
    "np_int64": lambda lib: np.int64(3),
    "np_complex64": lambda lib: np.complex64(2j),
    "zero_int": lambda lib: 0,
    "zero_float": lambda lib: 0.0,
    "negative_zero": lambda lib: -0.0,
    "np_zero": lambda lib: np.float64(0.0),
    "nan": lambda lib: nan,
    "negative_inf": lambda lib: -inf,
    "0d_array": lambda lib: lib.asarray(2.0),
    "0d_int_array": lambda lib: lib.asarray(4),
    "0d_zero_array": lambda lib: lib.asarray(0.0),
}


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", ["int32", "float32", "float64", "complex64"])
@pytest.mark.parametrize("scalar", list(SCALARS))
def test_scalar_divisor(lib, scalar, dtype, fmt):
    """Only x's stored values are divided (its pattern kept, zeros included: 0/0 is nan)."""
    lib.require(dtype)
    rng = np.random.default_rng(3)
    shape = (5, 7)
    x = random_entries(rng, shape, 20, zeros=0.3, integer=True)
    if dtype.startswith("complex"):
        x.data = x.data + 1j * rng.integers(-3, 4, x.data.size)
    y = SCALARS[scalar](lib)
    xs = build(lib, fmt, x, shape, dtype=dtype)
    out = xpops.sparse.divide(xs, y)
    y_host = y.get() if lib.name == "cupy" and hasattr(y, "get") else y
    with np.errstate(all="ignore"):  # NumPy's true-division dtype on every backend
        expected_dtype = (np.ones(1, dtype=dtype) / y_host).dtype
    mask, want = reference(x, dtype, y_host, None, shape)
    np.testing.assert_array_equal(mask, dense(x, dtype, shape, wide_dtype(dtype))[1])
    assert_result(lib, out, xs, mask, want, expected_dtype)


def test_scalar_dtype_rules(scipy_only):
    e = Entries.from_dense(np.array([[1.0, 0.0, 2.0]]))
    x = build(scipy_only, "csr", e, (1, 3))
    x32 = build(scipy_only, "csr", e, (1, 3), dtype="float32")
    xi = build(scipy_only, "csr", e, (1, 3), dtype="int32")
    assert xpops.sparse.divide(x32, 2.0).dtype == np.float32  # Python scalars are weak
    assert xpops.sparse.divide(x32, 2).dtype == np.float32
    assert xpops.sparse.divide(x32, np.float64(2)).dtype == np.float64
    assert xpops.sparse.divide(x32, 1j).dtype == np.complex64
    assert xpops.sparse.divide(xi, 2).dtype == np.float64
    assert xpops.sparse.divide(x, np.float32(2)).dtype == np.float64


# ---- inputs unchanged, fresh results -------------------------------------------------------------


def snapshot(lib, a):
    arrays = [lib.host(arr) for arr in (a.data, *index_arrays(a))]
    return (a.format, type(a), tuple(a.shape), [(h.dtype, h.shape, h.tobytes()) for h in arrays])


def _arrays(a):
    return [a.data, *index_arrays(a)]


def _shares(lib, a, b):
    if a.size == 0 or b.size == 0:
        return False
    if lib.name == "numpy":
        return np.shares_memory(a, b)
    lo_a, lo_b = a.data.ptr, b.data.ptr
    return lo_a < lo_b + b.nbytes and lo_b < lo_a + a.nbytes


@pytest.mark.parametrize("canonical_input", [False, True], ids=["raw", "canonical"])
@pytest.mark.parametrize("divisor", ["sparse", "scalar"])
@pytest.mark.parametrize("fmt_y", FORMATS)
@pytest.mark.parametrize("fmt_x", FORMATS)
@pytest.mark.parametrize("dtype", ["float64", "float32", "int64"])
def test_inputs_unchanged_and_result_fresh(lib, dtype, fmt_x, fmt_y, divisor, canonical_input):
    lib.require(dtype)
    if divisor == "scalar" and fmt_y == "csr":
        pytest.skip("one scalar case per x format is enough")
    rng = np.random.default_rng(4)
    shape = (6, 8)
    x, y = random_entries(rng, shape, 40, zeros=0.2), random_entries(rng, shape, 40, zeros=0.2)
    if canonical_input:
        x, y = canonical(x, shape), canonical(y, shape)
    xs = build(lib, fmt_x, x, shape, dtype=dtype)
    ys = build(lib, fmt_y, y, shape, dtype=dtype) if divisor == "sparse" else 1.0
    before = [snapshot(lib, xs), *([snapshot(lib, ys)] if divisor == "sparse" else [])]
    out = xpops.sparse.divide(xs, ys)
    after = [snapshot(lib, xs), *([snapshot(lib, ys)] if divisor == "sparse" else [])]
    assert before == after
    assert out is not xs
    assert out is not ys
    inputs = _arrays(xs) + (_arrays(ys) if divisor == "sparse" else [])
    for a in _arrays(out):
        for b in inputs:
            assert not _shares(lib, a, b)
    # and modifying the result leaves the inputs alone
    out.data[...] = 7
    assert [snapshot(lib, xs)] == before[:1]


# ---- errors --------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmts", [("csr", "csr"), ("coo", "csr"), ("csr", "coo")])
def test_shape_mismatch(lib, fmts):
    e = Entries(np.array([1.0]), (np.array([0]), np.array([0])))
    x, y = build(lib, fmts[0], e, (3, 4)), build(lib, fmts[1], e, (4, 3))
    with pytest.raises(ValueError, match=re.escape("got (3, 4) and (4, 3)")):
        xpops.sparse.divide(x, y)
    with pytest.raises(ValueError, match=re.escape("got (3, 4) and (3, 5)")):
        xpops.sparse.divide(x, build(lib, fmts[1], e, (3, 5)))
    with pytest.raises(ValueError, match=re.escape("got (0, 4) and (0, 3)")):
        xpops.sparse.divide(
            build(lib, fmts[0], Entries.empty(), (0, 4)),
            build(lib, fmts[1], Entries.empty(), (0, 3)),
        )


def test_non_sparse_operands(lib):
    e = Entries.from_dense(np.array([[1.0, 0.0], [0.0, 2.0]]))
    good = build(lib, "coo", e, (2, 2))
    dense_ = lib.asarray(np.array([[1.0, 2.0], [3.0, 4.0]]))
    for bad in (dense_, np.ones((2, 2)), [[1.0, 2.0], [3.0, 4.0]], None, 2.0, lib.asarray(2.0)):
        with pytest.raises(TypeError, match=r"`x` must be a sparse array or matrix of scipy"):
            xpops.sparse.divide(bad, good)
    for bad in ([[1.0, 2.0]], [2.0], None, "2", b"2", {"a": 1}):
        with pytest.raises(TypeError, match=r"`y` must be a sparse array .*or a scalar, got"):
            xpops.sparse.divide(good, bad)
    with pytest.raises(TypeError, match=r"`y` must have a numeric dtype"):
        xpops.sparse.divide(good, np.str_("2"))
    if lib.name == "numpy":  # (CuPy has no string dtype)
        with pytest.raises(TypeError, match=r"`y` must have a numeric dtype"):
            xpops.sparse.divide(good, np.array([["a", "b"], ["c", "d"]]))
    else:  # a NumPy array is no dense divisor of a cupyx matrix
        with pytest.raises(TypeError, match=r"a CuPy array of x's shape, or a scalar, got"):
            xpops.sparse.divide(good, np.ones((2, 2)))


@pytest.mark.parametrize("shape", [(1, 2), (2, 1), (2,), (1,), (2, 2, 1), (3, 2)])
def test_dense_divisor_not_broadcast(lib, shape):
    good = build(lib, "csr", Entries.from_dense(np.array([[1.0, 0.0], [0.0, 2.0]])), (2, 2))
    with pytest.raises(ValueError, match=re.escape(f"same shape, got (2, 2) and {shape}; a dense")):
        xpops.sparse.divide(good, lib.asarray(np.ones(shape)))


def test_mixing_scipy_and_cupyx(cupy_only):
    import cupyx.scipy.sparse as csp

    d = np.array([[1.0, 0.0], [0.0, 2.0]])
    for fx, fy in itertools.product(
        [sp.csr_array, sp.coo_matrix], [csp.csr_matrix, csp.coo_matrix]
    ):
        host, device = fx(d), fy(sp.csr_matrix(d) if fy is csp.csr_matrix else sp.coo_matrix(d))
        with pytest.raises(TypeError, match="same library"):
            xpops.sparse.divide(host, device)
        with pytest.raises(TypeError, match="same library"):
            xpops.sparse.divide(device, host)
    with pytest.raises(TypeError, match=r"`y` must be"):
        xpops.sparse.divide(sp.csr_array(d), cupy_only.asarray(2.0))
