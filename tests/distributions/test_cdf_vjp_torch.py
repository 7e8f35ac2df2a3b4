"""Gradients of MultivariateNormal.cdf and .logcdf through PyTorch's autograd: the class hands a
recorded call to the rules `CDF_ARRAYS` / `LOGCDF_ARRAYS` (continued from `test_cdf_vjp`, whose
closed forms and SciPy differences are the references).
"""

import math

import numpy as np
import pytest
from scipy import special, stats

from xpops.distributions import MultivariateNormal
from xpops.distributions._cdf_vjp import CDF_ARRAYS, LOGCDF_ARRAYS

from .test_cdf_vjp import _COV3, _MU3, _independent, _scipy_fd, inf

# ---- PyTorch: the class hands a recorded call to CDF_ARRAYS / LOGCDF_ARRAYS ----------------
# (gradcheck's finite differences would be too noisy for quasi-Monte-Carlo: closed forms)


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_torch_backward_independent(log, dtype):
    torch = pytest.importorskip("torch")
    dt = getattr(torch, dtype)
    mu, var = np.array([0.2, -0.5, 1.0]), np.array([1.0, 0.5, 3.0])
    b = np.array([[0.3, 1.2, -0.4], [inf, 0.0, 2.0]])
    a = np.array([-1.0, -inf, -2.0])
    loc = torch.tensor(mu, dtype=dt, requires_grad=True)
    value = torch.tensor(b, dtype=dt, requires_grad=True)
    lower = torch.tensor(a, dtype=dt, requires_grad=True)
    d = MultivariateNormal(loc, torch.tensor(np.diag(var), dtype=dt))
    out = (d.logcdf if log else d.cdf)(value, lower_limit=lower)
    assert out.requires_grad
    cot = torch.tensor([0.7, -1.3], dtype=dt)
    out.backward(cot)
    _, db, da, dlb, dla = _independent(mu, var, b, a)
    gb, ga = (dlb, dla) if log else (db, da)
    c = cot.double().numpy()[:, None]
    rtol = 1e-11 if dtype == "float64" else 2e-5
    assert value.grad.dtype == loc.grad.dtype == lower.grad.dtype == dt
    np.testing.assert_allclose(value.grad.double().numpy(), c * gb, rtol=rtol)
    np.testing.assert_allclose(lower.grad.double().numpy(), (c * ga).sum(0), rtol=rtol)
    np.testing.assert_allclose(loc.grad.double().numpy(), -(c * (gb + ga)).sum(0), rtol=rtol)


def test_torch_one_dimension_loc_only():
    torch = pytest.importorskip("torch")
    loc = torch.tensor([0.4], dtype=torch.float64, requires_grad=True)
    value = torch.tensor([[-3.0], [0.2], [1.5]], dtype=torch.float64)
    out = MultivariateNormal(loc, torch.tensor([[2.5]], dtype=torch.float64)).logcdf(value)
    (g,) = torch.autograd.grad(out.sum(), loc)
    z = (value.numpy() - 0.4) / math.sqrt(2.5)
    ref = np.exp(stats.norm.logpdf(z) - special.log_ndtr(z)) / math.sqrt(2.5)
    np.testing.assert_allclose(g.numpy(), [-ref.sum()], rtol=1e-12)
    assert value.grad is None


def test_torch_correlated_against_scipy():
    torch = pytest.importorskip("torch")
    b = np.array([0.5, 0.2, 0.1])
    _, db, _ = _scipy_fd(_MU3, _COV3, b)
    value = torch.tensor(b, requires_grad=True)
    out = MultivariateNormal(torch.tensor(_MU3), torch.tensor(_COV3)).cdf(value, rng=0)
    out.backward()
    np.testing.assert_allclose(value.grad.numpy(), db, atol=5e-6)


@pytest.mark.parametrize("parameter", ["covariance_matrix", "precision_matrix", "scale_tril"])
def test_torch_matrix_gradient_raises_on_backward(parameter):
    torch = pytest.importorskip("torch")
    loc = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    matrix = torch.eye(2, dtype=torch.float64, requires_grad=True)
    value = torch.zeros(2, dtype=torch.float64)
    out = MultivariateNormal(loc, **{parameter: matrix}).cdf(value)
    assert float(out.detach()) == pytest.approx(0.25)  # the forward pass works
    with pytest.raises(NotImplementedError, match=f"with respect to `{parameter}`"):
        out.backward()
    # with the matrix detached, the gradient of loc is given
    MultivariateNormal(loc, **{parameter: matrix.detach()}).cdf(value).backward()
    np.testing.assert_allclose(loc.grad.numpy(), [-0.5 * stats.norm.pdf(0.0)] * 2, rtol=1e-12)


def _apply(rule, primals, **kwargs):
    from xpops._autodiff import _torch as autograd

    name = "LOGCDF_ARRAYS" if rule is LOGCDF_ARRAYS else "CDF_ARRAYS"
    kwargs.setdefault("parameter", "covariance_matrix")
    return autograd.apply(f"xpops.distributions._cdf_vjp:{name}", primals, kwargs)


def test_torch_rule_arguments():
    torch = pytest.importorskip("torch")
    loc = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    cov = torch.eye(2, dtype=torch.float64)
    value = torch.zeros(2, dtype=torch.float64)
    lower = torch.full((2,), -1.0, dtype=torch.float64, requires_grad=True)
    with pytest.raises(NotImplementedError, match="`return_error` must be False"):
        _apply(CDF_ARRAYS, (loc, cov, value), return_error=True)
    with pytest.raises(ValueError, match="`parameter` must be"):
        _apply(CDF_ARRAYS, (loc, cov, value), parameter="cov")
    with pytest.raises(TypeError, match="optionally lower_limit"):
        _apply(CDF_ARRAYS, (loc, cov, value, lower), lower_limit=lower)
    # a lower limit that wants a gradient must be the fourth primal
    out = _apply(CDF_ARRAYS, (loc, cov, value), lower_limit=lower)
    with pytest.raises(NotImplementedError, match="`lower_limit` is given only"):
        out.backward()
    assert CDF_ARRAYS.primals == LOGCDF_ARRAYS.primals == ("loc", "matrix", "value", "lower_limit")
    out = _apply(LOGCDF_ARRAYS, (loc, cov, value), lower_limit=lower.detach(), validate_args=False)
    out.backward()
    ref = -stats.norm.pdf(0.0) * (1 - stats.norm.pdf(-1.0) / stats.norm.pdf(0.0))
    np.testing.assert_allclose(loc.grad.numpy(), [ref / (0.5 - special.ndtr(-1.0))] * 2)
