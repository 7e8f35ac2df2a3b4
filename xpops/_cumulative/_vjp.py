r"""The backward rule of `logcumsumexp`: a reverse scan in log space, by logcumsumexp itself.

Formulas
--------
Take the inclusive forward scan along one axis, ``y_i = log(sum_{k <= i} exp(x_k))``, and a
cotangent ``g`` of the shape of ``y``. Since ``dy_i / dx_j = exp(x_j - y_i)`` for ``j <= i``,

.. math::

    \bar x_j = \sum_{i \ge j} g_i \, e^{x_j - y_i}
             = e^{x_j + \mathrm{LCSE}^{\leftarrow}(\log g^+ - y)_j}
             - e^{x_j + \mathrm{LCSE}^{\leftarrow}(\log g^- - y)_j},

where ``g = g+ - g-`` splits the cotangent into its positive and negative parts (``log 0`` is
``-inf``, which the scan skips) and ``LCSE<-`` is logcumsumexp with `reverse` flipped and the
same `exclusive` (an exclusive forward scan gives the sum over ``i > j``). A reversed forward
scan is pulled back by a forward one. Each exponent is ``log(sum_i |g_i| exp(x_j - y_i))``,
at most ``log(sum |g|)``: nothing overflows, whatever the size of the inputs (``x`` near
``+-700`` in float64, ``+-80`` in float32), and no ``exp(y)`` is ever formed.

Complex inputs (holomorphic; PyTorch's convention for complex gradients, the conjugate
Wirtinger derivative of the real loss ``Re(sum(conj(g) * y))``):

.. math::

    \bar x_j = \sum_{i \ge j} g_i \, \overline{e^{x_j - y_i}}
             = \overline{e^{x_j + \mathrm{LCSE}^{\leftarrow}(\log \bar g - y)_j}},

one complex scan: the phase of ``log(conj(g))`` carries the sign, so no split is needed.

Special values
--------------
* An output of ``-inf`` (a prefix of only ``-inf`` inputs, and the first output of an
  exclusive scan) contributes nothing: its term is ``-inf`` whatever its cotangent. So the
  inputs of an all ``-inf`` prefix get the gradient 0 from it (the derivative of
  ``log(sum(exp(x)))`` is undefined there; 0 is the limit along any path that keeps those
  inputs below a finite one), and an input of ``-inf`` gets 0 wherever its outputs hold a
  finite term.
* An output of ``+inf`` contributes nothing to the finite inputs before it (their weight
  ``exp(x_j - inf)`` is 0); an input of ``+inf`` gets NaN (the weight of an infinite term in an
  infinite sum is undefined).
* An input of NaN gets NaN; a NaN output spreads NaN to the inputs it covers, unless its
  cotangent is 0 (an output with cotangent 0 takes no part in the sum).
* With finite inputs and a finite cotangent, no NaN and no floating-point warning appears:
  every operand is sanitized before ``log`` and ``exp``.
* Integer and bool inputs have no gradient: `forward` raises TypeError.

Dtypes: the gradient is computed in the dtype the forward computed in (float32 for float16 and
bfloat16 results, rounded once at the end) and returned in the dtype of ``x``. A real ``x``
cast to a complex `dtype` gets the real part of the complex gradient; a complex ``x`` cast to a
real `dtype` gets the real gradient as complex. Casts to `dtype` pass gradients through
unchanged. With ``axis=None`` the scan is of the row-major flattened ``x``, and the gradient has
the shape of ``x``.

Cost: two scans of the size of ``x`` (one for complex inputs) and about twenty elementwise
operations, in the namespace of ``x`` and on its device. On real NumPy arrays
(`._numpy_vjp`) whose every row has finite outputs and cotangents (-inf outputs allowed), no
NaN or +inf input, and outputs within 600 of each other, one cumulative sum against a
reference a row instead, its sums in float64 (float32 input too).
On CuPy arrays (and PyTorch's CUDA tensors) a real ``x`` takes `._cupy._backward`: along the
contiguous axis, one kernel that solves the sum as a linear recurrence (four passes over
arrays of the size of ``x``; rows of at most 1024 elements, and many longer rows, a group of
lanes each, fewer long rows chained across blocks); along a strided axis of many columns, the
same recurrence down the columns (four or six passes); along a strided axis of few columns,
both scans in one launch between two fused kernels (twelve passes). On real JAX arrays the
same sum is computed by the JAX engine (`._jax.real_pullback`): a linear recurrence solved by
one associative scan of multiply-adds, which costs about what JAX's own reverse pass of its
scan does, where each log-space scan costs a forward scan.
"""

