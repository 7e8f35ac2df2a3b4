"""logcumsumexp: the contract (docstring, validation) and the choice of engine.

The engines: `_numpy` (NumPy), `_cupy` (CUDA kernels), `_dask` (chunk-wise, from the
in-memory engines), `_jax` (JAX arrays: XLA's own scans) and `_agnostic` (any other array-API
namespace, by the log-depth scan of `_logdepth`); the special values of complex inputs are
written once in `_complex`.
"""

import functools
import operator
from typing import Any

from .. import _backend
from .._autodiff import _jax
from .._autodiff import _torch as _autograd
from .._lib._compile import compiling, untraced
from .._lib._dispatch import OWN_ENGINES, Engines, cupy_fast_arrays, dispatch, torch_fast_arrays
from .._lib._dtypes import default_float, is_dtype, is_low_precision
from .._lib._torch import on_device
from .._lib._typing import Array, ArrayT, DType, Namespace
from .._lib._validation import as_bool

__all__ = ["logcumsumexp"]

# Each engine takes (x, axis, exclusive, reverse): `x` of the compute dtype, ndim >= 1, and
# `axis` normalized to 0 <= axis < x.ndim. PyTorch tensors take the NumPy and CuPy engines
# (faster than torch.logcumsumexp on the CPU, which has no `exclusive` or `reverse`). JAX
# arrays take an associative scan or jax.lax.cumlogsumexp, by platform.
_ENGINES = Engines(
    __package__,
    numpy="._numpy:logcumsumexp",
    cupy="._cupy:logcumsumexp",
    dask="._dask:logcumsumexp",
    generic="._agnostic:logcumsumexp",
    torch=OWN_ENGINES,
    jax="._jax:logcumsumexp",
)
_RULE = "xpops._cumulative._vjp:RULE"  # the backward rule, for the PyTorch and JAX bindings


def _resolve_dtypes(xp: Namespace, x: Array, dtype: DType) -> tuple[DType, DType]:
    """(compute dtype, result dtype)."""
    floating = ("real floating", "complex floating")
    if dtype is None:
        if is_dtype(xp, x.dtype, floating):
            out_dtype = x.dtype
        elif is_dtype(xp, x.dtype, ("integral", "bool")):
            out_dtype = default_float(xp, x)
        else:
            msg = f"`x` must have a numeric dtype, got {x.dtype}"
            raise TypeError(msg)
    elif is_dtype(xp, dtype, floating):
        out_dtype = dtype
    else:
        msg = f"`dtype` must be a real floating or complex floating dtype, got {dtype!r}"
        raise TypeError(msg)
    compute = xp.float32 if is_low_precision(xp, out_dtype) else out_dtype
    return compute, out_dtype


def _normalize_axis(axis: Any, ndim: int) -> int:
    if isinstance(axis, bool) or not hasattr(axis, "__index__"):
        msg = f"`axis` must be an integer or None, got {type(axis).__name__} {axis!r}"
        raise TypeError(msg)
    axis = operator.index(axis)
    bound = max(ndim, 1)  # a 0-d array is scanned as shape (1,): axis 0 or -1
    if not -bound <= axis < bound:
        msg = f"`axis` {axis} is out of bounds for an array of dimension {ndim}"
        raise ValueError(msg)
    return axis % bound


