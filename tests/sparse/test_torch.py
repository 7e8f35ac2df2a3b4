"""sparse.divide on PyTorch sparse tensors: COO of any sparse_dim (hybrid included), CSR (2-D,
batched, hybrid), on the CPU and (with a GPU and CuPy) on CUDA, against the brute-force
reference of `_support` on the tensors' entries expanded element by element (a stored sparse
position stores its whole block of dense values)."""

import re

import numpy as np
import pytest

import xpops

from ._support import RTOL, Entries, reference

torch = pytest.importorskip("torch")

nan, inf = np.nan, np.inf

# PyTorch warns that its sparse CSR support is in beta each time a CSR tensor is made.
pytestmark = [
    pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta"),
    # some PyTorch versions warn when a tensor is built outside an explicit invariant check
    pytest.mark.filterwarnings("ignore:Sparse invariant checks are implicitly disabled"),
]


def tdtype(name):
    return getattr(torch, name)


# ---- building tensors and reading them back -----------------------------------------------------


def coo(e: Entries, shape, dtype="float64", device="cpu", *, coalesce=False):
    """A COO tensor holding entries `e` as given (duplicates, order): its sparse dimensions
    are those of e's coordinates, its dense ones those of e's values after the first."""
    indices = torch.as_tensor(np.array(e.coords, dtype=np.int64).reshape(len(e.coords), -1))
    values = torch.as_tensor(np.asarray(e.data)).to(tdtype(dtype))
    t = torch.sparse_coo_tensor(indices, values, shape, check_invariants=True)
    # coalesced on the CPU, whose sums are IEEE's (a sum of -0.0 alone stays -0.0), as the
    # references' are; PyTorch's CUDA coalesce gives +0.0 there
    return (t.coalesce() if coalesce else t).to(device)


def csr(e: Entries, shape, dtype="float64", device="cpu", *, index="int64"):
    """A CSR tensor of canonical entries `e`: 2-D, or batched (leading coordinates the batch
    indices; every batch must hold as many entries), values with trailing dense dimensions."""
    nsparse = len(e.coords)
    batch_shape, nrows = tuple(shape[: nsparse - 2]), shape[nsparse - 2]
    keys = np.ravel_multi_index(e.coords, shape[:nsparse]) if e.data.shape[0] else np.zeros(0, int)
    order = np.argsort(keys)
    coords = [np.asarray(c)[order] for c in e.coords]
    data = np.asarray(e.data)[order]
    batch = int(np.prod(batch_shape))
    b = np.ravel_multi_index(coords[:-2], batch_shape) if batch_shape else np.zeros(len(data), int)
    per = np.bincount(b, minlength=batch) if batch else np.zeros(0, int)
    assert len(set(per.tolist())) <= 1, "batched CSR needs as many entries in each batch"
    nnz = int(per[0]) if batch else 0
    crow = np.zeros((batch, nrows + 1), dtype=np.int64)
    for k in range(batch):
        rows = coords[-2][b == k]
        crow[k, 1:] = np.cumsum(np.bincount(rows, minlength=nrows))
    it = getattr(torch, index)
    crow_t = torch.as_tensor(crow.reshape(*batch_shape, nrows + 1)).to(it)
    col_t = torch.as_tensor(coords[-1].reshape(*batch_shape, nnz)).to(it)
    values = torch.as_tensor(data.reshape(*batch_shape, nnz, *data.shape[1:])).to(tdtype(dtype))
    return torch.sparse_csr_tensor(
        crow_t,
        col_t,
        values,
        size=shape,
        device=device,
        # some PyTorch versions' checks refuse an empty col_indices: nothing to check there
        check_invariants=nnz > 0,
    )


