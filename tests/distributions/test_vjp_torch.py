"""Gradients of MultivariateNormal's methods and of kl_divergence through PyTorch's autograd
(the class's methods on tensors that require grad), continued from `test_vjp` (its cases and
helpers), against the autograd of ``torch.distributions.MultivariateNormal`` and
``torch.autograd.gradcheck``.
"""

import numpy as np
import pytest

import xpops
from xpops.distributions import MultivariateNormal, kl_divergence

from .._support import to_numpy
from .test_vjp import PARAMS, D, case, matrix_of, random_cov

# ---- PyTorch: autograd through the class's methods ------------------------------------------


def _torch():
    return pytest.importorskip("torch")


def _leaf(torch, a, dtype=None):
    return torch.tensor(np.asarray(a), dtype=dtype or torch.float64, requires_grad=True)


def _grads(*tensors):
    out = [None if t.grad is None else t.grad.clone() for t in tensors]
    for t in tensors:
        t.grad = None
    return out


@pytest.mark.parametrize("param", PARAMS)
def test_torch_log_prob_and_entropy_match_torch(param):
    torch = _torch()
    loc_, cov, value, _ = case(14, "batch")
    loc, m, v = _leaf(torch, loc_), _leaf(torch, matrix_of(param, cov)), _leaf(torch, value)
    d = MultivariateNormal(loc, **{param: m})

    def ref():  # a fresh one for each backward pass through its factor
        return torch.distributions.MultivariateNormal(loc, **{param: m})

    for ours, theirs, inputs in (
        (lambda: d.log_prob(v), lambda: ref().log_prob(v), (loc, m, v)),
        (lambda: d.prob(v), lambda: ref().log_prob(v).exp(), (loc, m, v)),
        (d.entropy, lambda: ref().entropy(), (loc, m)),
    ):
        out = ours()
        assert type(out.grad_fn).__name__ == "XpopsFunctionBackward"
        w = torch.rand_like(out)
        (out * w).sum().backward()
        got = _grads(*inputs)
        (theirs() * w).sum().backward()
        want = _grads(*inputs)
        for a, b in zip(got, want, strict=True):
            if b is None:  # torch leaves the grad of loc unset for the entropy
                torch.testing.assert_close(a, torch.zeros_like(a), rtol=0, atol=0)
            else:
                torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("param_q", PARAMS)
@pytest.mark.parametrize("param_p", PARAMS)
def test_torch_kl_matches_torch(param_p, param_q):
    torch = _torch()
    rng = np.random.default_rng(15)
    lp, mp = (
        _leaf(torch, rng.standard_normal((2, D))),
        _leaf(torch, matrix_of(param_p, random_cov(rng, (2,)))),
    )
    lq, mq = (
        _leaf(torch, rng.standard_normal(D)),
        _leaf(torch, matrix_of(param_q, random_cov(rng, ()))),
    )
    p, q = MultivariateNormal(lp, **{param_p: mp}), MultivariateNormal(lq, **{param_q: mq})
    tp = torch.distributions.MultivariateNormal(lp, **{param_p: mp})
    tq = torch.distributions.MultivariateNormal(lq, **{param_q: mq})
    out = kl_divergence(p, q)
    assert type(out.grad_fn).__name__ == "XpopsFunctionBackward"
    w = torch.rand_like(out)
    (out * w).sum().backward()
    got = _grads(lp, mp, lq, mq)
    (torch.distributions.kl_divergence(tp, tq) * w).sum().backward()
    want = _grads(lp, mp, lq, mq)
    for i, param in ((1, param_p), (3, param_q)):
        if param == "scale_tril":  # torch reads the whole matrix, the factor its lower triangle
            want[i] = torch.tril(want[i])
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("param", PARAMS)
def test_torch_rsample_matches_torch(param):
    """Our draw with its normals (NumPy's, from the seed) through torch's own factor."""
    torch = _torch()
    loc_, cov, _, _ = case(16, "batch")
    loc, m = _leaf(torch, loc_), _leaf(torch, matrix_of(param, cov))
    d = MultivariateNormal(loc, **{param: m})
    out = d.rsample((4,), rng=3)
    assert tuple(out.shape) == (4, 2, 3, D)
    w = torch.rand_like(out)
    (out * w).sum().backward()
    got = _grads(loc, m)
    eps = torch.tensor(np.random.default_rng(3).standard_normal((4, 2, 3, D)))
    ref = torch.distributions.MultivariateNormal(loc, **{param: m})
    x = ref.loc + (ref.scale_tril @ eps[..., None])[..., 0]
    torch.testing.assert_close(out.detach(), x.detach(), rtol=1e-12, atol=1e-12)
    (x * w).sum().backward()
    want = _grads(loc, m)
    if param == "scale_tril":  # torch reads the whole matrix, the factor its lower triangle
        want[1] = torch.tril(want[1])
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)


