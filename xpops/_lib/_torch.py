"""PyTorch tensors on xpops' own engines: the ``torch`` engine of tables that name
`._dispatch.OWN_ENGINES` (or `._dispatch.CUDA_ENGINES`: CUDA tensors only).

CPU tensors run the op's NumPy engine on NumPy views of their memory (``numpy.from_dlpack``),
CUDA tensors the op's CuPy engine on CuPy views (wrapped directly, or by ``cupy.from_dlpack``
for dtypes NumPy lacks), and the result comes back by DLPack: nothing is copied either way.
On CUDA the engine runs on the tensors' device with PyTorch's current stream of that device
as CuPy's current stream, so its kernels queue behind the work that produced the tensors and
ahead of the work that uses the result, as a PyTorch op's would: no stream waits on another,
nothing synchronizes the host. Kernels launched on the tensors' addresses take that stream's
pointer instead, with nothing of CuPy's switched where the device is the current one
(`on_stream`).

The op's generic engine takes what ours cannot: dtypes other than float32, float64,
complex64 and complex128 (the contracts cast to one of them first), zero-size tensors,
other devices (meta, MPS, XLA; ROCm builds), CUDA without a working CuPy or on a device it
does not see, tensor subclasses and functorch's wrapped tensors (``vmap``, ``grad``).

Importing this module imports neither PyTorch (imported once a tensor exists) nor CuPy
(imported on the first CUDA tensor).
"""

import functools
import sys
from collections.abc import Callable, Iterable
from typing import Any

from . import _compat

__all__ = [
    "bridge",
    "check_device",
    "engine_for",
    "fast_tensors",
    "numpy_dtype",
    "on_device",
    "on_stream",
    "opaque",
    "run_on_cupy",
]

# The dtypes every own engine takes, by NumPy's ``dtype.char``.
_DTYPES = {"f": "float32", "d": "float64", "F": "complex64", "D": "complex128"}
_MAX_STREAMS = 64  # CuPy stream objects kept for PyTorch's streams, by (device, pointer)
_STREAMS: dict[tuple[int, int], Any] = {}


def bridge(engines: Any, cpu: bool = True) -> Callable[..., Any]:
    """The ``torch`` engine of `engines` (an `Engines` table): its NumPy engine for CPU tensors
    (with `cpu`), its CuPy engine for CUDA tensors, its generic engine for the rest (see the
    module docstring). It takes the arguments of the table's engines; tensors among the
    positional and keyword arguments are handed over, an ``xp`` keyword becomes the engine's
    namespace."""

    def engine(*args: Any, **kwargs: Any) -> Any:
        kind, index = engine_for((*args, *kwargs.values()))
        if kind == "numpy" and cpu:
            return opaque(_on_numpy)(engines["numpy"], args, kwargs)
        if kind == "cupy":
            return opaque(_on_cupy)(engines["cupy"], index, args, kwargs)
        return engines["generic"](*args, **kwargs)

    return engine


def opaque(run: Callable[..., Any]) -> Callable[..., Any]:
    """`run` kept out of ``torch.compile``'s traces (``torch.compiler.disable``) once TorchDynamo
    is loaded (``torch.compile`` loads it; importing it here would cost a second or two):
    TorchDynamo would trace the hand-over of the tensors to NumPy and CuPy, which its fake
    tensors cannot make (they have no memory). The compiled program breaks its graph there
    and runs the call as it is."""
    kept = _OPAQUE.get(run)
    if kept is not None:
        return kept
    if "torch._dynamo" not in sys.modules:  # nothing is compiled: `run` as it is, not kept
        return run
    disable = getattr(getattr(sys.modules["torch"], "compiler", None), "disable", None)
    kept = _OPAQUE[run] = run if disable is None else disable(run)
    return kept


_OPAQUE: dict[Callable[..., Any], Callable[..., Any]] = {}


@functools.cache
def _torch_parts() -> tuple[Any, tuple[type, ...], frozenset[Any], Callable[[Any], bool]]:
    """(torch, the tensor types taken, the dtypes taken, whether a tensor is functorch's
    wrapper), looked up once."""
    torch = sys.modules["torch"]
    types = (torch.Tensor, torch.nn.Parameter)
    dtypes = _dtypes("".join(_DTYPES))
    functorch = getattr(torch._C, "_functorch", None)
    wrapped = getattr(functorch, "is_functorch_wrapped_tensor", None)
    return torch, types, dtypes, wrapped if wrapped is not None else (lambda t: False)


@functools.cache
def _dtypes(chars: str) -> frozenset[Any]:
    """PyTorch's dtypes of the NumPy ``dtype.char`` letters `chars` (those of `_DTYPES`)."""
    torch = sys.modules["torch"]
    return frozenset(getattr(torch, _DTYPES[c]) for c in chars if c in _DTYPES)


