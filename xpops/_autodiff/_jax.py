"""JAX for the public functions: one `jax.custom_vjp` built from an op's rule.

A contract whose differentiated arguments are floating JAX arrays hands the call here, after
its own argument checks (`handles`). The custom_vjp's function is the public function (the
rule's forward, which calls it: a flag marks the call so that it goes to the engines, not back
here); its backward is the op's rule. So ``jax.grad`` never differentiates the engines'
arithmetic, which is not stable everywhere (``-inf`` in logcumsumexp, the triangle masks of
cholesky_solve) or not differentiable at all (the CDF's quasi-Monte-Carlo on the host), and
every backend's gradients come from one rule. ``jax.jit``, ``jax.vmap`` and their
compositions with ``jax.grad`` (``jax.jacrev``, ``jax.hessian`` of reverse mode) trace the
same function. Forward mode (``jax.jvp``, ``jax.jacfwd``) is not available: JAX does not take
it through a custom_vjp.

Conventions. The keyword arguments are static: closed over, and the custom_vjp cached per
rule and keyword arguments where they are hashable, except the JAX arrays among them (an rng
key, a `lower_limit`), which are passed as arguments; differentiating with respect to one of
those raises NotImplementedError (never a silent zero). The rules follow PyTorch's convention
for complex cotangents (the conjugate of JAX's): the cotangents are conjugated on the way in
and out. JAX is never imported by this module: it is only reached once a JAX array exists.
"""

import contextlib
import contextvars
import functools
import sys
from collections.abc import Callable, Iterator
from typing import Any

from ._rule import Rule, rule_of

__all__ = ["apply", "handles", "inside_rule", "takes_directly", "wants_gradient"]

# Set while a rule runs (its forward calls the public function, which must then go to the
# engines) and read by `handles`.
_IN_RULE: contextvars.ContextVar[bool] = contextvars.ContextVar("xpops_in_jax_rule", default=False)
# While a rule's forward runs under differentiation: its primals and whether JAX differentiates
# each (`wants_gradient`).
_PERTURBED: contextvars.ContextVar[tuple[tuple[Any, bool], ...]] = contextvars.ContextVar(
    "xpops_jax_perturbed", default=()
)


def handles(*primals: Any, traced_only: bool = False) -> bool:
    """Whether the JAX binding takes this call: JAX is imported, the call is not a rule's own,
    a primal is a JAX array and every JAX primal is floating (an integer array has no gradient:
    such a call goes to the engines). With `traced_only`, only where a primal is a tracer or
    JAX is tracing (``jax.grad`` of concrete arrays is a trace): outside a trace nothing is
    differentiated, and the engines serve the call directly."""
    jax = sys.modules.get("jax")
    if jax is None or _IN_RULE.get():
        return False
    arrays = [a for a in primals if isinstance(a, jax.Array)]
    if not arrays:
        return False
    inexact = jax.numpy.inexact
    if not all(jax.numpy.issubdtype(a.dtype, inexact) for a in arrays):
        return False
    if not traced_only:
        return True
    from .._lib import _compat

    return _compat.is_traced(*arrays) or _compat.jax_tracing()


def takes_directly(*arrays: Any) -> bool:
    """Whether a call whose arguments `arrays` are all concrete JAX arrays of real or complex
    floating dtypes (exactly JAX arrays, not tracers) may come to `apply` before its
    contract's checks: JAX is imported and the call is not a rule's own. The binding compiles
    the call, and the contract checks every argument when that program is traced (once per
    shapes and arguments), so such a fast path skips no check; it saves the host time of
    checking the same arrays again on every call (tens of microseconds, the time of a
    small solve). Costs about a microsecond."""
    jax = sys.modules.get("jax")
    if jax is None or not arrays or _IN_RULE.get():
        return False
    array, tracer = jax.Array, jax.core.Tracer
    for a in arrays:
        if not isinstance(a, array) or isinstance(a, tracer):
            return False
        if a.dtype.kind not in "fc":  # NumPy's kinds of JAX's dtypes (bfloat16's is "V")
            return False
    return True


def wants_gradient(primal: Any) -> bool | None:
    """Within a rule's forward pass under the JAX binding: whether JAX differentiates `primal`
    (one of the rule's primals, the object itself); None elsewhere (for a tensor, its
    ``requires_grad`` tells). A rule that cannot give some primal's cotangent asks this
    before refusing it."""
    for p, perturbed in _PERTURBED.get():
        if p is primal:
            return perturbed
    return None


@contextlib.contextmanager
def inside_rule(perturbed: tuple[tuple[Any, bool], ...] = ()) -> Iterator[None]:
    """Within: the public functions go to their engines, not to this binding; `perturbed`
    pairs the primals with whether they are differentiated (`wants_gradient`)."""
    token = _IN_RULE.set(True)
    marks = _PERTURBED.set(perturbed)
    try:
        yield
    finally:
        _PERTURBED.reset(marks)
        _IN_RULE.reset(token)


def apply(
    rule: str, primals: tuple[Any, ...], kwargs: dict[str, Any], *, compile: bool = True
) -> Any:
    """The function of `rule` (``"module:attribute"``, imported on first use) at `primals` and
    `kwargs`, differentiable by JAX through the rule.

    With `compile`, compiled by ``jax.jit`` as one program: JAX runs an uncompiled function
    operation by operation, compiling each for its shapes (seconds for the log-depth scan's
    dozens of operations, against a fraction of a second for the whole); under a trace it is
    inlined. Only for public functions whose checks need no values (they would be skipped).
    """
    import jax

    dynamic = tuple(k for k, v in kwargs.items() if isinstance(v, jax.Array))
    static = tuple((k, v) for k, v in kwargs.items() if k not in dynamic)
    try:
        keyed = _key(static)
    except TypeError:  # an unhashable keyword argument: built for this call
        fun = _build(rule, static, dynamic, len(primals), compile)
    else:
        fun = _cached_build(rule, keyed, dynamic, len(primals), compile)
    return fun(*primals, *(kwargs[k] for k in dynamic))