def _fast_path(x: Any, axis: Any, exclusive: Any, reverse: Any, dtype: Any) -> Any:
    """The CuPy (or PyTorch) engine's result for the common call (a float32 or float64 CuPy
    array, or PyTorch tensor that our engines take, of at least one dimension and no
    zero-length one, no `dtype`, bool flags, an int axis in range or None), or None: the
    general path's checks cost 40 us of host time on the H100 hosts, which the GPU spends idle
    before the scan starts. Such a call passes every check of the general path, and the
    engine gets the same arguments from either. A concrete floating JAX array goes to the JAX
    binding, as on the general path, whose compiled program checks the arguments when it is
    traced."""
    if _jax.takes_directly(x):
        kwargs = {"axis": axis, "exclusive": exclusive, "reverse": reverse, "dtype": dtype}
        return _jax.apply(_RULE, (x,), kwargs)
    if dtype is not None or type(exclusive) is not bool or type(reverse) is not bool:
        return None
    if cupy_fast_arrays(x, chars="fd"):
        engine = _ENGINES["cupy"]
    elif torch_fast_arrays(x, chars="fd"):
        # the tensor passed the guard: its device picks the engine, with no second look at it
        engine = functools.partial(on_device, _ENGINES, x.device)
    else:
        return None
    if axis is None:
        if x.ndim > 1:
            x = x.reshape(-1)
        axis = 0
    elif type(axis) is int and -x.ndim <= axis < x.ndim:
        axis %= x.ndim
    else:
        return None
    return engine(x, axis, exclusive, reverse)