def fast_tensors(arrays: tuple[Any, ...], chars: str, min_ndim: int) -> bool:
    """`._dispatch.torch_fast_arrays` (whose docstring says what is checked), PyTorch imported
    and `arrays` not empty. Each look at a tensor's attribute costs about 0.1 us of host time,
    a call of a small op a few: the first tensor's type, dtype and device are looked at once."""
    torch, _, _, wrapped = _torch_parts()
    tensor = torch.Tensor
    first = arrays[0]
    if type(first) is not tensor:
        return False
    dtype = first.dtype
    if dtype not in _dtypes(chars):
        return False
    grad = torch.is_grad_enabled()  # with grad mode off, nothing is recorded
    strided = torch.strided
    device = first.device
    for a in arrays:
        if (
            (a is not first and (type(a) is not tensor or a.dtype is not dtype))
            or (grad and a.requires_grad)
            or a.ndim < min_ndim
            or a.numel() == 0
            or a.is_nested  # strided, but without one shape
            or a.layout is not strided
            or (a is not first and a.device != device)
            or wrapped(a)
        ):
            return False
    kind = device.type
    if kind == "cpu":
        return True
    return kind == "cuda" and device.index is not None and device.index < _cupy_devices()


def engine_for(values: Iterable[Any]) -> tuple[str, int]:
    """``("numpy", -1)``, ``("cupy", device index)`` or ``("generic", -1)``: which of an op's
    engines takes the tensors among `values` (other values are not looked at)."""
    torch, types, dtypes, wrapped = _torch_parts()
    device = None
    for v in values:
        if not isinstance(v, torch.Tensor):
            continue
        if (
            type(v) not in types
            or v.dtype not in dtypes
            or v.layout != torch.strided
            or v.numel() == 0
            or wrapped(v)
        ):
            return "generic", -1
        if device is None:
            device = v.device
        elif v.device != device:
            return "generic", -1
    if device is None:
        return "generic", -1
    if device.type == "cpu":
        return "numpy", -1
    if device.type == "cuda" and device.index is not None and device.index < _cupy_devices():
        return "cupy", device.index
    return "generic", -1


def on_device(engines: Any, device: Any, *args: Any, **kwargs: Any) -> Any:
    """The NumPy engine of `engines` (an `Engines` table) for a CPU `device`, its CuPy engine
    for a CUDA device that CuPy sees, run on `args` and `kwargs` with their tensors handed
    over as in `bridge`, whatever their dtype (one that NumPy has) and size: for an op whose
    tensors are the parts of a tensor that `bridge` does not take (the index and value arrays
    of a sparse tensor), and for fast paths whose tensors a guard has already checked
    (`._dispatch.torch_fast_arrays`). NotImplementedError for any other device."""
    check_device(device)
    if device.type == "cpu":
        return opaque(_on_numpy)(engines["numpy"], args, kwargs)
    return opaque(_on_cupy)(engines["cupy"], device.index, args, kwargs)


def check_device(device: Any) -> None:
    """NotImplementedError unless `device` is the CPU or a CUDA device that CuPy sees (what
    `on_device` takes)."""
    if device.type == "cpu":
        return
    if device.type == "cuda" and device.index is not None and device.index < _cupy_devices():
        return
    msg = (
        f"xpops runs on PyTorch's CPU tensors and on CUDA tensors of a device that CuPy sees, "
        f"got a tensor on {device}"
    )
    raise NotImplementedError(msg)


@functools.cache
def _cupy_devices() -> int:
    """How many CUDA devices CuPy sees: 0 without a working CuPy or on ROCm (imports CuPy)."""
    torch = sys.modules["torch"]
    if getattr(torch.version, "hip", None) is not None:
        return 0
    try:
        import cupy

        if getattr(cupy.cuda.runtime, "is_hip", False):
            return 0
        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:  # ImportError, or a broken CUDA install raising something else
        return 0


def _exportable(t: Any) -> Any:
    """`t` as DLPack exports it: detached (the engines' forward is not recorded; the autograd
    binding records it), the conjugate and negative bits applied (copies only where set)."""
    if t.requires_grad:
        t = t.detach()
    if t.is_conj():
        t = t.resolve_conj()
    if t.is_neg():
        t = t.resolve_neg()
    return t