import math
import operator
from typing import Any

from .. import _backend
from .._autodiff._rule import Rule
from .._lib import _compat
from .._lib._dispatch import OWN_ENGINES, Engines, dispatch
from .._lib._dtypes import is_dtype, is_low_precision
from .._lib._names import type_name
from .._lib._typing import Array, DType, Namespace
from .._lib._validation import as_bool
from ._logcumsumexp import logcumsumexp

__all__ = ["RULE", "backward", "forward"]

_REAL = "real floating"
_COMPLEX = "complex floating"


def _result_dtype(x: Array, dtype: DType) -> DType:
    return x.dtype if dtype is None else dtype


def forward(
    x: Array,
    /,
    axis: int | None = None,
    *,
    exclusive: bool = False,
    reverse: bool = False,
    dtype: DType = None,
) -> tuple[Array, tuple[Array, Array]]:
    """``logcumsumexp(x, axis, exclusive=..., reverse=..., dtype=...)`` and the residuals
    ``(x, y)``: `x` as given (an array) and `y` the result in the dtype it was computed in
    (float32 for a float16 or bfloat16 result, which is `y` rounded once)."""
    xp, (a,) = _backend.array_args(x, names=["x"])
    if a is not None and is_dtype(xp, a.dtype, ("integral", "bool")):
        msg = (
            f"`x` of dtype {a.dtype} has no gradient: integer and bool inputs are not "
            "differentiable; cast `x` to a floating dtype first"
        )
        raise TypeError(msg)
    kwargs = {"exclusive": exclusive, "reverse": reverse}
    if a is None or not is_low_precision(xp, _result_dtype(a, dtype)):
        y = logcumsumexp(a, axis, dtype=dtype, **kwargs)  # the contract checks every argument
        return y, (a, y)
    # The contract casts to float16 (bfloat16), computes in float32 and rounds once: keep the
    # float32 result for the backward scan.
    out_dtype = _result_dtype(a, dtype)
    low = a if a.dtype == out_dtype else xp.astype(a, out_dtype)
    y = logcumsumexp(low, axis, dtype=xp.float32, **kwargs)
    return xp.astype(y, out_dtype), (a, y)


def _check_cotangent(xp: Namespace, cotangent: Any, y: Array) -> Array:
    """`cotangent` as an array of `y`'s namespace, device and dtype, or a clear error."""
    try:
        cxp = _compat.array_namespace(cotangent)
    except TypeError:
        cxp = None
    if cxp is not xp:
        msg = (
            f"`cotangent` must be an array of the output's namespace ({xp.__name__}), got "
            f"{type_name(cotangent)}"
        )
        raise TypeError(msg)
    complex_out = is_dtype(xp, y.dtype, _COMPLEX)
    kinds = (_REAL, _COMPLEX) if complex_out else _REAL
    if not is_dtype(xp, cotangent.dtype, kinds):
        want = "a real or complex floating" if complex_out else "a real floating"
        msg = f"`cotangent` must have {want} dtype for this output, got {cotangent.dtype}"
        raise TypeError(msg)
    dc, dy = _compat.device(cotangent), _compat.device(y)
    if dc != dy:
        msg = f"`cotangent` must be on the output's device {dy}, got {dc}"
        raise ValueError(msg)
    return cotangent if cotangent.dtype == y.dtype else xp.astype(cotangent, y.dtype)


def _real_pullback(
    x: Array, y: Array, g: Array, axis: int, exclusive: bool, reverse: bool
) -> Array:
    """``sum_{i covers j} g_i exp(x_j - y_i)`` of real arrays, by two scans (g's signs), in
    the namespace of `x`: the generic engine of `_PULLBACK`."""
    xp = _compat.array_namespace(x)
    kept = y != -math.inf  # NaN outputs are kept: they spread NaN
    log_abs = xp.log(xp.abs(xp.where(g != 0, g, 1.0))) - y
    positive = xp.where(kept & ~(g <= 0), log_abs, -math.inf)  # NaN cotangents go here
    negative = xp.where(kept & (g < 0), log_abs, -math.inf)
    a = logcumsumexp(positive, axis, exclusive=exclusive, reverse=reverse)
    b = logcumsumexp(negative, axis, exclusive=exclusive, reverse=reverse)
    plus_inf = x == math.inf
    xs = xp.where(plus_inf, 0.0, x)  # inf + (-inf) would warn: the result is set below
    return xp.where(plus_inf, math.nan, xp.exp(xs + a) - xp.exp(xs + b))


