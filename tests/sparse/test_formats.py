"""sparse.divide on every format of SciPy and cupyx (CSC merged column-wise; BSR, DOK, LIL and
DIA converted, giving CSR), mixed formats, and dense divisors, each against the brute-force
reference of `_support` (the stored pattern of an operand is what SciPy's or cupyx's own
``tocoo()`` keeps)."""

import itertools

import numpy as np
import pytest
import scipy.sparse as sp

import xpops

from ._support import (
    Entries,
    Lib,
    assert_result,
    assert_values,
    build,
    canonical,
    host_entries,
    index_arrays,
    random_entries,
    reference,
    result_format,
)

nan, inf = np.nan, np.inf

SCIPY_FORMATS = ("csr", "csc", "coo", "bsr", "dok", "lil", "dia")
CUPYX_FORMATS = ("csr", "csc", "coo", "dia")


def formats(lib):
    return SCIPY_FORMATS if lib.name == "numpy" else CUPYX_FORMATS


def make(lib, fmt, e: Entries, shape, *, dtype="float64", kind=None):
    """A `fmt` operand of `lib` holding entries `e`: CSR, CSC and COO as given (duplicates and
    order kept; CSC built as the transpose of a CSR of the transposed entries), the other
    formats converted by the library from a COO of them."""
    kind = kind or lib.kinds[0]
    if fmt in ("csr", "coo"):
        return build(lib, fmt, e, shape, dtype=dtype, kind=kind)
    if fmt == "csc":
        t = build(lib, "csr", Entries(e.data, e.coords[::-1]), shape[::-1], dtype=dtype, kind=kind)
        out = t.T
        assert out.format == "csc"
        return out
    if lib.name == "cupy":  # cupyx's DIA from SciPy's
        host = make(Lib("numpy"), fmt, e, shape, dtype=dtype, kind="matrix")
        return getattr(lib.sparse, f"{fmt}_matrix")(host)
    coo = build(lib, "coo", e, shape, dtype=dtype, kind=kind)
    if fmt == "bsr":
        return coo.tobsr(blocksize=(2, 2) if shape[0] % 2 == 0 and shape[1] % 2 == 0 else (1, 1))
    return coo.asformat(fmt)


def entries_of(lib, a) -> Entries:
    """The entries a library's own COO conversion keeps (the reference's view of `a`)."""
    c = a.tocoo()
    data = lib.host(c.data)
    coords = (lib.host(c.row), lib.host(c.col))
    return Entries(data, coords)


def check(lib, xs, ys, dtype="float64"):
    """divide(xs, ys) against the reference on the entries the library shows."""
    shape = tuple(xs.shape)
    x, y = entries_of(lib, xs), entries_of(lib, ys)
    out = xpops.sparse.divide(xs, ys)
    mask, want = reference(x, xs.dtype, y, ys.dtype, shape)
    assert_result(lib, out, xs, mask, want, dtype)
    return out


# ---- every format, every pairing ----------------------------------------------------------------


@pytest.mark.parametrize("canonical_input", [False, True], ids=["raw", "canonical"])
@pytest.mark.parametrize("fy", SCIPY_FORMATS)
@pytest.mark.parametrize("fx", SCIPY_FORMATS)
def test_format_pairs(lib, fx, fy, canonical_input):
    if fx not in formats(lib) or fy not in formats(lib):
        pytest.skip(f"cupyx has no {fx if fx not in formats(lib) else fy} format")
    rng = np.random.default_rng(SCIPY_FORMATS.index(fx) * 7 + SCIPY_FORMATS.index(fy))
    shape = (6, 8)
    x = random_entries(rng, shape, 30, zeros=0.2)
    y = random_entries(rng, shape, 30, zeros=0.2)
    if canonical_input:
        x, y = canonical(x, shape), canonical(y, shape)
    out = check(lib, make(lib, fx, x, shape), make(lib, fy, y, shape))
    assert out.format == result_format(make(lib, fx, x, shape))


@pytest.mark.parametrize("kind", ["array", "matrix"])
@pytest.mark.parametrize("fx", SCIPY_FORMATS)
def test_container_kind_of_converted_formats(scipy_only, fx, kind):
    """A BSR, DOK, LIL or DIA x gives a CSR of its container kind (*_array or *_matrix)."""
    rng = np.random.default_rng(0)
    shape = (4, 6)
    x, y = random_entries(rng, shape, 10), random_entries(rng, shape, 10)
    xs = make(scipy_only, fx, x, shape, kind=kind)
    out = check(scipy_only, xs, make(scipy_only, "csr", y, shape, kind=kind))
    assert isinstance(out, sp.sparray) == (kind == "array")
    assert out.format == result_format(xs)


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64", "complex128", "int64"])
@pytest.mark.parametrize("fy", ["csc", "csr", "coo"])
def test_csc_special_values_and_dtypes(lib, fy, dtype):
    """CSC x: zeros of either sign, NaN and infinities, every dtype; CSC result."""
    lib.require(dtype)
    shape = (3, 4)
    x = Entries(
        np.array([1.0, -1.0, 0.0, -0.0, inf, nan, 2.0, -0.0]),
        (np.array([0, 1, 2, 0, 1, 2, 0, 2]), np.array([0, 0, 0, 1, 1, 1, 2, 3])),
    )
    y = Entries(
        np.array([0.0, -0.0, 0.0, 5.0, 2.0, 1.0, -4.0]),
        (np.array([0, 1, 2, 0, 1, 2, 1]), np.array([0, 0, 0, 1, 1, 1, 3])),
    )
    if np.dtype(dtype).kind == "i":
        x = Entries(np.nan_to_num(x.data, nan=3.0, posinf=5.0), x.coords)
    xs, ys = make(lib, "csc", x, shape, dtype=dtype), make(lib, fy, y, shape, dtype=dtype)
    out_dtype = (np.ones(1, dtype) / np.ones(1, dtype)).dtype
    out = check(lib, xs, ys, out_dtype)
    assert out.format == "csc"