def _convert(
    args: tuple[Any, ...], kwargs: dict[str, Any], view: Callable[[Any], Any], library: str
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """`args` and `kwargs` with each tensor replaced by `view` of it and ``xp`` by the
    array-API namespace of `library`."""
    tensor = sys.modules["torch"].Tensor
    new_args = tuple(view(a) if isinstance(a, tensor) else a for a in args)
    new_kwargs = {k: view(v) if isinstance(v, tensor) else v for k, v in kwargs.items()}
    if "xp" in new_kwargs:
        new_kwargs["xp"] = _compat.wrapped_namespace(library)
    return new_args, new_kwargs


# ---- CPU: the NumPy engine -------------------------------------------------------------------


def _numpy_view(t: Any) -> Any:
    import numpy as np

    return np.from_dlpack(_exportable(t))


def _negative_strides(a: Any) -> bool:
    """Whether the NumPy or CuPy array `a` steps backwards along an axis (a flipped view).
    PyTorch has no negative strides, and its ``from_dlpack`` aborts the process on them
    rather than raising, so such a result is copied before it is handed over."""
    return any(s < 0 for s in a.strides)


def _from_numpy(out: Any) -> Any:
    """The engine's result as tensors: NumPy arrays by DLPack (a read-only array, which
    DLPack does not export, or a flipped view, which PyTorch cannot hold, copied first),
    tuples item by item, anything else as it is."""
    import numpy as np

    if isinstance(out, tuple):
        return tuple(_from_numpy(o) for o in out)
    if isinstance(out, np.generic):  # a NumPy scalar: a 0-d tensor, as arrays give
        out = np.asarray(out)
    if not isinstance(out, np.ndarray):
        return out
    if not out.flags.writeable or _negative_strides(out):
        out = out.copy()
    return sys.modules["torch"].from_dlpack(out)


def _on_numpy(engine: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    args, kwargs = _convert(args, kwargs, _numpy_view, "numpy")
    return _from_numpy(engine(*args, **kwargs))


# ---- CUDA: the CuPy engine on PyTorch's current stream -----------------------------------------


class _StreamPointer:
    """A raw CUDA stream pointer under the CUDA stream protocol (``__cuda_stream__``)."""

    __slots__ = ("ptr",)

    def __init__(self, ptr: int) -> None:
        self.ptr = ptr

    def __cuda_stream__(self) -> tuple[int, int]:
        return 0, self.ptr


@functools.cache
def _raw_stream_getter() -> Callable[[int], int]:
    """The pointer of PyTorch's current stream on a device: ``torch._C``'s raw getter where
    PyTorch has it (a few microseconds less a call), else through ``torch.cuda``."""
    torch = sys.modules["torch"]
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw
    return lambda index: int(torch.cuda.current_stream(index).cuda_stream)


def _cupy_stream(cupy: Any, index: int) -> Any:
    """CuPy's stream object for PyTorch's current stream on device `index`."""
    ptr = int(_raw_stream_getter()(index))
    if ptr == 0:  # PyTorch's default stream is the legacy default stream, CuPy's null stream
        return cupy.cuda.Stream.null
    key = (index, ptr)
    stream = _STREAMS.get(key)
    if stream is None:
        if len(_STREAMS) >= _MAX_STREAMS:
            _STREAMS.clear()
        from_external = getattr(cupy.cuda.Stream, "from_external", None)
        if from_external is not None:
            stream = from_external(_StreamPointer(ptr))
        else:  # CuPy before 14
            stream = cupy.cuda.ExternalStream(ptr, index)
        _STREAMS[key] = stream
    return stream


def _from_cupy(out: Any, stream: int) -> Any:
    """The engine's result as tensors: CuPy arrays by DLPack, tuples item by item, anything
    else as it is. `stream` is the DLPack number of PyTorch's current stream (1 for the
    legacy default stream), which is CuPy's current stream here: CuPy's ``__dlpack__`` is
    asked for the capsule on it (so it orders nothing) and PyTorch takes the capsule as it is,
    without looking up its current stream again in Python. A flipped view is copied first,
    on that stream."""
    cupy = sys.modules["cupy"]
    if isinstance(out, tuple):
        return tuple(_from_cupy(o, stream) for o in out)
    if not isinstance(out, cupy.ndarray):
        return out
    torch = sys.modules["torch"]
    if out.size == 0:  # no memory to hand over (and a null pointer DLPack may refuse)
        dtype = torch.from_numpy(_numpy_empty(out.dtype)).dtype
        return torch.empty(out.shape, dtype=dtype, device=f"cuda:{out.device.id}")
    if _negative_strides(out):
        out = out.copy()
    return torch.utils.dlpack.from_dlpack(out.__dlpack__(stream=stream))


def _numpy_empty(dtype: Any) -> Any:
    """An empty NumPy array of `dtype` (for PyTorch's dtype of a NumPy dtype)."""
    import numpy as np

    return np.empty(0, dtype=dtype)


class _Capsule:
    """A CUDA tensor under the DLPack protocol with PyTorch's capsule made directly
    (``to_dlpack``): PyTorch's own ``__dlpack__`` orders the consumer's stream after its
    current one in Python, about ten microseconds an array, and here both are one stream."""

    __slots__ = ("device", "tensor")

    def __init__(self, tensor: Any, index: int) -> None:
        self.tensor = tensor
        self.device = (2, index)  # kDLCUDA

    def __dlpack__(self, **kwargs: Any) -> Any:
        return sys.modules["torch"].utils.dlpack.to_dlpack(self.tensor)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.device


def _cupy_view(t: Any) -> Any:
    """A CuPy view of CUDA tensor `t` (on CuPy's current stream, PyTorch's current one); a
    new empty array for a zero-size one (no memory to share).

    A tensor of a dtype NumPy has is wrapped directly, its memory held by the view (CuPy's
    ``UnownedMemory`` keeping the tensor alive), told its device so that CuPy does not look
    the pointer up: a few microseconds less a tensor than DLPack's hand-over, which takes the
    other dtypes."""
    cupy = sys.modules["cupy"]
    if t.numel() == 0:
        dtype = _numpy_view(t.new_empty(0, device="cpu")).dtype
        return cupy.empty(tuple(t.shape), dtype=dtype)
    t = _exportable(t)
    dtype = _numpy_dtypes().get(t.dtype)
    if dtype is None:
        return cupy.from_dlpack(_Capsule(t, t.device.index))
    cuda, shape, size = cupy.cuda, tuple(t.shape), dtype.itemsize
    if t.is_contiguous():  # the common case: no strides to read or give, a microsecond less
        extent, strides = t.numel(), None
    else:
        elements = t.stride()
        extent = 1 + sum((n - 1) * s for n, s in zip(shape, elements, strict=True))
        strides = tuple(s * size for s in elements)
    memory = cuda.UnownedMemory(t.data_ptr(), extent * size, t, t.device.index)
    return cupy.ndarray(shape, dtype, cuda.MemoryPointer(memory, 0), strides)


def numpy_dtype(dtype: Any) -> Any:
    """NumPy's dtype of PyTorch's `dtype`, or None where NumPy has none (bfloat16, ...)."""
    return _numpy_dtypes().get(dtype)


@functools.cache
def _numpy_dtypes() -> dict[Any, Any]:
    """NumPy's dtypes of PyTorch's dtypes that have one (the tensors `_cupy_view` wraps
    directly)."""
    import numpy as np

    torch = sys.modules["torch"]
    names = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32"]
    names += ["float64", "complex64", "complex128"]
    return {getattr(torch, name): np.dtype(name) for name in names}


def _on_cupy(
    engine: Callable[..., Any], index: int, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    def run(view: Callable[[Any], Any]) -> Any:
        new_args, new_kwargs = _convert(args, kwargs, view, "cupy")
        return engine(*new_args, **new_kwargs)

    return _run_on_cupy(index, run)


def run_on_cupy(index: int, run: Callable[[Callable[[Any], Any]], Any]) -> Any:
    """``run(view)`` on CUDA device `index` with PyTorch's current stream as CuPy's current
    stream, where ``view(t)`` is a CuPy view of CUDA tensor `t` (as `bridge` hands tensors
    over); CuPy arrays in its result come back as tensors (tuples item by item). For callers
    that hand over more than an engine's arguments: the autograd binding runs a whole rule on
    CuPy arrays this way. Kept out of ``torch.compile``'s traces, as `bridge` is."""
    return opaque(_run_on_cupy)(index, run)


def on_stream(index: int, launch: Callable[[int | None], Any]) -> Any:
    """``launch(stream)`` for kernels launched by address (`._cuda.FastKernel`) on CUDA device
    `index`, on PyTorch's current stream of that device: `stream` is that stream's pointer
    where the device is the thread's current one and kernels launch through the driver, so
    that neither CuPy's device nor its current stream is switched (saving about 2 us of host
    time a call); otherwise None, with CuPy's device and current stream switched as
    `run_on_cupy` switches them. Kept out of ``torch.compile``'s traces, as `run_on_cupy`
    is."""
    return opaque(_on_stream)(index, launch)


def _on_stream(index: int, launch: Callable[[int | None], Any]) -> Any:
    cupy = sys.modules["cupy"]  # imported by `_cupy_devices`
    if _driver_launch() and cupy.cuda.runtime.getDevice() == index:
        return launch(int(_raw_stream_getter()(index)))
    with cupy.cuda.Device(index), _cupy_stream(cupy, index):
        return launch(None)


@functools.cache
def _driver_launch() -> bool:
    from . import _cuda  # CuPy is imported: a CUDA tensor exists

    return _cuda.DRIVER_LAUNCH


def _run_on_cupy(index: int, run: Callable[[Callable[[Any], Any]], Any]) -> Any:
    cupy = sys.modules["cupy"]  # imported by `_cupy_devices`
    stream = _cupy_stream(cupy, index)
    with cupy.cuda.Device(index), stream:
        return _from_cupy(run(_cupy_view), stream.ptr or 1)
