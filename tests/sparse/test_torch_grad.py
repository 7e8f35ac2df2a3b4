"""Gradients of sparse.divide on PyTorch sparse tensors, through the autograd binding, against
the dense formulas of the rule (``dx = dout / conj(Y)`` at x's stored entries, ``dy = -dout *
conj(out / Y)`` at y's) computed in float64/complex128 NumPy element by element, and central
finite differences; CPU, and CUDA with a GPU."""

import numpy as np
import pytest

import xpops

from ._support import Entries, canonical, dense
from .test_torch import (
    _batched_entries,
    coo,
    csr,
    element_entries,
    random_sparse,
    tdtype,
)

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta"),
    # some PyTorch versions warn when a tensor is built outside an explicit invariant check
    pytest.mark.filterwarnings("ignore:Sparse invariant checks are implicitly disabled"),
]
nan, inf = np.nan, np.inf


def _grads(out, primals, dout):
    return torch.autograd.grad(out, primals, grad_outputs=dout, allow_unused=True)


def _host_entries(t) -> Entries:
    """A sparse tensor's stored entries as it stores them (COO: not coalesced), element by
    element."""
    if t.layout == torch.sparse_coo:
        e = Entries(t._values().detach().cpu().numpy(), tuple(t._indices().cpu().numpy()))
    else:
        crow, col = t.crow_indices().cpu().numpy(), t.col_indices().cpu().numpy()
        values = t.values().detach().cpu().numpy()
        batch_shape = crow.shape[:-1]
        coords, data = [], []
        for b in np.ndindex(*batch_shape):
            rows = np.repeat(np.arange(crow[b].size - 1), np.diff(crow[b]))
            coords.append(np.stack([*(np.full(rows.size, i) for i in b), rows, col[b]]))
            data.append(values[b])
        e = Entries(np.concatenate(data), tuple(np.concatenate(coords, axis=1)))
    return element_entries(e, tuple(t.shape))


def _dense_grads(xe, y, de, shape, wide):
    """Dense X, Y (summed), O on the union, D; `y` Entries, a dense array or a number."""
    x_vals, mask = dense(xe, xe.data.dtype, shape, wide)
    if isinstance(y, Entries):
        y_vals, ym = dense(y, y.data.dtype, shape, wide)
        mask = mask | ym
    else:
        y_vals = np.broadcast_to(np.asarray(y, dtype=wide), shape)
    d_vals = np.asarray(de, dtype=wide)
    with np.errstate(all="ignore"):
        o = np.where(mask, x_vals / y_vals, 0)
    return x_vals, y_vals, o, d_vals, mask


def _assert(got, want, complex_):
    got = got.detach().cpu().numpy() if isinstance(got, torch.Tensor) else np.asarray(got)
    if complex_:
        finite = np.isfinite(want)
        np.testing.assert_allclose(got[finite], want[finite], rtol=1e-12, atol=0)
        assert not np.isfinite(got[~finite]).any()
        return
    np.testing.assert_allclose(got, want.real, rtol=1e-12, atol=0, equal_nan=True)
    zero = want.real == 0
    np.testing.assert_array_equal(np.signbit(got[zero]), np.signbit(want.real[zero]))


