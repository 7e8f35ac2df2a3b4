"""xpops' public functions under ``torch.compile``: run whole, outside TorchDynamo's trace.

TorchDynamo would trace xpops' dispatch down to the engines (which `_torch.opaque` keeps out
of the trace). The dispatch looks array libraries up in ``sys.modules``, so as not to import
them; PyTorch 2.11 builds a variable of that whole dict when it traces such a lookup, which
fails (``dictionary changed size during iteration``) when a module is imported meanwhile, as
TorchDynamo's own lazy imports do during a first compile. So a public function called on a
tensor while TorchDynamo traces calls itself through ``torch.compiler.disable`` first: the
graph breaks at the call, the function runs as it does eagerly, and its results and gradients
are the eager ones.
"""

from collections.abc import Callable
from typing import Any

__all__ = ["compiling", "untraced"]


def compiling(*arrays: Any) -> bool:
    """Whether TorchDynamo is tracing the call of which `arrays` are arguments, one of them
    a tensor. Without a tensor among them (NumPy, CuPy, JAX arrays: every call outside
    PyTorch) it costs a look at their types."""
    for a in arrays:
        if type(a).__module__.startswith("torch"):
            # a tensor exists, so PyTorch is loaded; TorchDynamo traces an import statement
            # without reading sys.modules
            import torch

            # TorchDynamo's tracing only: torch.export also sets is_compiling while it runs the
            # function for real, and the function must then run, not call itself again
            dynamo = getattr(torch.compiler, "is_dynamo_compiling", torch.compiler.is_compiling)
            return bool(dynamo())
    return False


def untraced(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` as ``torch.compiler.disable`` makes it (for a call that `compiling` found)."""
    import torch

    return torch.compiler.disable(fn)