def _param_from_free(torch, param, a):
    """A valid matrix of `param` from a free tensor (gradcheck perturbs every entry)."""
    if param == "scale_tril":
        return torch.tril(a)
    return (a + a.mT) / 2


@pytest.mark.parametrize("method", ["log_prob", "prob", "entropy", "rsample", "kl_p", "kl_q"])
@pytest.mark.parametrize("param", PARAMS)
def test_torch_gradcheck(param, method):
    torch = _torch()
    rng = np.random.default_rng(17)
    loc = _leaf(torch, rng.standard_normal((2, D)))
    m = _leaf(torch, matrix_of(param, random_cov(rng, (1,))))
    v = _leaf(torch, rng.standard_normal((3, 1, D)))
    lq, cq = _leaf(torch, rng.standard_normal(D)), _leaf(torch, random_cov(rng, ()))

    def dist(loc_, m_):
        return MultivariateNormal(loc_, **{param: _param_from_free(torch, param, m_)})

    def other(loc_, c_):
        return MultivariateNormal(loc_, covariance_matrix=(c_ + c_.mT) / 2)

    fun, inputs = {
        "log_prob": (lambda a, b, c: dist(a, b).log_prob(c), (loc, m, v)),
        "prob": (lambda a, b, c: dist(a, b).prob(c), (loc, m, v)),
        "entropy": (lambda a, b: dist(a, b).entropy(), (loc, m)),
        "rsample": (lambda a, b: dist(a, b).rsample((2,), rng=0), (loc, m)),
        "kl_p": (lambda a, b, c, e: kl_divergence(dist(a, b), other(c, e)), (loc, m, lq, cq)),
        "kl_q": (lambda a, b, c, e: kl_divergence(other(c, e), dist(a, b)), (loc, m, lq, cq)),
    }[method]
    # fast mode (random directions, not whole Jacobians): seconds less a check
    assert torch.autograd.gradcheck(fun, inputs, fast_mode=True)


def test_torch_value_only_and_dtypes():
    torch = _torch()
    rng = np.random.default_rng(18)
    cov = random_cov(rng, ())
    d = MultivariateNormal(torch.zeros(D, dtype=torch.float64), covariance_matrix=torch.tensor(cov))
    v = _leaf(torch, rng.standard_normal((2, D)), torch.float32)  # float32 value, float64 dist
    out = d.log_prob(v)
    assert out.dtype == torch.float64
    out.sum().backward()
    assert v.grad.dtype == torch.float32
    want = -np.linalg.solve(cov, to_numpy(v).astype(np.float64).T).T
    np.testing.assert_allclose(to_numpy(v.grad), want, rtol=1e-6)
    # float32 parameters: float32 results and gradients
    loc = _leaf(torch, rng.standard_normal(D), torch.float32)
    m = _leaf(torch, np.linalg.cholesky(cov), torch.float32)
    out = MultivariateNormal(loc, scale_tril=m).log_prob(torch.zeros(D))
    assert out.dtype == torch.float32
    out.backward()
    assert loc.grad.dtype == torch.float32
    assert m.grad.dtype == torch.float32
    # a Python number for loc: the gradient reaches the matrix
    m2 = _leaf(torch, cov)
    MultivariateNormal(0.0, covariance_matrix=m2).entropy().backward()
    np.testing.assert_allclose(to_numpy(m2.grad), np.linalg.inv(cov) / 2, rtol=1e-10)


