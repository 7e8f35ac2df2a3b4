"""Benchmark cases of the backward rules: forward and backward together, as a training step
pays them.

Each row times ``xpops.vjp`` and its pull-back (``fwd+bwd``); its peers are the same forward
alone (``xpops forward``: the backward's own cost is the difference), xpops called on PyTorch
tensors that require grad (``xpops via torch``: our kernels through DLPack, backward by
autograd), PyTorch's own op with ``.backward``, JAX's ``jax.vjp`` under ``jit``, and xpops
called on the same JAX arrays under the same ``jax.jit`` of ``jax.vjp`` (``xpops via jax``:
the JAX engines, backward by the rule's ``jax.custom_vjp``).
`nbytes` counts the forward's bytes plus the backward's (its inputs read once, the
cotangents written once).
"""

import functools
from collections.abc import Callable
from typing import Any

import xpops

from ._case import Case, import_jax

# (shape, axis): logcumsumexp float32 on the GPU, float64 on the CPU (the default CPU run
# takes the first; --full all, and the other ops' CPU cases)
SCAN_GPU = [((2**28,), None), ((8192, 32768), 1), ((8192, 32768), 0), ((1_048_576, 64), 1)]
SCAN_CPU = [((2**18,), None), ((2**20,), None)]
# (batch, M, K)
SOLVE_GPU = [(100_000, 16, 1), (1, 4096, 256)]
SOLVE_CPU = [(10_000, 16, 1)]
# (n, entries in each operand): CSR float32
DIVIDE_GPU = [(100_000, 10_000_000)]
DIVIDE_CPU = [(20_000, 400_000)]
# (points, D)
LOG_PROB_GPU = [(1_000_000, 16)]
LOG_PROB_CPU = [(100_000, 16)]


def _normal(backend: str, shape: tuple[int, ...], dtype: str, seed: int) -> Any:
    if backend == "cupy":
        import cupy

        return cupy.random.default_rng(seed).standard_normal(shape, dtype=dtype)
    import numpy as np

    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _torch(backend: str) -> Any:
    """torch, where it can take this backend's arrays by DLPack; else None."""
    try:
        import torch
    except ImportError:
        return None
    if backend == "cupy" and not torch.cuda.is_available():
        return None
    return torch


def _jax(backend: str) -> Any:
    if backend != "cupy":
        return None
    try:
        return import_jax()
    except ImportError:
        return None


def _host(backend: str, a: Any) -> Any:
    return a.get() if backend == "cupy" else a


def _vjp_step(fun: Callable[..., Any], primals: tuple[Any, ...], cot: Any, **kw: Any) -> Any:
    _, pullback = xpops.vjp(fun, *primals, **kw)
    return pullback(cot)


def _torch_step(fun: Callable[..., Any], tensors: list[Any], cot: Any) -> Callable[[], Any]:
    def step() -> Any:
        for t in tensors:
            t.grad = None
        fun(*tensors).backward(cot)
        return [t.grad for t in tensors]

    return step


def _scan_cases(backend: str, full: bool) -> list[Case]:
    dtype = "float32" if backend == "cupy" else "float64"
    chosen = SCAN_GPU if backend == "cupy" else SCAN_CPU[: None if full else 1]
    torch, jax = _torch(backend), _jax(backend)
    out = []
    for shape, axis in chosen:
        x = _normal(backend, shape, dtype, 0) * 10
        flat_shape = (x.size,) if axis is None else shape
        g = _normal(backend, flat_shape, dtype, 1)
        dim = 0 if axis is None else axis
        peers: dict[str, Any] = {
            "xpops forward": functools.partial(xpops.logcumsumexp, x, axis=axis)
        }
        if torch is not None:
            tx = torch.from_dlpack(x).requires_grad_()
            tg = torch.from_dlpack(g)
            peers["xpops via torch"] = _torch_step(
                functools.partial(xpops.logcumsumexp, axis=axis), [tx], tg.reshape(flat_shape)
            )
            scan = functools.partial(_torch_scan, torch, flat_shape, dim)
            peers["torch"] = _torch_step(scan, [tx], tg)
        if jax is not None:
            jx, jg = jax.numpy.asarray(_host(backend, x)), jax.numpy.asarray(_host(backend, g))
            peers["jax"] = _jax_scan(jax, jx, jg, flat_shape, dim)
            scan_x = functools.partial(xpops.logcumsumexp, axis=axis)
            peers["xpops via jax"] = _jax_vjp_step(jax, scan_x, (jx,), jg)
        itemsize = x.dtype.itemsize
        text = "x".join(map(str, shape)) if len(shape) > 1 else f"2^{shape[0].bit_length() - 1}"
        out.append(
            Case(
                op="logcumsumexp backward",
                label=f"{text} axis={axis} {dtype}, fwd+bwd",
                nbytes=6 * x.size * itemsize,  # fwd: x, out; bwd: x, out, dout, dx
                bandwidth="copy",
                run=functools.partial(_vjp_step, xpops.logcumsumexp, (x,), g, axis=axis),
                peers=peers,
            )
        )
    return out


