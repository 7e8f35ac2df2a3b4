"""The `rng` arguments: what kind of source each one is, and the one check every op runs on it.

An `rng` is None (fresh entropy), an int seed, or a generator of an array library. Each op
accepts some of these kinds; `check_rng` raises ``TypeError`` for the others, with a message
that names what was expected and the type that came. Never imports CuPy: a
``cupy.random.Generator`` can only exist once CuPy is imported.
"""

import numbers
import sys
from collections.abc import Collection
from typing import Any

import numpy as np

from ._typing import Array, Namespace

__all__ = [
    "ANY",
    "CUPY",
    "NUMPY",
    "SEEDS",
    "check_cupy_rng",
    "check_numpy_rng",
    "check_rng",
    "check_seed",
    "host_rng",
    "is_cupy_generator",
    "normal_as_float64",
    "normal_in_dtype",
    "rng_kind",
]

#: None or an int seed (a bool is not a seed).
SEEDS = frozenset({"none", "seed"})
#: What NumPy's ``default_rng`` takes: None, an int (a bool included) or its Generator.
NUMPY = frozenset({"none", "seed", "bool", "numpy"})
#: What CuPy's ``default_rng`` takes: None, an int seed (not a bool) or its Generator.
CUPY = frozenset({"none", "seed", "cupy"})
#: A seed or the generator of either library.
ANY = NUMPY | CUPY


def is_cupy_generator(rng: Any) -> bool:
    """Whether `rng` is a ``cupy.random.Generator`` (False without CuPy imported)."""
    cupy = sys.modules.get("cupy")
    return cupy is not None and isinstance(rng, cupy.random.Generator)


def rng_kind(rng: Any) -> str:
    """``"none"``, ``"seed"`` (an int), ``"bool"``, ``"numpy"`` (a ``numpy.random.Generator``),
    ``"cupy"`` (a ``cupy.random.Generator``) or ``"other"``."""
    if rng is None:
        return "none"
    if isinstance(rng, bool):
        return "bool"
    if isinstance(rng, numbers.Integral):
        return "seed"
    if isinstance(rng, np.random.Generator):
        return "numpy"
    if is_cupy_generator(rng):
        return "cupy"
    return "other"


def _type_of(rng: Any, style: str) -> str:
    cls = type(rng)
    if style == "name":
        return cls.__name__
    if style == "qualified":
        return f"{cls.__module__}.{cls.__name__}"
    return str(cls)  # "repr": <class 'str'>


def check_rng(
    rng: Any, accepted: Collection[str], expected: str, *, got: str = "qualified", where: str = ""
) -> None:
    """Raise ``TypeError`` unless ``rng_kind(rng)`` is in `accepted`.

    The message is ``"[where, ]`rng` must be <expected>, got <type>"``, the type written as
    `got` says: ``"name"`` (``str``), ``"qualified"`` (``builtins.str``) or ``"repr"``
    (``<class 'str'>``).
    """
    if rng_kind(rng) in accepted:
        return
    prefix = f"{where}, " if where else ""
    msg = f"{prefix}`rng` must be {expected}, got {_type_of(rng, got)}"
    raise TypeError(msg)


def check_seed(rng: Any, where: str) -> None:
    """`rng` must be None or an int seed (what a lazy Dask graph can carry), `where` saying
    why: ``"with `chunks`"``."""
    check_rng(rng, SEEDS, "None or an int seed", got="name", where=where)


def check_numpy_rng(rng: Any, *, got: str = "qualified") -> None:
    """`rng` must be what ``numpy.random.default_rng`` takes."""
    check_rng(rng, NUMPY, "None, an int seed or a numpy.random.Generator", got=got)


def check_cupy_rng(rng: Any) -> None:
    """`rng` must be what ``cupy.random.default_rng`` takes."""
    check_rng(rng, CUPY, "None, an int seed or a cupy.random.Generator for CuPy")


def host_rng(rng: Any) -> Any:
    """`rng` as NumPy's ``default_rng`` takes it: a ``cupy.random.Generator`` gives a NumPy
    generator seeded from four words drawn from it (on its device); anything else is returned
    as is."""
    if is_cupy_generator(rng):
        return np.random.default_rng([int(w) for w in (rng.random(4).get() * 2.0**32)])
    return rng


def normal_in_dtype(
    xp: Namespace, shape: tuple[int, ...], dtype: Any, device: Any, rng: Any
) -> Any:
    """Standard normals of `shape` for NumPy, drawn in `dtype` (float32 directly, which is
    faster) from `rng` as ``numpy.random.default_rng`` takes it (`xp` and `device` unused)."""
    check_numpy_rng(rng)
    gen = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    return gen.standard_normal(shape, dtype=np.dtype(dtype).type)


def normal_as_float64(
    xp: Namespace, shape: tuple[int, ...], dtype: Any, device: Any, rng: Any
) -> Array:
    """Standard normals of `shape` for another library: drawn by NumPy in float64 from `rng`
    (as ``numpy.random.default_rng`` takes it), then an array of `xp` in `dtype` on `device`."""
    check_numpy_rng(rng)
    gen = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    eps = gen.standard_normal(shape)
    return xp.asarray(eps, dtype=dtype, device=device)