def element_entries(e: Entries, shape) -> Entries:
    """Entries with blocks of values (hybrid) as entries of one value each."""
    block = np.asarray(e.data).shape[1:]
    if not block:
        return e
    n = e.data.shape[0]
    offsets = np.indices(block).reshape(len(block), -1)
    coords = tuple(np.repeat(np.asarray(c), offsets.shape[1]) for c in e.coords)
    coords += tuple(np.tile(o, n) for o in offsets)
    return Entries(np.asarray(e.data).reshape(-1), coords)


def tensor_entries(t) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """(values, coordinates) of a result's stored elements, in stored order, checking that it
    is canonical (coalesced COO; CSR rows sorted, unique)."""
    values = t.values().detach().cpu()
    if values.dtype == torch.bfloat16:
        values = values.to(torch.float32)
    if t.layout == torch.sparse_coo:
        assert t.is_coalesced()
        idx = t.indices().cpu().numpy()
        if idx.shape[1] > 1:
            keys = np.ravel_multi_index(tuple(idx), t.shape[: t.sparse_dim()])
            assert (np.diff(keys) > 0).all(), "not sorted, or duplicates"
        e = Entries(values.numpy(), tuple(idx))
        e = element_entries(e, tuple(t.shape))
        return np.asarray(e.data), e.coords
    crow = t.crow_indices().cpu().numpy()
    col = t.col_indices().cpu().numpy()
    assert crow.dtype == col.dtype
    batch_shape = crow.shape[:-1]
    coords, data = [], []
    for b in np.ndindex(*batch_shape):
        c, k = crow[b], col[b]
        assert c[0] == 0
        assert c[-1] == k.size
        rows = np.repeat(np.arange(c.size - 1), np.diff(c))
        for r in range(c.size - 1):
            assert (np.diff(k[c[r] : c[r + 1]]) > 0).all(), "CSR row not sorted, or duplicates"
        coords.append(np.stack([*(np.full(k.size, i) for i in b), rows, k]))
        data.append(values.numpy()[b] if batch_shape else values.numpy())
    nsparse = len(batch_shape) + 2
    cat = np.concatenate(coords, axis=1) if coords else np.zeros((nsparse, 0), int)
    vals = np.concatenate(data) if data else np.zeros((0, *values.shape[nsparse - 1 :]))
    e = element_entries(Entries(vals, tuple(cat)), tuple(t.shape))
    return np.asarray(e.data), e.coords


def check(out, x, mask, want, dtype):
    assert out.layout == x.layout
    assert out.device == x.device
    assert out.dtype == dtype
    assert tuple(out.shape) == mask.shape
    assert not out.requires_grad
    data, coords = tensor_entries(out)
    stored = np.zeros(mask.shape, dtype=bool)
    stored[coords] = True
    assert data.size == int(mask.sum())
    np.testing.assert_array_equal(stored, mask)
    name = {torch.bfloat16: "bfloat16"}.get(dtype, str(dtype).removeprefix("torch."))
    got = data.astype(np.complex128 if np.iscomplexobj(data) else np.float64)
    _assert_close(got, want[coords], name)


def _assert_close(got, want, name):
    rtol = {"bfloat16": 8e-3, "complex32": 1e-3}.get(name) or RTOL[name]
    if np.iscomplexobj(want):
        finite = np.isfinite(want)
        np.testing.assert_allclose(got[finite], want[finite], rtol=rtol, atol=0)
        assert not np.isfinite(got[~finite]).any()
        return
    np.testing.assert_allclose(got.real, want, rtol=rtol, atol=0, equal_nan=True)
    zero = want == 0
    np.testing.assert_array_equal(np.signbit(got.real[zero]), np.signbit(want[zero]))


def result_dtype(dx, dy):
    d = torch.promote_types(tdtype(dx), tdtype(dy))
    return d if d.is_floating_point or d.is_complex else torch.get_default_dtype()


