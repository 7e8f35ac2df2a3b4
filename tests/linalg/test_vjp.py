"""The gradient of linalg.cholesky_solve: `xpops.vjp` on every backend and PyTorch autograd.

References are independent: central finite differences in float64/complex128 of a solve with
``numpy.linalg.solve`` on A built from the used triangle alone (so the unused triangle's
derivative is exactly 0), the closed form written out in NumPy (itself checked against the
finite differences), and ``torch.cholesky_solve``'s own autograd. Complex cotangents follow
PyTorch's convention: ``dL/dRe w + i dL/dIm w`` for a real loss L.
"""

import numpy as np
import pytest
from hypothesis import given, settings

import xpops
from xpops.linalg._vjp import RULE

from .._support import backend_name, to_numpy
from ._common import asarray, make_factor, systems

nan, inf = np.nan, np.inf
solve = xpops.linalg.cholesky_solve

# (x shape, y batch shape, M): a vector, one system, batches that broadcast both ways
CASES = [
    ((3,), (), 3),
    ((3, 2), (), 3),
    ((3, 1, 3, 2), (4,), 3),
    ((3, 2), (2,), 3),
    ((2, 3, 2), (2, 1), 3),
    # few right-hand sides (3K < M, K after folding the summed batch): the rule's reassociated
    # products, C u = dx (z^H u) + z (dx^H u)
    ((7,), (), 7),
    ((2, 7, 1), (2, 1), 7),
]


# ---- references ---------------------------------------------------------------------------------


def _used(factor, upper):
    """The used triangle alone (np.tril/np.triu select, so NaN elsewhere is not read)."""
    return np.triu(factor) if upper else np.tril(factor)


def _matrix(factor, upper):
    t = _used(factor, upper)
    th = np.conj(np.swapaxes(t, -1, -2))
    return th @ t if upper else t @ th


def ref_solve(b, factor, upper):
    """numpy.linalg.solve on A = u u^H (or u^H u) from the used triangle, broadcasting."""
    a = _matrix(np.asarray(factor), upper)
    b = np.asarray(b)
    if b.ndim == 1:
        return np.linalg.solve(a, b[:, None])[:, 0]
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = np.broadcast_to(a, (*batch, *a.shape[-2:]))
    return np.linalg.solve(a, np.broadcast_to(b, (*batch, *b.shape[-2:])))


def numerical_grad(f, a, eps=1e-6):
    """Central differences of the real function `f` at `a`: dL/dRe + i dL/dIm for complex."""
    a = np.array(a)
    grad = np.zeros_like(a)
    units = (1.0, 1j) if np.iscomplexobj(a) else (1.0,)
    for index in np.ndindex(a.shape):
        for unit in units:
            plus, minus = a.copy(), a.copy()
            plus[index] += eps * unit
            minus[index] -= eps * unit
            grad[index] += unit * (f(plus) - f(minus)) / (2 * eps)
    return grad


def fd_grads(b, factor, g, upper):
    """Finite-difference cotangents of x and y for the cotangent g (float64/complex128)."""

    def loss(bb, ff):
        return float(np.sum(np.real(np.conj(g) * ref_solve(bb, ff, upper))))

    return (
        numerical_grad(lambda bb: loss(bb, factor), b),
        numerical_grad(lambda ff: loss(b, ff), factor),
    )


def _sum_to(a, shape):
    lead = a.ndim - len(shape)
    a = np.sum(a, axis=tuple(range(lead)))
    axes = tuple(i for i, s in enumerate(shape) if s == 1 and a.shape[i] != 1)
    return np.sum(a, axis=axes, keepdims=True)


def closed_form(b, factor, g, upper):
    """The rule written out in NumPy, complex128/float64, for the tests that need many values
    (checked against the finite differences in `test_closed_form_matches_finite_differences`).
    """
    wide = np.complex128 if any(np.iscomplexobj(v) for v in (b, factor, g)) else np.float64
    b, factor, g = (np.asarray(v).astype(wide) for v in (b, factor, g))
    vector = b.ndim == 1
    bb, gg = (b[:, None], g[:, None]) if vector else (b, g)
    z = ref_solve(bb, factor, upper)
    dx = ref_solve(gg, factor, upper)
    p = dx @ np.conj(np.swapaxes(z, -1, -2))
    c = _sum_to(p + np.conj(np.swapaxes(p, -1, -2)), factor.shape)
    u = _used(factor, upper)
    dy = -_used(u @ c if upper else c @ u, upper)
    dx = dx[:, 0] if vector else _sum_to(dx, b.shape)
    return dx, dy


