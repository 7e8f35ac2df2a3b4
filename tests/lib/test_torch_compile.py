"""xpops under ``torch.compile`` (CPU tensors, and CUDA tensors where PyTorch sees a GPU):
TorchDynamo breaks its graph around xpops' engines (they hand tensors to NumPy and CuPy, which
its fake tensors cannot do) and the compiled function gives the results and gradients of the
eager one. The ``eager`` and
``aot_eager`` backends need no C++ compiler."""

import numpy as np
import pytest

import xpops
from xpops.distributions import MultivariateNormal

torch = pytest.importorskip("torch")

# TorchDynamo warns about what it does not trace (cached functions, builtins): the graph
# breaks these tests expect. Some PyTorch releases also raise DeprecationWarnings of their own
# code while compiling (TorchScript modules imported by the compiler, an autograd Function
# instantiated by TorchDynamo's tracing of ``apply``), which the suite's "error" filter would
# turn into failures of PyTorch's tracer. They are ignored whatever module they are attributed
# to: PyTorch 2.11 attributes the second to the caller of ``apply``, xpops' autograd binding.
pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]

BACKENDS = ["eager", "aot_eager"]
DEVICES = [
    "cpu",
    pytest.param(
        "cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
    ),
]


def _compiled(fn, backend):
    torch._dynamo.reset()
    return torch.compile(fn, backend=backend)


def _grads(fn, args):
    out = fn(*args)
    return out.detach(), torch.autograd.grad(out, [a for a in args if a.requires_grad])


def _assert_same(fn, args, backend):
    want, want_grads = _grads(fn, args)
    got, got_grads = _grads(_compiled(fn, backend), args)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    for g, w in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_logcumsumexp(backend, device):
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.normal(0, 3, (5, 300))).to(device).requires_grad_()
    w = torch.from_numpy(rng.normal(0, 1, 300)).to(device)

    def loss(x):
        return (xpops.logcumsumexp(x, axis=1, reverse=True) * w).sum()

    _assert_same(loss, (x,), backend)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_cholesky_solve(backend, device):
    rng = np.random.default_rng(1)
    low = np.tril(rng.normal(0, 0.3, (20, 40, 40))) + 3 * np.eye(40)
    y = torch.from_numpy(low).to(device).requires_grad_()
    x = torch.from_numpy(rng.normal(0, 1, (20, 40, 2))).to(device).requires_grad_()

    def loss(x, y):
        return xpops.linalg.cholesky_solve(x, y).square().sum()

    _assert_same(loss, (x, y), backend)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_multivariate_normal_log_prob(backend, device):
    rng = np.random.default_rng(2)
    loc = torch.from_numpy(rng.normal(0, 1, 4)).to(device).requires_grad_()
    scale = np.tril(rng.normal(0, 0.3, (4, 4))) + np.eye(4)
    scale = torch.from_numpy(scale).to(device).requires_grad_()
    value = torch.from_numpy(rng.normal(0, 1, (50, 4))).to(device)

    def loss(loc, scale, value):
        return MultivariateNormal(loc, scale_tril=scale).log_prob(value).sum()

    _assert_same(loss, (loc, scale, value), backend)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_sparse_divide_and_tril_indices(backend, device):
    idx = torch.tensor([[0, 1, 3], [2, 0, 1]])
    f64 = {"dtype": torch.float64, "device": device}
    x = torch.sparse_coo_tensor(idx, torch.tensor([1.0, 2.0, 3.0], **f64), (4, 4), device=device)
    y = torch.sparse_coo_tensor(idx, torch.tensor([4.0, -5.0, 6.0], **f64), (4, 4), device=device)

    def quotient(a, b):
        return xpops.sparse.divide(a.coalesce(), b.coalesce()).to_dense()

    torch.testing.assert_close(_compiled(quotient, backend)(x, y), quotient(x, y))

    def indices():
        return xpops.tril_indices(50, 40, -3, xp=torch, device=device)

    torch.testing.assert_close(_compiled(indices, backend)(), indices())


def test_no_dynamo_import_without_compile():
    """Keeping engines out of traces does not load TorchDynamo (a second or two) for programs
    that never compile."""
    import subprocess
    import sys

    code = (
        "import sys, torch, xpops\n"
        "xpops.logcumsumexp(torch.ones(5, dtype=torch.float64))\n"
        "xpops.linalg.cholesky_solve(torch.ones(2, 1), torch.eye(2))\n"
        "assert 'torch._dynamo' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def _calls():
    rng = np.random.default_rng(3)
    x = torch.from_numpy(rng.normal(0, 1, (3, 5)))
    low = torch.from_numpy(np.tril(rng.normal(0, 0.3, (5, 5))) + 3 * np.eye(5))
    loc = torch.zeros(5, dtype=torch.float64)
    return {
        "logcumsumexp": (lambda x: xpops.logcumsumexp(x, axis=1).sum(), (x,)),
        "cholesky_solve": (lambda x, y: xpops.linalg.cholesky_solve(x.T, y).sum(), (x, low)),
        "log_prob": (
            lambda m, s, v: MultivariateNormal(m, scale_tril=s).log_prob(v).sum(),
            (loc, low, x),
        ),
        "kl_divergence": (
            lambda m, s: xpops.distributions.kl_divergence(
                MultivariateNormal(m, scale_tril=s), MultivariateNormal(m + 1, scale_tril=s)
            ),
            (loc, low),
        ),
    }


@pytest.mark.parametrize("op", ["logcumsumexp", "cholesky_solve", "log_prob", "kl_divergence"])
def test_dispatch_not_traced(op):
    """TorchDynamo does not trace into xpops: the compiled code guards on none of xpops'
    internal modules nor on ``sys.modules``, whose lookups in xpops' dispatch PyTorch 2.11
    traces by building a variable of the whole dict (which fails when a module is imported
    meanwhile, as during a first compile)."""
    fn, args = _calls()[op]
    torch._dynamo.reset()
    guards = [str(g.name) for g in torch._dynamo.explain(fn)(*args).out_guards]
    inside = [g for g in guards if "sys.modules" in g or "__import_xpops" in g]
    assert not inside, inside[:5]


def test_export():
    """``torch.export`` runs xpops' functions as they are (it sets ``is_compiling`` while it
    runs them for real, with no TorchDynamo trace to keep them out of)."""

    class Scan(torch.nn.Module):
        def forward(self, x):
            return xpops.logcumsumexp(x, axis=1)

    x = torch.from_numpy(np.random.default_rng(4).normal(0, 3, (3, 50)))
    program = torch.export.export(Scan(), (x,), strict=False)
    torch.testing.assert_close(program.module()(x), torch.logcumsumexp(x, 1))
