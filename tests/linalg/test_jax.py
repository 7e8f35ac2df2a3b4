"""The JAX engine of cholesky_solve and of the internal triangular solve
(`xpops.linalg._jax`), called directly: batch dimensions folded into K where the factor is
broadcast (before, between and after kept ones) or broadcast where the right-hand sides are,
``upper``, complex factors, junk in the unused triangle, against float64 references. The public
function on JAX arrays runs the contract tests (their JAX rows) and ``tests/test_jax.py``."""

import numpy as np
import pytest
import scipy.linalg

from .._support import to_numpy
from ._common import assert_solution, make_factor, reference

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

from xpops.linalg import _jax as engine  # noqa: E402  (after JAX is known to exist)

pytestmark = pytest.mark.usefixtures("jax_only")  # skipped when XPOPS_BACKEND names another

# (batch of the right-hand sides, batch of the factors)
BATCHES = [
    ((), ()),
    ((5,), ()),  # one factor, every right-hand side folded into K
    ((2, 3), (3,)),
    ((2, 3), (2, 1)),  # the factor broadcast along the last batch dimension
    ((4, 2, 3), (1, 2, 1)),  # folded dimensions around a kept one
    ((3,), (2, 3)),  # the right-hand sides broadcast over the factors
    ((1, 3), (2, 1)),  # each broadcast along one
]


@pytest.fixture(autouse=True, scope="module")
def _x64():
    jax.config.update("jax_enable_x64", True)


@pytest.mark.parametrize(("bx", "by"), BATCHES)
@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_solve_batches(bx, by, upper):
    rng = np.random.default_rng(len(bx) + 3 * len(by))
    m, k = 5, 2
    factor, a, _ = make_factor(rng, by, m, upper=upper)  # NaN in the unused triangle
    b = rng.standard_normal((*bx, m, k))
    got = engine.cholesky_solve(jnp.asarray(b), jnp.asarray(factor), upper)
    assert got.shape == (*np.broadcast_shapes(bx, by), m, k)
    assert_solution(got, reference(a, b), "float64")


@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("dtype_name", ["complex64", "complex128", "float32"])
def test_cholesky_solve_dtypes(upper, dtype_name):
    rng = np.random.default_rng(7)
    factor, a, _ = make_factor(rng, (3,), 6, dtype_name, upper=upper)
    b = rng.standard_normal((2, 1, 6, 2)).astype(dtype_name)
    got = engine.cholesky_solve(jnp.asarray(b), jnp.asarray(factor), upper)
    assert got.dtype == np.dtype(dtype_name)
    assert_solution(got, reference(a, b), dtype_name)


@pytest.mark.parametrize("lower", [False, True])
@pytest.mark.parametrize("conj_trans", [False, True])
def test_solve_triangular(lower, conj_trans):
    rng = np.random.default_rng(8)
    factor, _, clean = make_factor(rng, (3,), 7, "complex128", upper=not lower)
    b = rng.standard_normal((2, 1, 7, 2)) + 1j * rng.standard_normal((2, 1, 7, 2))
    got = to_numpy(engine.solve_triangular(jnp.asarray(b), jnp.asarray(factor), lower, conj_trans))
    assert got.shape == (2, 3, 7, 2)
    trans = 2 if conj_trans else 0
    for i in range(2):
        for j in range(3):
            want = scipy.linalg.solve_triangular(clean[j], b[i, 0], lower=lower, trans=trans)
            np.testing.assert_allclose(got[i, j], want, rtol=0, atol=1e-12)


def test_zero_pivot_stays_in_its_system():
    rng = np.random.default_rng(9)
    factor, a, _ = make_factor(rng, (3,), 5)
    factor[1, 2, 2] = 0.0
    b = rng.standard_normal((3, 5, 1))
    got = to_numpy(engine.cholesky_solve(jnp.asarray(b), jnp.asarray(factor), False))
    assert not np.isfinite(got[1]).all()
    assert_solution(got[[0, 2]], reference(a[[0, 2]], b[[0, 2]]), "float64")


# (right-hand sides, factors): the backward's products C u with few right-hand sides, K = 1
# (separate products) and K > 1 after folding a summed batch dimension (concatenated ones)
GRAD_CASES = [
    ((7, 1), (7, 7)),
    ((2, 3, 7, 1), (3, 7, 7)),
    ((2, 7, 1), (2, 1, 7, 7)),
    ((7, 2), (7, 7)),
]


@pytest.mark.parametrize(("xs", "ys"), GRAD_CASES)
@pytest.mark.parametrize("upper", [False, True])
def test_gradients_with_few_right_hand_sides(xs, ys, upper):
    """jax.grad through the rule against JAX's own autodiff of cho_solve on the used
    triangle (the factor broadcast explicitly there)."""
    from xpops.linalg import cholesky_solve

    rng = np.random.default_rng(len(xs) + 7 * upper)
    factor, _, clean = make_factor(rng, ys[:-2], ys[-1], upper=upper)
    b = rng.standard_normal(xs)
    w = rng.standard_normal(np.broadcast_shapes(xs, (*ys[:-1], xs[-1])))

    def ours(b, u):
        return jnp.sum(w * cholesky_solve(b, u, upper=upper))

    def theirs(b, u):
        used = jnp.triu(u) if upper else jnp.tril(u)
        batch = np.broadcast_shapes(b.shape[:-2], u.shape[:-2])
        used = jnp.broadcast_to(used, (*batch, *u.shape[-2:]))
        rhs = jnp.broadcast_to(b, (*batch, *b.shape[-2:]))
        return jnp.sum(w * jax.scipy.linalg.cho_solve((used, not upper), rhs))

    got = jax.jit(jax.grad(ours, (0, 1)))(jnp.asarray(b), jnp.asarray(factor))
    want = jax.grad(theirs, (0, 1))(jnp.asarray(b), jnp.asarray(clean))
    for g, r in zip(got, want, strict=True):
        np.testing.assert_allclose(to_numpy(g), to_numpy(r), rtol=1e-10, atol=1e-10)