@pytest.mark.parametrize("dout_kind", ["dense", "sparse"])
@pytest.mark.parametrize("dtype", ["float64", "complex128"])
@pytest.mark.parametrize(("lx", "ly", "shape"), [
    ("coo", "coo", (5, 6)), ("coo", "coo", (3, 4, 2)), ("coo", "coo", (4, 3, 5)),
    ("csr", "csr", (5, 6)), ("csr", "coo", (5, 6)), ("coo", "csr", (5, 6)),
    ("csr", "csr", (2, 3, 4)),
])  # fmt: skip
def test_sparse_divisor(device, lx, ly, shape, dtype, dout_kind):
    """Uncoalesced COO operands (duplicates kept in the gradients' structure), hybrid COO
    (shape (3, 4, 2) with one dense dimension), batched CSR; stored zeros give inf and nan."""
    rng = np.random.default_rng(sum(map(ord, lx + ly + dtype + dout_kind)) + len(shape))
    complex_ = dtype == "complex128"
    sdim = 2 if shape == (3, 4, 2) else len(shape)

    def operand(layout):
        if layout == "csr":
            e = _batched_entries(rng, shape, len(shape), 6, ())
            if complex_:
                e.data = e.data + 1j * rng.integers(-3, 4, e.data.shape) / 2
            return e, csr(e, shape, dtype, device)
        e = random_sparse(rng, shape[:sdim], 14, shape[sdim:])
        if complex_:
            e.data = e.data + 1j * rng.integers(-3, 4, e.data.shape) / 2
        return e, coo(e, shape, dtype, device)

    (xe, xs), (ye, ys) = operand(lx), operand(ly)
    if lx == ly == "csr" and len(shape) == 3:  # batched: same pattern, so the union is too
        ye, ys = xe, csr(Entries(xe.data * 2 - 1, xe.coords), shape, dtype, device)
        ye = Entries(xe.data * 2 - 1, xe.coords)
    xs.requires_grad_(True)
    ys.requires_grad_(True)
    out = xpops.sparse.divide(xs, ys)
    assert out.requires_grad
    d = rng.integers(-4, 5, shape) / 4.0
    if complex_:
        d = d + 1j * rng.integers(-4, 5, shape) / 4
    dt = torch.as_tensor(d).to(tdtype(dtype)).to(device)
    dout = dt if dout_kind == "dense" else dt.sparse_mask(out.detach().to_sparse_coo().coalesce())
    gx, gy = _grads(out, (xs, ys), dout)
    assert gx.layout == xs.layout
    assert gy.layout == ys.layout
    ex, ey = element_entries(xe, shape), element_entries(ye, shape)
    wide = np.complex128 if complex_ else np.float64
    _, y_vals, o, d_vals, mask = _dense_grads(ex, ey, d, shape, wide)
    if dout_kind == "sparse":
        d_vals = np.where(mask, d_vals, 0)
    with np.errstate(all="ignore"):
        hx = _host_entries(gx)
        hy = _host_entries(gy)
        want_x = d_vals[hx.coords] / np.conj(y_vals[hx.coords])
        want_y = -d_vals[hy.coords] * np.conj(o[hy.coords] / y_vals[hy.coords])
    # the gradients' structure is the operands' own (COO: the indices as stored)
    for g, a in ((gx, xs), (gy, ys)):
        if a.layout == torch.sparse_coo:
            assert torch.equal(g._indices(), a._indices())
        else:
            assert torch.equal(g.crow_indices(), a.crow_indices())
            assert torch.equal(g.col_indices(), a.col_indices())
    _assert(hx.data, want_x, complex_)
    _assert(hy.data, want_y, complex_)


@pytest.mark.parametrize("layout", ["coo", "csr"])
@pytest.mark.parametrize("kind", ["python", "0d", "dense"])
def test_scalar_and_dense_divisors(device, kind, layout):
    rng = np.random.default_rng(4)
    shape = (4, 5)
    xe = random_sparse(rng, shape, 9, unique=layout == "csr")
    xs = (coo if layout == "coo" else csr)(xe, shape, "float64", device).requires_grad_(True)
    yd = rng.integers(1, 5, shape) / 2.0
    y = {
        "python": 2.5,
        "0d": torch.tensor(-2.0, dtype=torch.float64, device=device, requires_grad=True),
        "dense": torch.as_tensor(yd).to(device).requires_grad_(True),
    }[kind]
    out = xpops.sparse.divide(xs, y)
    d = rng.integers(-4, 5, shape) / 4.0
    primals = (xs,) if kind == "python" else (xs, y)
    grads = _grads(out, primals, torch.as_tensor(d).to(device))
    ex = element_entries(xe, shape)
    y_host = {"python": 2.5, "0d": -2.0, "dense": yd}[kind]
    _, y_vals, o, d_vals, mask = _dense_grads(ex, y_host, d, shape, np.float64)
    hx = _host_entries(grads[0])
    with np.errstate(all="ignore"):
        _assert(hx.data, d_vals[hx.coords] / y_vals[hx.coords], False)
        terms = np.where(mask, -d_vals * o / y_vals, 0)
    if kind == "0d":
        assert grads[1].shape == ()
        assert grads[1].device == y.device
        np.testing.assert_allclose(grads[1].item(), terms.sum(), rtol=1e-13)
    if kind == "dense":
        assert grads[1].layout == torch.strided
        _assert(grads[1], terms, False)