def random_system(rng, x_shape, y_batch, m, dtype="float64", upper=False, junk=nan):
    factor, _, clean = make_factor(rng, y_batch, m, dtype, upper, junk=junk)
    complex_ = np.dtype(dtype).kind == "c"

    def draw(shape):
        a = rng.standard_normal(shape)
        return (a + 1j * rng.standard_normal(shape) if complex_ else a).astype(dtype)

    out_shape = (m,) if len(x_shape) == 1 else np.broadcast_shapes(x_shape, (*y_batch, m, 1))
    return draw(x_shape), factor, clean, draw(out_shape)


def pull(xp, b, factor, g, upper):
    out, pullback = xpops.vjp(solve, asarray(xp, b), asarray(xp, factor), upper=upper)
    return out, pullback(asarray(xp, g))


def only_some_on_jax(xp, keep):
    """JAX compiles each op anew for every shape and dtype (seconds a case on two cores): on
    JAX only the cases that cover the most (`keep`) run."""
    if backend_name(xp) == "jax" and not keep:
        pytest.skip("JAX: the broadcast case alone (each op compiles per shape)")


def unused_mask(m, upper):
    return np.tril(np.ones((m, m), bool), -1) if upper else np.triu(np.ones((m, m), bool), 1)


# ---- values against finite differences --------------------------------------------------------


@pytest.mark.parametrize("dtype_name", ["float64", "complex128"])
@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize(("x_shape", "y_batch", "m"), CASES)
def test_against_finite_differences(xp, x_shape, y_batch, m, upper, dtype_name):
    only_some_on_jax(xp, x_shape == CASES[4][0])
    rng = np.random.default_rng(len(x_shape) * 7 + len(y_batch))
    b, factor, _, g = random_system(rng, x_shape, y_batch, m, dtype_name, upper)
    out, (dx, dy) = pull(xp, b, factor, g, upper)
    want_dx, want_dy = fd_grads(b, factor, g, upper)
    np.testing.assert_allclose(to_numpy(out), ref_solve(b, factor, upper), atol=1e-12)
    assert type(dx) is type(out)
    assert type(dy) is type(out)
    assert dx.dtype == getattr(xp, dtype_name)
    assert dy.dtype == getattr(xp, dtype_name)
    dx, dy = to_numpy(dx), to_numpy(dy)
    assert dx.shape == b.shape
    assert dy.shape == factor.shape
    np.testing.assert_allclose(dx, want_dx, rtol=0, atol=1e-7)
    np.testing.assert_allclose(dy, want_dy, rtol=0, atol=1e-7)
    # the unused triangle (NaN in the factor) has an exact 0, +0.0, cotangent
    assert np.all(dy[..., unused_mask(m, upper)] == 0)
    zeros = dy[..., unused_mask(m, upper)]
    assert not np.any(np.signbit(np.real(zeros)) | np.signbit(np.imag(zeros)))
    assert np.all(np.isfinite(dy))


@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize(("x_shape", "y_batch", "m"), [CASES[0], CASES[2], CASES[4]])
def test_closed_form_matches_finite_differences(x_shape, y_batch, m, upper):
    rng = np.random.default_rng(5)
    b, factor, _, g = random_system(rng, x_shape, y_batch, m, "complex128", upper)
    for got, want in zip(
        closed_form(b, factor, g, upper), fd_grads(b, factor, g, upper), strict=True
    ):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-7)


@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize(
    ("dx_name", "dy_name"), [("float64", "complex128"), ("complex128", "float64")]
)
def test_real_with_complex_inputs(xp, upper, dx_name, dy_name):
    """A real input next to a complex one: its cotangent is the real part, in its dtype."""
    rng = np.random.default_rng(3)
    b, _, _, _ = random_system(rng, (2, 3, 2), (), 3, dx_name, upper)
    _, factor, _, _ = random_system(rng, (3, 2), (2,), 3, dy_name, upper)
    g = rng.standard_normal((2, 3, 2)) + 1j * rng.standard_normal((2, 3, 2))
    _, (dx, dy) = pull(xp, b, factor, g, upper)
    assert dx.dtype == getattr(xp, dx_name)
    assert dy.dtype == getattr(xp, dy_name)
    want_dx, want_dy = fd_grads(b, factor, g, upper)
    np.testing.assert_allclose(to_numpy(dx), want_dx, rtol=0, atol=1e-7)
    np.testing.assert_allclose(to_numpy(dy), want_dy, rtol=0, atol=1e-7)


# ---- against PyTorch's autograd ---------------------------------------------------------------


def _torch_grads(torch, b, clean, g, upper):
    """torch.cholesky_solve's own autograd (it broadcasts and sums back like xpops)."""
    bt = torch.tensor(b, requires_grad=True)
    ut = torch.tensor(clean, requires_grad=True)
    vector = b.ndim == 1
    out = torch.cholesky_solve(bt[:, None] if vector else bt, ut, upper=upper)
    out.backward(torch.tensor(g[:, None] if vector else g))
    return bt.grad.numpy(), ut.grad.numpy()


