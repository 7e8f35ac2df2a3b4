r"""JAX engine of logcumsumexp, and the real pull-back of its backward rule on JAX arrays:
XLA's own scans, traced into the caller's program (the JAX binding compiles each call as one).

Forward (real dtypes). ``jax.lax.associative_scan`` of ``logaddexp`` (a tree of passes) on
the CPU and on CUDA GPUs, where XLA runs ``jax.lax.cumlogsumexp`` as a windowed reduction that
is slower: 2^20 float32 on two CPU cores 60 against 550 ms; on an H200, jitted, 2.6 against
9.2 ms for 2^28 float32, 2.2-2.3 against 5.9-9.1 ms for (8192, 32768) along either axis, 0.7
against 2.4 ms for (1048576, 64) along the rows, 2.4 against 20 ms for 2^27 float64.
``jax.lax.cumlogsumexp`` stays on the other platforms (TPU, ROCm), unmeasured;
``jax.lax.platform_dependent`` picks one when the program is compiled for its device. Both
combine with ``logaddexp``, which meets the contract's special values: ``-inf`` is the identity
(so a prefix of one finite term among ``-inf`` is that term exactly), ``+inf`` wins from there
on, NaN spreads to every later output. `exclusive` is the inclusive scan moved one step along
the scan (a pad of ``-inf``). Complex dtypes take the generic log-depth scan (`_logdepth`):
JAX's complex ``logaddexp`` gives NaN where a real part is ``-inf`` instead of the identity.

Backward (real dtypes). The cotangent ``dx_j = sum_i g_i exp(x_j - y_i)`` over the outputs
``i`` whose terms hold ``x_j``, as the first-order linear recurrence that JAX's own reverse
pass of its scan amounts to, rather than the rule's two log-space scans (each costing a forward
scan): for the inclusive forward scan,

.. math::

    \bar x_j = e^{x_j - y_j} S_j, \qquad S_j = g_j + e^{y_j - y_{j+1}} S_{j+1},

solved by ``jax.lax.associative_scan`` over affine maps (a product and a multiply-add per
combination, no ``exp`` or ``log``). Every factor is at most 1 (the outputs grow along the
scan), so nothing overflows, for inputs near ``+-700`` in float64 as anywhere. `reverse` runs
the recurrence the other way; `exclusive` moves the outputs and cotangents one step back to
those of the inclusive scan (the last input in scan order is in no output). Special values, as
the rule documents them: an output of ``-inf`` contributes nothing; an output of ``+inf``
contributes nothing to finite inputs (its weight is 0) and an input of ``+inf`` gets NaN; an
input of NaN gets NaN, and a NaN output with a nonzero cotangent spreads NaN to every input it
holds (a weight of 0 times NaN is NaN), one with a zero cotangent spreads nothing. Each link
``e^{y_j - y_{j+1}}`` and weight ``e^{x_j - y_j}`` that is NaN (an infinity minus itself, a
NaN output) is set to 0: the NaN that the formula owes arrives through the terms.

Importing this module does not import JAX: the engines are reached once a JAX array exists.
"""

import functools
import math
from collections.abc import Callable
from typing import Any

from .._lib._typing import Array
from ._logdepth import log_depth_scan

__all__ = ["logcumsumexp", "native_scan", "real_pullback", "scan", "shift", "tree_scan"]


def logcumsumexp(x: Array, axis: int, exclusive: bool, reverse: bool) -> Array:
    """Scan `axis` of the JAX array `x` (real or complex floating, ndim >= 1; validated and
    cast by the contract)."""
    import jax

    jnp = jax.numpy
    if jnp.iscomplexobj(x):
        return log_depth_scan(x, axis, exclusive, reverse, jnp)
    if x.size == 0:
        return x
    flags: dict[str, Any] = {"axis": axis, "exclusive": exclusive, "reverse": reverse}
    tree = functools.partial(scan, inclusive=tree_scan, **flags)
    return jax.lax.platform_dependent(
        x, cpu=tree, cuda=tree, default=functools.partial(scan, inclusive=native_scan, **flags)
    )