@pytest.mark.parametrize("ix", ["int32", "int64"])
def test_csc_index_dtype_and_canonical_flag(scipy_only, ix):
    rng = np.random.default_rng(5)
    shape = (7, 5)
    x, y = random_entries(rng, shape, 20), random_entries(rng, shape, 20)
    xt = build(scipy_only, "csr", Entries(x.data, x.coords[::-1]), shape[::-1], index_dtype=ix)
    xs = xt.T
    out = xpops.sparse.divide(xs, make(scipy_only, "csr", y, shape))
    assert out.format == "csc"
    assert out.has_canonical_format
    assert [a.dtype.name for a in index_arrays(out)] == [ix, ix]


@pytest.mark.parametrize("shape", [(0, 4), (4, 0), (0, 0), (1, 1)])
@pytest.mark.parametrize("fx", ["csc", "dia", "lil", "dok", "bsr"])
def test_zero_size_and_empty(lib, fx, shape):
    if fx not in formats(lib):
        pytest.skip(f"cupyx has no {fx} format")
    e = Entries.empty()
    xs, ys = make(lib, fx, e, shape), make(lib, "csr", e, shape)
    out = check(lib, xs, ys)
    assert out.nnz == 0


def test_dia_drops_its_stored_zeros(scipy_only):
    """A DIA operand's padding and zeros are not stored positions (SciPy's conversion drops
    them): the union holds x's nonzeros and y's pattern only."""
    xs = sp.dia_array((np.array([[1.0, 0.0, 3.0]]), np.array([0])), shape=(3, 3))
    ys = sp.csr_array((np.array([2.0]), np.array([0]), np.array([0, 1, 1, 1])), shape=(3, 3))
    out = xpops.sparse.divide(xs, ys)
    assert out.format == "csr"
    np.testing.assert_array_equal(out.toarray(), [[0.5, 0.0, 0.0], [0.0, 0.0, 0.0], [0, 0, inf]])
    assert out.nnz == 2


# ---- inputs left alone ----------------------------------------------------------------------


def _state(lib, a):
    c = a.tocoo()
    arrays = [lib.host(v) for v in (c.data, c.row, c.col)]
    if a.format in ("csr", "csc", "bsr"):
        arrays += [lib.host(a.data), *(lib.host(v) for v in index_arrays(a))]
    return a.format, tuple(a.shape), [v.tobytes() for v in arrays]


@pytest.mark.parametrize("divisor", ["sparse", "dense", "scalar"])
@pytest.mark.parametrize("fx", SCIPY_FORMATS)
def test_inputs_unchanged(lib, fx, divisor):
    if fx not in formats(lib):
        pytest.skip(f"cupyx has no {fx} format")
    rng = np.random.default_rng(9)
    shape = (4, 6)
    x, y = random_entries(rng, shape, 20, zeros=0.2), random_entries(rng, shape, 20)
    xs = make(lib, fx, x, shape)
    ys = {
        "sparse": make(lib, "csc", y, shape),
        "dense": lib.asarray(rng.integers(1, 5, shape) / 2.0),
        "scalar": 2.0,
    }[divisor]
    before = _state(lib, xs), (_state(lib, ys) if divisor == "sparse" else None)
    dense_before = lib.host(ys).copy() if divisor == "dense" else None
    out = xpops.sparse.divide(xs, ys)
    assert (_state(lib, xs), (_state(lib, ys) if divisor == "sparse" else None)) == before
    if divisor == "dense":
        np.testing.assert_array_equal(lib.host(ys), dense_before)
    out.data[...] = 7  # the result shares no memory with the inputs
    assert _state(lib, xs) == before[0]


# ---- dense divisors ----------------------------------------------------------------------------


def dense_reference(x: Entries, dx, yd: np.ndarray, shape):
    """(mask, expected): x's stored positions (duplicates summed) and x / y there."""
    c = canonical(Entries(x.data.astype(dx), x.coords), shape)
    mask = np.zeros(shape, dtype=bool)
    mask[c.coords] = True
    wide = np.complex128 if np.dtype(dx).kind == "c" or yd.dtype.kind == "c" else np.float64
    expected = np.zeros(shape, dtype=wide)
    with np.errstate(all="ignore"):
        expected[c.coords] = c.data.astype(wide) / yd[c.coords].astype(wide)
    return mask, expected


