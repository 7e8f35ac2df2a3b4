"""xpops._lib._cuda: C type names, grid sizing, the SM count, the packed argument slots, the
raw driver launch (FastKernel) and the pinned read of one element (read_int). The module
imports CuPy, so all of it needs a CUDA device."""

import ctypes
import itertools
import re
import threading

import numpy as np
import pytest

cupy = pytest.importorskip("cupy")
try:
    _DEVICES = cupy.cuda.runtime.getDeviceCount()
except Exception:
    _DEVICES = 0
if _DEVICES == 0:
    pytest.skip("no CUDA device available", allow_module_level=True)

from xpops._lib import _cuda  # noqa: E402  (imports CuPy: only once a device is known)

# ---- C types and grids ----------------------------------------------------------------------


def test_c_type_real():
    assert _cuda.c_type("float32") == "float"
    assert _cuda.c_type("float64") == "double"
    assert _cuda.c_type("float64", "Cplx") == "double"


def test_c_type_complex():
    assert _cuda.c_type("complex64", "Cplx") == "Cplx<float>"
    assert _cuda.c_type("complex128", "thrust::complex") == "thrust::complex<double>"


@pytest.mark.parametrize(
    ("name", "template"), [("complex64", None), ("int32", "Cplx"), ("x", None)]
)
def test_c_type_unknown(name, template):
    with pytest.raises(KeyError, match=re.escape(f"no C type for dtype {name!r}")):
        _cuda.c_type(name, template)


def test_type_tables():
    assert _cuda.C_TYPES == {"float32": "float", "float64": "double"}
    assert _cuda.INDEX_C_TYPES == {"int32": "int", "int64": "long long"}


def test_grid_1d():
    assert _cuda.MAX_GRID_X == 2**31 - 1
    assert _cuda.grid_1d(0, 256) == 1  # at least one block
    assert _cuda.grid_1d(1, 256) == 1
    assert _cuda.grid_1d(256, 256) == 1
    assert _cuda.grid_1d(257, 256) == 2
    assert _cuda.grid_1d(10**6, 256) == 3907
    assert _cuda.grid_1d(10**6, 256, max_blocks=100) == 100
    assert _cuda.grid_1d(2**40, 1) == _cuda.MAX_GRID_X


def test_multiprocessors(cupy_only):
    for device_id in range(_DEVICES):
        with cupy_only.cuda.Device(device_id):
            count = _cuda.multiprocessors()
            assert count == cupy_only.cuda.Device().attributes["MultiProcessorCount"]
        props = cupy_only.cuda.runtime.getDeviceProperties(device_id)
        assert count == props["multiProcessorCount"]
        assert type(count) is int
        assert count > 0


# ---- pack_arguments -------------------------------------------------------------------------


def _read_back(table_address: int, count: int, ctype=ctypes.c_int64) -> list[int]:
    slots = (ctypes.c_void_p * count).from_address(table_address)
    return [ctype.from_address(slots[k]).value for k in range(count)]


def test_pack_arguments_slots_read_back():
    args = [0, 1, -1, 2**63 - 1, -(2**63), 0x7F12_3456_789A]
    table = _cuda.pack_arguments(args)
    assert _read_back(table, len(args)) == args
    slots = (ctypes.c_void_p * len(args)).from_address(table)
    assert [slots[k] - slots[0] for k in range(len(args))] == [8 * k for k in range(len(args))]
    # negative integers in two's complement, as an unsigned 64-bit slot holds them
    assert _read_back(table, 3, ctypes.c_uint64)[2] == 2**64 - 1


def test_pack_arguments_32_bit_parameters_read_the_low_half():
    table = _cuda.pack_arguments([-7, 2**31 - 1, 5])
    assert _read_back(table, 3, ctypes.c_int32) == [-7, 2**31 - 1, 5]


