"""xpops: small, fast, exact array operations for NumPy, CuPy and any array-API namespace.

Arrays in give arrays of the same library and device out. With no array to go by, the
environment variable ``XPOPS_BACKEND`` (``numpy``, the default, or ``cupy``) picks the backend.
"""

import os as _os
import sys as _sys

__version__ = "0.1.0.dev0"


def _called_as_command() -> bool:
    """Whether this import is the one that ``xpops ...`` or ``python -m xpops ...`` makes."""
    if _sys.argv[:1] == ["-m"]:  # ``python -m <module>``, while runpy imports its package
        orig = list(_sys.orig_argv)
        return "-m" in orig and orig[orig.index("-m") + 1 :][:1] in (["xpops"], ["xpops.__main__"])
    name = _os.path.basename(_sys.argv[0]) if _sys.argv else ""
    return name in ("xpops", "xpops.exe", "xpops-script.py")


# The backend module reads XPOPS_BACKEND, and raises on a bad value, when it is imported:
# ``import xpops`` raises it. The command line reports the bad value itself (``xpops info``
# prints it, the other commands exit with its message), so there the package is imported
# with the default backend.
try:
    from ._backend import default_namespace, get_namespace
except ValueError:
    if not _called_as_command():
        raise
    _value = _os.environ.pop("XPOPS_BACKEND")
    try:
        from ._backend import default_namespace, get_namespace
    finally:
        _os.environ["XPOPS_BACKEND"] = _value

from . import distributions, linalg, sparse
from ._autodiff._vjp import vjp
from ._cumulative import logcumsumexp
from ._indexing import tril_indices, triu_indices

__all__ = [
    "__version__",
    "default_namespace",
    "distributions",
    "get_namespace",
    "linalg",
    "logcumsumexp",
    "sparse",
    "tril_indices",
    "triu_indices",
    "vjp",
]
