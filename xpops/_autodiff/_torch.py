"""PyTorch autograd for the public functions: one `torch.autograd.Function` built from a rule.

A contract whose inputs include a tensor that requires grad (under grad mode) hands the call
here. The forward runs the public function on detached tensors and the backward is the op's rule.
Torch is never imported by this module: it is only reached once a tensor exists.

CUDA tensors that CuPy takes (`.._lib._torch.engine_for`) are handed over once each way: the
rule's forward runs on their CuPy views, and its backward on CuPy views of the saved residuals,
each on PyTorch's current stream. The rule's every step then takes the CuPy path, as
`xpops.vjp` on CuPy arrays does, instead of crossing from PyTorch to CuPy and back for each of
its operations, host time that a small call would pay several times over. The residuals are
saved as tensors (views of the inputs as the inputs themselves), so PyTorch's in-place check,
saved-tensor hooks and release after the backward apply as to any op. Calls that draw random
numbers (an ``rng`` keyword) stay on PyTorch: their draws come from PyTorch's generators.
Keywords a rule on CuPy arrays cannot take (a PyTorch dtype without a NumPy one) keep the call
on PyTorch as well. A rule that reaches the kernels by the tensors' addresses, or in one
hand-over of its own, for the call (`Rule.on_tensors`) runs on the tensors themselves.
"""

import functools
import sys
from typing import Any

from .._lib._torch import engine_for, run_on_cupy
from ._rule import Rule, rule_of

__all__ = ["apply", "recording"]


def recording(*arrays: Any) -> bool:
    """Whether PyTorch records this call: grad mode is on and an argument requires grad."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.is_grad_enabled():
        return False
    tensor = torch.Tensor
    return any(isinstance(a, tensor) and a.requires_grad for a in arrays)


def apply(rule: str, primals: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The function of `rule` (``"module:attribute"``, imported on first use) at `primals`
    and `kwargs`, recorded by autograd."""
    return _function().apply(rule_of(rule), kwargs, *primals)


@functools.cache
def _function() -> Any:
    """The one autograd Function class (built on first use: it subclasses a torch class)."""
    import torch

    class XpopsFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, rule: Rule, kwargs: dict[str, Any], *primals: Any) -> Any:
            ctx.cupy = None
            handed = _cupy_call(torch, primals, kwargs)
            if handed is not None and not (rule.on_tensors and rule.on_tensors(*primals, **kwargs)):
                return _forward_on_cupy(ctx, rule, primals, *handed)
            out, residuals = rule.forward(*primals, **kwargs)
            is_tensor = [isinstance(r, torch.Tensor) for r in residuals]
            ctx.save_for_backward(*(r for r, t in zip(residuals, is_tensor, strict=True) if t))
            ctx.others = [None if t else r for r, t in zip(residuals, is_tensor, strict=True)]
            ctx.is_tensor = is_tensor
            ctx.rule = rule
            ctx.kwargs = kwargs
            return out

        @staticmethod
        @torch.autograd.function.once_differentiable
        def backward(ctx: Any, *grad_outputs: Any) -> Any:  # pyright: ignore[reportIncompatibleMethodOverride] - once_differentiable retypes ctx
            if ctx.cupy is not None:
                return _backward_on_cupy(ctx, grad_outputs)
            saved = iter(ctx.saved_tensors)
            residuals = tuple(
                next(saved) if t else r for r, t in zip(ctx.others, ctx.is_tensor, strict=True)
            )
            (cotangent,) = grad_outputs  # every rule has one output
            grads = ctx.rule.backward(residuals, cotangent, **ctx.kwargs)
            # no gradient for the rule and its keyword arguments, nor for a primal that does
            # not require one
            needs = ctx.needs_input_grad[2:]
            return (None, None, *(g if n else None for g, n in zip(grads, needs, strict=True)))

    return XpopsFunction


