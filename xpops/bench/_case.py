"""What a benchmark case is."""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Case:
    """One timed call of an xpops op, with the same work done by each peer.

    `nbytes` counts the bytes that must move: inputs read once, outputs written once.
    `bandwidth` names the probe it is compared with: ``"copy"`` or ``"fill"`` (write-only ops).
    `per_call`: time the wall time per call of calls made back to back (the latency cases,
    where the host's time per call is what shows), rather than each call on its own.
    """

    op: str
    label: str
    nbytes: int
    bandwidth: str
    run: Callable[[], Any]
    peers: dict[str, Callable[[], Any]] = field(default_factory=dict)
    per_call: bool = False


def import_jax() -> Any:
    """JAX set up as a GPU peer: no preallocation of most of the device's memory at import,
    and 64-bit mode on (without it JAX silently turns float64 inputs into float32, and its
    float64 figures would be float32 ones). Raises ImportError without JAX."""
    import os

    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    import jax

    jax.config.update("jax_enable_x64", True)
    return jax
