"""``python -m xpops scale``: throughput of the Dask engines with 1 and more workers.

The two workloads of issue 7: ``logcumsumexp`` along a long 1-D array, and
``MultivariateNormal.log_prob`` of many points in D = 16. Inputs are generated on the workers
(nothing is shipped from the client), results are persisted on the workers (nothing is
gathered; on GPUs each run ends when every worker's device is done), and each configuration
is timed as the median of a few runs after a warm-up. The in-memory xpops call on the same
data in this process is the baseline; where that data does not fit in the GPU's memory with
the call's result and temporaries, the baseline is the largest power-of-two fraction of it
that fits, and the comparison is one of throughput.
``--gpu`` uses ``dask_cuda.LocalCUDACluster`` (one worker a GPU, CuPy chunks, dask-cuda's
spilling to host memory off: the workloads are sized to fit, and a spill would time host
copies) instead of a CPU ``distributed.LocalCluster`` (one single-threaded worker process a
core). With more workers than GPUs (a one-GPU machine asked for two) the GPU workers are
processes of a ``distributed.LocalCluster`` that share the device, and the report says so.
"""

import argparse
import statistics
import time
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workers", default="1,2", help="comma-separated worker counts")
    parser.add_argument("--gpu", action="store_true", help="LocalCUDACluster and CuPy chunks")
    parser.add_argument("--scan-log2", type=int, default=26, help="log2 of the scan's length")
    parser.add_argument("--chunk-log2", type=int, default=22, help="log2 of its chunk length")
    parser.add_argument("--points-log2", type=int, default=22, help="log2 of the MVN points")
    parser.add_argument("--repeats", type=int, default=3)


def _time(fn: Any, repeats: int) -> float:
    fn()
    samples = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t)
    return statistics.median(samples)


def _workloads(args: argparse.Namespace, xp: Any) -> dict[str, Any]:
    """name -> (make the Dask input, op, bytes moved, make the in-memory input)."""
    import dask.array as da
    import numpy as np

    from ..distributions import MultivariateNormal

    n, chunk = 2**args.scan_log2, 2**args.chunk_log2
    points, d = 2**args.points_log2, 16
    rng = np.random.default_rng(0)
    g = rng.standard_normal((d, d))
    cov = xp.asarray(g @ g.T / d + np.eye(d), dtype=xp.float32)
    dist = MultivariateNormal(xp.zeros(d, dtype=xp.float32), covariance_matrix=cov)

    def rng_meta() -> Any:
        if xp.__name__ == "cupy":
            return da.random.RandomState(RandomState=xp.random.RandomState)
        return da.random.RandomState(0)

    def scan_input() -> Any:
        return rng_meta().standard_normal(n, chunks=chunk).astype("float32")

    def points_input() -> Any:
        return rng_meta().standard_normal((points, d), chunks=(chunk // d, d)).astype("float32")

    import xpops

    def local_normals(shape: Any) -> Any:  # drawn where they are used (no host round trip)
        if xp.__name__ == "cupy":
            return xp.random.default_rng(0).standard_normal(shape, dtype=xp.float32)
        return np.random.default_rng(0).standard_normal(shape, dtype=np.float32)

    # the last entry: the in-memory input with 1 / 2^shrink of the elements
    return {
        f"logcumsumexp 2^{args.scan_log2} float32": (
            scan_input,
            xpops.logcumsumexp,
            8 * n,
            lambda shrink: local_normals(n >> shrink),
        ),
        f"MVN log_prob 2^{args.points_log2} points D=16 float32": (
            points_input,
            dist.log_prob,
            4 * points * (d + 1),
            lambda shrink: local_normals((points >> shrink, d)),
        ),
    }


def _same(block: Any) -> Any:
    return block


def _synchronize() -> None:
    """Wait for the worker's GPU: a task ends when its kernels are queued, not run."""
    import cupy

    cupy.cuda.Device().synchronize()


def _release() -> None:
    """Hand the memory CuPy's pool keeps back to the device, for the next workload's sizes."""
    import cupy

    cupy.get_default_memory_pool().free_all_blocks()


def run(args: argparse.Namespace) -> int:
    import numpy as np
    from distributed import Client, LocalCluster, wait

    if args.gpu:
        import cupy as xp
        from dask_cuda import LocalCUDACluster
    else:
        xp = np
    counts = [int(w) for w in args.workers.split(",") if w.strip()]
    work = _workloads(args, xp)
    results: dict[str, dict[str, float]] = {name: {} for name in work}
    shrinks: dict[str, int] = {}
    for name, (_, op, _, make_local) in work.items():
        for shrink in range(8):
            try:
                local = make_local(shrink)

                def call(local: Any = local, op: Any = op) -> None:
                    op(local)
                    if args.gpu:
                        xp.cuda.Device().synchronize()

                results[name]["in-memory"] = _time(call, args.repeats) * 2**shrink
                shrinks[name] = shrink
                break
            except MemoryError:  # CuPy's OutOfMemoryError is one: try half the data
                pass
            finally:
                local = call = None
                if args.gpu:  # the workers need the memory this process's pool keeps
                    xp.get_default_memory_pool().free_all_blocks()
    gpus = xp.cuda.runtime.getDeviceCount() if args.gpu else 0
    for workers in counts:
        if args.gpu and workers <= gpus:
            cluster = LocalCUDACluster(n_workers=workers, device_memory_limit=0)
        else:
            if args.gpu:  # more workers than GPUs: worker processes share the device
                print(f"{workers} workers on {gpus} GPU(s): a LocalCluster sharing the device(s)")
            cluster = LocalCluster(
                n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None
            )
        with cluster, Client(cluster) as client:
            for name, (make_input, op, _, _) in work.items():
                data = client.persist(make_input())
                wait(data)

                runs = iter(range(10**9))

                def compute(data: Any = data, op: Any = op, runs: Any = runs) -> None:
                    # a fresh name each run: Dask would otherwise find the previous result
                    fresh = data.map_blocks(_same, name=f"xpops-scale-input-{next(runs)}")
                    out = client.persist(op(fresh))
                    wait(out)
                    if args.gpu:
                        client.run(_synchronize)
                    del out

                seconds = _time(compute, args.repeats)
                results[name][f"{workers} worker(s)"] = seconds
                print(f"  {name}, {workers} worker(s): {seconds:.3f} s", flush=True)
                del data
                if args.gpu:
                    client.run(_release)
    kind = "GPU" if args.gpu else "CPU"
    print(f"xpops scale ({kind}); seconds, median of {args.repeats}; GB/s of bytes moved")
    for name, shrink in shrinks.items():
        if shrink:
            print(
                f"- {name}: in memory on 1/{2**shrink} of the data (the whole did not fit), "
                f"its time scaled by {2**shrink}"
            )
    for name, times in results.items():
        nbytes = work[name][2]
        base = min(t for k, t in times.items() if k.endswith("worker(s)"))
        cells = "; ".join(f"{k} {t:.3f} s ({nbytes / t / 1e9:.2f} GB/s)" for k, t in times.items())
        first = times.get(f"{counts[0]} worker(s)")
        speedups = "; ".join(
            f"{w} workers / {counts[0]}: {first / times[f'{w} worker(s)']:.2f}x"
            for w in counts[1:]
            if first
        )
        memory = times.get("in-memory")
        versus = f"{base / memory:.2f}x the time" if memory else "no in-memory run fitted"
        parts = [cells, speedups, f"Fastest Dask vs in-memory: {versus}"]
        print(f"- {name}: " + ". ".join(p for p in parts if p))
    return 0
