"""The `rng` arguments: what kind of source each one is, and the one check every op runs on it.

An `rng` is what ``numpy.random.default_rng`` takes (SPEC 7): None (fresh entropy), an int
seed, a sequence of int seeds, a ``numpy.random.SeedSequence``, a ``BitGenerator`` or a
``Generator``; or a ``cupy.random.Generator``; or, for JAX arrays, a ``jax.random`` key (a
typed key array, ``jax.random.key``, or a legacy ``uint32`` key, ``jax.random.PRNGKey``); or,
for PyTorch tensors, a ``torch.Generator`` of their device. A
bool is not a seed (``default_rng(True)`` would take it as 1), and a seed is non-negative. Each
op accepts some of these kinds; `check_rng` raises ``TypeError`` for the others, with a message
that names what was expected and the type that came, and ``ValueError`` for a negative seed.
Never imports CuPy, JAX or PyTorch: a ``cupy.random.Generator``, a JAX key or a
``torch.Generator`` can only exist once its library is imported.

Under a JAX trace (``jax.jit``, ``jax.vmap``, ``jax.grad``) a draw from a NumPy source would be
made once, when the function is traced, and every call of the compiled function (every member
of a vmapped batch) would reuse it: there `normal_as_float64` takes a JAX key or a fixed seed
only, and raises ``ValueError`` for None and NumPy generators.
"""

import numbers
import sys
from collections.abc import Collection
from typing import Any

import numpy as np

from . import _compat
from ._typing import Array, Namespace

__all__ = [
    "ANY",
    "CUPY",
    "JAX",
    "NUMPY",
    "SEEDS",
    "as_seed",
    "check_cupy_rng",
    "check_numpy_rng",
    "check_rng",
    "check_seed",
    "host_rng",
    "is_cupy_generator",
    "is_jax_key",
    "normal_as_float64",
    "normal_in_dtype",
    "normal_torch",
    "rng_kind",
]

#: What a seed of every library and a lazy graph can carry: None, an int seed, a sequence of
#: ints or a ``numpy.random.SeedSequence`` (taken to an int seed by `as_seed`).
SEEDS = frozenset({"none", "seed", "seedsequence"})
#: What NumPy's ``default_rng`` takes, bools excepted: a seed, a BitGenerator or a Generator.
NUMPY = SEEDS | {"bitgenerator", "numpy"}
#: A seed or a ``cupy.random.Generator``.
CUPY = SEEDS | {"cupy"}
#: A seed or the generator of either library.
ANY = NUMPY | CUPY
#: What the draws of JAX arrays take: NumPy's sources (outside a trace) or a ``jax.random`` key.
JAX = NUMPY | {"jax"}
#: What the draws of PyTorch tensors take: NumPy's sources or a ``torch.Generator``.
TORCH = NUMPY | {"torch"}


def is_cupy_generator(rng: Any) -> bool:
    """Whether `rng` is a ``cupy.random.Generator`` (False without CuPy imported)."""
    cupy = sys.modules.get("cupy")
    return cupy is not None and isinstance(rng, cupy.random.Generator)


def is_jax_key(rng: Any) -> bool:
    """Whether `rng` is a ``jax.random`` key: a typed key array of one key (``jax.random.key``),
    or a legacy key, a ``uint32`` JAX array of shape ``(2,)`` (``jax.random.PRNGKey``); concrete
    or traced. False without JAX imported."""
    jax = sys.modules.get("jax")
    if jax is None or not isinstance(rng, jax.Array):
        return False
    if jax.dtypes.issubdtype(rng.dtype, jax.dtypes.prng_key):
        return rng.ndim == 0
    return rng.dtype == np.uint32 and tuple(rng.shape) == (2,)


def rng_kind(rng: Any) -> str:
    """``"none"``, ``"seed"`` (an int), ``"bool"``, ``"seedsequence"`` (a ``SeedSequence``
    or the sequence of ints one is made of), ``"bitgenerator"``, ``"numpy"`` (a
    ``numpy.random.Generator``), ``"cupy"`` (a ``cupy.random.Generator``), ``"jax"`` (a
    ``jax.random`` key, `is_jax_key`), ``"torch"`` (a ``torch.Generator``) or ``"other"``."""
    if rng is None:
        return "none"
    if isinstance(rng, bool | np.bool_):
        return "bool"
    if isinstance(rng, numbers.Integral):
        return "seed"
    if isinstance(rng, np.random.SeedSequence) or _is_int_sequence(rng):
        return "seedsequence"
    if isinstance(rng, np.random.BitGenerator):
        return "bitgenerator"
    if isinstance(rng, np.random.Generator):
        return "numpy"
    if is_cupy_generator(rng):
        return "cupy"
    if is_jax_key(rng):
        return "jax"
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(rng, torch.Generator):
        return "torch"
    return "other"


def _is_int_sequence(rng: Any) -> bool:
    """A list, tuple or 1-D integer NumPy array of ints: entropy for a ``SeedSequence``."""
    if isinstance(rng, np.ndarray):
        return rng.ndim == 1 and rng.size > 0 and rng.dtype.kind in "iu"
    return (
        isinstance(rng, list | tuple)
        and len(rng) > 0
        and all(isinstance(w, numbers.Integral) and not isinstance(w, bool | np.bool_) for w in rng)
    )


