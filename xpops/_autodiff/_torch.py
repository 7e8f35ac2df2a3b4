"""PyTorch autograd for the public functions: one `torch.autograd.Function` built from a rule.

A contract whose inputs include a tensor that requires grad (under grad mode) hands the call
here. The forward runs the public function on detached tensors (so our engines, including the
CuPy kernels through DLPack, do the work) and the backward is the op's rule. Torch is never
imported by this module: it is only reached once a tensor exists.
"""

import functools
import sys
from typing import Any

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
