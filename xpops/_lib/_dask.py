"""Helpers shared by the ops' Dask engines (the ``_dask.py`` of each op package).

Imported only by those engines, once a Dask array has reached an op: xpops never imports Dask
itself.
"""

import sys
from types import ModuleType
from typing import Any

import numpy as np

__all__ = [
    "block_library",
    "check_core_chunks",
    "child_seed",
    "chunk_engine",
    "single_block",
    "task_name",
]


def task_name(op: str, *args: Any) -> str:
    """``xpops-<op>-<token>``: the name of an op's graph layer, a token of its arguments."""
    from dask.base import tokenize

    return f"xpops-{op}-{tokenize(*args)}"


def block_library(block: Any) -> ModuleType:
    """The in-memory library of a chunk: ``numpy``, or the top-level module of its type
    (``cupy`` for CuPy chunks)."""
    if isinstance(block, np.ndarray):
        return np
    return sys.modules[type(block).__module__.split(".")[0]]


def single_block(block: Any) -> Any:
    """The one block that ``blockwise(..., concatenate=False)`` passes as a (nested) list along
    indices missing from the output, where those dimensions are one chunk each. With
    ``concatenate=True`` Dask would copy it: a full pass over the block for nothing."""
    while isinstance(block, list):
        (block,) = block
    return block


def check_core_chunks(a: Any, name: str, core: int, why: str) -> None:
    """Raise ValueError unless the last `core` dimensions of Dask array `a` are one chunk
    each; `why` says what needs them whole (``"the solve needs whole matrices"``)."""
    split = [i for i in range(a.ndim - core, a.ndim) if len(a.chunks[i]) > 1]
    if split:
        dims = ", ".join(str(i - a.ndim) for i in split)
        last = "dimension" if core == 1 else f"{core} dimensions"
        msg = (
            f"`{name}` must hold its last {last} in one chunk ({why}), got "
            f"{len(a.chunks[split[0]])} chunks along axis {dims}; rechunk first, e.g. "
            f"{name}.rechunk({{{', '.join(f'{-k}: -1' for k in range(core, 0, -1))}}})"
        )
        raise ValueError(msg)


def child_seed(entropy: int, index: int) -> int:
    """A 63-bit seed for chunk `index`: its own child of ``SeedSequence(entropy)``, so that
    only the entropy travels with each task and a seed and a chunking give one result."""
    child = np.random.SeedSequence(entropy, spawn_key=(index,))
    return int(child.generate_state(1, dtype=np.uint64)[0] >> np.uint64(1))


# The engine kind of an in-memory chunk, by its top-level module: SciPy's sparse chunks go to
# the NumPy engines, cupyx's to the CuPy ones; any other library to the generic engine.
_CHUNK_KINDS = {"numpy": "numpy", "scipy": "numpy", "cupy": "cupy", "cupyx": "cupy"}


def chunk_engine(engines: Any, block: Any) -> Any:
    """The engine of `engines` (an `Engines` table) that serves the in-memory chunk `block`:
    the one way every op's Dask engine picks a chunk's engine."""
    kind = _CHUNK_KINDS.get(type(block).__module__.split(".")[0], "generic")
    return engines[kind]
