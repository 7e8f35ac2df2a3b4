"""Root conftest: keep doctest collection away from modules that need a GPU library or an
optional one that is not installed."""

import importlib.util

collect_ignore_glob = ["docs/*", ".gpu/*"]
if importlib.util.find_spec("sparse") is None:
    # the pydata engine of sparse.divide imports pydata's `sparse`, an optional dependency
    collect_ignore_glob.append("xpops/sparse/_pydata.py")
if importlib.util.find_spec("cupy") is None:
    # the CuPy engines and kernels of every op, and the CUDA helpers: they import CuPy
    collect_ignore_glob += [
        "xpops/*/_cupy*",
        "xpops/*/_cupy/*",
        "xpops/*/*/_cupy*",
        "xpops/_lib/_cuda.py",
    ]