@functools.lru_cache(maxsize=256)
def _cached_build(
    spec: str, keyed: Any, dynamic: tuple[str, ...], n: int, jit: bool
) -> Callable[..., Any]:
    """`_build` once per rule and typed static keyword arguments (`_key`)."""
    return _build(spec, _unkey(keyed), dynamic, n, jit)


def _key(value: Any) -> Any:
    """`value` with the type of each of its parts: ``1``, ``1.0`` and ``True`` are equal in
    Python, but not as keyword arguments (``axis=True`` must be refused, not served by the
    function of ``axis=1``). ``TypeError`` for an unhashable value."""
    if type(value) in (tuple, list):
        return type(value), tuple(_key(v) for v in value)
    hash(value)
    return type(value), value


def _unkey(keyed: Any) -> Any:
    """The value that `_key` made `keyed` from."""
    kind, value = keyed
    if kind is tuple or kind is list:
        return kind(_unkey(v) for v in value)
    return value


def _build(
    spec: str, static: tuple[tuple[str, Any], ...], dynamic: tuple[str, ...], n: int, jit: bool
) -> Callable[..., Any]:
    """The custom_vjp of `spec` with keyword arguments `static` closed over; its arguments are
    the `n` primals, then the keyword arguments named `dynamic` (JAX arrays)."""
    import jax

    rule: Rule = rule_of(spec)
    fixed = dict(static)

    def kwargs_of(extra: tuple[Any, ...]) -> dict[str, Any]:
        return {**fixed, **dict(zip(dynamic, extra, strict=True))}

    def primal(*args: Any) -> Any:
        with inside_rule():
            out, _ = rule.forward(*args[:n], **kwargs_of(args[n:]))
        return out

    def fwd(*args: Any) -> tuple[Any, tuple[Any, tuple[Any, ...]]]:
        for name, arg in zip(dynamic, args[n:], strict=True):
            if arg.perturbed:
                msg = f"{rule.name} is not differentiable with respect to `{name}`"
                raise NotImplementedError(msg)
        values = tuple(a.value for a in args)
        perturbed = tuple((a.value, a.perturbed) for a in args[:n])
        with inside_rule(perturbed):
            out, residuals = rule.forward(*values[:n], **kwargs_of(values[n:]))
        return out, (_Static.pack(residuals), values[n:])

    def bwd(saved: tuple[Any, tuple[Any, ...]], cotangent: Any) -> tuple[Any, ...]:
        packed, extra = saved
        residuals = _Static.unpack(packed)
        cotangent = _conj(_instantiate(cotangent))
        with inside_rule():
            grads = rule.backward(residuals, cotangent, **kwargs_of(extra))
        return (*(_conj(g) for g in grads), *(None for _ in extra))

    fun = jax.custom_vjp(primal)
    fun.defvjp(fwd, bwd, symbolic_zeros=True)
    # Compiled, the backward is always traced, so the rule never sees a mix of concrete arrays
    # and tracers (``jax.vmap`` of ``jax.grad`` batches the residuals, not the cotangent).
    return jax.jit(fun) if jit else fun


def _instantiate(tree: Any) -> Any:
    """`tree` with JAX's symbolic zero cotangents made arrays of zeros (an output that the
    loss does not use): the rules take arrays."""
    import jax

    zero = jax.custom_derivatives.SymbolicZero

    def array(a: Any) -> Any:
        if isinstance(a, zero):
            z: Any = a
            return jax.numpy.zeros(z.shape, z.dtype)
        return a

    return jax.tree_util.tree_map(array, tree, is_leaf=lambda a: isinstance(a, zero))


def _conj(tree: Any) -> Any:
    """`tree` (an array, or a mapping of arrays for a distribution's cotangent) with its
    complex arrays conjugated: PyTorch's convention for complex cotangents, the rules', is the
    conjugate of JAX's."""
    import jax

    def conj(a: Any) -> Any:
        if a is None or not jax.numpy.iscomplexobj(a):
            return a
        return jax.numpy.conj(a)

    return jax.tree_util.tree_map(conj, tree)


class _Static:
    """What of a rule's residuals is not an array (a Python number, a string, a dtype, the
    structure of nested tuples), carried as static data through JAX's residual tree."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    @staticmethod
    def pack(residuals: Any) -> tuple[Any, list[Any]]:
        """`residuals` as JAX takes them: their leaves, the arrays as they are and the rest
        static, with their structure (static)."""
        import jax
        import numpy as np

        _register()
        leaves, tree = jax.tree_util.tree_flatten(residuals)
        arrays = (jax.Array, np.ndarray)
        return _Static(tree), [a if isinstance(a, arrays) else _Static(a) for a in leaves]

    @staticmethod
    def unpack(packed: tuple[Any, list[Any]]) -> Any:
        """The residuals that `pack` took apart."""
        import jax

        tree, leaves = packed
        values = [a.obj if isinstance(a, _Static) else a for a in leaves]
        return jax.tree_util.tree_unflatten(tree.obj, values)


@functools.cache
def _register() -> None:
    import jax

    jax.tree_util.register_pytree_node(_Static, lambda s: ((), s.obj), lambda obj, _: _Static(obj))
