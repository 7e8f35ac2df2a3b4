"""Shared by the tests of sparse.divide: building SciPy and cupyx operands from host entries,
the brute-force reference and the checks of a result.

The reference is independent and brute force: the operands' entries are summed into dense
float64/complex128 NumPy arrays (duplicates summed, starting from -0.0 so that a single stored
-0.0 keeps its sign), the union of the stored positions is a boolean mask (explicitly stored
zeros count), and the expected result is the dense IEEE quotient on that mask. A result must
store exactly the mask's positions, in canonical order, with those values.
"""

import dataclasses

import numpy as np
import pytest
import scipy.sparse as sp

import xpops

from ..conftest import _load, _selected_backends

SPARSE_BACKENDS = tuple(b for b in _selected_backends() if b in ("numpy", "cupy"))
FORMATS = ("coo", "csr")
CUPYX_DTYPES = ("float32", "float64", "complex64", "complex128")
RTOL = {"float16": 1e-3, "float32": 1e-6, "float64": 1e-15, "complex64": 1e-5, "complex128": 1e-13}


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
    if a.format in ("csr", "csc", "bsr"):
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
    """(data, coords) of a result on the host, in stored order, checking the CSR (CSC)
    structure on the way."""
    data = lib.host(a.data)
    if a.format not in ("csr", "csc"):
        return data, tuple(lib.host(c) for c in index_arrays(a))
    indices, indptr = lib.host(a.indices), lib.host(a.indptr)
    nmajor = (a.shape[0] if a.format == "csr" else a.shape[1]) if len(a.shape) == 2 else 1
    assert indptr.shape == (nmajor + 1,)
    assert indptr[0] == 0
    assert indptr[-1] == data.size == indices.size
    assert (np.diff(indptr) >= 0).all()
    if len(a.shape) == 1:
        return data, (indices,)
    major = np.repeat(np.arange(nmajor), np.diff(indptr))
    return data, ((major, indices) if a.format == "csr" else (indices, major))


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


def result_format(x) -> str:
    """The format of ``divide(x, y)``: x's for CSR, CSC and COO, else CSR."""
    return x.format if x.format in ("csr", "csc", "coo") else "csr"


def assert_result(lib, out, x, mask, want, dtype):
    """`out` has x's library, format (`result_format`) and container kind, canonical form,
    dtype `dtype`, stores exactly `mask` and holds `want` there."""
    dtype = np.dtype(dtype)
    assert out is not x
    assert out.format == result_format(x)
    if out.format == x.format:
        assert type(out) is type(x)
    else:  # the container kind of x (cupyx has only *_matrix classes)
        assert type(out).__name__.endswith(type(x).__name__[3:])
    assert tuple(out.shape) == mask.shape
    assert out.dtype == dtype
    assert out.has_canonical_format
    data, coords = host_entries(lib, out)
    assert data.dtype == dtype
    assert len(coords) == mask.ndim
    for c, n in zip(coords, mask.shape, strict=True):
        assert c.shape == data.shape
        assert ((c >= 0) & (c < n)).all(), "index out of bounds"
    if data.size:  # sorted row-major (column-major for CSC), no duplicates
        csc = out.format == "csc"
        keys = np.ravel_multi_index(
            coords[::-1] if csc else coords, mask.shape[::-1] if csc else mask.shape
        )
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