def logcumsumexp(
    x: ArrayT,
    /,
    axis: int | None = None,
    *,
    exclusive: bool = False,
    reverse: bool = False,
    dtype: DType = None,
) -> ArrayT:
    r"""Cumulative ``log(sum(exp(x)))`` along an axis, computed without overflow.

    ``out[..., i] = log(sum(exp(x[..., :i+1])))`` along `axis`, evaluated so that no
    intermediate overflows or underflows needlessly: inputs such as 1000 or -1000 give 1000 and
    -1000, not inf or -inf.

    Parameters
    ----------
    x : array_like
        Input array (NumPy, CuPy, PyTorch, array-api-strict, Dask, ...), real or complex; a
        list, tuple or Python scalar is taken as a NumPy array. Integer and bool inputs are
        converted to the namespace's default real floating dtype.
    axis : int, optional
        Axis to accumulate along; negative values count from the end. None (the default) scans
        the row-major flattened array and returns a 1-D result.
    exclusive : bool, optional
        If True, ``out[i]`` covers ``x[:i]`` only, so the first output is ``-inf`` (the log of
        an empty sum).
    reverse : bool, optional
        If True, accumulate from the end: ``out[i]`` covers ``x[i:]`` (``x[i+1:]`` when
        `exclusive`).
    dtype : dtype, optional
        Real or complex floating dtype to cast `x` to before computing; the result has this
        dtype. float16 (and bfloat16 where the namespace has it) accumulate in float32 and are
        rounded once at the end.

    Returns
    -------
    out : array
        Same namespace and device as `x`; the shape of `x` (1-D of ``x.size`` elements when
        `axis` is None; shape ``(1,)`` for 0-d `x` with `axis` None).

    Raises
    ------
    TypeError
        If `x` is not an array (or a list, tuple or Python scalar), has a non-numeric dtype,
        `dtype` is not floating, `axis` is not an integer, or `exclusive`/`reverse` are not
        bools.
    ValueError
        If `axis` is out of bounds.

    See Also
    --------
    numpy.logaddexp.accumulate : the same inclusive forward scan, sequential, NumPy only.
    scipy.special.logsumexp : the reduction.

    Notes
    -----
    Special values: ``-inf`` is the identity (a prefix of only ``-inf`` gives ``-inf``, never
    NaN); ``+inf`` gives ``+inf`` from there on; NaN propagates to every later output. An
    output whose prefix holds a single finite term is that term exactly. Complex
    inputs give ``log(cumsum(exp(z)))`` on the principal branch (imaginary part in
    :math:`(-\pi, \pi]`), stable for large real parts.

    Algorithm: each output is ``m + log(s)``, where ``m`` is a running reference (a maximum of
    the inputs seen) and ``s`` the sum of ``exp(x - m)``; pairs ``(m, s)`` combine
    associatively, so the scan is blocked (NumPy) or tree-shaped (GPU, generic), which is also
    more accurate than sequential accumulation. Each element costs one ``exp`` and each output
    one ``log``. `exclusive` and `reverse` are done by indexing, never by flipped copies.

    Backend support: NumPy (blocked, vectorized; faster than ``numpy.logaddexp.accumulate``),
    CuPy (CUDA kernels for long 1-D scans, many short rows and strided axes; no transposing
    copies), Dask (lazy: each chunk scanned by the in-memory op, block carries combined with
    ``logaddexp``), PyTorch (the NumPy engine for CPU tensors, the CuPy kernels for CUDA
    tensors where CuPy is installed, on their memory through DLPack; other tensors as other
    namespaces), JAX (an associative scan of ``logaddexp`` on the CPU and CUDA GPUs,
    ``jax.lax.cumlogsumexp`` on other platforms; complex input as other namespaces), and any
    other array-API namespace (a log-depth scan in array-API operations).

    JAX: ``jax.grad``, ``jax.jit``, ``jax.vmap`` and their compositions take floating JAX
    arrays, the gradient given by the backward rule (a ``jax.custom_vjp``: no NaN at ``-inf``
    inputs; for real input its sum computed by one associative scan), the function compiled as
    one program (JAX compiles it once per shape and arguments). No check needs the values of
    `x`, so none is skipped under a trace. Forward mode (``jax.jvp``, ``jax.jacfwd``) is not
    available.

    Examples
    --------
    >>> import numpy as np
    >>> import xpops
    >>> x = np.array([0.0, 0.0, np.log(2.0)])
    >>> xpops.logcumsumexp(x)
    array([0.        , 0.69314718, 1.38629436])
    >>> np.log(np.cumsum(np.exp([1000.0, 1000.0])))  # overflows  # doctest: +SKIP
    array([inf, inf])
    >>> xpops.logcumsumexp(np.array([1000.0, 1000.0]))
    array([1000.        , 1000.69314718])
    >>> xpops.logcumsumexp(x, exclusive=True)
    array([      -inf, 0.        , 0.69314718])
    >>> xpops.logcumsumexp(x, reverse=True)
    array([1.38629436, 1.09861229, 0.69314718])
    >>> xpops.logcumsumexp(np.arange(6).reshape(2, 3), axis=0)
    array([[0.        , 1.        , 2.        ],
           [3.04858735, 4.04858735, 5.04858735]])
    """
    if compiling(x):
        return untraced(logcumsumexp)(x, axis, exclusive=exclusive, reverse=reverse, dtype=dtype)
    fast = _fast_path(x, axis, exclusive, reverse, dtype)
    if fast is not None:
        return fast
    # lists, tuples and Python scalars become NumPy arrays (the one rule of `array_args`)
    xp, (a,) = _backend.array_args(x, names=["x"])
    if a is None:
        msg = "`x` must be an array, got None"
        raise TypeError(msg)
    if _autograd.recording(a):
        kwargs = {"axis": axis, "exclusive": exclusive, "reverse": reverse, "dtype": dtype}
        return _autograd.apply(_RULE, (a,), kwargs)
    if _jax.handles(a):
        kwargs = {"axis": axis, "exclusive": exclusive, "reverse": reverse, "dtype": dtype}
        return _jax.apply(_RULE, (a,), kwargs)
    exclusive = as_bool(exclusive, "exclusive")
    reverse = as_bool(reverse, "reverse")
    compute_dtype, out_dtype = _resolve_dtypes(xp, a, dtype)
    ndim = a.ndim
    if axis is None:
        a = xp.reshape(a, (-1,))
        scan_axis = 0
        out_shape: tuple[int, ...] | None = None
    else:
        scan_axis = _normalize_axis(axis, ndim)
        out_shape = tuple(a.shape) if ndim == 0 else None
        if ndim == 0:
            a = xp.reshape(a, (1,))
    if a.dtype != compute_dtype:
        a = xp.astype(a, compute_dtype)
    out = dispatch(xp, _ENGINES, a, scan_axis, exclusive, reverse)
    if out.dtype != out_dtype:
        out = xp.astype(out, out_dtype)
    if out_shape is not None:
        out = xp.reshape(out, out_shape)
    return out
