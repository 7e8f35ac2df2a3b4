"""JAX engine of log_prob for one distribution (no batch) at many points.

The arithmetic of the general code (``x - loc``, its product with ``L^-T``, the rows' sums of
squares, the log density) compiled as one XLA program by ``jax.jit``, with the check of the
values (`validate_args`) folded into it: a call is one dispatch and, with the check, one read
of a single flag. Run op by op, the same arithmetic is a dispatch and a pass over the points
for each step. The product asks for full float32 precision (``Precision.HIGHEST``): XLA may
otherwise run a float32 product on a GPU in TF32. Under a JAX trace the check is skipped, as
every check of values is (its answer is not known while tracing).

Importing this module does not import JAX: the program is built once a JAX array exists.
"""

import functools
import math
from collections.abc import Callable
from typing import Any

from .._lib._compat import is_traced
from ._common import bad_values

__all__ = ["log_prob_points", "points_engine"]

_LOG_2PI = math.log(2 * math.pi)


def points_engine(batch: tuple[int, ...], d: int) -> Any:
    """`log_prob_points` for a distribution of batch shape `batch` and event size `d` when it
    takes them (no batch, d >= 1), else None."""
    return log_prob_points if not batch and d >= 1 else None


@functools.cache
def _program() -> Callable[..., Any]:
    """The compiled log densities and, with `check` (static), whether every value is finite."""
    import jax
    import jax.numpy as jnp

    def log_prob(value: Any, loc: Any, linv_t: Any, half_log_det: Any, check: bool) -> Any:
        d = value.shape[-1]
        z = jnp.matmul(value - loc, linv_t, precision=jax.lax.Precision.HIGHEST)
        out = -0.5 * (d * _LOG_2PI + jnp.sum(z * z, axis=-1)) - half_log_det
        return out, (jnp.all(jnp.isfinite(value)) if check else True)

    return jax.jit(log_prob, static_argnums=4)


def log_prob_points(value: Any, loc: Any, linv_t: Any, half_log_det: Any, check: bool) -> Any:
    """Log densities at `value` (..., D), of the distribution's dtype, of the distribution of
    mean `loc` (D,) whose factor's inverse transposed is `linv_t` (D, D) and half log
    determinant `half_log_det`; None for no points (the caller's general code takes them).
    `check`: ``ValueError`` for non-finite values of concrete arrays."""
    if value.size == 0:
        return None
    out, finite = _program()(value, loc, linv_t, half_log_det, check)
    if check and not is_traced(finite) and not bool(finite):
        raise ValueError(bad_values("value", tuple(int(s) for s in value.shape), False))
    return out