def run(x, y, shape, dx, dy, make_x, make_y):
    xs, ys = make_x(x, dx), make_y(y, dy)
    out = xpops.sparse.divide(xs, ys)
    ex, ey = element_entries(x, shape), element_entries(y, shape)
    wide = "complex128" if "complex" in dx + dy else "float64"
    # PyTorch rounds both operands to the result's dtype before dividing
    rd = str(result_dtype(dx, dy)).removeprefix("torch.")
    rd = {"bfloat16": "float32", "complex32": "complex64"}.get(rd, rd)
    mask, want = reference(_rounded(ex, dx, rd), wide, _rounded(ey, dy, rd), wide, shape)
    check(out, xs, mask, want, result_dtype(dx, dy))
    return out, xs, ys


def _rounded(e: Entries, dtype, to):
    """Entries as the operand dtype holds them, then as the result's dtype holds them."""
    t = torch.as_tensor(np.asarray(e.data)).to(tdtype(dtype)).to(tdtype(to))
    return Entries(t.numpy(), e.coords)


def random_sparse(rng, sparse_shape, n, block=(), *, zeros=0.2, unique=False):
    """Entries at `n` random sparse positions (duplicates unless `unique`), blocks of dense
    values of shape `block`, dyadic (exact sums), a fraction `zeros` of them signed zeros."""
    if 0 in sparse_shape or n == 0:
        return Entries(np.zeros((0, *block)), tuple(np.zeros(0, int) for _ in sparse_shape))
    total = int(np.prod(sparse_shape))
    keys = rng.choice(total, min(n, total), replace=False) if unique else rng.integers(0, total, n)
    coords = np.unravel_index(keys, sparse_shape) if sparse_shape else ()
    size = (len(keys), *block)
    vals = rng.integers(1, 9, size) * rng.choice([-1.0, 1.0], size) / 4
    z = rng.random(size) < zeros
    vals[z] = rng.choice([0.0, -0.0], int(z.sum()))
    return Entries(vals, tuple(coords))


# ---- COO of any sparse_dim, hybrid ------------------------------------------------------------

COO_CASES = [  # (shape, sparse_dim)
    ((7,), 1),
    ((5, 6), 2),
    ((3, 4, 5), 3),
    ((2, 3, 2, 4), 4),
    ((5, 6, 3), 2),  # hybrid: one dense dimension
    ((6, 2, 3), 1),  # hybrid: two dense dimensions
    ((3, 4, 2, 2), 2),
    ((0, 5), 2),
    ((4, 0, 2), 1),
    ((3, 0), 1),
]


@pytest.mark.parametrize("coalesced", [False, True], ids=["raw", "coalesced"])
@pytest.mark.parametrize(("shape", "sdim"), COO_CASES, ids=str)
def test_coo_union(device, shape, sdim, coalesced):
    rng = np.random.default_rng(len(shape) * 7 + sdim)
    sshape, block = shape[:sdim], shape[sdim:]
    x = random_sparse(rng, sshape, 20, block)
    y = random_sparse(rng, sshape, 20, block)

    def make(e, d):
        return coo(e, shape, d, device, coalesce=coalesced)

    run(x, y, shape, "float64", "float64", make, make)


@pytest.mark.parametrize(("shape", "sdim", "n"), [
    ((4, 300), 2, 700),  # rows longer than a warp
    ((1000, 5), 2, 200),  # mostly empty rows
    ((6, 50, 40), 2, 900),  # hybrid, long rows
    ((200, 300, 100), 3, 40),  # too many rows for row pointers: a folded frame
])  # fmt: skip
def test_coo_row_lengths(device, shape, sdim, n):
    """The result's coordinates from its row pointers, for rows of every length."""
    rng = np.random.default_rng(sum(shape) + n)
    sshape, block = shape[:sdim], shape[sdim:]
    x = random_sparse(rng, sshape, n, block)
    y = random_sparse(rng, sshape, n, block)

    def make(e, d):
        return coo(e, shape, d, device)

    run(x, y, shape, "float64", "float64", make, make)


