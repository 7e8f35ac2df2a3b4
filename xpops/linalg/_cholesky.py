"""cholesky_solve: contract, validation and dispatch."""

from typing import Any

import numpy as np

from .. import _backend
from .._autodiff import _jax
from .._autodiff import _torch as _autograd
from .._lib import _compat
from .._lib._compile import compiling, untraced
from .._lib._dispatch import Engines, cupy_fast_arrays, dispatch, torch_fast_arrays
from .._lib._dtypes import default_float, is_dtype, is_low_precision
from .._lib._typing import Array, ArrayT, DType, Namespace
from .._lib._validation import as_bool

__all__ = ["cholesky_solve"]

# Each engine takes (x, y, upper, *, xp) as validated and cast below: x (*, M, K), y (*, M, M),
# one float or complex compute dtype, nothing empty. The NumPy and generic engines are imported
# on first use too: the NumPy one imports SciPy. PyTorch tensors take torch.cholesky_solve for
# small systems on the CPU and the NumPy and CuPy engines otherwise (`_torch`); JAX arrays XLA's
# triangular solve.
_ENGINES = Engines(
    __package__,
    numpy="._numpy:cholesky_solve",
    cupy="._cupy:cholesky_solve",
    dask="._dask:cholesky_solve",
    generic="._agnostic:cholesky_solve",
    torch="._torch:cholesky_solve",
    jax="._jax:cholesky_solve",
)
# The fast path's engine (two CuPy arrays, or PyTorch tensors that our engines take, of one
# float or complex dtype, one batch shape, nothing empty): only its CuPy and PyTorch entries
# are called; the others are the general engines.
_SAME_BATCH_ENGINES = Engines(
    __package__,
    numpy="._numpy:cholesky_solve",
    cupy="._cupy:solve_same_batch",
    dask="._dask:cholesky_solve",
    generic="._agnostic:cholesky_solve",
    torch="._torch:solve_same_batch",
)
_RULE = "xpops.linalg._vjp:RULE"  # the backward rule, for the PyTorch and JAX bindings


def _shapes(xs: tuple[int, ...], ys: tuple[int, ...]) -> str:
    return f"got shapes {xs} for `x` and {ys} for `y`"


def _floating(xp: Namespace, a: Array) -> DType | None:
    """The dtype `a` is computed in before promotion: integers and bools become float."""
    if is_dtype(xp, a.dtype, ("real floating", "complex floating")):
        return a.dtype
    if is_dtype(xp, a.dtype, ("integral", "bool")):
        return default_float(xp, a)
    return None


def _resolve_dtypes(xp: Namespace, x: Array, y: Array) -> tuple[DType, DType]:
    """(compute dtype, result dtype)."""
    fx, fy = _floating(xp, x), _floating(xp, y)
    if fx is None or fy is None:
        shapes = _shapes(tuple(x.shape), tuple(y.shape))
        msg = f"`x` and `y` must have numeric dtypes, got {x.dtype} and {y.dtype} ({shapes})"
        raise TypeError(msg)
    if is_low_precision(xp, fx) and is_low_precision(xp, fy) and fx != fy:
        out_dtype = xp.float32  # float16 with bfloat16
    else:
        out_dtype = xp.result_type(fx, fy)
    compute = xp.float32 if is_low_precision(xp, out_dtype) else out_dtype
    return compute, out_dtype


def _check_shapes(xs: tuple[int, ...], ys: tuple[int, ...]) -> tuple[tuple[int, ...], bool]:
    """Validate the shapes; return the result shape and whether `x` is a 1-D vector."""
    if len(ys) < 2:
        msg = f"`y` must have at least 2 dimensions, (*, M, M), {_shapes(xs, ys)}"
        raise ValueError(msg)
    if len(xs) < 1:
        msg = f"`x` must have at least 1 dimension, (M,) or (*, M, K), {_shapes(xs, ys)}"
        raise ValueError(msg)
    if ys[-1] != ys[-2]:
        msg = f"`y` must be square in its last two dimensions, (*, M, M), {_shapes(xs, ys)}"
        raise ValueError(msg)
    m = ys[-1]
    vector = len(xs) == 1
    if vector and len(ys) > 2:
        msg = (
            "a 1-D `x` needs a 2-D `y` (give `x` the shape (M, 1) to solve against a batch "
            f"of factors), {_shapes(xs, ys)}"
        )
        raise ValueError(msg)
    xm = xs[0] if vector else xs[-2]
    if xm != m:
        where = "x.shape[0]" if vector else "x.shape[-2]"
        msg = f"`x` and `y` must agree on M ({where} == y.shape[-1]), {_shapes(xs, ys)}"
        raise ValueError(msg)
    if vector:
        return (m,), True
    if xs[:-2] == ys[:-2]:
        return (*xs[:-2], m, xs[-1]), False
    try:
        batch = np.broadcast_shapes(xs[:-2], ys[:-2])
    except ValueError:
        msg = (
            f"the batch shapes {xs[:-2]} of `x` and {ys[:-2]} of `y` do not broadcast, "
            f"{_shapes(xs, ys)}"
        )
        raise ValueError(msg) from None
    return (*batch, m, xs[-1]), False


