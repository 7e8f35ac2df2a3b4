"""Benchmarks behind ``python -m xpops bench`` (DESIGN.md §8).

Each op module registers cases; for each case the runner reports xpops' median time, the bytes
that must move over that time (GB/s), that rate as a share of the device's bandwidth measured in
the same run (a device-to-device copy, or a fill for write-only ops), and every installed peer's
time over xpops' time (> 1: xpops is faster).
"""

from ._runner import add_arguments, run

__all__ = ["add_arguments", "run"]