def _numpy_pullback(
    x: Array, y: Array, g: Array, axis: int, exclusive: bool, reverse: bool
) -> Array:
    """The NumPy engine of `_PULLBACK`: one cumulative sum against a reference a row
    (`._numpy_vjp`) where that applies, the generic rule otherwise."""
    from . import _numpy_vjp

    dx = _numpy_vjp.real_pullback(x, y, g, axis, exclusive, reverse)
    return _real_pullback(x, y, g, axis, exclusive, reverse) if dx is None else dx


def _complex_pullback(xp: Namespace, x: Array, y: Array, g: Array, scan: dict[str, Any]) -> Array:
    """``sum_{i covers j} g_i conj(exp(x_j - y_i))`` of complex arrays, by one scan."""
    gc = xp.conj(g)
    skip = (gc == 0) | (xp.real(y) == -math.inf)
    terms = xp.log(xp.where(gc == 0, 1.0, gc)) - y
    terms = xp.where(skip, complex(-math.inf, 0.0), terms)
    a = logcumsumexp(terms, **scan)
    plus_inf = xp.real(x) == math.inf
    s = xp.where(plus_inf, 0.0, x) + a
    re, im = xp.real(s), xp.imag(s)
    # Complex exp warns on NaN and infinite parts: such exponents are replaced, and the result
    # set below (an exponent of real part -inf gives 0, whatever its imaginary part).
    zero = re == -math.inf
    nan = plus_inf | xp.isnan(re) | (~xp.isfinite(im) & ~zero)
    # conj before exp: the same value, and no lazily conjugated view (PyTorch's conj bit)
    dx = xp.exp(xp.conj(xp.where(nan | zero, 0.0, s)))
    return xp.where(nan, complex(math.nan, math.nan), xp.where(zero, 0.0, dx))


def backward(
    residuals: tuple[Array, Array],
    cotangent: Any,
    /,
    axis: int | None = None,
    *,
    exclusive: bool = False,
    reverse: bool = False,
    dtype: DType = None,
) -> tuple[Array]:
    """The cotangent of `x` (its shape, dtype, namespace and device) for the cotangent of
    ``logcumsumexp(x, axis, ...)``, by the formulas of the module docstring."""
    x, y = residuals
    xp = _compat.array_namespace(x)
    g = _check_cotangent(xp, cotangent, y)
    compute = y.dtype
    # x as the forward scanned it: cast to the result dtype, then to the compute dtype
    xc = x
    out_dtype = _result_dtype(x, dtype)
    if is_dtype(xp, x.dtype, _COMPLEX) and not is_dtype(xp, out_dtype, _COMPLEX):
        xc = xp.real(xc)  # the cast to a real dtype keeps the real part (NumPy would warn)
    if xc.dtype != out_dtype:
        xc = xp.astype(xc, out_dtype)
    if xc.dtype != compute:
        xc = xp.astype(xc, compute)
    if axis is None or x.ndim == 0:
        scan_axis = 0
        xc = xp.reshape(xc, (-1,))
        y, g = xp.reshape(y, (-1,)), xp.reshape(g, (-1,))
    else:
        scan_axis = operator.index(axis) % x.ndim
    scan = {
        "axis": scan_axis,
        "exclusive": as_bool(exclusive, "exclusive"),
        "reverse": not as_bool(reverse, "reverse"),
    }
    if is_dtype(xp, compute, _COMPLEX):
        dx = _complex_pullback(xp, xc, y, g, scan)
        if not is_dtype(xp, x.dtype, _COMPLEX):
            dx = xp.real(dx)
    else:
        dx = dispatch(xp, _PULLBACK, xc, y, g, **scan)
    if dx.dtype != x.dtype:
        dx = xp.astype(dx, x.dtype)
    return (xp.reshape(dx, tuple(x.shape)),)


# The real pull-back's engines: CUDA kernels on CuPy (and PyTorch's CUDA tensors; see
# `._cupy._backward`), a linear recurrence on JAX arrays, one cumulative sum on NumPy arrays
# where it applies (`._numpy_vjp`), the generic operations elsewhere.
_PULLBACK = Engines(
    __package__,
    numpy=_numpy_pullback,
    cupy="._cupy._backward:real_pullback",
    dask=_real_pullback,
    generic=_real_pullback,
    torch=OWN_ENGINES,
    jax="._jax:real_pullback",
)

RULE = Rule("logcumsumexp", ("x",), forward, backward)