def _torch_scan(torch: Any, shape: tuple[int, ...], dim: int, t: Any) -> Any:
    return torch.logcumsumexp(t.reshape(shape), dim)


def _jax_vjp_step(
    jax: Any, fun: Callable[..., Any], primals: tuple[Any, ...], cot: Any
) -> Callable[[], Any]:
    """``fun``'s forward and pull-back at the JAX arrays `primals` and `cot`, as one program
    (``jax.jit`` of ``jax.vjp``, as the ``jax`` peers)."""
    step = jax.jit(lambda *a: jax.vjp(fun, *a[:-1])[1](a[-1]))
    return lambda: jax.block_until_ready(step(*primals, cot))


def _jax_scan(jax: Any, x: Any, g: Any, shape: tuple[int, ...], dim: int) -> Callable[[], Any]:
    def scan(a: Any) -> Any:
        return jax.lax.cumlogsumexp(a.reshape(shape), axis=dim)

    step = jax.jit(lambda a, c: jax.vjp(scan, a)[1](c)[0])
    return lambda: step(x, g).block_until_ready()


def _factor(backend: str, batch: int, m: int, dtype: str) -> Any:
    """Well-conditioned lower factors: a random lower triangle with a dominant diagonal."""
    xp = xpops.default_namespace()
    low = xp.tril(xp.asarray(_normal(backend, (batch, m, m), dtype, 2))) / m
    return low + 2 * xp.eye(m, dtype=low.dtype)