def cholesky_solve(x: ArrayT, y: ArrayT, /, upper: bool = False) -> ArrayT:
    r"""Solve :math:`A X = B` given the Cholesky factor of :math:`A`; batched, broadcasting.

    `x` holds the right-hand sides :math:`B` and `y` the factor :math:`u` of :math:`A`:
    :math:`A = u u^H` with `u` lower triangular (``upper=False``, the default) or
    :math:`A = u^H u` with `u` upper triangular (``upper=True``), :math:`u^H` being the
    conjugate transpose. The argument order and names are Paddle's
    (``paddle.linalg.cholesky_solve``); ``torch.cholesky_solve`` has the same order.

    Parameters
    ----------
    x : array_like, shape (\*, M, K) or (M,)
        Right-hand sides. A 1-D `x` of shape ``(M,)`` is accepted when `y` is 2-D and gives a
        result of shape ``(M,)`` (SciPy's rule); to solve one vector against a batch of
        factors, pass it as ``(M, 1)``.
    y : array_like, shape (\*, M, M)
        Cholesky factor of :math:`A`, lower triangular if `upper` is False, upper triangular
        otherwise. Only that triangle, diagonal included, is read: the other triangle may
        hold anything, NaN included.

        Either may be a Python list (nested) or scalar: it becomes an array of the other
        argument's library and device, or a NumPy array if neither is an array. A NumPy
        array next to a Dask array becomes a Dask array of one chunk, as Dask itself combines
        them; other mixes of libraries are refused.
    upper : bool, optional
        Whether `y` is upper triangular (:math:`A = u^H u`). Default False
        (:math:`A = u u^H`).

    Returns
    -------
    out : array, shape ``broadcast(x.shape[:-2], y.shape[:-2]) + (M, K)``, or (M,)
        The solution :math:`X`, in the namespace and on the device of the inputs,
        C-contiguous (for the libraries that have the notion). Its dtype is the promotion of
        the inputs' dtypes after integer and bool inputs are taken as the default real
        floating dtype (float64 for NumPy and CuPy, float32 for PyTorch).

    Raises
    ------
    TypeError
        If `x` or `y` is neither an array nor a list or scalar, they come from libraries
        that cannot be mixed (NumPy with CuPy or PyTorch, ...), a dtype is not numeric (bool,
        integer, real or complex floating), or `upper` is not a bool.
    ValueError
        If `y` has fewer than 2 dimensions or is not square, `x` has no dimensions, `x` and
        `y` disagree on M, a 1-D `x` comes with a batched `y`, the batch shapes do not
        broadcast, or the inputs are on different devices. The messages give both shapes.

    See Also
    --------
    scipy.linalg.cho_solve : the same solve in SciPy, ``cho_solve((c, lower), b)``; it
        checks for NaN and inf in the whole of ``c`` unless ``check_finite=False``.
    numpy.linalg.cholesky : computes the lower factor.

    Notes
    -----
    dtypes: float32, float64, complex64 and complex128 are computed as they are (conjugate
    transposes for complex). float16, and bfloat16 where the library has it, are computed
    in float32 and the result is rounded to the input dtype once. Mixed dtypes promote by the
    array API rules (float32 with float64 gives float64). NumPy's long double (float128 and
    complex256 where the platform has them; NumPy and Dask with NumPy chunks) is computed in
    long double by the vectorized substitution, whatever the sizes (SciPy's BLAS has none);
    CuPy, PyTorch and array-api-strict have no long double dtype.

    Special values: a zero on the diagonal of the factor (a singular :math:`A`) is not an
    error: as in LAPACK, the systems that use that factor get inf or NaN, and the other
    systems of the batch are not affected. Whether the factor is that of a positive definite
    matrix cannot be checked from the factor and is not. NaN or inf in the used triangle or
    in `x` propagate to the systems they belong to. Empty M or K and zero-size batches give
    empty results of the right shape.

    Algorithm: a forward substitution with the triangular factor, then a backward
    substitution with its conjugate transpose (two triangular solves, as LAPACK's
    ``potrs``). Batch dimensions in which the factor is broadcast against several
    right-hand sides are folded into K, so that each distinct factor is read once and never
    copied; the cost is :math:`O(M^2 K)` per system.

    Backend support: NumPy (SciPy's BLAS ``trsm`` on the arrays' own memory for large
    systems; a substitution vectorized over the batch for many small ones); CuPy (CUDA
    engine); PyTorch (``torch.cholesky_solve`` for CPU tensors of systems of M <= 32, the
    NumPy engine on their memory through DLPack for larger ones, the CuPy engine for CUDA
    tensors where CuPy is installed; ``torch.linalg.solve_triangular`` for the tensors those
    engines do not take); JAX (``jax.lax.linalg.triangular_solve``, as
    ``jax.scipy.linalg.cho_solve``); any other
    array-API namespace (array-api-strict, ...): the array API standard has no triangular
    solve, so each triangular solve is ``xp.linalg.solve`` on the triangle selected by
    ``xp.tril`` or ``xp.triu``, and systems with a zero diagonal entry come out as NaN.

    JAX: ``jax.grad``, ``jax.jit``, ``jax.vmap`` and their compositions take floating JAX
    arrays, the gradient given by the backward rule (a ``jax.custom_vjp``), the function
    compiled as one program. No check needs the values of the inputs, so none is skipped under
    a trace; under a trace the devices of tracers are not compared (JAX places the
    computation). Forward mode (``jax.jvp``, ``jax.jacfwd``) is not available.

    Examples
    --------
    >>> import numpy as np
    >>> import xpops
    >>> A = np.array([[4.0, 2.0], [2.0, 3.0]])
    >>> L = np.linalg.cholesky(A)
    >>> xpops.linalg.cholesky_solve(np.array([6.0, 5.0]), L)
    array([1., 1.])

    Lists are taken as arrays (of the other argument's library):

    >>> xpops.linalg.cholesky_solve([6.0, 5.0], L)
    array([1., 1.])

    The upper factor, with junk in the unused triangle:

    >>> U = L.T.copy()
    >>> U[1, 0] = np.nan
    >>> xpops.linalg.cholesky_solve(np.array([[6.0], [5.0]]), U, upper=True)
    array([[1.],
           [1.]])

    Batches broadcast: three right-hand-side matrices against one factor, or one against a
    batch of factors.

    >>> B = np.ones((3, 2, 4))
    >>> xpops.linalg.cholesky_solve(B, L).shape
    (3, 2, 4)
    >>> xpops.linalg.cholesky_solve(np.ones((2, 1)), np.stack([L, 2 * L])).shape
    (2, 2, 1)
    """
    if compiling(x, y):
        return untraced(cholesky_solve)(x, y, upper)
    a: Array = x  # the arrays, typed for attribute access (ArrayT ties the result's type to x)
    b: Array = y
    # Concrete floating JAX arrays go to the JAX binding, as on the general path, whose
    # compiled program checks the arguments when it is traced.
    if type(upper) is bool and _jax.takes_directly(a, b):
        return _jax.apply(_RULE, (a, b), {"upper": upper})
    # The common CuPy call (and PyTorch's, on our engines) goes straight to the kernel: the
    # general checks cost more host time than the kernel takes for small batches. The guard and
    # the checks here imply every check below (same batch shape, hence broadcasting ones;
    # square factors; matching M).
    if type(upper) is bool:
        if cupy_fast_arrays(a, b, chars="fdFD", min_ndim=2):
            kind = "cupy"
        elif torch_fast_arrays(a, b, chars="fdFD", min_ndim=2):
            kind = "torch"
        else:
            kind = ""
        if kind:
            xs, ys = a.shape, b.shape
            if xs[:-2] == ys[:-2] and ys[-1] == ys[-2] and xs[-2] == ys[-1]:
                return _SAME_BATCH_ENGINES[kind](a, b, upper)
    for name, arg in (("x", a), ("y", b)):
        if arg is None:  # array_args passes None through, for optional parameters
            msg = f"`{name}` must be an array, got None"
            raise TypeError(msg)
    xp, (a, b) = _backend.array_args(a, b, names=("x", "y"))
    upper = as_bool(upper, "upper")
    if _autograd.recording(a, b):
        return _autograd.apply(_RULE, (a, b), {"upper": upper})
    if _jax.handles(a, b):
        return _jax.apply(_RULE, (a, b), {"upper": upper})
    xs, ys = tuple(a.shape), tuple(b.shape)
    compute_dtype, out_dtype = _resolve_dtypes(xp, a, b)
    out_shape, vector = _check_shapes(xs, ys)
    device = _check_device(a, b, xs, ys)

    if 0 in out_shape:
        return xp.empty(out_shape, dtype=out_dtype, device=device)
    if vector:
        a = xp.reshape(a, (xs[0], 1))
    if a.dtype != compute_dtype:
        a = xp.astype(a, compute_dtype)
    if b.dtype != compute_dtype:
        b = xp.astype(b, compute_dtype)

    out = dispatch(xp, _ENGINES, a, b, upper, xp=xp)

    if out.dtype != out_dtype:
        out = xp.astype(out, out_dtype)
    if vector:
        out = xp.reshape(out, out_shape)
    return out


def _check_device(x: Array, y: Array, xs: tuple[int, ...], ys: tuple[int, ...]) -> Any:
    """The device of the inputs (None for JAX tracers, which have none and are not compared)."""
    if not _compat.same_device(x, y):
        dx, dy = _compat.device(x), _compat.device(y)
        msg = f"`x` and `y` must be on the same device, got {dx} and {dy} ({_shapes(xs, ys)})"
        raise ValueError(msg)
    return _compat.device_of(x, y)
