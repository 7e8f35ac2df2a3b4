"""sparse.divide on SciPy (numpy backend) and cupyx (cupy backend) operands.

The reference is independent and brute force: the operands' entries are summed into dense
float64/complex128 NumPy arrays (duplicates summed, starting from -0.0 so that a single stored
-0.0 keeps its sign), the union of the stored positions is a boolean mask (explicitly stored
zeros count), and the expected result is the dense IEEE quotient on that mask. A result must
store exactly the mask's positions, in canonical order, with those values.
"""

import dataclasses
import itertools
import re

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import xpops

from ..conftest import _load, _selected_backends

nan, inf = np.nan, np.inf

SPARSE_BACKENDS = tuple(b for b in _selected_backends() if b in ("numpy", "cupy"))
FORMATS = ("coo", "csr")
CUPYX_DTYPES = ("float32", "float64", "complex64", "complex128")
RTOL = {"float32": 1e-6, "float64": 1e-15, "complex64": 1e-5, "complex128": 1e-13}


# ---- backends: building operands from host data and bringing results back -------------------


class Lib:
    """One sparse library: scipy.sparse (backend "numpy") or cupyx.scipy.sparse ("cupy")."""

    def __init__(self, name: str):
        self.name = name
        if name == "cupy":
            self.xp = _load("cupy")  # skips with "no CUDA device available"
            import cupyx.scipy.sparse as csp

            self.sparse = csp
            self.kinds = ("matrix",)  # cupyx has only *_matrix classes
        else:
            self.xp, self.sparse, self.kinds = np, sp, ("array", "matrix")

    def supports(self, dtype) -> bool:
        return self.name == "numpy" or np.dtype(dtype).name in CUPYX_DTYPES

    def require(self, *dtypes) -> None:
        for dtype in dtypes:
            if not self.supports(dtype):
                pytest.skip(f"cupyx.scipy.sparse has no {np.dtype(dtype).name}")

    def asarray(self, a):
        return self.xp.asarray(a)

    def host(self, a) -> np.ndarray:
        return a.get() if self.name == "cupy" else np.asarray(a)


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


@dataclasses.dataclass
class Entries:
    """Host COO entries in any order, duplicates allowed: values and one index array per axis."""

    data: np.ndarray
    coords: tuple[np.ndarray, ...]

    @classmethod
    def empty(cls, ndim=2):
        return cls(np.zeros(0), tuple(np.zeros(0, np.int64) for _ in range(ndim)))

    @classmethod
    def from_dense(cls, a):
        """The nonzeros of `a`, row-major."""
        coords = np.nonzero(a)
        return cls(a[coords], coords)

    def shuffled(self, rng):
        order = rng.permutation(self.data.size)
        return Entries(self.data[order], tuple(c[order] for c in self.coords))


def canonical(e: Entries, shape) -> Entries:
    """Duplicates summed (starting from -0.0, as the reference) and positions sorted."""
    if e.data.size == 0:
        return e
    keys = np.ravel_multi_index(e.coords, shape)
    uniq, inverse = np.unique(keys, return_inverse=True)
    zero = complex(-0.0, -0.0) if e.data.dtype.kind == "c" else -0.0
    data = np.full(uniq.size, zero, dtype=e.data.dtype)
    np.add.at(data, inverse, e.data)
    return Entries(data, np.unravel_index(uniq, shape))


def index_arrays(a) -> tuple:
    if a.format == "csr":
        return (a.indices, a.indptr)
    return tuple(a.coords) if hasattr(a, "coords") else (a.row, a.col)


def _cupyx(cls, arg, shape):
    try:
        return cls(arg, shape=shape)
    except ValueError as e:
        if 0 in shape:
            pytest.skip(f"cupyx cannot build a {cls.__name__} of shape {shape}: {e}")
        raise


def build(lib, fmt, e: Entries, shape, *, dtype="float64", kind=None, index_dtype=np.int32):
    """A `fmt` operand of `lib` holding entries `e` as given: CSR rows are grouped, but the
    order inside a row and the duplicates are kept (so the operand is not canonical unless `e`
    is)."""
    kind = kind or lib.kinds[0]
    data = e.data.astype(dtype)
    coords = tuple(c.astype(index_dtype) for c in e.coords)
    if fmt == "coo":
        if lib.name == "cupy":
            return _cupyx(
                lib.sparse.coo_matrix,
                (lib.asarray(data), tuple(lib.asarray(c) for c in coords)),
                shape,
            )
        a = (sp.coo_array if kind == "array" else sp.coo_matrix)((data, coords), shape=shape)
        if hasattr(a, "coords"):  # SciPy may narrow the index dtype: restore it
            a.coords = coords
        else:
            a.row, a.col = coords
        return a
    assert fmt == "csr"
    if len(shape) == 1:
        rows = np.zeros(data.size, np.int64)
        nrows = 1
    else:
        rows, nrows = coords[0], shape[0]
    order = np.argsort(rows, kind="stable")
    indices = coords[-1][order]
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=nrows))])
    indptr = indptr.astype(index_dtype)
    data = data[order]
    if lib.name == "cupy":
        return _cupyx(
            lib.sparse.csr_matrix,
            (lib.asarray(data), lib.asarray(indices), lib.asarray(indptr)),
            shape,
        )
    a = (sp.csr_array if kind == "array" else sp.csr_matrix)((data, indices, indptr), shape=shape)
    a.indices, a.indptr = indices, indptr  # SciPy may narrow the index dtype: restore it
    return a