def test_pack_arguments_one_buffer_per_thread():
    here = _cuda.pack_arguments([1, 2])
    assert _cuda.pack_arguments([3]) == here  # one thread's slots are reused
    other: list[int] = []

    def pack_elsewhere():
        table = _cuda.pack_arguments([4])
        other.extend([table, *_read_back(table, 1)])

    thread = threading.Thread(target=pack_elsewhere)
    thread.start()
    thread.join()
    assert other[0] != here
    assert other[1] == 4
    assert _read_back(here, 2) == [3, 2]  # this thread's slots untouched by the other


def test_pack_arguments_no_arguments():
    assert _cuda.pack_arguments([]) == _cuda.pack_arguments([1])


# ---- FastKernel -----------------------------------------------------------------------------

_AFFINE = r"""
extern "C" __global__ void xpops_test_affine(long long* out, long long a, int b, long long n) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = a * i + b;
    }
}
"""


@pytest.fixture
def affine(cupy_only):
    return cupy_only.RawKernel(_AFFINE, "xpops_test_affine")


def _check_affine(cp, kernel, n, a, b, threads=128):
    out = cp.full(n + 5, -1, dtype=cp.int64)
    kernel(_cuda.grid_1d(n, threads), threads, (out.data.ptr, a, b, n))
    want = a * np.arange(n, dtype=np.int64) + b
    got = out.get()
    np.testing.assert_array_equal(got[:n], want)
    np.testing.assert_array_equal(got[n:], -1)  # nothing written past n


@pytest.mark.parametrize("fast", [True, False])
def test_fast_kernel_launch(cupy_only, affine, fast):
    kernel = _cuda.FastKernel(affine, "pqiq", fast=fast)
    assert kernel.fast == (fast and hasattr(cupy_only.cuda.driver, "launchKernel"))
    assert kernel.kernel is affine
    assert kernel.signature == "pqiq"
    # a 64-bit factor beyond 2**32 and a negative 32-bit offset
    _check_affine(cupy_only, kernel, 1000, 2**33 + 3, -7)
    _check_affine(cupy_only, kernel, 1, 5, 2**31 - 1)


def test_fast_and_typed_launches_agree(cupy_only, affine):
    cp = cupy_only
    n = 4099
    results = []
    for fast in (True, False):
        out = cp.zeros(n, dtype=cp.int64)
        _cuda.FastKernel(affine, "pqiq", fast=fast)(
            _cuda.grid_1d(n, 256), 256, (out.data.ptr, -(2**40), -123, n)
        )
        results.append(out.get())
    np.testing.assert_array_equal(results[0], results[1])


def test_fast_kernel_runs_on_the_current_stream(cupy_only, affine):
    cp = cupy_only
    kernel = _cuda.FastKernel(affine, "pqiq")
    n = 1 << 16
    out = cp.zeros(n, dtype=cp.int64)
    stream = cp.cuda.Stream(non_blocking=True)
    # the zeros are written on the null stream, which a non-blocking stream does not wait for
    stream.wait_event(cp.cuda.get_current_stream().record())
    with stream:
        kernel(_cuda.grid_1d(n, 256), 256, (out.data.ptr, 3, 1, n))
    stream.synchronize()
    np.testing.assert_array_equal(out.get(), 3 * np.arange(n) + 1)


_SPIN = r"""
extern "C" __global__ void xpops_test_spin(long long cycles) {
    const long long start = clock64();
    while (clock64() - start < cycles) {
    }
}
"""


def test_fast_kernel_runs_on_the_given_stream(cupy_only, affine):
    """`stream=` launches on that stream, not CuPy's current one: behind a spin on a
    non-blocking stream, then a fill of the output with -1 there, the kernel's values are
    the last written only if it queued behind the fill (on the current null stream it would
    run at once and the fill overwrite it). The spin is still running at the launch, so that
    the test cannot pass by the fill having run before it."""
    cp = cupy_only
    kernel = _cuda.FastKernel(affine, "pqiq")
    if not kernel.fast:
        pytest.skip("CuPy without the driver launch")
    spin = cp.RawKernel(_SPIN, "xpops_test_spin")
    n = 1 << 16
    out = cp.zeros(n, dtype=cp.int64)
    out.fill(-1)  # the fill's kernel compiled and loaded before the spin
    spin((1,), (1,), (np.int64(1000),))
    stream = cp.cuda.Stream(non_blocking=True)
    stream.wait_event(cp.cuda.get_current_stream().record())  # the zeros are written
    with stream:
        spin((1,), (1,), (np.int64(200_000_000),))  # about 0.1 s
        out.fill(-1)
    kernel(_cuda.grid_1d(n, 256), 256, (out.data.ptr, 3, 1, n), stream=stream.ptr)
    assert not stream.done
    stream.synchronize()
    np.testing.assert_array_equal(out.get(), 3 * np.arange(n) + 1)