def scan(
    x: Array, axis: int, exclusive: bool, reverse: bool, *, inclusive: Callable[..., Array]
) -> Array:
    """The scan of `x` by `inclusive` (`native_scan` or `tree_scan`), moved one step for an
    exclusive one."""
    y = inclusive(x, axis, reverse)
    if exclusive:
        y = shift(y, axis, toward_end=not reverse, fill=-math.inf)
    return y


def native_scan(x: Array, axis: int, reverse: bool) -> Array:
    """The inclusive scan by ``jax.lax.cumlogsumexp`` (the engine's choice on platforms other
    than the CPU and CUDA)."""
    import jax

    return jax.lax.cumlogsumexp(x, axis=axis, reverse=reverse)


def tree_scan(x: Array, axis: int, reverse: bool) -> Array:
    """The inclusive scan by ``jax.lax.associative_scan`` of ``logaddexp`` (the engine's
    choice on the CPU and CUDA GPUs)."""
    import jax

    return jax.lax.associative_scan(jax.numpy.logaddexp, x, reverse=reverse, axis=axis)


def shift(a: Array, axis: int, *, toward_end: bool, fill: float) -> Array:
    """`a` moved one step along `axis`, toward its end (``out[k] = a[k-1]``) or its start
    (``out[k] = a[k+1]``), `fill` in the place left empty: one pad, no copy of a slice."""
    import jax

    config = [(0, 0, 0)] * a.ndim
    config[axis] = (1, -1, 0) if toward_end else (-1, 1, 0)
    return jax.lax.pad(a, jax.numpy.asarray(fill, dtype=a.dtype), config)


def _compose(earlier: tuple[Any, Any], later: tuple[Any, Any]) -> tuple[Any, Any]:
    """The affine map ``s -> b + a s`` of `later` after that of `earlier`, each as ``(a, b)``."""
    a1, b1 = earlier
    a2, b2 = later
    return a1 * a2, b2 + a2 * b1


def real_pullback(x: Array, y: Array, g: Array, axis: int, exclusive: bool, reverse: bool) -> Array:
    """The cotangent of the real JAX array `x` (the scanned operand, ndim >= 1) for the
    cotangent `g` of ``y = logcumsumexp(x, axis, exclusive=..., reverse=not reverse)``, by the
    recurrence of the module docstring; `x`, `y` and `g` of one dtype and shape. The flags are
    those of the scan that sums the cotangents (the forward's `reverse` flipped), as for the
    other engines of the pull-back."""
    import jax

    reverse = not reverse  # the forward scan's direction

    jnp = jax.numpy
    if x.size == 0:
        return jnp.zeros_like(x)
    inf = math.inf
    if exclusive:  # the outputs of the inclusive scan, and their cotangents
        y = shift(y, axis, toward_end=reverse, fill=inf)
        g = shift(g, axis, toward_end=reverse, fill=0.0)
    # the terms: g where the output is finite; an output of -inf or a cotangent of 0 takes no
    # part; a +inf output weighs 0 (NaN times a NaN cotangent); a NaN output gives NaN
    finite = jnp.isfinite(y)
    none = (y == -inf) | (g == 0)
    t = jnp.where(finite, g, jnp.where(none, 0.0, jnp.where(y == inf, g * 0.0, jnp.nan)))
    # the links e^(y_j - y_next(j)), next(j) = j + 1 (j - 1 reversed); NaN ones set to 0
    link = jnp.exp(y - shift(y, axis, toward_end=reverse, fill=inf))
    link = jnp.where(jnp.isnan(link), 0.0, link)
    _, s = jax.lax.associative_scan(_compose, (link, t), reverse=not reverse, axis=axis)
    weight = jnp.exp(x - y)
    undefined = jnp.isnan(x) | (x == inf)
    weight = jnp.where(undefined, jnp.nan, jnp.where(jnp.isnan(weight), 0.0, weight))
    return weight * s
