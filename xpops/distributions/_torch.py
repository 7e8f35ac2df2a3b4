"""PyTorch engines of MultivariateNormal: a distribution of CUDA tensors that CuPy takes is
checked, and its log_prob and prob computed, by the CuPy engine on the tensors' memory (the
class's own in-memory code on CuPy views of them, `.._lib._torch.run_on_cupy`), on PyTorch's
current stream; so is its factor, unless autograd records the parameters or `validate_args` is
False (`parameters_of_tensors`). Other tensors run that code on the tensors themselves.

Importing this module imports neither PyTorch nor CuPy.
"""

import functools
import sys
from collections.abc import Callable
from typing import Any

from .._autodiff import _torch as _autograd
from .._lib._torch import engine_for, run_on_cupy
from .._lib._typing import Array
from ._common import is_array

__all__ = ["on_cuda_tensors", "parameters_of_tensors"]


def on_cuda_tensors(in_memory: Callable[..., Any]) -> Callable[..., Any]:
    """A method's ``torch`` engine: for a distribution of CUDA tensors that CuPy takes (and
    tensors among the arguments on the same device), `in_memory` runs on the distribution's
    CuPy mirror (`State._mirror`: views of the same memory) and on views of those tensors, on
    PyTorch's current stream, its result coming back as tensors (`run_on_cupy`). The fused
    kernels then serve the call, checks of the values included, in one pass and one read
    where PyTorch's operations would take several of each. Otherwise `in_memory` runs on the
    tensors, which also refuses an array of another library among the arguments (the mirror
    would take a CuPy one)."""

    def engine(dist: Any, *args: Any) -> Any:
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
