"""The one helper thread the NumPy engines share to use a second core."""

import functools
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any


class Helper:
    """A worker thread that takes part of an engine's work, when no other call is using it.

    NumPy's loops and SciPy's sparse arithmetic release the GIL, so the calling thread and the
    helper run on two cores. A call that finds the helper busy (another user thread, say a
    Dask task, is using it) does all its work itself instead of queueing behind that call.
    """

    def __init__(self, executor: ThreadPoolExecutor) -> None:
        self._executor = executor
        self._free = threading.Lock()

    def try_submit(self, fn: Callable[..., Any], *args: Any) -> Future | None:
        """``fn(*args)`` on the helper thread, or None (and nothing done) if it is busy."""
        if not self._free.acquire(blocking=False):
            return None
        try:
            return self._executor.submit(self._run, fn, args)
        except BaseException:
            self._free.release()
            raise

    def _run(self, fn: Callable[..., Any], args: tuple) -> Any:
        try:
            return fn(*args)
        finally:
            self._free.release()


@functools.cache
def helper_thread() -> Helper | None:
    """The shared helper, or None on a single core or where ``OMP_NUM_THREADS=1`` asks for one
    compute thread a process (as Dask's worker processes and many batch systems set)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    if cores < 2 or os.environ.get("OMP_NUM_THREADS", "").strip() == "1":
        return None
    return Helper(ThreadPoolExecutor(1, thread_name_prefix="xpops-helper"))