def _entries(coords, values):
    return Entries(
        np.asarray(values, dtype=float), tuple(np.asarray(c, dtype=np.int64) for c in coords)
    )


@pytest.mark.parametrize(("shape", "x", "y"), [
    ((6, 3), ([[4, 5], [0, 2]], [1.0, 2.0]), ([[5], [2]], [4.0])),  # no entry before row 4
    ((6, 3), ([[0, 1], [1, 2]], [1.0, -2.0]), ([[1], [0]], [4.0])),  # none after row 1
    ((6, 3), ([[], []], []), ([[2, 3], [1, 1]], [3.0, -5.0])),  # x empty
    ((6, 3), ([[0, 5], [0, 2]], [1.0, 3.0]), ([[], []], [])),  # y empty
    ((5, 0), ([[], []], []), ([[], []], [])),  # no columns
])  # fmt: skip
def test_coo_rows_at_the_edges(device, shape, x, y):
    """Entries only in the last rows, only in the first, an operand with none, no columns."""
    ex, ey = _entries(*x), _entries(*y)

    def make(e, d):
        return coo(e, shape, d, device)

    run(ex, ey, shape, "float64", "float64", make, make)


def test_coo_zero_dimensional(device):
    x = torch.tensor(3.0).to_sparse().to(device)
    y = torch.tensor(-2.0).to_sparse().to(device)
    out = xpops.sparse.divide(x, y)
    assert out.shape == ()
    assert out.to_dense().item() == -1.5
    empty = torch.sparse_coo_tensor(
        torch.zeros(0, 0, dtype=torch.long), torch.zeros(0), (), check_invariants=True
    )
    out = xpops.sparse.divide(empty.to(device), y)
    assert out.to_dense().item() == -0.0
    assert out.values().shape == (1,)


# ---- CSR: 2-D, batched, hybrid ------------------------------------------------------------------

CSR_CASES = [  # (shape, dense dimensions, entries a batch)
    ((5, 6), 0, 12),
    ((2, 4, 5), 0, 7),
    ((2, 3, 4, 5), 0, 6),
    ((4, 5, 3), 1, 8),
    ((2, 3, 4, 2), 1, 5),
    ((0, 4), 0, 0),
    ((3, 0), 0, 0),
]


def _batched_entries(rng, shape, sparse_n, per, block, values_like=None):
    """Canonical entries with `per` entries in each batch (batched CSR's requirement)."""
    batch_shape, inner = shape[: sparse_n - 2], shape[sparse_n - 2 : sparse_n]
    coords, data = [], []
    total = int(np.prod(inner))
    for b in np.ndindex(*batch_shape):
        keys = np.sort(rng.choice(total, per, replace=False)) if total else np.zeros(0, int)
        r, c = np.unravel_index(keys, inner)
        coords.append(np.stack([*(np.full(per, i) for i in b), r, c]))
        e = random_sparse(rng, (max(per, 1),), per, block, unique=True)
        data.append(e.data)
    cat = np.concatenate(coords, axis=1) if coords else np.zeros((sparse_n, 0), int)
    vals = np.concatenate(data) if data else np.zeros((0, *block))
    return Entries(vals, tuple(cat))


@pytest.mark.parametrize("index", ["int32", "int64"])
@pytest.mark.parametrize(("shape", "ddim", "per"), CSR_CASES, ids=str)
def test_csr_union(device, shape, ddim, per, index):
    rng = np.random.default_rng(len(shape) + ddim + per)
    sparse_n = len(shape) - ddim
    block = shape[sparse_n:]
    x = _batched_entries(rng, shape, sparse_n, per, block)
    # y shares x's row counts where the union would otherwise differ between batches
    y = Entries(np.asarray(x.data) * 2 - 1, x.coords) if sparse_n > 2 else None
    if y is None:
        y = _batched_entries(rng, shape, sparse_n, per, block)

    def make(e, d):
        return csr(e, shape, d, device, index=index)

    out, xs, _ = run(x, y, shape, "float64", "float64", make, make)
    assert out.crow_indices().dtype == xs.crow_indices().dtype