def as_seed(rng: Any) -> Any:
    """`rng` with a ``SeedSequence`` (or a sequence of ints, its entropy) replaced by the
    63-bit int seed it generates (what CuPy's generators and a lazy graph take: an int fits
    every library's seed); anything else unchanged."""
    if _is_int_sequence(rng):
        rng = np.random.SeedSequence([int(w) for w in rng])
    if isinstance(rng, np.random.SeedSequence):
        return int(rng.generate_state(1, dtype=np.uint64)[0] >> np.uint64(1))
    return rng


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
    """Raise ``TypeError`` unless ``rng_kind(rng)`` is in `accepted`, ``ValueError`` for a
    negative int seed.

    The message is ``"[where, ]`rng` must be <expected>, got <type>"``, the type written as
    `got` says: ``"name"`` (``str``), ``"qualified"`` (``builtins.str``) or ``"repr"``
    (``<class 'str'>``).
    """
    prefix = f"{where}, " if where else ""
    kind = rng_kind(rng)
    if kind not in accepted:
        msg = f"{prefix}`rng` must be {expected}, got {_type_of(rng, got)}"
        raise TypeError(msg)
    if kind == "seed" and rng < 0:
        msg = f"{prefix}`rng` as an int seed must be non-negative, got {int(rng)}"
        raise ValueError(msg)
    if kind == "seedsequence" and _is_int_sequence(rng) and any(int(w) < 0 for w in rng):
        msg = f"{prefix}`rng` as a sequence of ints must hold non-negative ints, got {rng!r}"
        raise ValueError(msg)


def check_seed(rng: Any, where: str) -> None:
    """`rng` must be None, an int seed or a SeedSequence (what a lazy Dask graph can carry),
    `where` saying why: ``"with `chunks`"``."""
    check_rng(
        rng, SEEDS, "None, an int seed or a numpy.random.SeedSequence", got="name", where=where
    )


def check_numpy_rng(rng: Any, *, got: str = "qualified") -> None:
    """`rng` must be what ``numpy.random.default_rng`` takes (not a bool)."""
    expected = "None, an int seed or a numpy.random SeedSequence, BitGenerator or Generator"
    check_rng(rng, NUMPY, expected, got=got)


def check_cupy_rng(rng: Any) -> None:
    """`rng` must be what CuPy's generators take (a SeedSequence through `as_seed`)."""
    expected = "None, an int seed, a numpy.random.SeedSequence or a cupy.random.Generator for CuPy"
    check_rng(rng, CUPY, expected)


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
    (as ``numpy.random.default_rng`` takes it), then an array of `xp` in `dtype` on `device`.

    For JAX (`xp` ``jax.numpy``) `rng` may also be a ``jax.random`` key, drawn from by
    ``jax.random.normal`` in `dtype`; under a JAX trace it must be a key or a fixed seed (an
    int or a ``SeedSequence``, whose draws are constants of the traced function): None and
    NumPy generators raise ``ValueError`` (their draws would be made once, at trace time, and
    reused by every call).
    """
    if "jax" in sys.modules and _compat.is_jax_namespace(xp):
        return _jax_normal(shape, dtype, device, rng)
    check_numpy_rng(rng)
    gen = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    eps = gen.standard_normal(shape)
    return xp.asarray(eps, dtype=dtype, device=device)


def normal_torch(xp: Namespace, shape: tuple[int, ...], dtype: Any, device: Any, rng: Any) -> Array:
    """`normal_as_float64` of PyTorch tensors, which may also draw from a ``torch.Generator``
    of their `device` (``torch.randn`` in `dtype`, on the device)."""
    if rng_kind(rng) != "torch":
        expected = (
            "None, an int seed, a numpy.random SeedSequence, BitGenerator or Generator, or a "
            "torch.Generator for PyTorch tensors"
        )
        check_rng(rng, TORCH, expected)
        return normal_as_float64(xp, shape, dtype, device, rng)
    import torch

    device = torch.device("cpu") if device is None else torch.device(device)
    if rng.device.type != device.type or (
        device.index is not None and rng.device.index not in (None, device.index)
    ):
        msg = f"`rng` is a torch.Generator of device {rng.device}, the tensors are on {device}"
        raise ValueError(msg)
    return torch.randn(shape, generator=rng, dtype=dtype, device=device)


def _jax_normal(shape: tuple[int, ...], dtype: Any, device: Any, rng: Any) -> Array:
    """`normal_as_float64` of JAX: from a ``jax.random`` key, or from NumPy outside a trace."""
    import jax

    kind = rng_kind(rng)
    if kind == "jax":
        out = jax.random.normal(rng, shape, dtype)
        return out if device is None else jax.device_put(out, device)
    expected = (
        "None, an int seed, a numpy.random SeedSequence, BitGenerator or Generator, or a "
        "jax.random key for JAX arrays"
    )
    check_rng(rng, JAX, expected)
    if kind in ("none", "bitgenerator", "numpy") and _compat.jax_tracing():
        msg = (
            "sampling under a JAX trace (jax.jit, jax.vmap, jax.grad) needs `rng` as a "
            f"jax.random key (or an int seed, whose draws are the same on every call), got "
            f"{'None' if rng is None else type(rng).__name__}: NumPy would draw once, when the "
            "function is traced, and every call would reuse those draws"
        )
        raise ValueError(msg)
    gen = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    eps = gen.standard_normal(shape)
    return jax.numpy.asarray(eps, dtype=dtype, device=device)
