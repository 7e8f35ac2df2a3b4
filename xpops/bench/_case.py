"""What a benchmark case is."""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Case:
    """One timed call of an xpops op, with the same work done by each peer.

    `nbytes` counts the bytes that must move: inputs read once, outputs written once.
    `bandwidth` names the probe it is compared with: ``"copy"`` or ``"fill"`` (write-only ops).
    """

    op: str
    label: str
    nbytes: int
    bandwidth: str
    run: Callable[[], Any]
    peers: dict[str, Callable[[], Any]] = field(default_factory=dict)