def test_batched_csr_union_of_unequal_sizes_refused(device):
    shape = (2, 3, 3)
    x = Entries(np.array([1.0, 2.0]), (np.array([0, 1]), np.array([0, 0]), np.array([0, 0])))
    y = Entries(np.array([1.0, 2.0]), (np.array([0, 1]), np.array([1, 0]), np.array([1, 0])))
    with pytest.raises(ValueError, match=re.escape("different number of entries in each batch")):
        xpops.sparse.divide(csr(x, shape, device=device), csr(y, shape, device=device))


@pytest.mark.parametrize(("lx", "ly"), [("coo", "csr"), ("csr", "coo")])
@pytest.mark.parametrize("shape", [(5, 6), (5, 6, 2)], ids=str)
def test_mixed_layouts_follow_x(device, lx, ly, shape):
    rng = np.random.default_rng(1)
    block = shape[2:]
    x = random_sparse(rng, shape[:2], 12, block, unique=True)
    y = random_sparse(rng, shape[:2], 12, block, unique=True)
    makers = {
        "coo": lambda e, d: coo(e, shape, d, device),
        "csr": lambda e, d: csr(e, shape, d, device),
    }
    out, _, _ = run(x, y, shape, "float64", "float64", makers[lx], makers[ly])
    assert out.layout == (torch.sparse_coo if lx == "coo" else torch.sparse_csr)


# ---- values: special values, dtypes -----------------------------------------------------------


def test_special_values_and_signed_zeros(device):
    shape = (2, 6)
    x = Entries(
        np.array([1.0, -1.0, 0.0, -0.0, inf, nan, 2.0, -0.0, 3.0]),
        (np.array([0, 0, 0, 0, 1, 1, 1, 1, 0]), np.array([0, 1, 2, 3, 0, 1, 2, 3, 4])),
    )
    y = Entries(
        np.array([0.0, -0.0, 0.0, 5.0, 2.0, inf, -4.0]),
        (np.array([0, 0, 0, 0, 1, 1, 1]), np.array([0, 1, 2, 3, 0, 1, 5])),
    )
    for maker in (coo, csr):
        for dtype in ("float32", "float64"):

            def make(e, d, maker=maker):
                return maker(e, shape, d, device)

            run(x, y, shape, dtype, dtype, make, make)


DTYPES = [
    ("float32", "float32"),
    ("float64", "float64"),
    ("float16", "float16"),
    ("bfloat16", "bfloat16"),
    ("float16", "float32"),
    ("int64", "int64"),
    ("int32", "float64"),
    ("int16", "uint8"),
    ("bool", "bool"),
    ("complex64", "complex64"),
    ("complex128", "float32"),
    ("float32", "complex64"),
]


@pytest.mark.parametrize("layout", ["coo", "csr"])
@pytest.mark.parametrize(("dx", "dy"), DTYPES)
def test_dtypes(device, dx, dy, layout):
    rng = np.random.default_rng(DTYPES.index((dx, dy)))
    shape = (4, 6)
    x = random_sparse(rng, shape, 10, unique=True)
    y = random_sparse(rng, shape, 10, unique=True)
    for e, d in ((x, dx), (y, dy)):
        if d == "bool":
            e.data = (e.data != 0).astype(np.float64)
        elif d == "uint8":
            e.data = np.abs(e.data) * 4
        elif d.startswith("int"):
            e.data = e.data * 4
        if d.startswith("complex"):
            e.data = e.data + 1j * rng.integers(-3, 4, e.data.shape) / 2
    maker = coo if layout == "coo" else csr

    def make(e, d):
        return maker(e, shape, d, device)

    run(x, y, shape, dx, dy, make, make)


