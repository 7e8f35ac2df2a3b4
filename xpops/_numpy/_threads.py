"""The one helper thread the NumPy engines share to use a second core."""

import functools
import os
from concurrent.futures import ThreadPoolExecutor


@functools.cache
def helper_thread() -> ThreadPoolExecutor | None:
    """One worker thread for the second half of an engine's work; None on a single core.

    NumPy's loops and SciPy's sparse arithmetic release the GIL, so the calling thread and
    this one run on two cores. Jobs never submit further jobs, so calls from several user
    threads only queue here.
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return ThreadPoolExecutor(1, thread_name_prefix="xpops-helper") if cores > 1 else None
