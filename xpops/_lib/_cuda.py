"""CUDA helpers shared by the CuPy engines: device properties, grid sizing, C type names and
a cheap raw kernel launch.

Imported only by CuPy engines (it imports CuPy). Nothing here compiles code.
"""

import ctypes
import struct
import threading
from collections.abc import Sequence
from typing import Any

import cupy
import numpy as np

__all__ = [
    "C_TYPES",
    "INDEX_C_TYPES",
    "MAX_GRID_X",
    "MAX_GRID_Y",
    "FastKernel",
    "c_type",
    "grid_1d",
    "multiprocessors",
    "read_int",
    "read_int_at",
    "scratch",
]

#: C names of the real floating dtypes, by ``dtype.name``.
C_TYPES = {"float32": "float", "float64": "double"}
#: C names of the index dtypes, by ``dtype.name``.
INDEX_C_TYPES = {"int32": "int", "int64": "long long"}
#: The largest x dimension of a CUDA grid.
MAX_GRID_X = 2**31 - 1
#: The largest y dimension of a CUDA grid.
MAX_GRID_Y = 65535


def c_type(dtype_name: str, complex_template: str | None = None) -> str:
    """The C type of a float or complex dtype; a complex dtype is `complex_template` of its
    real type (``"Cplx"`` gives ``Cplx<float>`` for complex64), as the kernel source names it."""
    if dtype_name in C_TYPES:
        return C_TYPES[dtype_name]
    if complex_template is not None and dtype_name in ("complex64", "complex128"):
        real = "float" if dtype_name == "complex64" else "double"
        return f"{complex_template}<{real}>"
    msg = f"no C type for dtype {dtype_name!r}"
    raise KeyError(msg)


@cupy.memoize(for_each_device=True)
def multiprocessors() -> int:
    """The number of streaming multiprocessors of the current device."""
    return int(cupy.cuda.Device().attributes["MultiProcessorCount"])


