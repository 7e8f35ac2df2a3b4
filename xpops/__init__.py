"""xpops: small, fast, exact array operations for NumPy, CuPy and any array-API namespace.

Arrays in give arrays of the same library and device out. With no array to go by, the
environment variable ``XPOPS_BACKEND`` (``numpy``, the default, or ``cupy``) picks the backend.
"""

__version__ = "0.1.0.dev0"

from . import distributions, linalg, sparse
from ._backend import default_namespace, get_namespace
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
]
