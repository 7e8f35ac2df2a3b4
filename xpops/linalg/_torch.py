"""PyTorch engine of cholesky_solve: ``torch.cholesky_solve`` for CPU tensors of small systems,
the op's own engines otherwise (`.._lib._torch.bridge`: the NumPy engine on CPU tensors' memory,
the CuPy engine on CUDA tensors', the generic engine for the rest; the fast path's tensors,
already checked, go to `.._lib._torch.on_device`, or by address to the lanes or small kernel,
below).

``torch.cholesky_solve`` meets the contract: LAPACK's ``potrs`` reads only the used triangle
and gives inf or NaN for a system with a zero pivot, without an error; batches broadcast. Its C
loop over the systems costs about a microsecond a system, where the NumPy engine's vectorized
substitution costs 2M NumPy steps whatever the batch (a few hundred microseconds at M = 16): on
a 2-core CPU, float32, M = 16, K = 1, 100 systems 0.06 against 0.29 ms, 1000 systems 0.49
against 0.71, 3000 systems 1.9 against 3.6; at 10000 systems the two are within the noise of
each other (6-12 ms), and float64 from a few thousand systems is the NumPy engine's (1.4-1.8x).
From M = 64 the NumPy engine (BLAS ``trsm`` over the whole batch) is as fast or faster (M =
1024, K = 64: 22 against 48 ms). So systems of M <= `_TORCH_MAX_M` go to PyTorch; its
result, which LAPACK leaves column-major, is made C-contiguous as the contract says.

The fast path's CUDA tensors of systems that the CuPy engine's lanes or small kernel takes
(M <= 64), C-contiguous and holding their values as stored (no conjugate or negative bit:
PyTorch's lazy ``conj()`` shares the memory of the unconjugated values), go to that kernel by
address (`_solve_at`), the result a tensor made here: neither operand is viewed and nothing
comes back by DLPack, host time that short calls would otherwise add. Real factors whose
matrices are column-major, as ``torch.linalg.cholesky`` returns them, go too: their memory
holds the other triangle's factor of the same matrix in C order (`_stored_factor`).

`forward_keeping_half` and `backward_from_half` are the backward rule's engines (`._vjp`) for
tensors: they hand systems of more than 64 unknowns to the NumPy or CuPy engines that keep the
forward's first solve (`._numpy_grad`, `._cupy_grad`). Smaller systems of CUDA tensors, as the
fast path takes them, get both cotangents from the lanes kernel's backward by address
(`_backward_lanes_at`); `rule_by_address` tells the autograd binding when both halves of the
rule go by address, so that it runs the rule on the tensors rather than on CuPy views.

Importing this module imports neither PyTorch nor CuPy.
"""

import functools
import sys
from collections.abc import Callable
from typing import Any

from .._lib._dispatch import Engines
from .._lib._torch import bridge, engine_for, numpy_dtype, on_device, on_stream
from .._lib._typing import Array, Namespace

__all__ = [
    "backward_from_half",
    "cholesky_solve",
    "forward_keeping_half",
    "rule_by_address",
    "solve_same_batch",
]

_TORCH_MAX_M = 32  # torch.cholesky_solve for M up to this (see the module docstring)

# The op's own engines, as the contract's tables name them for the other kinds
_OWN = Engines(
    __package__,
    numpy="._numpy:cholesky_solve",
    cupy="._cupy:cholesky_solve",
    dask="._dask:cholesky_solve",
    generic="._agnostic:cholesky_solve",
)
_OWN_SAME_BATCH = Engines(
    __package__,
    numpy="._numpy:cholesky_solve",
    cupy="._cupy:solve_same_batch",
    dask="._dask:cholesky_solve",
    generic="._agnostic:cholesky_solve",
)


def _by_torch(x: Any, y: Any) -> bool:
    """Whether ``torch.cholesky_solve`` takes the call: tensors that the NumPy engine would
    take (CPU, strided, not empty, neither a subclass nor wrapped by functorch: those keep the
    generic engine, whose operations functorch differentiates) of systems of M <= 32."""
    return y.shape[-1] <= _TORCH_MAX_M and engine_for((x, y))[0] == "numpy"


@functools.cache
def _own() -> Callable[..., Any]:
    """The ``torch`` engine of `_OWN` (`bridge`), made once."""
    return bridge(_OWN)


def _solve(x: Array, y: Array, upper: bool) -> Array:
    torch = sys.modules["torch"]
    x, y = (t.detach() if t.requires_grad else t for t in (x, y))
    return torch.cholesky_solve(x, y, upper=upper).contiguous()