# ---- the reference and the checks --------------------------------------------------------------


def wide_dtype(*dtypes):
    return np.complex128 if any(np.dtype(d).kind == "c" for d in dtypes) else np.float64


def dense(e: Entries, dtype, shape, wide):
    """(values, mask): the entries cast to the operand dtype, summed in `wide`."""
    vals = e.data.astype(dtype).astype(wide)
    zero = complex(-0.0, -0.0) if np.dtype(wide).kind == "c" else -0.0
    out = np.full(shape, zero, dtype=wide)  # -0.0 + v == v for every v, -0.0 included
    np.add.at(out, e.coords, vals)
    mask = np.zeros(shape, dtype=bool)
    mask[e.coords] = True
    out[~mask] = 0  # the missing side is +0
    return out, mask


def reference(x: Entries, dx, y, dy, shape):
    """(mask, expected): the union of the stored positions and the dense quotient there.

    `y` is Entries of dtype `dy`, or a host scalar (then `dy` is ignored and the mask is x's).
    """
    if isinstance(y, Entries):
        wide = wide_dtype(dx, dy)
        xv, xm = dense(x, dx, shape, wide)
        yv, ym = dense(y, dy, shape, wide)
        mask = xm | ym
    else:
        y = np.asarray(y)
        wide = wide_dtype(dx, y.dtype)
        xv, mask = dense(x, dx, shape, wide)
        yv = y.astype(wide)
    with np.errstate(all="ignore"):
        expected = xv / yv
    return mask, np.where(mask, expected, 0)


def host_entries(lib, a):
    """(data, coords) of a result on the host, checking the CSR structure on the way."""
    data = lib.host(a.data)
    if a.format != "csr":
        return data, tuple(lib.host(c) for c in index_arrays(a))
    indices, indptr = lib.host(a.indices), lib.host(a.indptr)
    nrows = a.shape[0] if len(a.shape) == 2 else 1
    assert indptr.shape == (nrows + 1,)
    assert indptr[0] == 0
    assert indptr[-1] == data.size == indices.size
    assert (np.diff(indptr) >= 0).all()
    if len(a.shape) == 1:
        return data, (indices,)
    return data, (np.repeat(np.arange(nrows), np.diff(indptr)), indices)


def assert_values(got, want, dtype):
    """`got` close to `want`, NaN where NaN, infinities and signed zeros exactly (real dtypes).

    For complex dtypes a division by zero has no single IEEE answer (NumPy gives inf+nanj,
    C99 Annex G an infinity of some phase): there only non-finiteness is required.
    """
    rtol = RTOL[np.dtype(dtype).name]
    assert got.shape == want.shape
    if np.dtype(dtype).kind == "c":
        finite = np.isfinite(want)
        np.testing.assert_allclose(got[finite], want[finite], rtol=rtol, atol=0)
        assert not np.isfinite(got[~finite]).any(), (got[~finite], want[~finite])
        return
    np.testing.assert_allclose(got, want, rtol=rtol, atol=0, equal_nan=True)
    zero = want == 0
    np.testing.assert_array_equal(np.signbit(got[zero]), np.signbit(want[zero]), "signs of zeros")


def assert_result(lib, out, x, mask, want, dtype):
    """`out` has x's library, format and container, canonical form, dtype `dtype`, stores
    exactly `mask` and holds `want` there."""
    dtype = np.dtype(dtype)
    assert out is not x
    assert type(out) is type(x)
    assert out.format == x.format
    assert tuple(out.shape) == mask.shape
    assert out.dtype == dtype
    assert out.has_canonical_format
    data, coords = host_entries(lib, out)
    assert data.dtype == dtype
    assert len(coords) == mask.ndim
    for c, n in zip(coords, mask.shape, strict=True):
        assert c.shape == data.shape
        assert ((c >= 0) & (c < n)).all(), "index out of bounds"
    if data.size:
        keys = np.ravel_multi_index(coords, mask.shape)
        assert (np.diff(keys) > 0).all(), "indices not sorted, or duplicates"
    stored = np.zeros(mask.shape, dtype=bool)
    stored[coords] = True
    missing, extra = int((mask & ~stored).sum()), int((stored & ~mask).sum())
    assert (missing, extra) == (0, 0), f"{missing} positions missing, {extra} extra"
    assert data.size == int(mask.sum())
    assert_values(data, want[coords], dtype)


def run_and_check(lib, fmt_x, x, dx, fmt_y, y, dy, shape, *, kx=None, ky=None, out_dtype=None):
    """Build the operands, divide, check against the reference; returns (out, xs, ys)."""
    xs = build(lib, fmt_x, x, shape, dtype=dx, kind=kx)
    ys = build(lib, fmt_y, y, shape, dtype=dy, kind=ky)
    out = xpops.sparse.divide(xs, ys)
    mask, want = reference(x, dx, y, dy, shape)
    assert_result(lib, out, xs, mask, want, out_dtype or (np.ones(1, dx) / np.ones(1, dy)).dtype)
    return out, xs, ys