def test_default_dtype_of_integer_quotients(device):
    x = coo(Entries(np.array([3.0]), (np.array([0]), np.array([1]))), (2, 2), "int64", device)
    old = torch.get_default_dtype()
    try:
        torch.set_default_dtype(torch.float64)
        assert xpops.sparse.divide(x, x).dtype == torch.float64
    finally:
        torch.set_default_dtype(old)
    assert xpops.sparse.divide(x, x).dtype == old


# ---- scalar and dense divisors ------------------------------------------------------------------

SCALARS = [2, -0.5, 0.0, -0.0, True, 1 - 2j, 10**30, np.float32(4), np.array(2.0), "0d", "0d_cpu"]


@pytest.mark.parametrize("layout", ["coo", "csr"])
@pytest.mark.parametrize("scalar", SCALARS, ids=str)
def test_scalar_divisor(device, scalar, layout):
    """x's pattern (coalesced), its values divided as PyTorch divides them."""
    rng = np.random.default_rng(3)
    shape = (4, 5, 2)
    x = random_sparse(rng, shape[:2], 10, shape[2:], unique=layout == "csr")
    xs = (coo if layout == "coo" else csr)(x, shape, "float32", device)
    if scalar == "0d":
        y = torch.tensor(-4.0, device=device)
    elif scalar == "0d_cpu":
        y = torch.tensor(3.0)
    else:
        y = scalar
    out = xpops.sparse.divide(xs, y)
    dense = xs.to_dense()
    py = y.item() if isinstance(y, np.ndarray | np.generic) else y
    py = float(py) if isinstance(py, int) and abs(py) > 2**62 else py
    want = dense / py
    assert out.dtype == want.dtype
    assert out.layout == xs.layout
    ex = element_entries(x, shape)
    mask = np.zeros(shape, dtype=bool)
    mask[ex.coords] = True
    got = out.to_dense().cpu().numpy()
    np.testing.assert_array_equal(got[mask], want.cpu().numpy()[mask])
    _, coords = tensor_entries(out)
    stored = np.zeros(shape, dtype=bool)
    stored[coords] = True
    np.testing.assert_array_equal(stored, mask)


DENSE_DTYPES = [
    ("float64", "float64"),
    ("float32", "float16"),
    ("int32", "float32"),
    ("float32", "complex64"),
]
DENSE_CASES = [("coo", (4, 5)), ("coo", (3, 4, 2)), ("csr", (4, 5)), ("csr", (2, 3, 4))]


@pytest.mark.parametrize(("dx", "dy"), DENSE_DTYPES)
@pytest.mark.parametrize(("layout", "shape"), DENSE_CASES)
def test_dense_divisor(device, layout, shape, dx, dy):
    """x's stored positions (blocks) divided by y's values there; y's other values unread."""
    rng = np.random.default_rng(5)
    if layout == "coo":
        x = random_sparse(rng, shape[:2], 8, shape[2:])
        xs = coo(x, shape, dx, device)
    else:
        x = _batched_entries(rng, shape, len(shape), 4, ())
        xs = csr(x, shape, dx, device)
    yd = torch.as_tensor(rng.integers(-2, 3, shape) / 2.0).to(tdtype(dy)).to(device)
    ex = element_entries(x, shape)
    mask = np.zeros(shape, dtype=bool)
    mask[ex.coords] = True
    poisoned = torch.where(torch.as_tensor(mask, device=device), yd, torch.nan).to(yd.dtype)
    out = xpops.sparse.divide(xs, poisoned)
    want = xs.to_dense() / yd
    assert out.dtype == want.dtype
    _, coords = tensor_entries(out)
    stored = np.zeros(shape, dtype=bool)
    stored[coords] = True
    np.testing.assert_array_equal(stored, mask)
    got = out.to_dense().cpu().numpy()
    np.testing.assert_array_equal(got[mask], want.cpu().numpy()[mask])