def test_typed_launch_refuses_a_stream(cupy_only, affine):
    kernel = _cuda.FastKernel(affine, "pqiq", fast=False)
    out = cupy_only.zeros(4, dtype=cupy_only.int64)
    with pytest.raises(ValueError, match="a launch on a stream pointer needs the driver launch"):
        kernel(1, 32, (out.data.ptr, 1, 2, 4), stream=0)


_PLANE = r"""
extern "C" __global__ void xpops_test_plane(long long* out, long long n) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[blockIdx.y * n + i] = 1000 * (long long)blockIdx.y + i;
    }
}
"""


@pytest.mark.parametrize("fast", [True, False])
def test_fast_kernel_two_dimensional_grid(cupy_only, fast):
    """A grid given as (x, y) launches y rows of x blocks; an int is one row."""
    cp = cupy_only
    kernel = _cuda.FastKernel(cp.RawKernel(_PLANE, "xpops_test_plane"), "pq", fast=fast)
    n, rows, threads = 300, 5, 128
    out = cp.full(rows * n + 3, -1, dtype=cp.int64)
    kernel((_cuda.grid_1d(n, threads), rows), threads, (out.data.ptr, n))
    want = 1000 * np.arange(rows)[:, None] + np.arange(n)
    got = out.get()
    np.testing.assert_array_equal(got[: rows * n].reshape(rows, n), want)
    np.testing.assert_array_equal(got[rows * n :], -1)
    out[...] = -1
    kernel(_cuda.grid_1d(n, threads), threads, (out.data.ptr, n))
    got = out.get()
    np.testing.assert_array_equal(got[:n], np.arange(n))
    np.testing.assert_array_equal(got[n:], -1)


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("count", [3, 5])
def test_fast_kernel_wrong_argument_count(cupy_only, affine, fast, count):
    kernel = _cuda.FastKernel(affine, "pqiq", fast=fast)
    with pytest.raises(ValueError, match=f"the kernel takes 4 arguments, got {count}"):
        kernel(1, 32, tuple(range(count)))


@pytest.mark.parametrize("signature", ["pqx", "pf", "P", "p" * 17, "pq i"])
def test_fast_kernel_bad_signature(cupy_only, affine, signature):
    message = f"`signature` must be at most 16 of the letters p, q, i, got {signature!r}"
    with pytest.raises(ValueError, match=re.escape(message)):
        _cuda.FastKernel(affine, signature)


def test_fast_kernel_longest_signature(cupy_only, affine):
    assert _cuda.MAX_ARGS == 16
    assert _cuda.FastKernel(affine, "p" * 16).signature == "p" * 16  # built, never launched


def test_fast_kernel_first_launch_in_a_fresh_thread(cupy_only, affine):
    """A thread that has made no CUDA runtime call has no current context: the first launch
    in it (as in a Dask worker thread given pooled arrays) must still run."""
    import threading

    cp = cupy_only
    n = 777
    out = cp.full(n, -1, dtype=cp.int64)
    kernel = _cuda.FastKernel(affine, "pqiq")
    errors = []

    def launch():
        try:
            kernel(_cuda.grid_1d(n, 128), 128, (out.data.ptr, 3, 4, n))
            cp.cuda.get_current_stream().synchronize()
        except Exception as exc:  # reported in the main thread
            errors.append(exc)

    thread = threading.Thread(target=launch)
    thread.start()
    thread.join()
    assert not errors, errors
    np.testing.assert_array_equal(out.get(), 3 * np.arange(n) + 4)