def cholesky_solve(x: Array, y: Array, upper: bool, *, xp: Namespace | None = None) -> Array:
    """The engine of the contract's table: arguments as the other engines take them."""
    if _by_torch(x, y):
        return _solve(x, y, upper)
    return _own()(x, y, upper, xp=xp)


def solve_same_batch(x: Array, y: Array, upper: bool) -> Array:
    """The engine of the contract's fast path (one batch shape, nothing empty), whose tensors
    `torch_fast_arrays` has passed (one device, the CPU or a CUDA device that CuPy sees): they
    are not looked at again (a few microseconds of host time a look)."""
    device = x.device
    if device.type == "cpu" and y.shape[-1] <= _TORCH_MAX_M:
        return _solve(x, y, upper)
    if device.type == "cuda":
        out = _solve_at(x, y, upper)
        if out is not None:
            return out
    return on_device(_OWN_SAME_BATCH, device, x, y, upper)


def _solve_at(x: Any, y: Any, upper: bool) -> Any:
    """The CuPy engine's lanes kernel (M <= `_cupy.LANES_MAX_M`) or small kernel (M <=
    `_cupy.SMALL_MAX_M`) on the memory of CUDA tensors `x` (*batch, M, K) and `y`
    (*batch, M, M) (one batch, nothing empty: the fast path's), into a tensor made here, as
    the engine chooses them; None where M is past the small kernel's, `x` or the factors are
    not as stored (`_as_stored`, `_stored_factor`; the views' path resolves the others), or
    the dtype has no kernel."""
    kernels = _kernels()
    m, k = x.shape[-2:]
    dtype = numpy_dtype(x.dtype)
    if m > kernels.SMALL_MAX_M or dtype is None or dtype.kind not in "fc":
        return None
    stored = _stored_factor(y, dtype)
    if stored is None or not _as_stored(x):
        return None
    factor, flipped = stored
    out = sys.modules["torch"].empty_like(x)  # x is C-contiguous: so is out
    n = out.numel() // (m * k)
    pointers = (x.data_ptr(), factor.data_ptr(), out.data_ptr())
    index = x.get_device()
    up = upper != flipped
    solve = kernels.solve_lanes_at if m <= kernels.LANES_MAX_M else kernels.solve_small_at
    on_stream(index, lambda s: solve(dtype, m, k, n, pointers, up, index, s))
    return out


def _as_stored(*tensors: Any) -> bool:
    """Whether the tensors' memory holds their values in C order: C-contiguous, without
    PyTorch's conjugate or negative bit (a lazy ``conj()`` or ``neg()`` shares the memory of
    the values it negates)."""
    for t in tensors:  # noqa: SIM110 (a loop: a generator would cost a microsecond of host time)
        if not t.is_contiguous() or t.is_conj() or t.is_neg():
            return False
    return True


@functools.cache
def _kernels() -> Any:
    """The CuPy engine's module (`._cupy`), imported once a CUDA tensor that CuPy takes exists:
    a call costs less host time than an import statement."""
    from . import _cupy

    return _cupy


def _stored_factor(y: Any, dtype: Any) -> tuple[Any, bool] | None:
    """``(the tensor whose C-order memory the kernels read, whether it is y's transpose)``:
    `y` itself where it is as stored (`_as_stored`); for a real `dtype`, a `y` whose matrices
    are column-major (as ``torch.linalg.cholesky`` returns its factors) as ``y.mT``, the factor
    of the other triangle of the same matrix (``L L^T = (L^T)^T L^T``), which the kernels take
    with `upper` flipped; None otherwise (a complex column-major factor's memory holds the
    conjugate of that factor)."""
    if _as_stored(y):
        return y, False
    if dtype.kind == "f" and _as_stored(y.mT):
        return y.mT, True
    return None


def rule_by_address(x: Any, y: Any, upper: Any = False) -> bool:
    """The rule's `on_tensors` (`.._autodiff._rule.Rule`), for CUDA tensors that CuPy takes:
    True where the forward goes to the lanes kernel by address (`_solve_at`) and the
    backward to its backward kernel (`_backward_lanes_at`): a batch of systems (*batch, M, K)
    with factors (*batch, M, M) of one batch shape and dtype (float32, float64, complex64 or
    complex128), rows of the factor of at most `._cupy_grad.FUSED_MAX_BYTES`, nothing empty,
    `x` as stored and the factors as stored or column-major (`_stored_factor`). Anything
    else, bad input included, takes the views' path, which raises the public function's
    errors."""
    torch = sys.modules["torch"]
    if type(x) is not torch.Tensor or type(y) is not torch.Tensor or x.ndim < 2:
        return False
    if x.device.type != "cuda" or y.device != x.device:
        return False
    from . import _cupy, _cupy_grad  # CuPy: these are tensors it takes

    shape, m = tuple(x.shape), int(y.shape[-1]) if y.ndim >= 2 else 0
    if tuple(y.shape) != (*shape[:-1], m) or shape[-2] != m or x.dtype != y.dtype:
        return False
    kernels = (torch.float32, torch.float64, torch.complex64, torch.complex128)
    if x.dtype not in kernels or m > _cupy.LANES_MAX_M:
        return False
    if m * x.element_size() > _cupy_grad.FUSED_MAX_BYTES:
        return False
    return x.numel() > 0 and _as_stored(x) and _stored_factor(y, numpy_dtype(x.dtype)) is not None


