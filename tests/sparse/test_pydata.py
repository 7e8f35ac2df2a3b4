"""sparse.divide on pydata ``sparse`` arrays (COO and GCXS of any number of dimensions), against
the brute-force reference of `_support`: the union of the stored patterns, IEEE values, x's
class (and compressed axes) with fill_value 0, canonical."""

import itertools
import re

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

import xpops

from ._support import (
    Entries,
    assert_values,
    canonical,
    random_entries,
    reference,
)

sparse = pytest.importorskip("sparse")

nan, inf = np.nan, np.inf


def make(fmt, e: Entries, shape, *, dtype="float64", axes=None, raw=False):
    """A pydata operand holding entries `e`. COO: pydata's constructor sums duplicates and
    sorts, unless `raw` (then the entries are kept as given, pydata told they are canonical:
    the engine must not trust that). GCXS: from the canonical COO, compressed along `axes`
    (pydata's default for None); `raw` reverses the indices within each row."""
    data = e.data.astype(dtype)
    coords = np.array(e.coords, dtype=np.intp).reshape(len(shape), -1)
    if raw and fmt == "coo":
        return sparse.COO(coords, data, shape=shape, has_duplicates=False, sorted=True)
    coo = sparse.COO(coords, data, shape=shape)
    if fmt == "coo":
        return coo
    g = sparse.GCXS.from_coo(coo, compressed_axes=axes)
    if raw:  # each row's entries in reverse order: unsorted, still the same array
        indptr = np.asarray(g.indptr)
        if indptr.size == 0:  # a 1-D GCXS of pydata before 0.16: one row, no pointers
            indptr = np.array([0, g.nnz])
        rows = range(len(indptr) - 1)
        order = np.concatenate(
            [np.arange(indptr[r + 1] - 1, indptr[r] - 1, -1) for r in rows] or [np.zeros(0, int)]
        ).astype(np.intp)
        g = sparse.GCXS(
            (g.data[order], g.indices[order], g.indptr),
            shape=shape,
            compressed_axes=g.compressed_axes,
        )
    return g


def positions(a) -> tuple[np.ndarray, np.ndarray]:
    """(data, coords) of a result in stored order, checking its canonical form."""
    if a.format == "coo":
        coords = a.coords
        if a.nnz:
            keys = np.ravel_multi_index(tuple(coords), a.shape)
            assert (np.diff(keys) > 0).all(), "COO not sorted row-major, or duplicates"
        return a.data, coords
    indptr = np.asarray(a.indptr)
    if indptr.size == 0:  # a 1-D GCXS of pydata before 0.16: one row, no pointers
        indptr = np.array([0, a.nnz])
    assert indptr[0] == 0
    assert indptr[-1] == a.data.size == a.indices.size
    for r in range(len(indptr) - 1):
        row = a.indices[indptr[r] : indptr[r + 1]]
        assert (np.diff(row) > 0).all(), "GCXS row not sorted, or duplicates"
    c = a.tocoo()
    return c.data, c.coords


def assert_result(out, x, mask, want, dtype):
    dtype = np.dtype(dtype)
    assert type(out) is type(x)
    assert out.shape == mask.shape
    assert out.dtype == dtype
    assert out.fill_value == 0
    if x.format == "gcxs":
        assert tuple(out.compressed_axes or ()) == tuple(x.compressed_axes or ())
    data, coords = positions(out)
    stored = np.zeros(mask.shape, dtype=bool)
    stored[tuple(coords)] = True
    assert data.size == int(mask.sum())
    np.testing.assert_array_equal(stored, mask)
    assert_values(data.astype(dtype), want[tuple(coords)], dtype)


def run(fx, x, dx, fy, y, dy, shape, *, ax=None, ay=None, raw=False):
    xs = make(fx, x, shape, dtype=dx, axes=ax, raw=raw)
    ys = make(fy, y, shape, dtype=dy, axes=ay, raw=raw)
    out = xpops.sparse.divide(xs, ys)
    mask, want = reference(x, dx, y, dy, shape)
    assert_result(out, xs, mask, want, (np.ones(1, dx) / np.ones(1, dy)).dtype)
    return out


SHAPES = [(7,), (5, 6), (3, 4, 5), (2, 3, 2, 4), (0, 5), (3, 0, 2), (1, 1, 1)]


