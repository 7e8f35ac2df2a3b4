"""PyTorch engines of MultivariateNormal: a distribution of CUDA tensors that CuPy takes is
checked, and its log_prob and prob computed, by the CuPy engine on the tensors' memory (the
class's own in-memory code on CuPy views of them, `.._lib._torch.run_on_cupy`), on PyTorch's
current stream; so is its factor, unless autograd records the parameters or `validate_args` is
False (`parameters_of_tensors`). Other tensors run that code on the tensors themselves.

The common log_prob call, an unbatched distribution whose CuPy mirror has its parameters laid
out already (every call after the first) at a C-contiguous CUDA tensor of its dtype, skips
even the views: the fused kernel reads the tensor's memory by address and writes into a
tensor made here (`log_prob_of_tensor`), so that no tensor crosses over by DLPack either way.

The rules of log_prob and prob that autograd records run on the tensors themselves for such a
call (`log_prob_on_tensors`): the forward is the method's call above, one hand-over, and the
backward's gradients come from the fused kernels on the tensors' memory (`log_prob_grads`).

Importing this module imports neither PyTorch nor CuPy.
"""

import functools
import sys
from collections.abc import Callable
from typing import Any

from .._autodiff import _torch as _autograd
from .._lib._torch import bridge, engine_for, numpy_dtype, on_stream, run_on_cupy
from .._lib._typing import Array
from ._common import bad_values, is_array

__all__ = [
    "log_prob_grads",
    "log_prob_of_tensor",
    "log_prob_on_tensors",
    "on_cuda_tensors",
    "parameters_of_tensors",
]


def on_cuda_tensors(
    in_memory: Callable[..., Any], fast: Callable[..., Any] | None = None
) -> Callable[..., Any]:
    """A method's ``torch`` engine: for a distribution of CUDA tensors that CuPy takes (and
    tensors among the arguments on the same device), `in_memory` runs on the distribution's
    CuPy mirror (`State._mirror`: views of the same memory) and on views of those tensors, on
    PyTorch's current stream, its result coming back as tensors (`run_on_cupy`). The fused
    kernels then serve the call, checks of the values included, in one pass and one read
    where PyTorch's operations would take several of each. Otherwise `in_memory` runs on the
    tensors, which also refuses an array of another library among the arguments (the mirror
    would take a CuPy one). `fast(dist, *args)`, where given, serves the calls it takes
    first (None for the others)."""

    def engine(dist: Any, *args: Any) -> Any:
        if fast is not None:
            out = fast(dist, *args)
            if out is not None:
                return out
        kind, index = engine_for((dist._loc, *args))
        tensor = sys.modules["torch"].Tensor
        if kind != "cupy" or any(is_array(a) and not isinstance(a, tensor) for a in args):
            return in_memory(dist, *args)

        def run(view: Any) -> Any:
            viewed = (view(a) if isinstance(a, tensor) else a for a in args)
            return in_memory(dist._mirror(view), *viewed)

        return run_on_cupy(index, run)

    return engine


def parameters_of_tensors(dist: Any, name: str, loc: Array, matrix: Array) -> tuple[Array, Array]:
    """The constructor's ``torch`` engine: for CUDA tensors that CuPy takes, the checks run on
    their CuPy views (the fused kernel's one pass and one read for a ``scale_tril``), and so
    does the factor, unless PyTorch's autograd records the parameters: then PyTorch's
    operations make the factor, so that what is computed from it (``scale_tril``,
    ``covariance_matrix``, ...) carries their gradients. Without checks (`validate_args`
    False) a covariance or precision is factored by PyTorch, whose factorization raises for a
    matrix that is not positive definite where CuPy's returns NaN."""
    kind, index = engine_for((loc, matrix))
    if kind != "cupy" or (not dist._validate and name != "scale_tril"):
        return dist._parameters(name, loc, matrix)
    mapped = functools.partial(dist._mapped, given=False)
    if not _autograd.recording(loc, matrix):
        tril = run_on_cupy(index, lambda view: mapped(view)._factor(name, view(loc), view(matrix)))
        return dist._loc, tril
    if dist._validate:
        run_on_cupy(
            index,
            lambda view: mapped(view)._check_parameters(name, view(loc), view(matrix), copy=False),
        )
    return dist._loc, dist._factor(name, loc, matrix, checked=True)


def log_prob_of_tensor(dist: Any, value: Any) -> Any:
    """log_prob at `value` by the fused kernel on the tensors' memory, for an unbatched
    distribution of CUDA tensors whose CuPy mirror has laid its parameters out (`_mirror`,
    `_fused_params`: every call after the first) and a C-contiguous CUDA tensor (..., D) of
    at least one point, of the distribution's dtype and device; None for any other call,
    which the general engine takes with all its checks. The values' check is the kernel's
    flag, read once, as there."""
    held = vars(dist).get("_mirror_of")
    if held is None or held[0] is not dist._loc or held[1] is not dist._tril:
        return None
    params = held[2]._fused
    torch = sys.modules["torch"]
    loc = dist._loc
    if (
        params is None
        or dist._batch_shape
        or type(value) is not torch.Tensor
        or value.dtype != loc.dtype
        or value.device != loc.device
        or value.ndim < 1
        or value.shape[-1] != dist._d
        or not value.is_contiguous()
        or value.is_neg()  # a negative view: its memory holds the negation of its values
    ):
        return None
    n = value.numel() // dist._d
    if n == 0:
        return None
    from . import _cupy  # CuPy: imported once a mirror exists

    out = torch.empty(value.shape[:-1], dtype=value.dtype, device=value.device)

    def run(view: Any) -> bool:
        return _cupy.log_prob_at(value.data_ptr(), n, params, out.data_ptr(), dist._validate)

    if not run_on_cupy(loc.device.index, run):
        raise ValueError(bad_values("value", tuple(value.shape), False))
    return out