@pytest.mark.parametrize("dtype_name", ["float64", "complex128"])
@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize(("x_shape", "y_batch", "m"), CASES)
def test_against_torch_autograd(x_shape, y_batch, m, upper, dtype_name):
    """On a factor whose unused triangle is zero, torch's factor gradient is ours on the used
    triangle; on the other one it is the other triangle of -C u (lower) or -u C (upper), the
    derivative with respect to entries that the solve does not read, which xpops sets to 0."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(11)
    b, factor, clean, g = random_system(rng, x_shape, y_batch, m, dtype_name, upper)
    _, (dx, dy) = pull(np, b, factor, g, upper)
    want_dx, want_dy = _torch_grads(torch, b, clean, g, upper)
    np.testing.assert_allclose(dx, want_dx, rtol=0, atol=1e-12)
    mask = unused_mask(m, upper)
    np.testing.assert_allclose(dy[..., ~mask], want_dy[..., ~mask], rtol=0, atol=1e-12)
    assert np.all(dy[..., mask] == 0)
    # torch's other triangle: -C u (-u C) with C summed over y's broadcast batch
    vector = b.ndim == 1
    z = ref_solve(b[:, None] if vector else b, factor, upper)
    dxf = ref_solve(g[:, None] if vector else g, factor, upper)
    p = dxf @ np.conj(np.swapaxes(z, -1, -2))
    c = _sum_to(p + np.conj(np.swapaxes(p, -1, -2)), factor.shape)
    full = -(clean @ c if upper else c @ clean)
    np.testing.assert_allclose(want_dy[..., mask], full[..., mask], rtol=0, atol=1e-12)


def test_torch_autograd_reads_the_unused_triangle():
    """torch.cholesky_solve's backward multiplies by the whole factor: NaN in the unused
    triangle (which its forward ignores) makes its factor gradient NaN; ours stays finite."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    b, factor, _, g = random_system(rng, (3, 2), (), 3)
    _, want_dy = _torch_grads(torch, b, factor, g, False)
    assert np.isnan(want_dy[np.tril(np.ones((3, 3), bool))]).any()
    _, (_, dy) = pull(np, b, factor, g, False)
    assert np.all(np.isfinite(dy))


@settings(max_examples=25, deadline=None)
@given(case=systems())
def test_property_against_torch_autograd(case):
    torch = pytest.importorskip("torch")
    m, k, bx, by, upper, seed = case
    rng = np.random.default_rng(seed)
    b, factor, clean, g = random_system(rng, (*bx, m, k), by, m, "float64", upper)
    _, (dx, dy) = pull(np, b, factor, g, upper)
    want_dx, want_dy = _torch_grads(torch, b, clean, g, upper)
    want_dy = _used(want_dy, upper)
    scale = max(1.0, float(np.max(np.abs(want_dy))), float(np.max(np.abs(want_dx))))
    np.testing.assert_allclose(dx, want_dx, rtol=0, atol=1e-11 * scale)
    np.testing.assert_allclose(dy, want_dy, rtol=0, atol=1e-11 * scale)


# ---- through PyTorch autograd (the contract hands tensors that require grad to the rule) ------