def test_finite_differences_of_a_hybrid_coo():
    """Each stored value of x and y (duplicates included) against central differences of
    ``sum(dout * out)``, out's values from the dense quotient on the union."""
    rng = np.random.default_rng(7)
    shape = (3, 4, 2)
    xe = random_sparse(rng, shape[:2], 5, shape[2:], zeros=0.0)
    ye = canonical(Entries(np.ones(12), np.unravel_index(np.arange(12), shape[:2])), shape[:2])
    ye = Entries(rng.integers(2, 6, (12, 2)) / 2.0, ye.coords)  # every position: smooth
    d = rng.integers(-4, 5, shape) / 4.0

    def loss(xv, yv):
        ex = element_entries(Entries(xv, xe.coords), shape)
        ey = element_entries(Entries(yv, ye.coords), shape)
        _, _, o, dv, mask = _dense_grads(ex, ey, d, shape, np.float64)
        return float(np.sum(dv[mask] * o[mask]))

    xs = coo(xe, shape).requires_grad_(True)
    ys = coo(ye, shape).requires_grad_(True)
    gx, gy = _grads(xpops.sparse.divide(xs, ys), (xs, ys), torch.as_tensor(d))

    def numeric(f, values, h=1e-6):
        grad = np.zeros_like(values)
        for k in np.ndindex(values.shape):
            plus, minus = values.copy(), values.copy()
            plus[k] += h
            minus[k] -= h
            grad[k] = (f(plus) - f(minus)) / (2 * h)
        return grad

    want_x = numeric(lambda v: loss(v, ye.data), np.asarray(xe.data, dtype=np.float64))
    want_y = numeric(lambda v: loss(xe.data, v), np.asarray(ye.data, dtype=np.float64))
    np.testing.assert_allclose(gx._values().numpy(), want_x, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(gy._values().numpy(), want_y, rtol=1e-6, atol=1e-8)


def test_float32_gradient_dtypes_and_real_parts(device):
    """Gradients have the operands' dtypes: a real operand of a complex quotient gets the
    real part."""
    shape = (3, 3)
    e = Entries(np.array([1.0, 2.0]), (np.array([0, 1]), np.array([0, 2])))
    xs = coo(e, shape, "float32", device).requires_grad_(True)
    ys = coo(Entries(np.array([1 + 1j, 2.0]), e.coords), shape, "complex64", device)
    ys.requires_grad_(True)
    out = xpops.sparse.divide(xs, ys)
    assert out.dtype == torch.complex64
    gx, gy = _grads(out, (xs, ys), torch.ones(shape, dtype=torch.complex64, device=device))
    assert gx.dtype == torch.float32
    assert gy.dtype == torch.complex64
    np.testing.assert_allclose(gx.to_dense().cpu().numpy()[0, 0], (1 / np.conj(1 + 1j)).real)


def test_cotangent_errors():
    shape = (2, 2)
    e = Entries(np.array([1.0]), (np.array([0]), np.array([1])))
    from xpops.sparse._vjp import RULE

    _, residuals = RULE.forward(coo(e, shape), 2.0)
    for bad in (torch.ones(shape, dtype=torch.complex128), torch.ones(shape, dtype=torch.int64)):
        with pytest.raises(TypeError, match=r"cotangent of sparse\.divide must have a real"):
            RULE.backward(residuals, bad)
    with pytest.raises(TypeError, match=r"cotangent of sparse\.divide must be a PyTorch tensor"):
        RULE.backward(residuals, np.ones(shape))


@pytest.mark.parametrize("y", [2**64, 10**30, -(2**70)])
def test_python_int_divisor_past_int64(y):
    """A Python int past int64 divides as the float it converts to, forward and backward."""
    x = torch.sparse_coo_tensor(
        torch.tensor([[0, 2]]),
        torch.tensor([1.5, -2.0], dtype=torch.float64),
        (4,),
        check_invariants=False,
    ).requires_grad_()
    out = xpops.sparse.divide(x, y)
    np.testing.assert_allclose(out.to_dense().detach().numpy(), [1.5 / y, 0, -2.0 / y, 0])
    out.to_dense().sum().backward()
    np.testing.assert_allclose(x.grad.to_dense().numpy(), [1 / float(y), 0, 1 / float(y), 0])


@pytest.mark.parametrize("dout_kind", ["dense", "csr", "coo", "uncoalesced"])
@pytest.mark.parametrize("dtype", ["float64", "complex128"])
@pytest.mark.parametrize("layout", ["coo", "csr"])
def test_matrices(device, layout, dtype, dout_kind, monkeypatch):
    """Coalesced COO and CSR matrices (on CUDA, the compressed kernel): rows longer than a
    warp, empty rows (the first and the last), rows of one operand only, stored zeros (inf and
    nan), each kind of cotangent."""
    if layout == "coo" and dout_kind == "csr":
        pytest.skip("autograd refuses a CSR cotangent of a COO output")
    rng = np.random.default_rng(sum(map(ord, layout + dtype + dout_kind)))
    shape = (40, 300)
    complex_ = dtype == "complex128"
    wide = np.complex128 if complex_ else np.float64

    def entries(rows, n):
        keys = np.unique(rng.choice(rows, n) * shape[1] + rng.integers(0, shape[1], n))
        values = rng.integers(-8, 9, keys.size) / 4  # zeros among them
        if complex_:
            values = values + 1j * rng.integers(-8, 9, keys.size) / 4
        return Entries(values, (keys // shape[1], keys % shape[1]))

    def tensor(e, kind, coalesced=True):
        idx = torch.as_tensor(np.stack(e.coords))
        values = torch.as_tensor(e.data).to(tdtype(dtype))
        t = torch.sparse_coo_tensor(idx, values, shape, is_coalesced=coalesced).to(device)
        return t.to_sparse_csr() if kind == "csr" else t

    from xpops.sparse import _vjp_torch

    kernel = []
    on_gpu = _vjp_torch._on_gpu

    def spied(*args):
        grads = on_gpu(*args)
        kernel.append(grads is not None)
        return grads

    monkeypatch.setattr(_vjp_torch, "_on_gpu", spied)
    xe, ye = entries([1, 3, 4, 5, 17, 30], 900), entries([3, 4, 5, 17, 22, 38], 900)
    xs = tensor(xe, layout).requires_grad_(True)
    ys = tensor(ye, layout).requires_grad_(True)
    out = xpops.sparse.divide(xs, ys)
    de = entries([1, 4, 17, 22, 39], 600)
    if dout_kind == "dense":
        d = rng.integers(-4, 5, shape) / 4.0
        dout = torch.as_tensor(d).to(tdtype(dtype)).to(device)
    elif dout_kind == "uncoalesced":  # duplicates: the rule's general path
        twice = Entries(np.concatenate([de.data, de.data]), tuple(np.tile(c, 2) for c in de.coords))
        dout = tensor(twice, "coo", coalesced=False)
        d = np.zeros(shape, wide)
        np.add.at(d, twice.coords, twice.data)
    else:
        dout = tensor(de, dout_kind)
        d = np.zeros(shape, wide)
        d[de.coords] = de.data
    gx, gy = _grads(out, (xs, ys), dout)
    _, y_vals, o, _, _ = _dense_grads(xe, ye, d, shape, wide)
    with np.errstate(all="ignore"):
        want_x = d[xe.coords] / np.conj(y_vals[xe.coords])
        want_y = -d[ye.coords] * np.conj(o[ye.coords] / y_vals[ye.coords])
    for g, a, want in ((gx, xs, want_x), (gy, ys, want_y)):
        assert g.layout == a.layout
        assert g.dtype == a.dtype
        _assert(g.values() if layout == "csr" else g._values(), want, complex_)
    if not complex_:
        assert np.isinf(want_x).any()
        assert np.isnan(want_y).any() or np.isinf(want_y).any()
    # CUDA matrices take the kernel, but for an uncoalesced cotangent
    assert kernel == [device.type == "cuda" and dout_kind != "uncoalesced"]
