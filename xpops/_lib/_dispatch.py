"""Engine choice: the one way every op's contract hands its validated arguments to an engine.

Every public function ends with ``dispatch(xp, ENGINES, *args, **kwargs)``, where ``ENGINES``
is the op's `Engines` table, built once at import; an op whose operands have no array-API
namespace (sparse matrices) names the engine kind itself, with ``dispatch_kind``. An engine
is a callable or a ``"module:attribute"`` string relative to the op's package; strings are
imported on first use, so CuPy and Dask (and the op's kernels) load only when an array of
theirs arrives. PyTorch tensors go to an op's ``torch`` engine: `OWN_ENGINES` serves them with
the op's own NumPy and CuPy engines (`._torch`), `CUDA_ENGINES` only CUDA tensors with its
CuPy engine (others generically); an op without one serves them generically.
JAX arrays go to an op's ``jax`` engine, which delegates to JAX's own operations where they
meet the contract (array-api-extra's anatomy); an op without one serves them generically.
"""

import importlib
import sys
from collections.abc import Callable
from typing import Any

from . import _compat
from . import _torch as _torch_lib
from ._typing import Namespace

__all__ = [
    "CUDA_ENGINES",
    "ENGINE_KINDS",
    "OWN_ENGINES",
    "Engines",
    "cupy_fast_arrays",
    "dispatch",
    "dispatch_kind",
    "engine_kind",
    "torch_fast_arrays",
]

#: The engine kinds, in the order they are tried: NumPy, CuPy, Dask, PyTorch, JAX, any other
#: namespace.
ENGINE_KINDS = ("numpy", "cupy", "dask", "torch", "jax", "generic")

#: The ``torch`` engine that runs an op's own engines on tensors (`._torch.bridge`): its NumPy
#: engine for CPU tensors and its CuPy engine for CUDA tensors, by DLPack without copies.
OWN_ENGINES = "own engines"
#: A ``torch`` engine: the op's CuPy engine for CUDA tensors (as `OWN_ENGINES`), its generic
#: engine on the tensors themselves for the rest. For an op whose NumPy engine is its generic
#: code: handing CPU tensors to NumPy would only add the hand-over, and OpenBLAS's threads,
#: which contend with PyTorch's for the same cores.
CUDA_ENGINES = "cuda engines"

Engine = Callable[..., Any] | str

# The kind of a namespace depends on the namespace alone; remembering it saves
# array_api_compat's checks on every call.
_KIND_OF_NAMESPACE: dict[str, str] = {}


def engine_kind(xp: Namespace) -> str:
    """``"numpy"``, ``"cupy"``, ``"dask"``, ``"torch"``, ``"jax"`` or ``"generic"``: which
    engine serves `xp`.

    Never imports CuPy, Dask, PyTorch or JAX: a namespace of theirs can only exist once they
    are imported.
    """
    name = getattr(xp, "__name__", None)
    if name is None:  # array_api_compat tells namespaces apart by name alone
        return "generic"
    kind = _KIND_OF_NAMESPACE.get(name)
    if kind is not None:
        return kind
    if _compat.is_numpy_namespace(xp):
        kind = "numpy"
    elif "cupy" in sys.modules and _compat.is_cupy_namespace(xp):
        kind = "cupy"
    elif "dask" in sys.modules and _compat.is_dask_namespace(xp):
        kind = "dask"
    elif "torch" in sys.modules and _compat.is_torch_namespace(xp):
        kind = "torch"
    elif "jax" in sys.modules and _compat.is_jax_namespace(xp):
        kind = "jax"
    else:
        kind = "generic"
    _KIND_OF_NAMESPACE[name] = kind
    return kind


