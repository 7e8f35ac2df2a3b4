"""Device arrays whose D no kernel takes: the host engine on host copies.

`on_host` copies the problems of a GPU library (CuPy) to the host, has the host engine
(`solve`, the NumPy engine, which the entry's dispatch table hands in) compute them and returns
the results on the arrays' device. Array-API calls only; imports no engine.
"""

from collections.abc import Callable
from typing import Any

from ..._lib import _compat
from ..._lib._random import host_rng
from ._genz import check_shift_rng

__all__ = ["on_host"]


def on_host(
    lower: Any, upper: Any, chol: Any, *, solve: Callable[..., Any], rng: Any, **options: Any
) -> tuple[Any, Any]:
    """``solve`` (the host engine's `mvn_cdf`) of host copies of the arrays, the results
    float64 arrays on `chol`'s device (D = 1 and 2 are deterministic there). A
    ``cupy.random.Generator`` gives the host engine a generator seeded from it."""
    check_shift_rng(rng)
    xp = _compat.array_namespace(chol)
    device = _compat.device(chol)
    host = [
        _compat.to_device(xp.asarray(a, dtype=xp.float64, device=device), "cpu")
        for a in (lower, upper, chol)
    ]
    v, e = solve(*host, rng=host_rng(rng), **options)
    return (
        xp.asarray(v, dtype=xp.float64, device=device),
        xp.asarray(e, dtype=xp.float64, device=device),
    )
