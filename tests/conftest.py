"""Backend fixtures (DESIGN.md §5).

`xp` runs a test once per available backend: numpy, array_api_strict, cupy (skipped with "no
CUDA device available" on machines without one), torch and jax (when installed). When
``XPOPS_BACKEND`` is set, only that backend runs.

JAX runs with ``jax_enable_x64`` on (set when the first JAX test loads it, for the rest of the
session): the tests compare float64 results, which JAX otherwise silently makes float32. The
flag is JAX's own; the other backends do not read it. JAX's rows are marked ``slow``: JAX
compiles each operation (each public function, under the binding) for each new shape and dtype,
a fraction of a second to seconds of CPU, and the suites call hundreds of shapes; the fast JAX
tests, of grad, jit and vmap, are ``tests/test_jax.py``.
"""

import importlib
import os

import pytest

ALL_BACKENDS = ("numpy", "array_api_strict", "cupy", "torch", "jax")


# The thread pools of NumPy's BLAS and of OpenMP that a worker of pytest-xdist may start
_POOLS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist (``-n N``) each worker's BLAS would start a thread a core, N times
    the cores in all (OpenBLAS's threads spin while they wait): the workers get an equal share
    of the cores instead, before they start. Variables already set are kept. The GPU suite
    (``XPOPS_BACKEND=cupy``, ``-n 8``) on a just-started 16-core H100 host: 189 s, against
    391 s without the limit, where single tests took up to 118 s."""
    workers = getattr(config.option, "numprocesses", None)
    if os.environ.get("PYTEST_XDIST_WORKER") or not workers:
        return
    cores = os.cpu_count() or 1
    share = max(1, cores // workers) if isinstance(workers, int) else 1
    for name in _POOLS:
        os.environ.setdefault(name, str(share))


def _selected_backends() -> tuple[str, ...]:
    env = os.environ.get("XPOPS_BACKEND", "").strip().lower()
    return (env,) if env else ALL_BACKENDS


def _cuda_available() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def _load(name: str):
    if name == "cupy":
        if not _cuda_available():
            pytest.skip("no CUDA device available")
        import cupy

        return cupy
    if name == "torch":
        return pytest.importorskip("torch")
    if name == "jax":
        jax = pytest.importorskip("jax")
        jax.config.update("jax_enable_x64", True)
        return importlib.import_module("jax.numpy")
    return importlib.import_module(name)


def _params() -> list:
    return [
        pytest.param(b, marks=pytest.mark.slow) if b == "jax" else b for b in _selected_backends()
    ]


@pytest.fixture(params=_params())
def xp(request):
    """The array library of the backend under test (a plain module: numpy, cupy, ...)."""
    return _load(request.param)


@pytest.fixture
def jax_only():
    """JAX's numpy namespace, or skip: for the JAX-only tests (grad, jit, vmap)."""
    if "jax" not in _selected_backends():
        pytest.skip("the JAX backend is not selected")
    return _load("jax")


@pytest.fixture
def cupy_only():
    """CuPy, or skip: for GPU-only tests."""
    if "cupy" not in _selected_backends():
        pytest.skip("the CuPy backend is not selected")
    return _load("cupy")