@pytest.mark.parametrize("dtype_name", ["float64", "complex128"])
@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize(
    ("x_shape", "y_batch", "m"), [((2,), (), 2), ((3, 1, 2, 1), (2,), 2), ((2, 2, 2), (2, 1), 2)]
)
def test_torch_gradcheck(x_shape, y_batch, m, upper, dtype_name):
    """gradcheck perturbs every entry, the unused triangle (NaN here) included: the solve
    does not read it, so its numerical derivative is 0, as is ours."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(13)
    b, factor, _, _ = random_system(rng, x_shape, y_batch, m, dtype_name, upper)
    bt = torch.tensor(b, requires_grad=True)
    ut = torch.tensor(factor, requires_grad=True)
    assert torch.autograd.gradcheck(lambda p, q: solve(p, q, upper=upper), (bt, ut))


@pytest.mark.parametrize("which", ["x", "y"])
def test_torch_one_input_requires_grad(which):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    b, factor, _, g = random_system(rng, (2, 3, 2), (), 3)
    bt, ut = torch.tensor(b), torch.tensor(factor)
    (bt if which == "x" else ut).requires_grad_()
    out = solve(bt, ut)
    assert out.requires_grad
    out.backward(torch.tensor(g))
    want = dict(zip("xy", closed_form(b, factor, g, False), strict=True))
    got = bt.grad if which == "x" else ut.grad
    np.testing.assert_allclose(got.numpy(), want[which], rtol=0, atol=1e-12)
    assert (ut.grad if which == "x" else bt.grad) is None


def test_torch_no_grad_and_dtypes():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(6)
    b, factor, _, g = random_system(rng, (3, 2), (), 3)
    bt = torch.tensor(b, dtype=torch.float32, requires_grad=True)
    ut = torch.tensor(factor, requires_grad=True)
    with torch.no_grad():
        assert solve(bt, ut).grad_fn is None
    out = solve(bt, ut)
    assert out.dtype == torch.float64
    out.backward(torch.tensor(g))
    assert bt.grad.dtype == torch.float32
    assert ut.grad.dtype == torch.float64
    want_dx, want_dy = closed_form(b.astype(np.float32), factor, g, False)
    np.testing.assert_allclose(bt.grad.numpy(), want_dx, rtol=0, atol=1e-6)
    np.testing.assert_allclose(ut.grad.numpy(), want_dy, rtol=0, atol=1e-12)


# ---- dtypes ------------------------------------------------------------------------------------


@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("dtype_name", ["float32", "complex64"])
def test_single_precision(xp, upper, dtype_name):
    rng = np.random.default_rng(8)
    b, factor, _, g = random_system(rng, (3, 1, 4, 2), (2,), 4, dtype_name, upper)
    _, (dx, dy) = pull(xp, b, factor, g, upper)
    assert dx.dtype == getattr(xp, dtype_name)
    assert dy.dtype == getattr(xp, dtype_name)
    want_dx, want_dy = closed_form(b, factor, g, upper)
    np.testing.assert_allclose(to_numpy(dx), want_dx, rtol=0, atol=5e-5)
    np.testing.assert_allclose(to_numpy(dy), want_dy, rtol=0, atol=5e-5)
    assert np.all(to_numpy(dy)[..., unused_mask(4, upper)] == 0)


@pytest.mark.parametrize(("dx_name", "dy_name"), [("float32", "float64"), ("float64", "float32")])
def test_mixed_precision_each_cotangent_in_its_input_dtype(xp, dx_name, dy_name):
    rng = np.random.default_rng(9)
    b, factor, _, g = random_system(rng, (2, 3, 2), (), 3)
    b, factor = b.astype(dx_name), factor.astype(dy_name)
    out, (dx, dy) = pull(xp, b, factor, g, False)
    assert out.dtype == xp.float64
    assert dx.dtype == getattr(xp, dx_name)
    assert dy.dtype == getattr(xp, dy_name)
    want_dx, want_dy = closed_form(b, factor, g, False)
    np.testing.assert_allclose(to_numpy(dx), want_dx, rtol=0, atol=1e-6)
    np.testing.assert_allclose(to_numpy(dy), want_dy, rtol=0, atol=1e-6)


def test_float16_keeps_its_dtype():
    rng = np.random.default_rng(10)
    b, factor, _, g = random_system(rng, (3, 2), (), 3)
    b16, f16, g16 = b.astype(np.float16), factor.astype(np.float16), g.astype(np.float16)
    _, (dx, dy) = pull(np, b16, f16, g16, False)
    assert dx.dtype == np.float16
    assert dy.dtype == np.float16
    want_dx, want_dy = closed_form(b16, f16, g16, False)
    np.testing.assert_allclose(dx, want_dx, rtol=0, atol=1e-2)
    np.testing.assert_allclose(dy, want_dy, rtol=0, atol=1e-2)


@pytest.mark.parametrize(("bad", "name"), [("x", "x"), ("y", "y"), ("bool", "x")])
def test_integer_and_bool_inputs_have_no_gradient(xp, bad, name):
    b = xp.asarray(np.ones((2, 1)))
    factor = xp.asarray(np.eye(2))
    if bad == "x":
        b = xp.asarray(np.ones((2, 1), np.int64))
    elif bad == "y":
        factor = xp.asarray(np.eye(2, dtype=np.int32))
    else:
        b = xp.asarray(np.ones((2, 1), bool))
    with pytest.raises(TypeError, match=rf"`{name}` has dtype .*which has no gradient"):
        xpops.vjp(solve, b, factor)


def test_lists_are_arrays():
    factor = np.linalg.cholesky(np.array([[4.0, 2.0], [2.0, 3.0]]))
    out, pullback = xpops.vjp(solve, [6.0, 5.0], factor.tolist())
    np.testing.assert_allclose(out, [1.0, 1.0], atol=1e-15)
    dx, dy = pullback(np.array([1.0, 0.0]))
    want_dx, want_dy = closed_form(np.array([6.0, 5.0]), factor, np.array([1.0, 0.0]), False)
    np.testing.assert_allclose(dx, want_dx, atol=1e-15)
    np.testing.assert_allclose(dy, want_dy, atol=1e-15)


# ---- special values, empty ----------------------------------------------------------------------


@pytest.mark.parametrize("bad", [nan, -inf])
def test_nan_and_inf_in_x_stay_in_their_system(xp, bad):
    rng = np.random.default_rng(12)
    b, factor, _, g = random_system(rng, (2, 3, 2), (2,), 3)
    b[0, 1, 0] = bad
    _, (dx, dy) = pull(xp, b, factor, g, False)
    dx, dy = to_numpy(dx), to_numpy(dy)
    # no finite value (NaN, or an infinity where a kernel sums fewer products with 0)
    assert not np.isfinite(dy[0][np.tril(np.ones((3, 3), bool))]).any()
    want_dx, want_dy = closed_form(b[1:], factor[1:], g[1:], False)
    np.testing.assert_allclose(dx[1:], want_dx, rtol=0, atol=1e-12)
    want_dx, _ = closed_form(b[:1], factor[:1], g[:1], False)
    np.testing.assert_allclose(dx[:1], want_dx, rtol=0, atol=1e-12)  # A^-1 G: no B in it
    np.testing.assert_allclose(dy[1:], want_dy, rtol=0, atol=1e-12)
    assert np.all(dy[..., unused_mask(3, False)] == 0)  # zeros even beside NaN


@pytest.mark.parametrize("upper", [False, True])
def test_junk_in_the_unused_triangle_is_ignored(xp, upper):
    rng = np.random.default_rng(14)
    b, factor, clean, g = random_system(rng, (3, 2), (), 3, upper=upper, junk=1e300)
    _, (dx, dy) = pull(xp, b, factor, g, upper)
    _, (dx0, dy0) = pull(xp, b, clean, g, upper)
    np.testing.assert_array_equal(to_numpy(dx), to_numpy(dx0))
    np.testing.assert_array_equal(to_numpy(dy), to_numpy(dy0))


@pytest.mark.parametrize(
    ("x_shape", "y_shape"),
    [
        ((0, 3, 2), (3, 3)),  # zero-size batch of x
        ((1, 3, 2), (0, 3, 3)),  # zero-size batch of y, x broadcast
        ((2, 1, 3, 2), (0, 3, 3)),  # zero-size batch against a non-empty one
        ((3, 0), (3, 3)),  # K = 0
        ((2, 3, 0), (2, 3, 3)),
        ((0, 2), (0, 0)),  # M = 0
        ((0,), (0, 0)),
    ],
)
@pytest.mark.parametrize("upper", [False, True])
def test_empty(xp, x_shape, y_shape, upper):
    b = np.ones(x_shape)
    factor = np.broadcast_to(np.eye(y_shape[-1]), y_shape).copy()
    out_shape = (
        x_shape
        if len(x_shape) == 1
        else (*np.broadcast_shapes(x_shape[:-2], y_shape[:-2]), *x_shape[-2:])
    )
    out, (dx, dy) = pull(xp, b, factor, np.ones(out_shape), upper)
    assert tuple(out.shape) == out_shape
    assert tuple(dx.shape) == x_shape
    assert tuple(dy.shape) == y_shape
    assert dx.dtype == xp.float64
    assert dy.dtype == xp.float64
    # a sum over nothing: the cotangents of the inputs that meet no output are zeros
    assert np.all(to_numpy(dx) == 0)
    assert np.all(to_numpy(dy) == 0)


# ---- cotangent and argument errors, inputs unmodified -----------------------------------------


def _numpy_pullback(dtype=np.float64):
    b = np.ones((2, 1), dtype)
    return xpops.vjp(solve, b, np.eye(2, dtype=dtype))


def test_cotangent_of_another_library():
    import array_api_strict as strict

    _, pullback = _numpy_pullback()
    with pytest.raises(TypeError, match=r"`cotangent` must be an array of the output's library"):
        pullback(strict.ones((2, 1), dtype=strict.float64))


@pytest.mark.parametrize("dtype", [np.int64, np.bool_, np.complex128])
def test_cotangent_dtype(dtype):
    _, pullback = _numpy_pullback()
    with pytest.raises(TypeError, match=r"`cotangent` must have a real floating dtype"):
        pullback(np.ones((2, 1), dtype))


def test_cotangent_of_a_complex_output():
    _, pullback = _numpy_pullback(np.complex128)
    with pytest.raises(TypeError, match=r"`cotangent` must have a real or complex floating"):
        pullback(np.ones((2, 1), np.int32))
    real = pullback(np.ones((2, 1)))
    complex_ = pullback(np.ones((2, 1), np.complex128))
    for got, want in zip(real, complex_, strict=True):
        assert got.dtype == np.complex128
        np.testing.assert_array_equal(got, want)


def test_cotangent_shape_and_type():
    _, pullback = _numpy_pullback()
    with pytest.raises(ValueError, match="shape of the output"):
        pullback(np.ones((2, 2)))
    with pytest.raises(TypeError, match="`cotangent` must be an array"):
        pullback([[1.0], [1.0]])


def test_float32_cotangent_of_a_float64_output():
    rng = np.random.default_rng(15)
    b, factor, _, g = random_system(rng, (3, 2), (), 3)
    _, pullback = xpops.vjp(solve, b, factor)
    dx, dy = pullback(g.astype(np.float32))
    assert dx.dtype == np.float64
    assert dy.dtype == np.float64
    want_dx, want_dy = closed_form(b, factor, g.astype(np.float32), False)
    np.testing.assert_allclose(dx, want_dx, rtol=0, atol=1e-12)
    np.testing.assert_allclose(dy, want_dy, rtol=0, atol=1e-12)


def test_argument_errors():
    with pytest.raises(TypeError, match="`y` must be an array, got None"):
        xpops.vjp(solve, np.ones(2), None)
    with pytest.raises(TypeError, match="takes 2 primal"):
        xpops.vjp(solve, np.ones(2), np.eye(2), True)
    with pytest.raises(TypeError, match="`upper` must be"):
        xpops.vjp(solve, np.ones(2), np.eye(2), upper="yes")
    with pytest.raises(ValueError, match="must agree on M"):
        xpops.vjp(solve, np.ones(3), np.eye(2))
    assert RULE.primals == ("x", "y")


@pytest.mark.parametrize("upper", [False, True])
def test_inputs_unmodified(xp, upper):
    rng = np.random.default_rng(16)
    b, factor, _, g = random_system(rng, (3, 1, 3, 2), (4,), 3, "complex128", upper)
    xb, xf, xg = asarray(xp, b), asarray(xp, factor), asarray(xp, g)
    _, pullback = xpops.vjp(solve, xb, xf, upper=upper)
    pullback(xg)
    np.testing.assert_array_equal(to_numpy(xb), b)
    np.testing.assert_array_equal(to_numpy(xf), factor)  # NaN compares equal here
    np.testing.assert_array_equal(to_numpy(xg), g)


def test_dask_lazy_cotangents():
    """The rule is array-API code: on Dask arrays (several chunks) it stays lazy."""
    da = pytest.importorskip("dask.array")
    rng = np.random.default_rng(17)
    b, factor, _, g = random_system(rng, (4, 1, 3, 2), (2,), 3)
    _, pullback = xpops.vjp(solve, da.from_array(b, chunks=(2, 1, 3, 2)), da.from_array(factor))
    dx, dy = pullback(da.from_array(g, chunks=(2, 1, 3, 2)))
    assert isinstance(dx, da.Array)
    assert isinstance(dy, da.Array)
    want_dx, want_dy = closed_form(b, factor, g, False)
    np.testing.assert_allclose(dx.compute(scheduler="synchronous"), want_dx, rtol=0, atol=1e-12)
    np.testing.assert_allclose(dy.compute(scheduler="synchronous"), want_dy, rtol=0, atol=1e-12)


# ---- CuPy: the fused kernel of the factor's cotangent -------------------------------------------


@pytest.mark.parametrize("dtype_name", ["float32", "float64"])
@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize(
    ("batch", "m", "k"),
    [((300,), 1, 1), ((1000,), 16, 1), ((7, 9), 33, 3), ((50,), 64, 2), ((4,), 65, 1)],
)
def test_cupy_fused_factor_cotangent(cupy_only, dtype_name, upper, batch, m, k):
    """The fused kernel (batches of small real systems, M up to 64) and the generic code past
    it, against the closed form in float64, with NaN in the unused triangle."""
    cp = cupy_only
    rng = np.random.default_rng(19)
    b, factor, _, g = random_system(rng, (*batch, m, k), batch, m, dtype_name, upper)
    dx, dy = pull(cp, b, factor, g, upper)[1]
    want_x, want_y = closed_form(b, factor, g, upper)
    assert dy.dtype == np.dtype(dtype_name)
    dy = cp.asnumpy(dy)
    assert (dy[..., unused_mask(m, upper)] == 0).all()
    tol = {"float32": 2e-3, "float64": 1e-10}[dtype_name]
    scale = np.abs(want_y).max()
    np.testing.assert_allclose(dy, want_y, rtol=tol, atol=tol * scale)
    np.testing.assert_allclose(cp.asnumpy(dx), want_x, rtol=tol, atol=tol * np.abs(want_x).max())


# (batch, M, K): M about the lane groups' sizes (1, 2, 4, 8, 16, 32 lanes a system), K about
# the kernel's chunks of right-hand sides (1, or 4 at a time); "vector": x of shape (M,)
FUSED_CASES = [
    ((1,), 1, 1),
    ((257,), 2, 3),
    ((100,), 5, 4),
    ("vector", 7, 1),
    ((33,), 8, 9),
    ((3, 41), 15, 1),
    ((65,), 16, 5),
    ((129,), 17, 2),
    ((70,), 31, 1),
    ((64,), 32, 4),
]


@pytest.mark.parametrize("dtype_name", ["float32", "float64", "complex64", "complex128"])
@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize(("batch", "m", "k"), FUSED_CASES)
def test_cupy_fused_backward(cupy_only, monkeypatch, dtype_name, upper, batch, m, k):
    """Both cotangents from the one kernel (rows of the factor up to FUSED_MAX_BYTES), the two
    steps past it, against the closed form in float64, with NaN in the unused triangle."""
    from xpops.linalg import _cupy_grad

    cp = cupy_only
    launched = []
    launch = _cupy_grad.lanes_grad_launch

    def spy(dtype, m, single, device):
        launched.append(m)
        return launch(dtype, m, single, device)

    monkeypatch.setattr(_cupy_grad, "lanes_grad_launch", spy)
    rng = np.random.default_rng(23)
    x_shape, y_batch = ((m,), ()) if batch == "vector" else ((*batch, m, k), batch)
    b, factor, _, g = random_system(rng, x_shape, y_batch, m, dtype_name, upper)
    dx, dy = pull(cp, b, factor, g, upper)[1]
    want_x, want_y = closed_form(b, factor, g, upper)
    fused = m * np.dtype(dtype_name).itemsize <= _cupy_grad.FUSED_MAX_BYTES
    assert launched == ([m] if fused else [])
    assert dx.dtype == dy.dtype == np.dtype(dtype_name)
    dx, dy = cp.asnumpy(dx), cp.asnumpy(dy)
    assert (dy[..., unused_mask(m, upper)] == 0).all()
    tol = 2e-3 if dtype_name in ("float32", "complex64") else 1e-10
    np.testing.assert_allclose(dy, want_y, rtol=tol, atol=tol * np.abs(want_y).max())
    np.testing.assert_allclose(dx, want_x, rtol=tol, atol=tol * np.abs(want_x).max())


# (x shape, factor batch, M, whether the forward keeps its first solve): past 64 unknowns, one
# system and batches of their own (kept); a vector and x broadcast against the factor (not)
HALF_CASES = [
    ((65, 1), (), 65, True),
    ((2, 100, 3), (2,), 100, True),
    ((90,), (), 90, False),
    ((2, 1, 70, 3), (2, 3), 70, False),
]


@pytest.mark.parametrize("dtype_name", ["float32", "float64", "complex128"])
@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize(("x_shape", "y_batch", "m", "kept"), HALF_CASES)
def test_large_systems_from_the_forwards_half(
    xp, monkeypatch, x_shape, y_batch, m, kept, upper, dtype_name
):
    """NumPy (and PyTorch's CPU tensors, on their memory): past 64 unknowns the forward keeps
    its first triangular solve and the factor's cotangent is one product from it
    (`_numpy_grad`, row blocks of the used triangle, M not a multiple of them); without the
    kept solve, the generic rule. Against the closed form in float64, NaN in the unused
    triangle."""
    from xpops.linalg import _numpy_grad

    only_some_on_jax(xp, x_shape == HALF_CASES[1][0])
    calls = []
    product = _numpy_grad._triangle_product

    def spy(*args):
        calls.append(args[0].shape)
        return product(*args)

    monkeypatch.setattr(_numpy_grad, "_triangle_product", spy)
    monkeypatch.setattr(_numpy_grad, "_BLOCK_ROWS", 32)
    rng = np.random.default_rng(31)
    b, factor, _, g = random_system(rng, x_shape, y_batch, m, dtype_name, upper)
    out, (dx, dy) = pull(xp, b, factor, g, upper)
    want_x, want_y = closed_form(b, factor, g, upper)
    ours = backend_name(xp) in ("numpy", "torch")  # the NumPy engines: theirs
    assert len(calls) == (1 if ours and kept else 0)
    assert dx.dtype == dy.dtype == getattr(xp, dtype_name)
    dx, dy = to_numpy(dx), to_numpy(dy)
    assert dx.shape == b.shape
    assert dy.shape == factor.shape
    zeros = dy[..., unused_mask(m, upper)]
    assert (zeros == 0).all()
    assert not np.any(np.signbit(np.real(zeros)) | np.signbit(np.imag(zeros)))
    tol = 2e-3 if dtype_name == "float32" else 1e-10
    np.testing.assert_allclose(to_numpy(out), ref_solve(b, factor, upper), rtol=tol, atol=tol)
    np.testing.assert_allclose(dy, want_y, rtol=tol, atol=tol * np.abs(want_y).max())
    np.testing.assert_allclose(dx, want_x, rtol=tol, atol=tol * np.abs(want_x).max())


# (x shape, factor batch, M): past SMALL_MAX_M, one system and batches, a vector, x broadcast
# against the factor's batch; the factor broadcast against x's (the generic code)
BLAS_CASES = [
    ((65, 1), (), 65),
    ((1, 100, 7), (1,), 100),
    ((3, 130, 2), (3,), 130),
    ((90,), (), 90),
    ((2, 1, 70, 3), (2, 3), 70),
    ((4, 70, 2), (), 70),
]


@pytest.mark.parametrize("blocks", [1, 3])
@pytest.mark.parametrize("dtype_name", ["float32", "float64", "complex128"])
@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize(("x_shape", "y_batch", "m"), BLAS_CASES)
def test_cupy_blas_backward(cupy_only, monkeypatch, x_shape, y_batch, m, upper, dtype_name, blocks):
    """Large systems: both cotangents from cuBLAS calls (`_cupy_blas.backward`: real factors
    with a batch of their own; Y kept by the forward or computed; the product whole or in row
    blocks of the used triangle, M not a multiple of them), the generic code for the rest,
    against the closed form in float64, with NaN in the unused triangle and in the memory
    pool."""
    from xpops.linalg import _cupy_blas

    cp = cupy_only
    calls = []
    blas = _cupy_blas.backward

    def spy(*args):
        got = blas(*args)
        calls.append((got is not None, args[-1] is not None))
        return got

    monkeypatch.setattr(_cupy_blas, "BLOCKED_MIN_WORK", 0)
    monkeypatch.setattr(_cupy_blas, "BLOCKS", blocks)
    monkeypatch.setattr("xpops.linalg._cupy_grad.blas_backward", spy)
    rng = np.random.default_rng(29)
    b, factor, _, g = random_system(rng, x_shape, y_batch, m, dtype_name, upper)
    junk = cp.full(16 * (factor.size + b.size) + 4096, np.nan, dtype=np.float32)
    del junk
    dx, dy = pull(cp, b, factor, g, upper)[1]
    want_x, want_y = closed_form(b, factor, g, upper)
    own_batch = len(x_shape) < 3 or np.broadcast_shapes(x_shape[:-2], y_batch) == y_batch
    # the forward keeps its first solve for two arrays of one batch shape and dtype
    real = dtype_name != "complex128"
    kept = real and len(x_shape) >= 2 and x_shape[:-2] == y_batch
    assert calls == ([(real, kept)] if own_batch else [])
    assert dx.dtype == dy.dtype == np.dtype(dtype_name)
    assert dx.shape == b.shape
    assert dy.shape == factor.shape
    dx, dy = cp.asnumpy(dx), cp.asnumpy(dy)
    zeros = dy[..., unused_mask(m, upper)]
    assert (zeros == 0).all()
    assert not np.signbit(np.real(zeros)).any()
    tol = 2e-3 if dtype_name == "float32" else 1e-10
    np.testing.assert_allclose(dy, want_y, rtol=tol, atol=tol * np.abs(want_y).max())
    np.testing.assert_allclose(dx, want_x, rtol=tol, atol=tol * np.abs(want_x).max())


def test_torch_cuda_triangular_solves_in_chunks(cupy_only, monkeypatch):
    """Many right-hand sides on CUDA tensors are solved in chunks of columns (PyTorch's own
    solve slows down sharply with their number): the same values as one NumPy solve."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA device")
    from xpops._lib import _compat
    from xpops.linalg import _agnostic

    monkeypatch.setattr(_agnostic, "TORCH_CUDA_MAX_COLUMNS", 7)
    rng = np.random.default_rng(41)
    factor, _, clean = make_factor(rng, (), 5, "float64")
    b = rng.standard_normal((5, 30))
    tb, tf = torch.tensor(b, device="cuda"), torch.tensor(factor, device="cuda")
    for lower, conj_trans in [(True, False), (True, True)]:
        got = _agnostic.solve_triangular(tb, tf, lower, conj_trans, xp=_compat.array_namespace(tb))
        op = clean.T if conj_trans else clean
        np.testing.assert_allclose(got.cpu().numpy(), np.linalg.solve(op, b), rtol=1e-12)