def log_prob_on_tensors(
    loc: Any, matrix: Any, value: Any, *, dist: Any = None, **kwargs: Any
) -> bool:
    """The `on_tensors` of log_prob's and prob's rules (`.._autodiff._rule.Rule`), for CUDA
    tensors that CuPy takes: True for the distribution `dist` the method was called on,
    unbatched, of an event size and dtype that the fused kernels take, and a C-contiguous
    CUDA tensor `value` (..., D) of at least one point, its dtype and device, as stored (no
    negative bit). Its forward (`on_cuda_tensors`) views the distribution and the value once,
    and its backward reaches the gradient kernels by address (`log_prob_grads`). Anything
    else, bad input included, takes the views' path."""
    torch = sys.modules["torch"]
    if dist is None or dist._batch_shape or type(value) is not torch.Tensor:
        return False
    loc = dist._loc
    if type(loc) is not torch.Tensor or value.device != loc.device or value.dtype != loc.dtype:
        return False
    d = dist._d
    if value.ndim < 1 or value.shape[-1] != d or value.numel() == 0:
        return False
    if not value.is_contiguous() or value.is_neg() or value.device.type != "cuda":
        return False
    from . import _cupy  # CuPy: these are tensors it takes

    return _cupy.supported(numpy_dtype(value.dtype), d)


def log_prob_grads(loc: Any, tril: Any, value: Any, g: Any, *, xp: Any) -> Any:
    """The ``torch`` engine of `._grads.log_prob_grads`: its fused CuPy kernels on the memory
    of CUDA tensors of one distribution (`_log_prob_grads_at`); otherwise the CuPy engine on
    views of CUDA tensors, the generic code on the others (`.._lib._torch.bridge`)."""
    out = _log_prob_grads_at(loc, tril, value, g)
    if out is not None:
        return out
    return _bridged_grads()(loc, tril, value, g, xp=xp)


@functools.cache
def _bridged_grads() -> Callable[..., Any]:
    from ._grads import LOG_PROB_GRADS

    return bridge(LOG_PROB_GRADS, cpu=False)


def _log_prob_grads_at(loc: Any, tril: Any, value: Any, g: Any) -> Any:
    """``(g_loc, gL, g_value)`` by `._cupy_grad.log_prob_grads_at` into tensors made here, for
    CUDA tensors that CuPy takes: one distribution (`loc` (D,), `tril` (D, D)), points `value`
    (..., D) and their cotangents `g` (...), one dtype and device, of at least one point, D and
    dtype that the kernels take; None otherwise. Operands not as stored (strided, a broadcast
    mean, a negative bit) are copied first, as the CuPy engine copies them."""
    torch = sys.modules["torch"]
    tensors = (loc, tril, value, g)
    if any(type(t) is not torch.Tensor for t in tensors) or value.device.type != "cuda":
        return None
    d = int(tril.shape[-1]) if tril.ndim == 2 else -1
    if tuple(loc.shape) != (d,) or tuple(value.shape) != (*g.shape, d) or g.numel() == 0:
        return None
    dtype, device = value.dtype, value.device
    if any(t.dtype != dtype or t.device != device for t in tensors):
        return None
    if engine_for(tensors)[0] != "cupy":
        return None
    from . import _cupy, _cupy_grad  # CuPy: these are tensors it takes

    np_dtype = numpy_dtype(dtype)
    if not _cupy.supported(np_dtype, d):
        return None
    loc, tril, value, g = (t.resolve_neg().contiguous() for t in tensors)
    n = g.numel()
    g_value = torch.empty((n, d), dtype=dtype, device=device)
    g_l = torch.empty((d, d), dtype=dtype, device=device)
    g_loc = torch.empty(d, dtype=dtype, device=device)

    def launch(stream: int | None) -> None:
        # the partial sums' columns depend on the device's multiprocessors: sized on it; the
        # caching allocator gives its memory to later work on this stream only
        partial = torch.empty(_cupy_grad.partial_shape(n, d), dtype=dtype, device=device)
        arrays = (value, g, loc, tril, g_value, partial, g_l, g_loc)
        pointers = tuple(a.data_ptr() for a in arrays)
        _cupy_grad.log_prob_grads_at(np_dtype, d, n, pointers, stream)

    on_stream(device.index, launch)
    return g_loc, g_l, g_value.reshape(value.shape)