# ---- scratch --------------------------------------------------------------------------------


def test_scratch_buffers_are_aligned_disjoint_and_writable(cupy_only, affine):
    sizes = (8, 0, 1, 8 * 1000, 24, _cuda.SCRATCH_ALIGN, 8 * 3)
    owner, addresses = _cuda.scratch(*sizes)
    assert len(addresses) == len(sizes)
    base = owner.data.ptr
    assert all(a % _cuda.SCRATCH_ALIGN == 0 for a in addresses)
    spans = sorted((a, a + s) for a, s in zip(addresses, sizes, strict=True))
    assert spans[0][0] >= base
    assert all(end <= start for (_, end), (start, _) in itertools.pairwise(spans))  # disjoint
    assert spans[-1][1] <= base + owner.nbytes
    kernel = _cuda.FastKernel(affine, "pqiq")
    owner[...] = 0xAB  # poison
    for k, (address, size) in enumerate(zip(addresses, sizes, strict=True)):
        if size >= 8:
            kernel(_cuda.grid_1d(size // 8, 128), 128, (address, 1, 100 * k, size // 8))
    host = owner.get()
    for k, (address, size) in enumerate(zip(addresses, sizes, strict=True)):
        got = host[address - base : address - base + size // 8 * 8].view(np.int64)
        np.testing.assert_array_equal(got, 100 * k + np.arange(size // 8))


def test_scratch_of_nothing(cupy_only):
    owner, addresses = _cuda.scratch()
    assert addresses == []
    assert owner.nbytes >= 1


# ---- read_int -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "dtype", ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
)
def test_read_int_reads_each_element(cupy_only, dtype):
    info = np.iinfo(dtype)
    host = np.array([info.min, info.max, 0, 1, info.max - 1, 7], dtype=dtype)
    a = cupy_only.asarray(host)
    for index in range(-host.size, host.size):
        got = _cuda.read_int(a, index)
        assert type(got) is int
        assert got == int(host[index])


_SLOW_WRITE = r"""
extern "C" __global__ void xpops_test_slow_write(long long* out, long long value,
                                                 long long cycles) {
    const long long start = clock64();
    while (clock64() - start < cycles) {}
    out[1] = value;
}
"""


def test_read_int_waits_for_the_current_stream(cupy_only):
    """The copy is queued on the current stream after a kernel that spins before it writes
    the element (about a millisecond): a copy on another stream would read the old value."""
    cp = cupy_only
    kernel = _cuda.FastKernel(cp.RawKernel(_SLOW_WRITE, "xpops_test_slow_write"), "pqq")
    out = cp.full(3, -1, dtype=cp.int64)
    stream = cp.cuda.Stream(non_blocking=True)
    stream.wait_event(cp.cuda.get_current_stream().record())
    with stream:
        for k in range(1, 4):
            kernel(1, 1, (out.data.ptr, k, 2_000_000))
            assert _cuda.read_int(out, 1) == k
            assert _cuda.read_int(out, -1) == -1


def test_read_int_in_threads(cupy_only):
    """Each thread reads through its own pinned buffer."""
    cp = cupy_only
    arrays = [cp.arange(1000, dtype=cp.int64) * k for k in range(8)]
    results: dict[int, list[int]] = {}

    def read(k):
        results[k] = [_cuda.read_int(arrays[k], i) for i in range(0, 1000, 7)]

    threads = [threading.Thread(target=read, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k in range(8):
        assert results[k] == [k * i for i in range(0, 1000, 7)]


@pytest.mark.parametrize("case", ["float", "strided", "past-the-end"])
def test_read_int_refuses(cupy_only, case):
    cp = cupy_only
    if case == "past-the-end":
        with pytest.raises(IndexError):
            _cuda.read_int(cp.arange(4), 4)
        return
    a = cp.arange(10.0) if case == "float" else cp.arange(10)[::2]
    with pytest.raises(ValueError, match="read_int reads C-contiguous arrays of integers"):
        _cuda.read_int(a, 0)