def grid_1d(items: int, per_block: int, max_blocks: int = MAX_GRID_X) -> int:
    """Blocks that cover `items` at `per_block` each, at least one and at most `max_blocks`
    (kernels given fewer blocks than they cover stride over the rest)."""
    return max(1, min(-(-items // per_block), max_blocks))


#: Alignment of the buffers that `scratch` hands out.
SCRATCH_ALIGN = 256


def scratch(*sizes: int) -> tuple[cupy.ndarray, list[int]]:
    """Temporary device buffers of `sizes` bytes in one allocation: (the array that owns their
    memory, to be held until the kernels that use them are queued; each buffer's address,
    `SCRATCH_ALIGN`-aligned). For kernels launched by address (`FastKernel`): one allocation
    costs the host about as much as one ``cupy.empty``, however many buffers it holds."""
    offsets = []
    total = 0
    for size in sizes:
        offsets.append(total)
        total += -(-size // SCRATCH_ALIGN) * SCRATCH_ALIGN
    owner = cupy.empty(max(total, 1), dtype=np.uint8)
    base = owner.data.ptr
    return owner, [base + offset for offset in offsets]


# Each thread's pinned host buffer of `read_int`: (the memory, its address).
_PINNED = threading.local()
# The ctypes integer of each NumPy integer dtype (kind, itemsize) that `read_int` reads.
_C_INTS = {
    ("i", 1): ctypes.c_int8,
    ("i", 2): ctypes.c_int16,
    ("i", 4): ctypes.c_int32,
    ("i", 8): ctypes.c_int64,
    ("u", 1): ctypes.c_uint8,
    ("u", 2): ctypes.c_uint16,
    ("u", 4): ctypes.c_uint32,
    ("u", 8): ctypes.c_uint64,
}


def read_int(a: cupy.ndarray, index: int) -> int:
    """Element `index` of a C-contiguous integer device array `a`, read back by an
    asynchronous copy on the current stream into pinned host memory, then a wait for that
    stream.

    ``int(a[index])`` makes a view and copies through pageable memory: 15 us on an H200 host
    against 7.5 for this, on an idle device. Each thread copies into its own 8 bytes, so that
    threads never share the buffer. An array on another device than the current one is read
    on that device's current stream. The read is a synchronisation that
    ``cupyx.allow_synchronize(False)`` does not see: the callers make it only where the size
    of a result depends on the data.
    """
    if (a.dtype.kind, a.itemsize) not in _C_INTS or not a.flags.c_contiguous:
        msg = f"read_int reads C-contiguous arrays of integers of at most 8 bytes, got {a!r}"
        raise ValueError(msg)
    index = range(a.size)[index]  # negative indices from the end; IndexError past it
    if a.data.device_id != cupy.cuda.runtime.getDevice():
        with a.device:
            return read_int(a, index)
    return read_int_at(a.data.ptr + index * a.itemsize, a.dtype)


def read_int_at(address: int, dtype: np.dtype) -> int:
    """The integer of NumPy `dtype` (at most 8 bytes) at device `address` of the current
    device, read as `read_int` reads (memory that no CuPy array holds, such as a PyTorch
    tensor's)."""
    c_int = _C_INTS[(dtype.kind, dtype.itemsize)]
    pinned = getattr(_PINNED, "buffer", None)
    if pinned is None:
        memory = cupy.cuda.alloc_pinned_memory(8)
        pinned = _PINNED.buffer = (memory, memory.ptr)
    stream = cupy.cuda.get_current_stream()
    runtime = cupy.cuda.runtime
    runtime.memcpyAsync(pinned[1], address, dtype.itemsize, runtime.memcpyDefault, stream.ptr)
    stream.synchronize()
    return int(c_int.from_address(pinned[1]).value)


#: Whether CuPy exposes the driver's kernel launch, which `FastKernel` launches through.
DRIVER_LAUNCH = hasattr(cupy.cuda.driver, "launchKernel")

# The per-thread argument buffer: MAX_ARGS 64-bit slots and the table of their addresses that
# cuLaunchKernel reads. A 32-bit int parameter reads the low half of its slot (little-endian).
MAX_ARGS = 16
_SLOTS = threading.local()
_PACK = {n: struct.Struct(f"<{n}q").pack_into for n in range(MAX_ARGS + 1)}


def _slots() -> tuple[Any, int]:
    slots = getattr(_SLOTS, "slots", None)
    if slots is None:
        # A thread's first launch: the driver launches in the thread's current context, which a
        # thread that has made no CUDA runtime call yet (a Dask worker thread handed arrays
        # from a memory pool, say) does not have. Setting the thread's current device makes
        # that device's primary context current, as every runtime call would.
        cupy.cuda.runtime.setDevice(cupy.cuda.runtime.getDevice())
        values = (ctypes.c_uint64 * MAX_ARGS)()
        base = ctypes.addressof(values)
        table = (ctypes.c_void_p * MAX_ARGS)(*(base + 8 * i for i in range(MAX_ARGS)))
        slots = _SLOTS.slots = (values, table, ctypes.addressof(table))
    return slots[0], slots[2]


def pack_arguments(args: Sequence[int]) -> int:
    """Write `args` (each a pointer or an integer, in 64 bits; negative integers in two's
    complement) into this thread's argument slots and return the address of the table of
    their addresses, as ``cuLaunchKernel`` takes it. The slots stay valid until this thread's
    next call."""
    values, table_address = _slots()
    _PACK[len(args)](values, 0, *args)
    return table_address


class FastKernel:
    """A compiled kernel launched straight through the CUDA driver.

    CuPy's ``RawKernel.__call__`` converts each argument and took about 20 us of host time a
    launch on the H100 hosts, which a GPU running a small batch spends idle. This launch packs
    the arguments, pointers and integers only, into 64-bit slots instead (a few
    microseconds). Where the driver call is missing from CuPy, or `fast` is False, it
    launches through ``RawKernel`` with the arguments typed by `signature`.

    Parameters
    ----------
    kernel : cupy.RawKernel
        The kernel, compiled for the current device.
    signature : str
        One letter a parameter: ``p`` a pointer, ``q`` a 64-bit and ``i`` a 32-bit integer.
    fast : bool, optional
        Whether to use the driver launch (the default, where CuPy has it).
    """

    __slots__ = ("_fast", "_function", "kernel", "signature")

    def __init__(self, kernel: cupy.RawKernel, signature: str, *, fast: bool = True) -> None:
        if len(signature) > MAX_ARGS or set(signature) - set("pqi"):
            msg = (
                f"`signature` must be at most {MAX_ARGS} of the letters p, q, i, got {signature!r}"
            )
            raise ValueError(msg)
        self.kernel = kernel
        self.signature = signature
        self._fast = fast and DRIVER_LAUNCH
        self._function = kernel.kernel.ptr if self._fast else 0

    @property
    def fast(self) -> bool:
        """Whether launches go straight through the driver."""
        return self._fast

    def __call__(
        self,
        blocks: int | tuple[int, int],
        threads: int,
        args: Sequence[int],
        shared: int = 0,
        *,
        stream: int | None = None,
    ) -> None:
        """Launch on `blocks` blocks (an int, or the x and y sizes of a 2-D grid) of `threads`
        threads, with `shared` bytes of dynamic shared memory, on the stream whose pointer is
        `stream` (0: the legacy default stream), or on CuPy's current stream where it is None.
        A stream pointer needs the driver launch (`fast`): the current device must then be
        the kernel's."""
        if len(args) != len(self.signature):
            msg = f"the kernel takes {len(self.signature)} arguments, got {len(args)}"
            raise ValueError(msg)
        blocks_x, blocks_y = blocks if isinstance(blocks, tuple) else (blocks, 1)
        if not self._fast:
            if stream is not None:
                msg = "a launch on a stream pointer needs the driver launch (`fast`)"
                raise ValueError(msg)
            self._typed_launch((blocks_x, blocks_y), threads, args, shared)
            return
        if stream is None:
            stream = cupy.cuda.get_current_stream().ptr
        cupy.cuda.driver.launchKernel(
            self._function,
            blocks_x,
            blocks_y,
            1,
            threads,
            1,
            1,
            shared,
            stream,
            pack_arguments(args),
            0,
        )

    def _typed_launch(
        self, blocks: tuple[int, int], threads: int, args: Sequence[int], shared: int
    ) -> None:
        types = {"p": np.uint64, "q": np.int64, "i": np.int32}
        typed = tuple(types[k](a) for k, a in zip(self.signature, args, strict=True))
        self.kernel(blocks, (threads,), typed, shared_mem=shared)