def test_torch_not_recorded():
    torch = _torch()
    loc = _leaf(torch, np.zeros(D))
    d = MultivariateNormal(loc, covariance_matrix=torch.eye(D, dtype=torch.float64))
    with torch.no_grad():
        assert d.log_prob(torch.zeros(D, dtype=torch.float64)).grad_fn is None
        assert d.entropy().grad_fn is None
    plain = MultivariateNormal(
        torch.zeros(D, dtype=torch.float64), scale_tril=torch.eye(D, dtype=torch.float64)
    )
    assert plain.log_prob(torch.zeros(D, dtype=torch.float64)).requires_grad is False
    assert plain.rsample((2,), rng=0).requires_grad is False


def test_torch_cdf_routing():
    torch = _torch()
    loc = _leaf(torch, np.zeros(2))
    d = MultivariateNormal(loc, covariance_matrix=torch.eye(2, dtype=torch.float64))
    v = torch.ones(2, dtype=torch.float64)
    with pytest.raises(NotImplementedError, match="return_error=True"):
        d.cdf(v, return_error=True)
    with pytest.raises(NotImplementedError, match="return_error=True"):
        d.logcdf(v, return_error=True)
    # recorded, the gradient of loc that of the product of two normal cdfs
    out = d.cdf(v)
    assert type(out.grad_fn).__name__ == "XpopsFunctionBackward"
    out.backward()
    phi, big_phi = np.exp(-0.5) / np.sqrt(2 * np.pi), 0.8413447460685429
    np.testing.assert_allclose(to_numpy(loc.grad), [-phi * big_phi] * 2, rtol=1e-6)


def test_rsample_sample_shape_is_another_name_of_shape():
    d = MultivariateNormal(np.zeros(2), scale_tril=np.array([[1.0, 0.0], [0.5, 2.0]]))
    a, pull_a = xpops.vjp(MultivariateNormal.rsample, d, sample_shape=(3,), rng=0)
    b, pull_b = xpops.vjp(MultivariateNormal.rsample, d, shape=(3,), rng=0)
    np.testing.assert_array_equal(a, b)
    g = np.arange(6.0).reshape(3, 2)
    np.testing.assert_array_equal(pull_a(g)[0]["scale_tril"], pull_b(g)[0]["scale_tril"])
    with pytest.raises(TypeError, match="not both"):
        xpops.vjp(MultivariateNormal.rsample, d, shape=(3,), sample_shape=(3,), rng=0)


def test_torch_generator_as_rng():
    """A torch.Generator draws PyTorch's own normals (the same state, the same draws as
    ``torch.randn``), reparameterized: ``loc + L z``, with gradients to loc and scale_tril;
    a generator of another device is refused; other rng types name what is taken."""
    torch = _torch()
    rng = np.random.default_rng(40)
    low = np.tril(rng.standard_normal((D, D))) / D + 2 * np.eye(D)
    loc, scale = _leaf(torch, rng.standard_normal(D)), _leaf(torch, low)
    d = MultivariateNormal(loc, scale_tril=scale)
    s = d.rsample((5,), rng=torch.Generator().manual_seed(3))
    z = torch.randn((5, D), generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    want = loc.detach().numpy() + z.numpy() @ low.T
    np.testing.assert_allclose(s.detach().numpy(), want, rtol=1e-13, atol=1e-13)
    s.sum().backward()
    np.testing.assert_allclose(loc.grad.numpy(), np.full(D, 5.0), rtol=1e-13)
    # d sum(L z) / dL_ij = sum over draws of z_j, on the lower triangle
    want_l = np.tril(np.broadcast_to(z.numpy().sum(axis=0), (D, D)))
    np.testing.assert_allclose(scale.grad.numpy(), want_l, rtol=1e-12, atol=1e-12)
    with pytest.raises(
        TypeError, match=r"or a torch\.Generator for PyTorch tensors, got builtins\.str"
    ):
        d.sample((2,), rng="seed")
    if torch.cuda.is_available():
        with pytest.raises(ValueError, match=r"`rng` is a torch\.Generator of device cuda"):
            d.sample((2,), rng=torch.Generator(device="cuda"))
