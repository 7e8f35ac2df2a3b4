"""The core-chunk check that the distributions' Dask engine imports from here."""

from typing import Any

from .._lib._dask import check_core_chunks

__all__: list[str] = []


def _check_core(a: Any, name: str, core: int) -> None:
    """Raise ValueError unless the last `core` dimensions of Dask array `a` are one chunk each."""
    check_core_chunks(a, name, core, "the solve needs whole matrices")