def random_entries(rng, shape, n, *, zeros=0.0, integer=False, rows=None):
    """`n` entries at random positions (duplicates likely), dyadic values so that sums are
    exact; a fraction `zeros` of them explicit zeros of either sign."""
    if 0 in shape:
        return Entries.empty(len(shape))
    coords = tuple(rng.integers(0, d, n) for d in shape)
    if rows is not None:
        coords = (rng.choice(rows, n), *coords[1:])
    mag = rng.integers(1, 9, n).astype(np.float64)
    vals = mag * rng.choice([-1.0, 1.0], n) / (1 if integer else 4)
    z = rng.random(n) < zeros
    vals[z] = rng.choice([0.0, -0.0], int(z.sum()))
    return Entries(vals, coords)


# ---- the contract's example ----------------------------------------------------------------------


def test_docstring_example(lib):
    x = Entries.from_dense(np.array([[1.0, 0.0, 2.0], [0.0, 0.0, 3.0]]))
    y = Entries.from_dense(np.array([[4.0, 5.0, 0.0], [0.0, 0.0, 6.0]]))
    xs, ys = build(lib, "csr", x, (2, 3)), build(lib, "csr", y, (2, 3))
    out = xpops.sparse.divide(xs, ys)
    np.testing.assert_array_equal(lib.host(out.toarray()), [[0.25, 0.0, inf], [0.0, 0.0, 0.5]])
    assert out.nnz == 4
    np.testing.assert_array_equal(lib.host(out.indices), [0, 1, 2, 2])
    np.testing.assert_array_equal(
        lib.host(xpops.sparse.divide(xs, 2).toarray()), [[0.5, 0.0, 1.0], [0.0, 0.0, 1.5]]
    )


# ---- semantics: zeros, signs, special values -------------------------------------------------

MISSING = None

# (x_ij, y_ij, expected); MISSING: not stored on that side (both MISSING: not stored at all)
ZERO_CASES = [
    (1.0, 0.0, inf),
    (-1.0, 0.0, -inf),
    (1.0, -0.0, -inf),
    (-1.0, -0.0, inf),
    (0.0, 0.0, nan),
    (-0.0, -0.0, nan),
    (3.0, MISSING, inf),
    (-3.0, MISSING, -inf),
    (MISSING, 2.0, 0.0),
    (MISSING, -2.0, -0.0),
    (0.0, 2.0, 0.0),
    (-0.0, 2.0, -0.0),
    (0.0, -2.0, -0.0),
    (0.0, MISSING, nan),
    (-0.0, MISSING, nan),
    (MISSING, 0.0, nan),
    (MISSING, -0.0, nan),
    (MISSING, MISSING, MISSING),
    (3.0, 4.0, 0.75),
    (-3.0, 4.0, -0.75),
    (nan, 2.0, nan),
    (2.0, nan, nan),
    (nan, MISSING, nan),
    (MISSING, nan, nan),
    (inf, 2.0, inf),
    (-inf, 2.0, -inf),
    (inf, MISSING, inf),
    (inf, 0.0, inf),
    (inf, inf, nan),
    (2.0, inf, 0.0),
    (2.0, -inf, -0.0),
    (-2.0, inf, -0.0),
    (MISSING, inf, 0.0),
    (0.0, inf, 0.0),
]

# Every divisor finite and nonzero, no stored zero anywhere (the "values" path of the SciPy
# engine, which encodes x + i*y).
FINITE_NONZERO_CASES = [
    (nan, 2.0, nan),
    (2.0, nan, nan),
    (nan, MISSING, nan),
    (MISSING, nan, nan),
    (inf, 2.0, inf),
    (-inf, -2.0, inf),
    (inf, MISSING, inf),
    (-inf, MISSING, -inf),
    (3.0, MISSING, inf),
    (MISSING, 2.0, 0.0),
    (MISSING, -2.0, -0.0),
    (3.0, 4.0, 0.75),
    (MISSING, MISSING, MISSING),
]

# Infinite divisors without stored zeros (also the "values" path).
INF_DIVISOR_CASES = [
    (2.0, inf, 0.0),
    (2.0, -inf, -0.0),
    (-2.0, inf, -0.0),
    (MISSING, inf, 0.0),
    (MISSING, -inf, -0.0),
    (inf, inf, nan),
    (3.0, 4.0, 0.75),
]