@pytest.mark.parametrize(("dx", "dy"), [("float64", "float64"), ("float32", "float32"),
                                        ("int32", "float32"), ("float32", "complex64"),
                                        ("complex128", "float64"), ("int64", "int64")])  # fmt: skip
@pytest.mark.parametrize("fx", SCIPY_FORMATS)
def test_dense_divisor(lib, fx, dx, dy):
    """Only x's stored positions are divided, by y's values there; x's format (CSR for the
    converted ones); zeros in y give ±inf or nan, y's values elsewhere are not read."""
    if fx not in formats(lib):
        pytest.skip(f"cupyx has no {fx} format")
    lib.require(dx, dy)
    rng = np.random.default_rng(11)
    shape = (5, 6)
    x = random_entries(rng, shape, 20, zeros=0.2, integer=True)
    yd = rng.integers(-3, 4, shape).astype(np.float64) / 2  # zeros of y included
    yd[0, 0] = -0.0
    if np.dtype(dy).kind == "c":
        yd = yd + 1j * rng.integers(-2, 3, shape)
    yd = yd.astype(dy)
    xs = make(lib, fx, x, shape, dtype=dx)
    out = xpops.sparse.divide(xs, lib.asarray(yd))
    shown = entries_of(lib, xs)
    mask, want = dense_reference(shown, xs.dtype, yd, shape)
    assert_result(lib, out, xs, mask, want, (np.ones(1, dx) / np.ones(1, dy)).dtype)


def test_dense_divisor_values_outside_x_not_read(lib):
    x = Entries(np.array([1.0, -2.0]), (np.array([0, 1]), np.array([1, 0])))
    yd = np.full((2, 2), nan)
    yd[0, 1], yd[1, 0] = 4.0, -0.0
    xs = build(lib, "csr", x, (2, 2))
    out = xpops.sparse.divide(xs, lib.asarray(yd))
    data, coords = host_entries(lib, out)
    np.testing.assert_array_equal(data, [0.25, inf])
    assert [c.tolist() for c in coords] == [[0, 1], [1, 0]]


@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
def test_dense_divisor_numpy_matrix_and_strides(scipy_only):
    rng = np.random.default_rng(2)
    shape = (4, 5)
    x = random_entries(rng, shape, 12)
    xs = build(scipy_only, "coo", x, shape)
    base = rng.integers(1, 5, (5, 8)).astype(np.float64)
    for yd in (np.asmatrix(base[:4, :5]), base.T[:4, :5], base[::-1][:4, ::-1][:, :5]):
        out = xpops.sparse.divide(xs, yd)
        mask, want = dense_reference(x, "float64", np.asarray(yd), shape)
        assert_result(scipy_only, out, xs, mask, want, "float64")


@pytest.mark.parametrize(("fx", "fy"), list(itertools.product(["csr", "coo"], repeat=2)))
def test_nd_and_1d_dense_divisor(scipy_only, fx, fy):
    """N-D COO and 1-D CSR x with a dense y of their shape."""
    rng = np.random.default_rng(3)
    for shape in ((3, 4, 5), (9,)):
        if fx == "csr" and len(shape) != 1:
            continue
        x = random_entries(rng, shape, 15, zeros=0.2)
        try:
            xs = build(scipy_only, fx, x, shape, kind="array")
        except (ValueError, TypeError):
            pytest.skip("this SciPy has no such array")
        yd = rng.integers(-2, 3, shape) / 2.0
        out = xpops.sparse.divide(xs, yd)
        mask, want = dense_reference(x, "float64", yd, shape)
        assert_result(scipy_only, out, xs, mask, want, "float64")
        assert_values(np.asarray(out.toarray())[mask], want[mask], "float64")


@pytest.mark.parametrize("kind", ["pydata", "torch", "scipy"])
def test_no_positions_and_many_leading_ones(kind):
    """A zero-length last dimension under more leading positions than the frames take in
    rows: an empty result of the shape."""
    shape = (2000, 3, 0)
    if kind == "pydata":
        pydata = pytest.importorskip("sparse")
        a = pydata.COO.from_numpy(np.zeros(shape))
    elif kind == "torch":
        torch = pytest.importorskip("torch")
        a = torch.sparse_coo_tensor(
            torch.zeros((3, 0), dtype=torch.int64), torch.zeros(0), shape, check_invariants=False
        )
    else:
        if not hasattr(sp, "coo_array"):
            pytest.skip("no coo_array")
        try:
            a = sp.coo_array((np.zeros(0), tuple(np.zeros(0, int) for _ in shape)), shape=shape)
        except (TypeError, ValueError):
            pytest.skip("this SciPy has no N-D COO arrays")
    out = xpops.sparse.divide(a, a)
    assert tuple(out.shape) == shape
    assert type(out) is type(a)
