"""Timers and bandwidth probes for the CPU (NumPy) and a CUDA GPU (CuPy)."""

import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

WARMUP = 3
REPEATS = 15
# `per_call` makes up to MAX_CALLS calls back to back, as many as fit in about BATCH_MS (at
# least MIN_CALLS): enough for a small GPU call's host time to show, and a CPU run that stays
# short.
MAX_CALLS, MIN_CALLS, BATCH_MS = 200, 5, 20.0


def per_call(fn: Callable[[], Any], sync: Callable[[], Any], repeats: int) -> float:
    """Median over `repeats` of the wall ms per call of calls of `fn` made back to back, from
    an idle device to the end of the last call's work (`sync` waits for it): the larger of
    the host's time and the device's time per call."""
    for _ in range(WARMUP):
        fn()
    sync()
    start = time.perf_counter()
    fn()
    sync()
    once = (time.perf_counter() - start) * 1e3
    calls = max(MIN_CALLS, min(MAX_CALLS, int(BATCH_MS / max(once, 1e-3))))
    samples = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        samples.append((time.perf_counter() - start) * 1e3 / calls)
    return _median_ms(samples)


def _median_ms(samples: list[float]) -> float:
    return statistics.median(samples)


class CpuTimer:
    """Median of repeated ``perf_counter`` runs."""

    kind = "cpu"

    def time(self, fn: Callable[[], Any], repeats: int = REPEATS) -> float:
        for _ in range(WARMUP):
            fn()
        samples = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - start) * 1e3)
        return _median_ms(samples)

    def per_call(self, fn: Callable[[], Any], repeats: int = REPEATS) -> float:
        return per_call(fn, lambda: None, repeats)

    def memory(self) -> dict[str, float]:
        """The device memory figures of `GpuTimer.memory`: none on the CPU."""
        return {}

    def release(self) -> None:
        """Nothing to give back on the CPU (see `GpuTimer.release`)."""

    def device_name(self) -> str:
        import platform

        return f"CPU {platform.processor() or platform.machine()}"

    def bandwidth(self, nbytes: int = 2**28) -> dict[str, float]:
        import numpy as np

        rng = np.random.default_rng(0)
        src = rng.random(nbytes // 8)
        dst = np.empty_like(src)
        copy_ms = self.time(lambda: np.copyto(dst, src), repeats=7)
        fill_ms = self.time(lambda: dst.fill(1.5), repeats=7)
        return {"copy": 2 * src.nbytes / copy_ms / 1e6, "fill": dst.nbytes / fill_ms / 1e6}


class GpuTimer:
    """CUDA events around each call after warm-up, on the legacy default stream.

    CuPy and PyTorch both launch on the legacy default stream unless told otherwise, so events
    recorded there bracket their kernels. JAX runs on its own streams: its callables must end
    with ``block_until_ready()``, which makes the bracket cover them too.
    """

    kind = "gpu"

    def __init__(self) -> None:
        import cupy

        self._cupy = cupy

    def time(self, fn: Callable[[], Any], repeats: int = REPEATS) -> float:
        cupy = self._cupy
        for _ in range(WARMUP):
            fn()
        cupy.cuda.Device().synchronize()
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        samples = []
        for _ in range(repeats):
            start.record()
            fn()
            stop.record()
            stop.synchronize()
            samples.append(cupy.cuda.get_elapsed_time(start, stop))
        return _median_ms(samples)

    def per_call(self, fn: Callable[[], Any], repeats: int = REPEATS) -> float:
        """`per_call` with a synchronization of the current device (CuPy, PyTorch and JAX
        work alike: JAX callables end with ``block_until_ready()``)."""
        return per_call(fn, self._cupy.cuda.Device().synchronize, repeats)

    def memory(self) -> dict[str, float]:
        """GB of the current device's memory: free and total (the driver's count), used and
        held by CuPy's default pool, and reserved by PyTorch's caching allocator where PyTorch
        has used CUDA in this process. Peers of several libraries in one process compete for
        the device's memory; these figures show how much CuPy and PyTorch hold (JAX's arrays
        show only in the free memory)."""
        cupy = self._cupy
        free, total = cupy.cuda.runtime.memGetInfo()
        pool = cupy.get_default_memory_pool()
        out = {
            "free": free / 1e9,
            "total": total / 1e9,
            "cupy_used": pool.used_bytes() / 1e9,
            "cupy_held": pool.total_bytes() / 1e9,
        }
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_initialized():
            out["torch_reserved"] = torch.cuda.memory_reserved() / 1e9
        return out

    def release(self) -> None:
        """Give the device back the blocks CuPy's pool and PyTorch's caching allocator hold
        unused. A peer that runs out of memory leaves its library's cache full, and the next
        case's allocations then meet a full device: CuPy frees its whole pool and retries on
        every failing allocation, and a case's time would depend on the cases before it.
        Called before each case and after each peer, outside the timed calls."""
        self._cupy.get_default_memory_pool().free_all_blocks()
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_initialized():
            torch.cuda.empty_cache()

    def device_name(self) -> str:
        props = self._cupy.cuda.runtime.getDeviceProperties(self._cupy.cuda.Device().id)
        name = props["name"]
        return name.decode() if isinstance(name, bytes) else str(name)

    def bandwidth(self, nbytes: int = 2**31) -> dict[str, float]:
        cupy = self._cupy
        src = cupy.random.default_rng(0).random(nbytes // 8)
        dst = cupy.empty_like(src)
        copy_ms = self.time(lambda: cupy.copyto(dst, src))
        # The fill rate is the faster of cudaMemset (a non-zero byte pattern) and CuPy's fill
        # kernel; on an H100 CuPy's fill reached only about half of what memset does.
        stream = cupy.cuda.get_current_stream().ptr
        memset_ms = self.time(
            lambda: cupy.cuda.runtime.memsetAsync(dst.data.ptr, 0x5A, dst.nbytes, stream)
        )
        fill_ms = min(memset_ms, self.time(lambda: dst.fill(1.5)))
        return {"copy": 2 * src.nbytes / copy_ms / 1e6, "fill": dst.nbytes / fill_ms / 1e6}


def make_timer(backend: str) -> CpuTimer | GpuTimer:
    return GpuTimer() if backend == "cupy" else CpuTimer()
