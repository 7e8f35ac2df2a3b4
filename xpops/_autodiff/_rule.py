"""The shape of a backward rule: one per differentiable public function, in the op's package.

A rule is written once against the array API (NumPy, CuPy, PyTorch, JAX, array-api-strict)
and is used by `xpops.vjp` (NumPy, CuPy) and by the PyTorch autograd binding.
"""

import functools
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Rule", "rule_of"]


@dataclass(frozen=True, slots=True)
class Rule:
    """The forward and backward halves of one public function.

    Attributes
    ----------
    name : str
        The public name, for messages (``"logcumsumexp"``, ``"MultivariateNormal.log_prob"``).
    primals : tuple of str
        The names of the differentiated positional arguments, in order.
    forward : callable
        ``forward(*primals, **kwargs) -> (out, residuals)``: the public function's result and
        a tuple of what `backward` needs (arrays, or None). It calls the public function, so
        its checks, engines and result are the public function's.
    backward : callable
        ``backward(residuals, cotangent, **kwargs) -> cotangents``: a tuple with one cotangent
        per primal, of that primal's shape, dtype, namespace and device. A gradient that the
        rule cannot give raises NotImplementedError naming it: never a silent zero.
    on_tensors : callable or None
        ``on_tensors(*primals, **kwargs) -> bool`` for PyTorch CUDA tensors that CuPy takes:
        True where both halves of the rule, run on the tensors themselves, reach the CuPy
        kernels by the tensors' addresses or in one hand-over each (each step of the rule
        would otherwise hand the tensors over to CuPy on its own). The autograd binding then
        runs the rule on the tensors instead of on CuPy views of them. None: always on the
        views.
    """

    name: str
    primals: tuple[str, ...]
    forward: Callable[..., tuple[Any, tuple[Any, ...]]]
    backward: Callable[..., tuple[Any, ...]]
    on_tensors: Callable[..., bool] | None = None


@functools.cache
def rule_of(spec: str) -> Rule:
    """The rule named by ``"module:attribute"`` (an absolute module name), imported once."""
    module_name, _, attribute = spec.partition(":")
    rule: Rule = getattr(importlib.import_module(module_name), attribute)
    return rule
