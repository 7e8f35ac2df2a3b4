"""``python -m xpops scale``: throughput of the Dask engines with 1 and more workers.

Two workloads: ``logcumsumexp`` along a long 1-D array, and
``MultivariateNormal.log_prob`` of many points in D = 16. Inputs are generated on the workers
(nothing is shipped from the client), a fresh one a run before its clock starts (new keys, so
no run finds an earlier result, and no extra task a chunk to rename them); results are
persisted on the workers (nothing is gathered; on GPUs each run ends when every worker's
device is done); each configuration is timed as the median of a few runs after a warm-up.
Baselines: the in-memory xpops call on the same data in this process (where that data does
not fit in the GPU's memory with the call's result and temporaries, the largest power-of-two
fraction of it that fits, compared by throughput); the same Dask graphs run in this process
by Dask's threaded scheduler (no cluster); and, on each cluster, a graph of one no-op task a
chunk, what Dask itself costs a run.
``--gpu`` uses ``dask_cuda.LocalCUDACluster`` (one worker a GPU, CuPy chunks, dask-cuda's
spilling to host memory off: the workloads are sized to fit, and a spill would time host
copies) instead of a CPU ``distributed.LocalCluster`` (one worker process a core). Workers
have ``--threads`` threads each (default 1). With more workers than GPUs (a one-GPU machine
asked for two) the GPU workers are processes of a ``distributed.LocalCluster`` that share the
device, and the report says so.
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
    parser.add_argument("--threads", type=int, default=1, help="threads a worker")
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

    def rng_meta(seed: int) -> Any:
        if xp.__name__ == "cupy":
            return da.random.RandomState(seed, RandomState=xp.random.RandomState)
        return da.random.RandomState(seed)

    def normals(seed: int, shape: Any, chunks: Any) -> Any:
        if xp.__name__ == "cupy":  # float32 drawn as such: no float64 chunk on the device
            return rng_meta(seed).standard_normal(shape, chunks=chunks, dtype="float32")
        return rng_meta(seed).standard_normal(shape, chunks=chunks).astype("float32")

    # a seed a run: fresh keys, so that no run finds an earlier run's result
    def scan_input(seed: int) -> Any:
        return normals(seed, n, chunk)

    def points_input(seed: int) -> Any:
        return normals(seed, (points, d), (chunk // d, d))

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


def _held(dask_worker: Any) -> int:
    """How many results the worker holds (``client.run`` passes the worker)."""
    return len(dask_worker.data)


def _synchronize() -> None:
    """Wait for the worker's GPU: a task ends when its kernels are queued, not run."""
    import cupy

    cupy.cuda.Device().synchronize()


def _release() -> None:
    """Hand the memory CuPy's pool keeps back to the device, for the next workload's sizes."""
    import cupy

    cupy.get_default_memory_pool().free_all_blocks()


THREADED = "this process, threaded scheduler"


def _noop(data: Any) -> Any:
    """A task a chunk that does nothing: what Dask itself costs a run."""
    return data.map_blocks(_same)


def _same(block: Any) -> Any:
    return block


def _timed_runs(
    make_input: Any, op: Any, repeats: int, persist: Any, settle: Any, drain: Any
) -> float:
    """Median seconds of `repeats` runs (after one to warm up) of ``persist(op(data))`` until
    `settle` returns, each on a fresh ``data = persist(make_input(run))`` made before the
    clock starts; `drain` lets both go before the next run. CuPy's pools keep the freed
    blocks for the next run's arrays of the same sizes, as they do for the in-memory call's
    repeats (a fresh ``cudaMalloc`` of a chunk inside the clock costs milliseconds)."""
    samples = []
    for run in range(repeats + 1):
        data = persist(make_input(run))
        settle(data)
        start = time.perf_counter()
        out = persist(op(data))
        settle(out)
        samples.append(time.perf_counter() - start)
        del data, out
        drain()
    return statistics.median(samples[1:])


def _in_memory(make_local: Any, op: Any, shrink: int, repeats: int, gpu: bool) -> float:
    """Seconds of the in-memory call on 1 / 2^shrink of the data, scaled to the whole."""
    local = make_local(shrink)

    def call() -> None:
        op(local)
        if gpu:
            _synchronize()

    return _time(call, repeats) * 2**shrink