def table_operands(cases, nrows=2):
    """The cases laid out over `nrows` rows (in reverse column order inside each row)."""
    ncols = -(-len(cases) // nrows)
    shape = (nrows, ncols)
    pos = [divmod(k, ncols) for k in range(len(cases))]
    pos = [(i, ncols - 1 - j) for i, j in pos]

    def side(k):
        kept = [(p, c[k]) for p, c in zip(pos, cases, strict=True) if c[k] is not MISSING]
        coords = tuple(np.array([p[a] for p, _ in kept], dtype=np.int64) for a in (0, 1))
        return Entries(np.array([v for _, v in kept], dtype=np.float64), coords)

    mask = np.zeros(shape, dtype=bool)
    want = np.zeros(shape)
    for p, c in zip(pos, cases, strict=True):
        if c[2] is not MISSING:
            mask[p], want[p] = True, c[2]
    return side(0), side(1), shape, mask, want


@pytest.mark.parametrize("fmt_y", FORMATS)
@pytest.mark.parametrize("fmt_x", FORMATS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("cases", ["zeros", "finite_nonzero"])
def test_zeros_and_special_values(lib, cases, dtype, fmt_x, fmt_y):
    x, y, shape, mask, want = table_operands(
        ZERO_CASES if cases == "zeros" else FINITE_NONZERO_CASES
    )
    xs = build(lib, fmt_x, x, shape, dtype=dtype)
    out = xpops.sparse.divide(xs, build(lib, fmt_y, y, shape, dtype=dtype))
    assert_result(lib, out, xs, mask, want, dtype)
    # the table is also what the brute-force reference gives
    ref_mask, ref_want = reference(x, dtype, y, dtype, shape)
    np.testing.assert_array_equal(ref_mask, mask)
    assert_values(ref_want[mask], want[mask], "float64")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_infinite_divisor_without_stored_zeros(lib, dtype):
    # x / ±inf is ±0 (the SciPy engine once encoded y as y * 1j, and inf * 1j is nan + inf j)
    x, y, shape, mask, want = table_operands(INF_DIVISOR_CASES, nrows=1)
    xs = build(lib, "csr", x, shape, dtype=dtype)
    out = xpops.sparse.divide(xs, build(lib, "csr", y, shape, dtype=dtype))
    assert_result(lib, out, xs, mask, want, dtype)


@pytest.mark.parametrize("zero_in_x", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_overflow_and_underflow(lib, dtype, zero_in_x):
    # overflowing and underflowing quotients are inf and 0, silently, as x / 0 is
    big, small = (1e30, 1e-30) if dtype == "float32" else (1e300, 1e-300)
    x = Entries(np.array([big, -big, small, 1.0]), (np.array([0, 0, 0, 1]), np.array([0, 1, 2, 0])))
    y = Entries(np.array([small, small, big]), (np.array([0, 0, 0]), np.array([0, 1, 2])))
    if zero_in_x:  # the "positions" path of the SciPy engine
        x = Entries(np.append(x.data, 0.0), (np.append(x.coords[0], 1), np.append(x.coords[1], 1)))
    shape = (2, 3)
    xs = build(lib, "csr", x, shape, dtype=dtype)
    out = xpops.sparse.divide(xs, build(lib, "csr", y, shape, dtype=dtype))
    mask, _ = reference(x, dtype, y, dtype, shape)
    want = np.zeros(shape)
    want[0] = [inf, -inf, 0.0]
    want[1, 0] = inf
    want[1, 1] = nan
    assert_result(lib, out, xs, mask, want, dtype)


# ---- patterns ------------------------------------------------------------------------------------


def _long_rows(rng):
    shape = (8, 5000)

    def rows(lengths):
        cols = [rng.choice(shape[1], n, replace=False) for n in lengths.values()]
        rws = [np.full(n, r) for r, n in lengths.items()]
        vals = rng.integers(1, 9, sum(lengths.values())) / 4.0
        return Entries(
            vals * rng.choice([-1.0, 1.0], vals.size), (np.concatenate(rws), np.concatenate(cols))
        )

    x = rows({1: 3000, 5: 4500, 7: 1})
    y = rows({1: 2000, 2: 4000, 6: 1, 7: 4999})
    return x.shuffled(rng), y.shuffled(rng), shape


def _pattern_case(name, rng):
    """(x entries, y entries, shape) for a named case."""
    if name == "random":
        shape = (7, 9)
        return random_entries(rng, shape, 30), random_entries(rng, shape, 30), shape
    if name == "duplicates_heavy":
        shape = (3, 3)
        return random_entries(rng, shape, 40), random_entries(rng, shape, 40), shape
    if name == "zeros_in_x":
        shape = (6, 7)
        return random_entries(rng, shape, 25, zeros=0.4), random_entries(rng, shape, 25), shape
    if name == "zeros_in_y":
        shape = (6, 7)
        return random_entries(rng, shape, 25), random_entries(rng, shape, 25, zeros=0.4), shape
    if name == "zeros_in_both":
        shape = (5, 5)
        x, y = random_entries(rng, shape, 20, zeros=0.5), random_entries(rng, shape, 20, zeros=0.5)
        return x, y, shape
    if name == "identical":
        shape = (6, 8)
        x = canonical(random_entries(rng, shape, 30), shape)
        y = Entries(rng.integers(1, 9, x.data.size) / 2.0, x.coords)
        return x.shuffled(rng), y.shuffled(rng), shape
    if name == "identical_with_duplicates":
        shape = (4, 4)
        x = random_entries(rng, shape, 20)
        return x, Entries(x.data[::-1].copy(), x.coords), shape
    if name == "disjoint":
        shape = (6, 8)
        keys = rng.permutation(48)
        xk, yk = keys[:20], keys[20:40]
        x = Entries(rng.integers(1, 9, 20) / 2.0, np.unravel_index(xk, shape))
        y = Entries(-rng.integers(1, 9, 20) / 2.0, np.unravel_index(yk, shape))
        return x, y, shape
    if name == "x_empty":
        shape = (5, 6)
        return Entries.empty(), random_entries(rng, shape, 12, zeros=0.3), shape
    if name == "y_empty":
        shape = (5, 6)
        return random_entries(rng, shape, 12, zeros=0.3), Entries.empty(), shape
    if name == "both_empty":
        return Entries.empty(), Entries.empty(), (4, 3)
    if name == "long_rows":
        return _long_rows(rng)
    if name == "only_last_row":
        shape = (9, 4)
        return (
            random_entries(rng, shape, 6, rows=[8]),
            random_entries(rng, shape, 6, rows=[8]),
            shape,
        )
    if name in ("zero_rows", "zero_cols", "zero_by_zero"):
        shape = {"zero_rows": (0, 5), "zero_cols": (4, 0), "zero_by_zero": (0, 0)}[name]
        return Entries.empty(), Entries.empty(), shape
    if name == "one_by_one":
        e = Entries(np.array([3.0, -1.0]), (np.array([0, 0]), np.array([0, 0])))
        return e, Entries(np.array([4.0]), (np.array([0]), np.array([0]))), (1, 1)
    if name == "row_vector":
        shape = (1, 11)
        return random_entries(rng, shape, 8), random_entries(rng, shape, 8), shape
    if name == "column_vector":
        shape = (11, 1)
        return random_entries(rng, shape, 8), random_entries(rng, shape, 8), shape
    raise AssertionError(name)


PATTERN_CASES = [
    "random",
    "duplicates_heavy",
    "zeros_in_x",
    "zeros_in_y",
    "zeros_in_both",
    "identical",
    "identical_with_duplicates",
    "disjoint",
    "x_empty",
    "y_empty",
    "both_empty",
    "long_rows",
    "only_last_row",
    "zero_rows",
    "zero_cols",
    "zero_by_zero",
    "one_by_one",
    "row_vector",
    "column_vector",
]


@pytest.mark.parametrize("canonical_input", [False, True], ids=["raw", "canonical"])
@pytest.mark.parametrize("fmt_y", FORMATS)
@pytest.mark.parametrize("fmt_x", FORMATS)
@pytest.mark.parametrize("case", PATTERN_CASES)
def test_patterns(lib, case, fmt_x, fmt_y, canonical_input):
    rng = np.random.default_rng(PATTERN_CASES.index(case))
    x, y, shape = _pattern_case(case, rng)
    if canonical_input:
        x, y = canonical(x, shape), canonical(y, shape)
    out, _, _ = run_and_check(lib, fmt_x, x, "float64", fmt_y, y, "float64", shape)
    if case == "both_empty" or 0 in shape:
        assert out.nnz == 0


def test_long_rows_next_to_empty_rows_structure(lib):
    x, y, shape = _long_rows(np.random.default_rng(0))
    out, _, _ = run_and_check(lib, "csr", x, "float64", "csr", y, "float64", shape)
    counts = np.diff(lib.host(out.indptr))
    union = [
        np.union1d(x.coords[1][x.coords[0] == r], y.coords[1][y.coords[0] == r]).size
        for r in range(8)
    ]
    np.testing.assert_array_equal(counts, union)
    assert counts[0] == counts[3] == counts[4] == 0


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


# ---- the SciPy engine's row blocks and its fallback ----------------------------------------------


@pytest.mark.parametrize("helper", ["none", "free", "busy"])
@pytest.mark.parametrize("direct", [True, False], ids=["csr_plus_csr", "public_add"])
@pytest.mark.parametrize("zeros", [0.0, 0.2], ids=["values", "positions"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "complex128"])
def test_scipy_engine_blocks(scipy_only, monkeypatch, direct, zeros, dtype, helper):
    """Many small row blocks (rows longer than a block, empty rows), through SciPy's compiled
    addition called directly and through its public operator, with the second half of the
    blocks on the helper thread (moved down after the first) or all on the calling thread (no
    helper, or one busy with another call)."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from xpops._lib._threads import Helper
    from xpops._numpy import sparse as engine

    monkeypatch.setattr(engine, "BLOCK_ENTRIES", 37)
    monkeypatch.setattr(engine, "HELPER_MIN_ENTRIES", 0)
    pool = ThreadPoolExecutor(1)
    shared = Helper(pool) if helper != "none" else None
    monkeypatch.setattr(engine, "helper_thread", lambda: shared)
    release = threading.Event()
    if helper == "busy":
        assert shared.try_submit(release.wait, 30) is not None
    if not direct:
        monkeypatch.setattr(engine, "_csr_plus_csr", None)
    rng = np.random.default_rng(7)
    shape = (40, 300)
    rows = np.concatenate([np.arange(0, 40, 3), np.full(20, 5)])  # row 5 is long
    x = random_entries(rng, shape, 400, zeros=zeros, rows=rows)
    y = random_entries(rng, shape, 350, zeros=zeros, rows=rows[::2])
    try:
        run_and_check(scipy_only, "csr", x, dtype, "coo", y, dtype, shape)
    finally:
        release.set()
        pool.shutdown()


# ---- N-D COO (SciPy) -----------------------------------------------------------------------------


def _scipy_has_nd_coo():
    try:
        sp.coo_array((np.ones(1), (np.zeros(1, int),) * 3), shape=(2, 2, 2))
    except Exception:
        return False
    return True


@pytest.mark.parametrize("shape", [(3, 4, 5), (2, 1, 3, 4), (2, 0, 3), (7,), (0,)])
@pytest.mark.parametrize("zeros", [0.0, 0.3])
def test_nd_coo(scipy_only, shape, zeros):
    if not _scipy_has_nd_coo():
        pytest.skip("this SciPy has no N-D COO")
    lib = scipy_only
    rng = np.random.default_rng(len(shape))
    x, y = random_entries(rng, shape, 30, zeros=zeros), random_entries(rng, shape, 25, zeros=zeros)
    run_and_check(lib, "coo", x, "float64", "coo", y, "float64", shape)
    xs = build(lib, "coo", x, shape)
    mask, want = reference(x, "float64", 0.5, None, shape)
    assert_result(lib, xpops.sparse.divide(xs, 0.5), xs, mask, want, "float64")
    mask, want = reference(x, "float64", 0, None, shape)
    assert_result(lib, xpops.sparse.divide(xs, 0), xs, mask, want, "float64")


def test_nd_coo_shape_mismatch(scipy_only):
    if not _scipy_has_nd_coo():
        pytest.skip("this SciPy has no N-D COO")
    x = sp.coo_array((np.ones(1), (np.zeros(1, int),) * 3), shape=(2, 3, 4))
    y = sp.coo_array((np.ones(1), (np.zeros(1, int),) * 3), shape=(2, 4, 3))
    with pytest.raises(ValueError, match=re.escape("(2, 3, 4) and (2, 4, 3)")):
        xpops.sparse.divide(x, y)


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


def _other_formats(lib):
    d = np.array([[1.0, 0.0], [0.0, 2.0]])
    if lib.name == "cupy":
        return {
            "csc": lib.sparse.csc_matrix(sp.csc_matrix(d)),
            "dia": lib.sparse.dia_matrix(
                (lib.asarray(np.array([[1.0, 2.0]])), lib.asarray(np.array([0], np.int32))),
                shape=(2, 2),
            ),
        }
    return {
        "csc": sp.csc_array(d),
        "csc_matrix": sp.csc_matrix(d),
        "bsr": sp.bsr_array(d),
        "lil": sp.lil_array(d),
        "dok": sp.dok_array(d),
        "dia": sp.dia_array(d),
        "dia_matrix": sp.dia_matrix(d),
    }


def test_unsupported_sparse_formats(lib):
    e = Entries.from_dense(np.array([[1.0, 0.0], [0.0, 2.0]]))
    good = build(lib, "csr", e, (2, 2))
    for name, other in _other_formats(lib).items():
        fmt = other.format
        with pytest.raises(TypeError, match=rf"`x` must be a COO or CSR .*format '{fmt}'"):
            xpops.sparse.divide(other, good)
        with pytest.raises(TypeError, match=r"`y` must be a COO or CSR .*or a scalar"):
            xpops.sparse.divide(good, other)
        assert name.startswith(fmt)


def test_non_sparse_operands(lib):
    e = Entries.from_dense(np.array([[1.0, 0.0], [0.0, 2.0]]))
    good = build(lib, "coo", e, (2, 2))
    dense_ = lib.asarray(np.array([[1.0, 2.0], [3.0, 4.0]]))
    for bad in (dense_, np.ones((2, 2)), [[1.0, 2.0], [3.0, 4.0]], None, 2.0, lib.asarray(2.0)):
        with pytest.raises(TypeError, match=r"`x` must be a COO or CSR sparse array or matrix"):
            xpops.sparse.divide(bad, good)
    for bad in (dense_, np.ones((2, 2)), np.ones(1), [[1.0, 2.0]], [2.0], None, "2", b"2"):
        with pytest.raises(TypeError, match=r"`y` must be a COO or CSR .*or a scalar, got"):
            xpops.sparse.divide(good, bad)
    with pytest.raises(TypeError, match=r"`y` must have a numeric dtype"):
        xpops.sparse.divide(good, np.str_("2"))


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


# ---- property test -------------------------------------------------------------------------------

PROPERTY_VALUES = [-4.0, -2.5, -1.0, -0.5, -0.0, 0.0, 0.5, 1.0, 3.0]


def _draw_entries(data, shape, complex_):
    if 0 in shape:
        return Entries.empty()
    cell = st.tuples(
        st.integers(0, shape[0] - 1),
        st.integers(0, shape[1] - 1),
        st.sampled_from(PROPERTY_VALUES),
        st.sampled_from(PROPERTY_VALUES),
    )
    items = data.draw(st.lists(cell, max_size=14))
    rows = np.array([t[0] for t in items], dtype=np.int64)
    cols = np.array([t[1] for t in items], dtype=np.int64)
    vals = np.array([t[2] for t in items], dtype=np.float64)
    if complex_:
        vals = vals + 1j * np.array([t[3] for t in items], dtype=np.float64)
    return Entries(vals, (rows, cols))


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_property_against_brute_force(lib, data):
    dtypes = (
        CUPYX_DTYPES
        if lib.name == "cupy"
        else ("int32", "int64", "float32", "float64", "complex64", "complex128")
    )
    shape = (data.draw(st.integers(0, 5), label="rows"), data.draw(st.integers(0, 5), label="cols"))
    dx, dy = data.draw(st.sampled_from(dtypes)), data.draw(st.sampled_from(dtypes))
    x = _draw_entries(data, shape, np.dtype(dx).kind == "c")
    y = _draw_entries(data, shape, np.dtype(dy).kind == "c")
    fx, fy = data.draw(st.sampled_from(FORMATS)), data.draw(st.sampled_from(FORMATS))
    kx, ky = data.draw(st.sampled_from(lib.kinds)), data.draw(st.sampled_from(lib.kinds))
    run_and_check(lib, fx, x, dx, fy, y, dy, shape, kx=kx, ky=ky)


# ---- GPU only: large skewed matrices, rows around block and warp sizes, poisoned memory -------


def _poison_pool(cupy, nbytes):
    """Leave NaN-filled blocks in CuPy's memory pool so unwritten outputs show up."""
    junk = cupy.full(nbytes // 4 + 1024, np.nan, dtype=np.float32)
    del junk


def _power_law_lengths(rng, nrows, ncols, total):
    """Row lengths with a heavy (Pareto) tail capped at ncols, about `total` in all; about 10%
    of the rows empty and a few full."""
    raw = rng.pareto(1.1, nrows)
    raw[rng.random(nrows) < 0.1] = 0
    raw[rng.integers(0, nrows, 3)] = np.inf  # full rows
    scale = total / raw[np.isfinite(raw)].sum()
    for _ in range(30):  # the cap makes the sum sublinear in the scale: iterate
        lengths = np.minimum(np.floor(raw * scale), ncols).astype(np.int64)
        scale *= total / lengths.sum()
    return lengths


def _device_keys(cupy, rs, lengths, ncols):
    """Sorted unique row-major keys: per row `lengths[i]` random columns, collisions dropped."""
    offsets = cupy.asarray(np.cumsum(lengths))
    total = int(lengths.sum())
    rows = cupy.searchsorted(offsets, cupy.arange(total, dtype=cupy.int64), side="right")
    cols = rs.randint(0, ncols, size=total, dtype=np.int64)
    return cupy.unique(rows.astype(cupy.int64) * ncols + cols)


def _device_values(cupy, rs, n, zero_fraction):
    vals = rs.uniform(0.5, 2.0, size=n, dtype=np.float64).astype(np.float32)
    vals *= cupy.where(rs.random_sample(n) < 0.5, -1, 1).astype(np.float32)
    vals[rs.random_sample(n) < zero_fraction] = 0
    return vals


def _row_reference(rows, cols, vals, i, ncols):
    """Dense row i (duplicates summed from -0.0) and its stored mask, from sorted-by-row COO."""
    lo, hi = np.searchsorted(rows, [i, i + 1])
    out = np.full(ncols, -0.0)
    np.add.at(out, cols[lo:hi], vals[lo:hi].astype(np.float64))
    mask = np.zeros(ncols, dtype=bool)
    mask[cols[lo:hi]] = True
    out[~mask] = 0.0
    return out, mask


# The fill kernel writes a tile's slots step by step up to SLOTS_CAP slots, lane by lane past
# it: the default, every tile lane by lane (0), and no tile lane by lane (long runs in a step).
SLOTS_CAPS = {"cap": None, "lanes": 0, "steps": 2**30}


@pytest.fixture(params=list(SLOTS_CAPS), ids=list(SLOTS_CAPS))
def slots_cap(request, monkeypatch):
    if request.param != "cap":
        from xpops._cupy import sparse as engine

        monkeypatch.setattr(engine, "SLOTS_CAP", SLOTS_CAPS[request.param])


@pytest.mark.parametrize("fmt", FORMATS)
def test_large_power_law_on_gpu(cupy_only, fmt, slots_cap):
    """1e5 x 1e5, about 1e7 entries each, power-law row lengths; the COO case is shuffled and
    has duplicates. Checked row by row on the host for a sample of rows."""
    cupy = cupy_only
    csp = Lib("cupy").sparse
    n = 10**5
    rng = np.random.default_rng(10)
    rs = cupy.random.RandomState(11)
    ops = []
    for k in range(2):
        keys = _device_keys(cupy, rs, _power_law_lengths(rng, n, n, 10**7), n)
        vals = _device_values(cupy, rs, keys.size, zero_fraction=1e-3 * k)
        if fmt == "coo":  # shuffled, and 1% of the entries once more (at most 2 per position)
            dup = rs.permutation(keys.size)[: keys.size // 100]
            keys = cupy.concatenate([keys, keys[dup]])
            vals = cupy.concatenate([vals, _device_values(cupy, rs, dup.size, 0)])
            perm = rs.permutation(keys.size)
            keys, vals = keys[perm], vals[perm]
        rows, cols = (keys // n).astype(cupy.int32), (keys % n).astype(cupy.int32)
        if fmt == "coo":
            a = csp.coo_matrix((vals, (rows, cols)), shape=(n, n))
        else:
            indptr = cupy.concatenate(
                [cupy.zeros(1, cupy.int32), cupy.cumsum(cupy.bincount(rows, minlength=n))]
            ).astype(cupy.int32)
            a = csp.csr_matrix((vals, cols, indptr), shape=(n, n))
        ops.append((a, keys))
    (x, xkeys), (y, ykeys) = ops
    union = int(cupy.unique(cupy.concatenate([xkeys, ykeys])).size)
    del xkeys, ykeys
    _poison_pool(cupy, 16 * union + 4 * n)
    out = xpops.sparse.divide(x, y)
    assert type(out) is type(x)
    assert out.format == fmt
    assert out.dtype == np.float32
    assert out.has_canonical_format
    assert int(out.nnz) == union
    if fmt == "csr":
        indptr = out.indptr.get()
        assert indptr[0] == 0
        assert indptr[-1] == union
        assert (np.diff(indptr) >= 0).all()
        out_rows = np.repeat(np.arange(n), np.diff(indptr))
        out_cols = out.indices.get()
    else:
        out_rows, out_cols = out.row.get(), out.col.get()
    okeys = out_rows.astype(np.int64) * n + out_cols
    assert (np.diff(okeys) > 0).all()
    assert ((out_cols >= 0) & (out_cols < n)).all()
    out_data = out.data.get()

    def host_coo(a):
        if fmt == "csr":
            ip = a.indptr.get()
            return np.repeat(np.arange(n), np.diff(ip)), a.indices.get(), a.data.get()
        r, c, v = a.row.get(), a.col.get(), a.data.get()
        order = np.argsort(r, kind="stable")
        return r[order], c[order], v[order]

    hx, hy = host_coo(x), host_coo(y)
    lengths = np.bincount(hx[0], minlength=n) + np.bincount(hy[0], minlength=n)
    sample = np.concatenate(
        [
            rng.choice(n, 300, replace=False),
            np.argsort(lengths)[-5:],
            np.flatnonzero(lengths == 0)[:5],
        ]
    )
    for i in sample:
        xr, xm = _row_reference(*hx, i, n)
        yr, ym = _row_reference(*hy, i, n)
        mask = xm | ym
        lo, hi = np.searchsorted(out_rows, [i, i + 1])
        np.testing.assert_array_equal(out_cols[lo:hi], np.flatnonzero(mask), f"row {i}")
        with np.errstate(all="ignore"):
            want = (xr / yr)[mask]
        assert_values(out_data[lo:hi], want, "float32")


BOUNDARY_LENGTHS = [0, 1, 31, 32, 33, 255, 256, 257, 1023, 1024, 1025, 5000]


def _boundary_operands(rng):
    """Rows for every pair of lengths (random overlap), plus identical and disjoint rows."""
    ncols = 12000  # even and odd columns hold 5000 each
    x_rows, y_rows = [], []
    for lx, ly in itertools.product(BOUNDARY_LENGTHS, repeat=2):
        x_rows.append(rng.choice(ncols, lx, replace=False))
        y_rows.append(rng.choice(ncols, ly, replace=False))
    for n in BOUNDARY_LENGTHS:
        cols = rng.choice(ncols, n, replace=False)
        x_rows.append(cols)
        y_rows.append(rng.permutation(cols))
        x_rows.append(2 * rng.choice(ncols // 2, n, replace=False))
        y_rows.append(2 * rng.choice(ncols // 2, n, replace=False) + 1)
    shape = (len(x_rows), ncols)

    def entries(rows):
        r = np.concatenate([np.full(len(c), i) for i, c in enumerate(rows)])
        c = np.concatenate(rows)
        vals = rng.integers(1, 9, c.size) * rng.choice([-1.0, 1.0], c.size) / 4
        vals[rng.random(c.size) < 0.01] = 0.0
        return Entries(vals, (r, c))

    return entries(x_rows), entries(y_rows), shape


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex128"])
@pytest.mark.parametrize("canonical_input", [False, True], ids=["raw", "canonical"])
@pytest.mark.parametrize("fmts", [("csr", "csr"), ("coo", "coo"), ("csr", "coo")])
def test_row_lengths_at_block_boundaries_on_gpu(cupy_only, fmts, canonical_input, dtype, slots_cap):
    lib = Lib("cupy")
    rng = np.random.default_rng(12)
    x, y, shape = _boundary_operands(rng)
    if canonical_input:
        x, y = canonical(x, shape), canonical(y, shape)
    if dtype.startswith("complex"):
        x.data = x.data + 1j * rng.integers(-3, 4, x.data.size)
        y.data = y.data - 1j * rng.integers(1, 4, y.data.size)
    xs = build(lib, fmts[0], x, shape, dtype=dtype)
    ys = build(lib, fmts[1], y, shape, dtype=dtype)
    _poison_pool(cupy_only, 64 * (x.data.size + y.data.size) + 8 * shape[0])
    out = xpops.sparse.divide(xs, ys)
    mask, want = reference(x, dtype, y, dtype, shape)
    assert_result(lib, out, xs, mask, want, dtype)


@pytest.mark.parametrize("fmt", FORMATS)
def test_scalar_divisor_poisoned_on_gpu(cupy_only, fmt):
    lib = Lib("cupy")
    rng = np.random.default_rng(13)
    x, _, shape = _boundary_operands(rng)
    xs = build(lib, fmt, x, shape, dtype="float32")
    for y in (3.0, 0.0, cupy_only.asarray(-2.0, dtype=np.float32)):
        _poison_pool(cupy_only, 32 * x.data.size + 8 * shape[0])
        out = xpops.sparse.divide(xs, y)
        y_host = y.get() if hasattr(y, "get") else y
        mask, want = reference(x, "float32", y_host, None, shape)
        assert_result(lib, out, xs, mask, want, "float32")
