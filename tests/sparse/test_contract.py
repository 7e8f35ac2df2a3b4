"""sparse.divide's contract on SciPy (numpy backend) and cupyx (cupy backend) operands:
semantics, patterns and a property test, each against the brute-force reference of `_support`
(dtypes, scalar divisors, inputs left alone and errors: `test_contract_inputs`)."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import xpops

from ._support import (
    CUPYX_DTYPES,
    FORMATS,
    Entries,
    assert_result,
    assert_values,
    build,
    canonical,
    random_entries,
    reference,
    run_and_check,
)

nan, inf = np.nan, np.inf


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
    # x / ±inf is ±0 (an encoding of y as y * 1j would fail here: inf * 1j is nan + inf j)
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