@pytest.mark.parametrize("raw", [False, True], ids=["canonical", "raw"])
@pytest.mark.parametrize(("fx", "fy"), list(itertools.product(["coo", "gcxs"], repeat=2)))
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_union_any_ndim(shape, fx, fy, raw):
    rng = np.random.default_rng(len(shape) * 10 + sum(shape))
    x = random_entries(rng, shape, 25, zeros=0.2)
    y = random_entries(rng, shape, 25, zeros=0.2)
    run(fx, x, "float64", fy, y, "float64", shape, raw=raw)


@pytest.mark.parametrize("ay", [None, (0,), (1,), (2,), (0, 2), (1, 2)])
@pytest.mark.parametrize("ax", [None, (0,), (1,), (2,), (0, 1), (0, 2)])
def test_gcxs_compressed_axes(ax, ay):
    """A GCXS x keeps its compressed axes; a y compressed along others is keyed in x's frame."""
    rng = np.random.default_rng(3)
    shape = (3, 4, 5)
    x, y = random_entries(rng, shape, 20, zeros=0.1), random_entries(rng, shape, 20)
    run("gcxs", x, "float64", "gcxs", y, "float64", shape, ax=ax, ay=ay)
    run("gcxs", x, "float64", "coo", y, "float64", shape, ax=ax)
    run("coo", x, "float64", "gcxs", y, "float64", shape, ay=ay)


DTYPES = [
    ("float64", "float64"),
    ("float32", "float32"),
    ("float32", "float64"),
    ("int64", "int32"),
    ("bool", "float32"),
    ("uint8", "int8"),
    ("complex64", "float32"),
    ("complex128", "complex64"),
    ("float16", "float16"),
]
GCXS_DTYPES = [("float64", "float64"), ("float32", "float32"), ("complex64", "float32")]


@pytest.mark.parametrize("fmt", ["coo", "gcxs"])
@pytest.mark.parametrize(("dx", "dy"), DTYPES)
def test_dtypes(dx, dy, fmt):
    if fmt == "gcxs" and (dx, dy) not in GCXS_DTYPES:
        # pydata builds GCXS arrays with numba, compiling for each dtype (seconds each, and
        # no float16): COO covers the dtype rules, which the two classes share
        pytest.skip("GCXS on a few dtypes only")
    rng = np.random.default_rng(DTYPES.index((dx, dy)))
    shape = (4, 3, 5)
    x = canonical(random_entries(rng, shape, 20, zeros=0.2, integer=True), shape)
    y = canonical(random_entries(rng, shape, 20, zeros=0.2, integer=True), shape)
    for e, d in ((x, dx), (y, dy)):
        if np.dtype(d).kind in "ub":
            e.data = np.abs(e.data)
        if np.dtype(d).kind == "c":
            e.data = e.data + 1j * rng.integers(-3, 4, e.data.size) / 2
    run(fmt, x, dx, fmt, y, dy, shape)


def test_special_values_and_signed_zeros():
    shape = (2, 2, 4)
    x = Entries(
        np.array([1.0, -1.0, 0.0, -0.0, inf, nan, 2.0, -0.0, 3.0]),
        (np.array([0, 0, 0, 0, 1, 1, 1, 1, 1]), np.array([0, 0, 1, 1, 0, 0, 1, 1, 1]),
         np.array([0, 1, 2, 3, 0, 1, 2, 3, 1])),
    )  # fmt: skip
    y = Entries(
        np.array([0.0, -0.0, 0.0, 5.0, 2.0, inf, -4.0]),
        (np.array([0, 0, 0, 0, 1, 1, 0]), np.array([0, 0, 1, 1, 0, 0, 1]),
         np.array([0, 1, 2, 3, 0, 1, 0])),
    )  # fmt: skip
    for fx, fy in itertools.product(["coo", "gcxs"], repeat=2):
        run(fx, x, "float64", fy, y, "float64", shape)
        run(fx, x, "float32", fy, y, "float32", shape)


def test_duplicates_summed_from_the_first():
    """Raw COO entries at one position are summed (a lone -0.0 keeps its sign)."""
    shape = (3, 3)
    x = Entries(np.array([1.0, 2.0, -0.0, 0.5]), (np.array([0, 0, 1, 0]), np.array([0, 0, 1, 0])))
    y = Entries(np.array([4.0]), (np.array([1]), np.array([1])))
    out = run("coo", x, "float64", "coo", y, "float64", shape, raw=True)
    np.testing.assert_array_equal(out.data, [inf, 0.0])
    assert np.signbit(out.data[1])