def _none(*args: Any) -> None:
    return None


# The backward rule's engines that keep the forward's first solve (`._vjp`), on the tensors'
# memory: NumPy's for CPU tensors, CuPy's for CUDA ones, none for the rest
_KEPT = Engines(
    __package__,
    numpy="._numpy_grad:forward",
    cupy="._cupy_grad:forward",
    dask=_none,
    generic=_none,
)
_FROM_HALF = Engines(
    __package__,
    numpy="._numpy_grad:backward",
    cupy="._cupy_grad:backward",
    dask=_none,
    generic=_none,
)


@functools.cache
def _bridged(name: str) -> Callable[..., Any]:
    return bridge(_KEPT if name == "kept" else _FROM_HALF)


def forward_keeping_half(x: Any, y: Any, upper: bool) -> tuple[Any, Any] | None:
    """The rule's forward keeping its first solve, for systems of more than 64 unknowns (the
    engines' own limit); None for smaller ones, which are not handed over at all."""
    if getattr(y, "ndim", 0) < 2 or y.shape[-1] <= 64:
        return None
    result: tuple[Any, Any] | None = _bridged("kept")(x, y, upper)
    return result


def backward_from_half(
    g: Any, z: Any, u: Any, upper: bool, batch: tuple[int, ...], half: Any
) -> tuple[Any, Any] | None:
    """Both cotangents from the forward's kept `half`, or without one, for CUDA tensors that
    CuPy takes, from the lanes kernel's backward by address (`_backward_lanes_at`); None
    (nothing handed over) otherwise."""
    if half is None:
        if g.device.type == "cuda" and engine_for((g, z, u))[0] == "cupy":
            return _backward_lanes_at(g, z, u, upper, batch)
        return None
    result: tuple[Any, Any] | None = _bridged("half")(g, z, u, upper, batch, half)
    return result


def _backward_lanes_at(
    g: Any, z: Any, u: Any, upper: bool, batch: tuple[int, ...]
) -> tuple[Any, Any] | None:
    """Both cotangents by the lanes kernel's backward (`._cupy_grad.backward_at`) on the
    memory of CUDA tensors: the cotangent `g` and solution `z` (*batch, M, K), the factors `u`
    (*batch, M, M), one dtype of a kernel and one batch (`batch`, the factors'), rows of the
    factor of at most `._cupy_grad.FUSED_MAX_BYTES`, nothing empty; into tensors made here. A
    cotangent not as stored is copied first; column-major real factors are read as their
    transposes (`_stored_factor`) and their cotangent written transposed; None where the
    factors or the solution are not as stored, where autograd records the call (grad mode on
    and an operand that requires grad: the two steps' operations then carry their
    gradients), or for any other call."""
    from . import _cupy_grad  # CuPy: imported already for CUDA tensors that it takes

    torch = sys.modules["torch"]
    if torch.is_grad_enabled() and (g.requires_grad or z.requires_grad or u.requires_grad):
        return None
    m, k = int(g.shape[-2]), int(g.shape[-1])
    dtype = numpy_dtype(u.dtype)
    if tuple(g.shape[:-2]) != batch or g.numel() == 0 or dtype is None or dtype.char not in "fdFD":
        return None
    if m * dtype.itemsize > _cupy_grad.FUSED_MAX_BYTES or not (g.dtype == z.dtype == u.dtype):
        return None
    stored = _stored_factor(u, dtype)
    if stored is None or not _as_stored(z):
        return None
    factor, flipped = stored
    g = g.resolve_conj().resolve_neg().contiguous()
    dx = torch.empty_like(g)  # g is C-contiguous: so is dx
    dy = torch.empty(u.shape, dtype=u.dtype, device=u.device)  # the cotangent of `factor`
    pointers = (g.data_ptr(), z.data_ptr(), factor.data_ptr(), dx.data_ptr(), dy.data_ptr())
    n = dx.numel() // (m * k)
    index = g.get_device()
    up = upper != flipped
    on_stream(index, lambda s: _cupy_grad.backward_at(dtype, m, k, n, pointers, up, index, s))
    return dx, dy.mT if flipped else dy