def _drain(client: Any) -> None:
    """Wait until the workers have dropped the released input and result (the next run's
    input needs the memory)."""
    deadline = time.perf_counter() + 60
    while sum(client.run(_held).values()) and time.perf_counter() < deadline:
        time.sleep(0.01)


def run(args: argparse.Namespace) -> int:
    import numpy as np
    from distributed import Client, LocalCluster, wait

    xp: Any = np
    gpu_cluster: Any = None  # dask_cuda.LocalCUDACluster with --gpu (imported first: fail early)
    if args.gpu:
        import cupy
        from dask_cuda import LocalCUDACluster

        xp, gpu_cluster = cupy, LocalCUDACluster
    counts = [int(w) for w in args.workers.split(",") if w.strip()]
    work = _workloads(args, xp)
    results: dict[str, dict[str, float]] = {name: {} for name in work}
    shrinks: dict[str, int] = {}
    for name, (_, op, _, make_local) in work.items():
        for shrink in range(8):
            try:
                seconds = _in_memory(make_local, op, shrink, args.repeats, args.gpu)
                results[name]["in-memory"] = seconds
                shrinks[name] = shrink
                break
            except MemoryError:  # CuPy's OutOfMemoryError is one: try half the data
                pass
            finally:  # the input is gone with _in_memory's frame
                if args.gpu:  # the workers need the memory this process's pool keeps
                    _release()
    noop: dict[str, float] = {}

    def settle_here(c: Any) -> None:
        if args.gpu:
            _synchronize()

    def drain_here() -> None:
        pass  # the persisted collections were the only references

    def persist_here(c: Any) -> Any:
        return c.persist(scheduler="threads")

    for name, (make_input, op, _, _) in work.items():
        seconds = _timed_runs(make_input, op, args.repeats, persist_here, settle_here, drain_here)
        results[name][THREADED] = seconds
        print(f"  {name}, {THREADED}: {seconds:.3f} s", flush=True)
        if args.gpu:  # the next workload's arrays have other sizes
            _release()
    gpus = xp.cuda.runtime.getDeviceCount() if args.gpu else 0
    for workers in counts:
        if args.gpu and workers <= gpus:
            cluster = gpu_cluster(
                n_workers=workers, threads_per_worker=args.threads, device_memory_limit=0
            )
        else:
            if args.gpu:  # more workers than GPUs: worker processes share the device
                print(f"{workers} workers on {gpus} GPU(s): a LocalCluster sharing the device(s)")
            cluster = LocalCluster(
                n_workers=workers,
                threads_per_worker=args.threads,
                processes=True,
                dashboard_address=None,  # pyright: ignore[reportArgumentType]  (None: no dashboard)
            )
        with cluster, Client(cluster) as client:

            def settle(c: Any, client: Any = client) -> None:
                wait(c)
                if args.gpu:
                    client.run(_synchronize)

            def drain(client: Any = client) -> None:
                _drain(client)

            for name, (make_input, op, _, _) in work.items():
                seconds = _timed_runs(make_input, op, args.repeats, client.persist, settle, drain)
                results[name][f"{workers} worker(s)"] = seconds
                print(f"  {name}, {workers} worker(s): {seconds:.3f} s", flush=True)
                if args.gpu:  # the next workload's arrays have other sizes
                    client.run(_release)
            make_input = next(iter(work.values()))[0]
            seconds = _timed_runs(make_input, _noop, args.repeats, client.persist, settle, drain)
            noop[f"{workers} worker(s)"] = seconds
            print(f"  no-op task a chunk, {workers} worker(s): {seconds:.3f} s", flush=True)
    kind = "GPU" if args.gpu else "CPU"
    print(
        f"xpops scale ({kind}, {args.threads} thread(s) a worker); seconds, median of "
        f"{args.repeats}; GB/s of bytes moved"
    )
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
        if memory:
            versus = (
                f"Fastest cluster vs in-memory: {base / memory:.2f}x the time; threaded "
                f"scheduler vs in-memory: {times[THREADED] / memory:.2f}x"
            )
        else:
            versus = "no in-memory run fitted"
        print(f"- {name}: " + ". ".join(p for p in (cells, speedups, versus) if p))
    cells = "; ".join(f"{k} {t:.3f} s" for k, t in noop.items())
    print(f"- Dask's own cost, a no-op task a chunk of the scan's input: {cells}")
    return 0
