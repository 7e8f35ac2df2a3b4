"""Root conftest: keep doctest collection away from modules that need a GPU library."""

import importlib.util

collect_ignore_glob = ["docs/*", ".gpu/*"]
if importlib.util.find_spec("cupy") is None:
    # the CuPy engines and kernels of every op, and the CUDA helpers: they import CuPy
    collect_ignore_glob += [
        "xpops/*/_cupy*",
        "xpops/*/_cupy/*",
        "xpops/*/*/_cupy*",
        "xpops/_lib/_cuda.py",
    ]