# ---- scalar and dense divisors ------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["coo", "gcxs"])
@pytest.mark.parametrize("y", [2, -0.5, 0.0, -0.0, np.float32(4), 1j, 10**30, np.array(3.0)])
def test_scalar_divisor(fmt, y):
    rng = np.random.default_rng(4)
    shape = (3, 4, 5)
    x = random_entries(rng, shape, 20, zeros=0.3)
    xs = make(fmt, x, shape, dtype="float32")
    out = xpops.sparse.divide(xs, y)
    mask, want = reference(x, "float32", y, None, shape)
    with np.errstate(all="ignore"):
        dtype = (np.ones(1, np.float32) / y).dtype
    assert_result(out, xs, mask, want, dtype)


@pytest.mark.parametrize(("dx", "dy"), [("float64", "float64"), ("int32", "float32"),
                                        ("float32", "complex64")])  # fmt: skip
@pytest.mark.parametrize("fmt", ["coo", "gcxs"])
def test_dense_divisor(fmt, dx, dy):
    """x's stored positions only, divided by y's values there."""
    rng = np.random.default_rng(6)
    shape = (3, 4, 5)
    x = canonical(random_entries(rng, shape, 20, zeros=0.2, integer=True), shape)
    yd = (rng.integers(-2, 3, shape) / 2.0).astype(dy)
    xs = make(fmt, x, shape, dtype=dx, axes=(2,) if fmt == "gcxs" else None)
    out = xpops.sparse.divide(xs, yd)
    mask = np.zeros(shape, dtype=bool)
    mask[x.coords] = True
    want = np.zeros(shape, dtype=np.complex128)
    with np.errstate(all="ignore"):
        want[x.coords] = x.data.astype(dx).astype(np.complex128) / yd[x.coords]
    if np.dtype(dy).kind != "c":
        want = want.real
    assert_result(out, xs, mask, want, (np.ones(1, dx) / np.ones(1, dy)).dtype)


def test_dense_divisor_of_another_shape_refused():
    xs = make("coo", Entries(np.ones(1), (np.zeros(1, int),) * 3), (2, 3, 4))
    with pytest.raises(ValueError, match=re.escape("got (2, 3, 4) and (3, 4); a dense `y` is not")):
        xpops.sparse.divide(xs, np.ones((3, 4)))


# ---- inputs, errors ---------------------------------------------------------------------------


@pytest.mark.parametrize("divisor", ["sparse", "scalar", "dense"])
@pytest.mark.parametrize("fmt", ["coo", "gcxs"])
def test_inputs_unchanged_and_result_fresh(fmt, divisor):
    rng = np.random.default_rng(8)
    shape = (4, 5, 3)
    x, y = random_entries(rng, shape, 20, zeros=0.2), random_entries(rng, shape, 20)
    xs = make(fmt, x, shape)
    ys = {"sparse": make(fmt, y, shape), "scalar": 2.0, "dense": np.full(shape, 2.0)}[divisor]

    def state(a):
        arrays = (a.coords,) if a.format == "coo" else (a.indices, a.indptr)
        return [v.copy() for v in (a.data, *arrays)]

    before = state(xs), (state(ys) if divisor == "sparse" else None)
    out = xpops.sparse.divide(xs, ys)
    after = state(xs), (state(ys) if divisor == "sparse" else None)
    for b, a in zip(before[0] + (before[1] or []), after[0] + (after[1] or []), strict=True):
        np.testing.assert_array_equal(a, b)
    mine = state(out)
    inputs = state(xs) and ((xs.data, xs.coords) if fmt == "coo" else (xs.data, xs.indices))
    for a in (out.data, *((out.coords,) if fmt == "coo" else (out.indices, out.indptr))):
        assert not any(np.shares_memory(a, b) for b in inputs)
    assert mine