def _cupy_call(torch: Any, primals: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``(device index, kwargs for CuPy)`` where the rule runs on CuPy views of the tensors
    (see the module docstring), else None. In the keywords, PyTorch dtypes become NumPy's;
    tensors and distributions are viewed when the call runs (`_on_cupy_value`)."""
    if "rng" in kwargs:
        return None
    kind, index = engine_for((*primals, *kwargs.values()))
    if kind != "cupy":
        return None
    converted = {}
    for name, value in kwargs.items():
        if isinstance(value, torch.dtype):
            value = _numpy_dtype(value)
            if value is None:
                return None
        converted[name] = value
    return index, converted


def _numpy_dtype(dtype: Any) -> Any:
    """NumPy's dtype of PyTorch's `dtype`, or None where NumPy has none (bfloat16)."""
    import numpy as np

    try:
        return np.dtype(str(dtype).removeprefix("torch."))
    except TypeError:
        return None


def _on_cupy_value(value: Any, view: Any) -> Any:
    """A keyword's value for the rule on CuPy arrays: a tensor's CuPy view, a distribution on
    the CuPy views of its arrays (``_mapped``), tuples item by item, anything else as is."""
    torch = sys.modules["torch"]
    if isinstance(value, torch.Tensor):
        return view(value)
    if hasattr(value, "_mapped"):  # a MultivariateNormal of the call's tensors
        return value._mapped(view)
    if isinstance(value, tuple):
        return tuple(_on_cupy_value(v, view) for v in value)
    return value


def _forward_on_cupy(
    ctx: Any, rule: Rule, primals: tuple[Any, ...], index: int, kwargs: dict[str, Any]
) -> Any:
    """The forward of the rule on CuPy views of the tensors of device `index`; the result as a
    tensor. The residuals are saved as PyTorch saves any (`save_for_backward`: its in-place
    check, its saved-tensor hooks, freed after the backward): a view of a tensor as that
    tensor, the result as the returned tensor, a new CuPy array as a tensor of its memory."""
    torch = sys.modules["torch"]
    viewed: dict[int, tuple[Any, Any]] = {}  # id of a CuPy view -> (view, its tensor)

    def run(view: Any) -> Any:
        def tracked(t: Any) -> Any:
            v = view(t)
            viewed[id(v)] = (v, t)
            return v

        args = tuple(tracked(p) if isinstance(p, torch.Tensor) else p for p in primals)
        on_cupy = {name: _on_cupy_value(v, tracked) for name, v in kwargs.items()}
        out, residuals = rule.forward(*args, **on_cupy)

        def saved(r: Any) -> Any:
            if r is out:
                return _OUT
            seen = viewed.get(id(r))
            return seen[1] if seen is not None and seen[0] is r else r

        # CuPy arrays among them come back as tensors (`run_on_cupy`)
        return (out, *(saved(r) for r in residuals))

    out, *residuals = run_on_cupy(index, run)
    residuals = [out if r is _OUT else r for r in residuals]
    is_tensor = [isinstance(r, torch.Tensor) for r in residuals]
    ctx.save_for_backward(*(r for r, t in zip(residuals, is_tensor, strict=True) if t))
    ctx.others = [None if t else r for r, t in zip(residuals, is_tensor, strict=True)]
    ctx.is_tensor = is_tensor
    ctx.cupy = (index, kwargs)
    ctx.rule = rule
    return out


_OUT = object()  # the result among the residuals: saved as the returned tensor


def _backward_on_cupy(ctx: Any, grad_outputs: tuple[Any, ...]) -> tuple[Any, ...]:
    """The rule's backward on CuPy views of the saved residuals and of the cotangent; the
    cotangents as tensors. The keywords are those of the forward's call (dtypes NumPy's): no
    backward rule reads an array from them."""
    saved = iter(ctx.saved_tensors)
    residuals = [next(saved) if t else r for r, t in zip(ctx.others, ctx.is_tensor, strict=True)]
    index, kwargs = ctx.cupy
    (cotangent,) = grad_outputs
    rule = ctx.rule
    tensor = sys.modules["torch"].Tensor

    def run(view: Any) -> Any:
        on_cupy = tuple(view(r) if isinstance(r, tensor) else r for r in residuals)
        return rule.backward(on_cupy, view(cotangent), **kwargs)

    grads = run_on_cupy(index, run)
    needs = ctx.needs_input_grad[2:]
    return (None, None, *(g if n else None for g, n in zip(grads, needs, strict=True)))