def _solve_cases(backend: str, full: bool) -> list[Case]:
    dtype = "float32" if backend == "cupy" else "float64"
    chosen = SOLVE_GPU if backend == "cupy" else (SOLVE_CPU if full else [])
    torch, jax = _torch(backend), _jax(backend)
    solve = xpops.linalg.cholesky_solve
    out = []
    for batch, m, k in chosen:
        low = _factor(backend, batch, m, dtype)
        b = _normal(backend, (batch, m, k), dtype, 3)
        g = _normal(backend, (batch, m, k), dtype, 4)
        peers: dict[str, Any] = {"xpops forward": functools.partial(solve, b, low)}
        if torch is not None:
            tb = torch.from_dlpack(b).requires_grad_()
            tl = torch.from_dlpack(low).requires_grad_()
            tg = torch.from_dlpack(g)
            peers["xpops via torch"] = _torch_step(solve, [tb, tl], tg)
            peers["torch"] = _torch_step(torch.cholesky_solve, [tb, tl], tg)
        if jax is not None:
            args = tuple(jax.numpy.asarray(_host(backend, a)) for a in (b, low, g))
            peers["jax"] = _jax_solve(jax, *args)
            peers["xpops via jax"] = _jax_vjp_step(jax, solve, args[:2], args[2])
        itemsize = b.dtype.itemsize
        # fwd: the factor's triangle, b, out; bwd: the factor twice, out, dout, db, dfactor
        nbytes = (batch * (m * m // 2 * 3 + m * m // 2) + 5 * b.size) * itemsize
        out.append(
            Case(
                op="cholesky_solve backward",
                label=f"({batch}, {m}, {m}) K={k} {dtype}, fwd+bwd",
                nbytes=nbytes,
                bandwidth="copy",
                run=functools.partial(_vjp_step, solve, (b, low), g),
                peers=peers,
            )
        )
    return out


def _jax_solve(jax: Any, b: Any, low: Any, g: Any) -> Callable[[], Any]:
    def solve(p: Any, q: Any) -> Any:
        return jax.scipy.linalg.cho_solve((q, True), p)

    step = jax.jit(lambda bb, ll, c: jax.vjp(solve, bb, ll)[1](c))
    return lambda: jax.block_until_ready(step(b, low, g))


def _jax_log_prob(jax: Any, loc: Any, low: Any, v: Any, g: Any) -> Callable[[], Any]:
    """NumPyro's formula (a triangular solve), forward and backward under jit."""
    jnp = jax.numpy
    d = v.shape[-1]

    def logpdf(a: Any, b: Any, c: Any) -> Any:
        z = jax.scipy.linalg.solve_triangular(b, (c - a).T, lower=True)
        half = jnp.sum(jnp.log(jnp.diagonal(b)))
        return -0.5 * jnp.sum(z * z, axis=0) - half - 0.5 * d * jnp.log(2 * jnp.pi)

    step = jax.jit(lambda a, b, c, cot: jax.vjp(logpdf, a, b, c)[1](cot))
    return lambda: jax.block_until_ready(step(loc, low, v, g))


def _log_prob_cases(backend: str, full: bool) -> list[Case]:
    dtype = "float32" if backend == "cupy" else "float64"
    chosen = LOG_PROB_GPU if backend == "cupy" else (LOG_PROB_CPU if full else [])
    torch, jax = _torch(backend), _jax(backend)
    mvn = xpops.distributions.MultivariateNormal
    out = []
    for n, d in chosen:
        low = _factor(backend, 1, d, dtype)[0]
        loc = _normal(backend, (d,), dtype, 5)
        v = _normal(backend, (n, d), dtype, 6)
        g = _normal(backend, (n,), dtype, 7)

        def step(loc: Any = loc, low: Any = low, v: Any = v, g: Any = g) -> Any:
            return _vjp_step(mvn.log_prob, (mvn(loc, scale_tril=low), v), g)

        peers: dict[str, Any] = {
            "xpops forward": lambda loc=loc, low=low, v=v: mvn(loc, scale_tril=low).log_prob(v)
        }
        if torch is not None:
            tloc, tlow, tv = (torch.from_dlpack(a).requires_grad_() for a in (loc, low, v))
            tg = torch.from_dlpack(g)
            peers["xpops via torch"] = _torch_step(
                lambda a, b, c: mvn(a, scale_tril=b).log_prob(c), [tloc, tlow, tv], tg
            )
        if jax is not None:
            args = tuple(jax.numpy.asarray(_host(backend, a)) for a in (loc, low, v, g))
            peers["jax"] = _jax_log_prob(jax, *args)
            peers["xpops via jax"] = _jax_vjp_step(
                jax, lambda a, b, c: mvn(a, scale_tril=b).log_prob(c), args[:3], args[3]
            )
        itemsize = v.dtype.itemsize
        out.append(
            Case(
                op="MultivariateNormal.log_prob backward",
                label=f"{n} points, D={d} {dtype}, d/d(value, loc, scale_tril), fwd+bwd",
                nbytes=(3 * v.size + 2 * n) * itemsize,  # fwd: v, out; bwd: v, dout, dv
                bandwidth="copy",
                run=step,
                peers=peers,
            )
        )
    return out


def _divide_cases(backend: str, full: bool) -> list[Case]:
    """PyTorch and JAX cannot divide two sparse arrays: the peers are the forward alone,
    cupyx's (SciPy's) ``x + y``, the cheapest pattern union there is, and on the GPU xpops
    on PyTorch CSR tensors of the same memory."""
    from . import sparse as sparse_cases

    chosen = DIVIDE_GPU if backend == "cupy" else (DIVIDE_CPU if full else [])
    divide = xpops.sparse.divide
    out = []
    for n, nnz in chosen:
        if backend == "cupy":
            x, y = sparse_cases.operands_gpu(n, nnz, "float32")
        else:
            x, y = sparse_cases.operands_cpu(n, nnz, "float32")
        g = divide(x, y)  # a cotangent of the result's pattern
        lib = "cupyx" if backend == "cupy" else "scipy"
        peers: dict[str, Any] = {
            "xpops forward": functools.partial(divide, x, y),
            f"{lib} x+y": lambda x=x, y=y: x + y,
        }
        torch = _torch(backend) if backend == "cupy" else None
        if torch is not None:  # CSR tensors on the same memory
            tx, ty = (sparse_cases.torch_csr(torch, a).requires_grad_() for a in (x, y))
            peers["xpops via torch"] = _torch_step(
                divide, [tx, ty], sparse_cases.torch_csr(torch, g)
            )
        # fwd: x, y, out (values and column indices); bwd: the same and dout, dx, dy
        nbytes = (3 * x.nnz + 3 * y.nnz + 3 * g.nnz) * 8
        out.append(
            Case(
                op="sparse.divide backward",
                label=f"{n}x{n} CSR, {x.nnz / 1e6:.1f}M + {y.nnz / 1e6:.1f}M entries float32, "
                "fwd+bwd",
                nbytes=nbytes,
                bandwidth="copy",
                run=functools.partial(_vjp_step, divide, (x, y), g),
                peers=peers,
            )
        )
    return out


def cases(backend: str, full: bool = False) -> list[Case]:
    return [
        *_scan_cases(backend, full),
        *_solve_cases(backend, full),
        *_divide_cases(backend, full),
        *_log_prob_cases(backend, full),
    ]