@pytest.mark.parametrize("fill", [1.0, nan, -2])
def test_fill_value_other_than_zero(fill):
    good = make("coo", Entries(np.ones(1), (np.zeros(1, int),) * 2), (2, 2))
    bad = sparse.COO(good.coords, good.data, shape=good.shape, fill_value=fill)
    with pytest.raises(ValueError, match=r"`x` must have fill_value 0 .*got fill_value"):
        xpops.sparse.divide(bad, good)
    with pytest.raises(ValueError, match=r"`y` must have fill_value 0 .*got fill_value"):
        xpops.sparse.divide(good, bad)
    with pytest.raises(ValueError, match=r"`x` must have fill_value 0"):
        xpops.sparse.divide(sparse.GCXS.from_coo(bad), 2.0)


def test_negative_zero_fill_value_taken():
    x = sparse.COO(np.array([[0, 1]]), np.array([1.0, 2.0]), shape=(3,), fill_value=-0.0)
    out = xpops.sparse.divide(x, 2.0)
    np.testing.assert_array_equal(out.todense(), [0.5, 1.0, 0.0])


def test_other_libraries_and_formats_refused():
    good = make("coo", Entries(np.ones(1), (np.zeros(1, int),) * 2), (2, 2))
    with pytest.raises(TypeError, match="same library"):
        xpops.sparse.divide(good, sp.csr_array(np.eye(2)))
    with pytest.raises(TypeError, match="same library"):
        xpops.sparse.divide(sp.csr_array(np.eye(2)), good)
    dok = sparse.DOK.from_coo(good)
    with pytest.raises(TypeError, match=r"`x` must be .*COO or GCXS array of pydata .*'dok'"):
        xpops.sparse.divide(dok, good)
    with pytest.raises(TypeError, match=r"`y` must be .*'dok'"):
        xpops.sparse.divide(good, dok)
    with pytest.raises(ValueError, match="same shape"):
        xpops.sparse.divide(good, make("coo", Entries.empty(3), (2, 2, 1)))


def test_large_3d_against_pydata_addition_pattern():
    """A larger 3-D case (folded frame and helper thread): the pattern is that of pydata's
    own x + y (no cancellations: positive values), the values x / y."""
    shape = (60, 70, 50)
    x = sparse.random(shape, nnz=40_000, random_state=0, data_rvs=lambda n: np.ones(n) * 2)
    y = sparse.random(shape, nnz=40_000, random_state=1, data_rvs=lambda n: np.ones(n) * 4)
    out = xpops.sparse.divide(x, y)
    total = x + y
    np.testing.assert_array_equal(out.coords, total.coords)
    want = np.where(total.data == 6, 0.5, np.where(total.data == 2, inf, 0.0))
    np.testing.assert_array_equal(out.data, want)


# ---- property test ----------------------------------------------------------------------------

_VALUES = [-4.0, -2.5, -1.0, -0.0, 0.0, 0.5, 1.0, 3.0]


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_property_against_brute_force(data):
    """Random N-D shapes (zero dimensions included), raw COO entries (duplicates, any order,
    signed zeros) or GCXS compressed along random axes, against the reference."""
    ndim = data.draw(st.integers(1, 4), label="ndim")
    shape = tuple(data.draw(st.lists(st.integers(0, 4), min_size=ndim, max_size=ndim)))

    def entries():
        if 0 in shape:
            return Entries(np.zeros(0), tuple(np.zeros(0, int) for _ in shape))
        cell = st.tuples(*(st.integers(0, n - 1) for n in shape), st.sampled_from(_VALUES))
        items = data.draw(st.lists(cell, max_size=12))
        coords = tuple(np.array([t[k] for t in items], dtype=int) for k in range(ndim))
        return Entries(np.array([t[-1] for t in items], dtype=float), coords)

    def axes(fmt):
        """Compressed axes of a GCXS operand: a sorted proper subset (pydata's default for
        1-D and where none are drawn)."""
        if fmt != "gcxs" or ndim < 2:
            return None
        k = data.draw(st.integers(1, ndim - 1))
        return tuple(sorted(data.draw(st.sets(st.integers(0, ndim - 1), min_size=k, max_size=k))))

    fx, fy = (
        data.draw(st.sampled_from(["coo", "gcxs"])),
        data.draw(st.sampled_from(["coo", "gcxs"])),
    )
    ax, ay = axes(fx), axes(fy)
    raw = data.draw(st.booleans(), label="raw")
    run(fx, entries(), "float64", fy, entries(), "float64", shape, ax=ax, ay=ay, raw=raw)
