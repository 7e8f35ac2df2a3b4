"""KL divergences: `kl_divergence` looks up a rule by the classes of the two distributions.

A distribution module registers its rules with `register_kl` (as ``torch.distributions`` and
NumPyro do), so this module imports no distribution. `normal_kl` is the closed form between two
multivariate normals, on arrays.
"""

import math
from collections.abc import Callable
from typing import Any, TypeVar

from .._lib._compile import compiling, untraced
from .._lib._typing import Array, Namespace
from ..linalg._triangular import solve_triangular

__all__ = ["kl_divergence", "normal_kl", "register_kl"]

Rule = TypeVar("Rule", bound=Callable[[Any, Any], Any])

# (class of p, class of q) -> rule; filled when the distribution modules are imported
_RULES: dict[tuple[type, type], Callable[[Any, Any], Any]] = {}


def register_kl(type_p: type, type_q: type) -> Callable[[Rule], Rule]:
    """Decorator: the function computes ``KL(p || q)`` for `p` of `type_p` and `q` of `type_q`
    (subclasses included)."""

    def register(rule: Rule) -> Rule:
        _RULES[type_p, type_q] = rule
        return rule

    return register


def _rule(p: Any, q: Any) -> Callable[[Any, Any], Any] | None:
    for tp in type(p).__mro__:
        for tq in type(q).__mro__:
            rule = _RULES.get((tp, tq))
            if rule is not None:
                return rule
    return None


def kl_divergence(p: Any, q: Any) -> Array:
    """``KL(p || q)`` of two multivariate normals, batch shapes broadcasting.

    Raises ``ValueError`` for different event sizes and ``TypeError`` for other objects or
    distributions of two array libraries.
    """
    if compiling(*getattr(p, "_args", ()), *getattr(q, "_args", ())):
        return untraced(kl_divergence)(p, q)
    known = tuple(dict.fromkeys(t for pair in _RULES for t in pair))
    for name, dist in (("p", p), ("q", q)):
        if not isinstance(dist, known):
            kinds = " or ".join(t.__name__ for t in known)
            msg = f"`{name}` must be a {kinds}, got {type(dist).__name__}"
            raise TypeError(msg)
    rule = _rule(p, q)
    if rule is None:
        msg = f"no KL divergence from a {type(p).__name__} to a {type(q).__name__}"
        raise NotImplementedError(msg)
    return rule(p, q)


def normal_kl(
    xp: Namespace,
    loc_p: Array,
    tril_p: Array,
    loc_q: Array,
    tril_q: Array,
    batch: tuple[int, ...],
    dtype: Any,
) -> Array:
    """``KL(N(loc_p, Lp Lp^T) || N(loc_q, Lq Lq^T))`` from the lower factors, in `dtype`,
    broadcast to `batch`: ``log det Lq - log det Lp + (|Lq^-1 Lp|_F^2 + |Lq^-1 (loc_q -
    loc_p)|^2 - D) / 2``, by two triangular solves."""
    lp, lq = xp.astype(tril_p, dtype), xp.astype(tril_q, dtype)
    d = tril_p.shape[-1]
    logdet = _half_log_det(xp, tril_q) - _half_log_det(xp, tril_p)
    if d == 0 or math.prod(batch) == 0:
        return xp.broadcast_to(xp.asarray(logdet, dtype=dtype), batch)
    m = solve_triangular(lq, lp, lower=True, xp=xp)  # Lq^-1 Lp
    trace = xp.sum(m * m, axis=(-2, -1))
    diff = xp.astype(loc_q, dtype) - xp.astype(loc_p, dtype)
    z = solve_triangular(lq, diff[..., None], lower=True, xp=xp)[..., 0]
    maha = xp.sum(z * z, axis=-1)
    kl = logdet + 0.5 * (trace + maha - d)
    return xp.broadcast_to(kl, batch)


def _half_log_det(xp: Namespace, tril: Array) -> Array:
    return xp.sum(xp.log(xp.linalg.diagonal(tril)), axis=-1)