class Engines:
    """The engines of one op (or one method), by kind.

    Parameters
    ----------
    package : str or None
        The package that relative engine strings are resolved in (the caller's
        ``__package__``, which type checkers see as ``str | None``).
    numpy, cupy, dask, generic : callable or str
        The engine for each kind: a callable, or ``"module:attribute"`` with `module` relative
        to `package` (``"._cupy:logcumsumexp"``), imported on first use.
    torch : callable or str, optional
        The engine of PyTorch tensors, as the others, or `OWN_ENGINES` (the op's NumPy and CuPy
        engines on the tensors' memory, `generic` where they cannot take them), or
        `CUDA_ENGINES` (its CuPy engine for CUDA tensors, `generic` for the rest). Default:
        `generic`.
    jax : callable or str, optional
        The engine of JAX arrays (concrete or traced: it runs under ``jax.jit``, ``jax.vmap``
        and the JAX binding's ``jax.custom_vjp``). Default: `generic`.
    """

    __slots__ = ("_own_torch", "_package", "_resolved", "_spec")

    def __init__(
        self,
        package: str | None,
        *,
        numpy: Engine,
        cupy: Engine,
        dask: Engine,
        generic: Engine,
        torch: Engine | None = None,
        jax: Engine | None = None,
    ) -> None:
        self._package = package
        self._spec: dict[str, Engine] = {
            "numpy": numpy,
            "cupy": cupy,
            "dask": dask,
            "torch": generic if torch is None else torch,
            "jax": generic if jax is None else jax,
            "generic": generic,
        }
        # a torch engine of the op's own (not the generic one): kept out of torch.compile's traces
        self._own_torch = torch is not None and torch not in (OWN_ENGINES, CUDA_ENGINES)
        self._resolved: dict[str, Callable[..., Any]] = {}

    def __getitem__(self, kind: str) -> Callable[..., Any]:
        """The engine of `kind` (one of `ENGINE_KINDS`), imported on first use."""
        engine = self._resolved.get(kind)
        if engine is None:
            spec = self._spec[kind]
            if spec in (OWN_ENGINES, CUDA_ENGINES):
                from . import _torch  # imports neither PyTorch nor CuPy

                engine = _torch.bridge(self, cpu=spec == OWN_ENGINES)
            elif kind == "torch" and self._own_torch:
                from . import _torch

                engine = _kept_out(_torch.opaque, self._load(spec))
            else:
                engine = self._load(spec)
            self._resolved[kind] = engine
        return engine

    def _load(self, spec: Engine) -> Callable[..., Any]:
        if not isinstance(spec, str):
            return spec
        module_name, sep, attribute = spec.partition(":")
        if not sep or not attribute:
            msg = f"an engine string must be 'module:attribute', got {spec!r}"
            raise ValueError(msg)
        module = importlib.import_module(module_name, self._package)
        engine: Callable[..., Any] = getattr(module, attribute)
        return engine


def _kept_out(opaque: Callable[..., Any], run: Callable[..., Any]) -> Callable[..., Any]:
    """`run`, called through `opaque` (`._torch.opaque`) each time: kept out of torch.compile's
    traces once TorchDynamo is loaded, whenever that happens."""

    def engine(*args: Any, **kwargs: Any) -> Any:
        return opaque(run)(*args, **kwargs)

    return engine


def dispatch(xp: Namespace, engines: Engines, /, *args: Any, **kwargs: Any) -> Any:
    """Call the engine of `engines` that serves namespace `xp` with the validated arguments."""
    return engines[engine_kind(xp)](*args, **kwargs)


def dispatch_kind(kind: str, engines: Engines, /, *args: Any, **kwargs: Any) -> Any:
    """Call the engine of `engines` of kind `kind` (one of `ENGINE_KINDS`) with the validated
    arguments: `dispatch` for operands without an array-API namespace (sparse matrices),
    whose validation names the kind from the operand's library."""
    return engines[kind](*args, **kwargs)


def cupy_fast_arrays(*arrays: Any, chars: str, min_ndim: int = 1) -> bool:
    """Whether the arrays are what every op's CuPy fast path takes for granted.

    That is: CuPy is imported; each argument is exactly a ``cupy.ndarray`` (no subclass,
    no other library); all share one dtype whose ``dtype.char`` is in `chars`; each has at
    least `min_ndim` dimensions and no zero-length one; all live on one device. A fast path
    that passes this guard (and checks its own scalar arguments by exact type) skips none of
    the contract's validation: every array-level check of the contracts holds for such
    arrays. Costs about a microsecond, against tens for the general path.
    """
    cupy = sys.modules.get("cupy")
    if cupy is None or not arrays:
        return False
    first = arrays[0]
    if type(first) is not cupy.ndarray:
        return False
    dtype = first.dtype
    if dtype.char not in chars:
        return False
    device_id = first.data.device_id
    for a in arrays:
        if type(a) is not cupy.ndarray or a.dtype != dtype:
            return False
        if a.ndim < min_ndim or 0 in a.shape:
            return False
        if a.data.device_id != device_id:  # cheaper than comparing ``a.device`` objects
            return False
    return True


def torch_fast_arrays(*arrays: Any, chars: str, min_ndim: int = 1) -> bool:
    """`cupy_fast_arrays` for PyTorch tensors that an op's own engines take (`OWN_ENGINES`).

    That is: PyTorch is imported; each argument is exactly a ``torch.Tensor``, strided, that
    does not require grad while grad mode is on (the autograd binding takes those; the rules'
    forwards, which it runs with grad mode off, pass) and is not wrapped by functorch;
    all share one dtype whose NumPy ``dtype.char`` is in `chars`; each has at least
    `min_ndim` dimensions and no zero-length one; all live on one device, the CPU or a CUDA
    device that CuPy sees (this imports CuPy the first time). As with `cupy_fast_arrays`, a
    fast path that passes this guard skips none of the contract's validation.
    """
    if "torch" not in sys.modules or not arrays:
        return False
    return _torch_lib.fast_tensors(arrays, chars, min_ndim)
