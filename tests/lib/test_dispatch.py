"""xpops._lib._dispatch: the engine tables, the engine kind of a namespace, dispatch and the
CuPy fast-path guard."""

import subprocess
import sys
import textwrap
import types

import numpy as np
import pytest

from xpops._lib import _dispatch
from xpops._lib._dispatch import (
    CUDA_ENGINES,
    ENGINE_KINDS,
    OWN_ENGINES,
    Engines,
    cupy_fast_arrays,
    dispatch,
    dispatch_kind,
    engine_kind,
)

# ---- Engines --------------------------------------------------------------------------------


@pytest.fixture
def engine_package(tmp_path, monkeypatch):
    """A throwaway package ``xpops_test_engines`` with a module ``_slow`` of two engines, on
    sys.path and removed from sys.modules afterwards."""
    name = "xpops_test_engines"
    package = tmp_path / name
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "_slow.py").write_text(
        textwrap.dedent(
            """
            def engine(*args, **kwargs):
                return ("slow", args, kwargs)

            other = 42
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    for mod in (name, f"{name}._slow"):
        monkeypatch.delitem(sys.modules, mod, raising=False)
    yield name
    for mod in (name, f"{name}._slow"):
        sys.modules.pop(mod, None)


def _numpy_engine(*args, **kwargs):
    return ("numpy", args, kwargs)


def _generic_engine(*args, **kwargs):
    return ("generic", args, kwargs)


def test_engine_kinds_order():
    assert ENGINE_KINDS == ("numpy", "cupy", "dask", "torch", "jax", "generic")


def test_string_engines_are_imported_lazily_relative_to_the_package(engine_package):
    engines = Engines(
        engine_package,
        numpy=_numpy_engine,
        cupy="._slow:engine",
        dask="._slow:engine",
        generic=_generic_engine,
    )
    assert f"{engine_package}._slow" not in sys.modules  # nothing imported when built
    engine = engines["cupy"]
    assert f"{engine_package}._slow" in sys.modules
    assert engine is sys.modules[f"{engine_package}._slow"].engine
    assert engine(1, b=2) == ("slow", (1,), {"b": 2})


def test_string_engines_are_cached(engine_package, monkeypatch):
    engines = Engines(
        engine_package,
        numpy=_numpy_engine,
        cupy="._slow:engine",
        dask="._slow:engine",
        generic=_generic_engine,
    )
    first = engines["cupy"]
    # once resolved, the engine is not looked up in its module again
    monkeypatch.setattr(sys.modules[f"{engine_package}._slow"], "engine", _generic_engine)
    assert engines["cupy"] is first
    assert engines["dask"] is _generic_engine  # resolved on its own first use


def test_absolute_engine_strings(engine_package):
    engines = Engines(
        "unused",
        numpy=f"{engine_package}._slow:engine",
        cupy=_numpy_engine,
        dask=_numpy_engine,
        generic=_generic_engine,
    )
    assert engines["numpy"](3) == ("slow", (3,), {})


def test_callable_engines_are_returned_as_they_are():
    engines = Engines(
        __package__,
        numpy=_numpy_engine,
        cupy=_numpy_engine,
        dask=_generic_engine,
        generic=_generic_engine,
    )
    assert engines["numpy"] is _numpy_engine
    assert engines["generic"] is _generic_engine
    with pytest.raises(KeyError):
        engines["mlx"]


def test_torch_engine_defaults_to_the_generic_one(engine_package):
    engines = Engines(
        engine_package,
        numpy=_numpy_engine,
        cupy=_numpy_engine,
        dask=_numpy_engine,
        generic=_generic_engine,
    )
    assert engines["torch"] is _generic_engine
    own = Engines(
        engine_package,
        numpy=_numpy_engine,
        cupy=_numpy_engine,
        dask=_numpy_engine,
        generic=_generic_engine,
        torch="._slow:engine",
    )
    assert own["torch"](1) == ("slow", (1,), {})


def _tensor_engines(numpy_engine, torch_spec):
    """A table whose NumPy and CuPy engines are `numpy_engine`, its torch engine `torch_spec`
    (`OWN_ENGINES` or `CUDA_ENGINES`), the others `_generic_engine`."""
    return Engines(
        __package__,
        numpy=numpy_engine,
        cupy=numpy_engine,
        dask=_generic_engine,
        generic=_generic_engine,
        torch=torch_spec,
    )


def test_own_engines_serve_torch_tensors_by_the_numpy_engine():
    torch = pytest.importorskip("torch")
    seen = []

    def numpy_engine(*args, **kwargs):
        seen.append((args, kwargs))
        return args[0] * 2

    engines = _tensor_engines(numpy_engine, OWN_ENGINES)
    t = torch.ones(3)
    out = engines["torch"](t, True, xp=torch)
    ((view, flag), kwargs) = seen[0]
    assert isinstance(view, np.ndarray)
    assert np.shares_memory(view, t.numpy())  # a view, not a copy
    assert flag is True
    assert kwargs["xp"].__name__ == "array_api_compat.numpy"
    assert type(out) is torch.Tensor
    assert torch.equal(out, torch.full((3,), 2.0))
    # what the own engines do not take goes to the generic engine, as it is
    integers = torch.ones(3, dtype=torch.int64)
    kind, (same,), _ = engines["torch"](integers)
    assert kind == "generic"
    assert same is integers


def test_cuda_engines_serve_cpu_tensors_by_the_generic_engine():
    """`CUDA_ENGINES`: the NumPy engine is never asked; CPU tensors reach the generic engine as
    they are, with the ``xp`` they came with."""
    torch = pytest.importorskip("torch")

    def numpy_engine(*args, **kwargs):
        raise AssertionError("the NumPy engine must not serve tensors")

    engines = _tensor_engines(numpy_engine, CUDA_ENGINES)
    t = torch.ones(3)
    kind, (same, flag), kwargs = engines["torch"](t, True, xp=torch)
    assert kind == "generic"
    assert same is t
    assert flag is True
    assert kwargs["xp"] is torch


@pytest.mark.parametrize("spec", ["._slow", "._slow:", "_slow.engine"])
def test_bad_engine_string(engine_package, spec):
    engines = Engines(
        engine_package,
        numpy=_numpy_engine,
        cupy=spec,
        dask=_numpy_engine,
        generic=_generic_engine,
    )
    assert engines["numpy"] is _numpy_engine  # a bad string fails only where it is used
    message = f"an engine string must be 'module:attribute', got {spec!r}"
    with pytest.raises(ValueError, match=message.replace(".", r"\.")):
        engines["cupy"]


def test_missing_engine_module_or_attribute(engine_package):
    engines = Engines(
        engine_package,
        numpy="._nope:engine",
        cupy="._slow:nope",
        dask=_numpy_engine,
        generic=_generic_engine,
    )
    with pytest.raises(ModuleNotFoundError):
        engines["numpy"]
    with pytest.raises(AttributeError):
        engines["cupy"]


# ---- engine_kind and dispatch ---------------------------------------------------------------


def test_engine_kind_numpy():
    import array_api_compat.numpy

    assert engine_kind(np) == "numpy"
    assert engine_kind(array_api_compat.numpy) == "numpy"


def test_engine_kind_generic():
    import array_api_strict

    assert engine_kind(array_api_strict) == "generic"
    assert engine_kind(types.ModuleType("some_library")) == "generic"
    assert engine_kind(types.SimpleNamespace()) == "generic"  # no name: nothing to tell by


def test_engine_kind_dask():
    da = pytest.importorskip("dask.array")
    import array_api_compat.dask.array

    assert engine_kind(da) == "dask"
    assert engine_kind(array_api_compat.dask.array) == "dask"


def test_engine_kind_torch():
    torch = pytest.importorskip("torch")
    import array_api_compat.torch

    assert engine_kind(torch) == "torch"
    assert engine_kind(array_api_compat.torch) == "torch"


def test_engine_kind_jax():
    jnp = pytest.importorskip("jax.numpy")
    from xpops._lib import _compat

    assert engine_kind(jnp) == "jax"
    assert engine_kind(_compat.array_namespace(jnp.zeros(2))) == "jax"


def test_jax_engine_defaults_to_the_generic_one(engine_package):
    engines = Engines(
        engine_package,
        numpy=_numpy_engine,
        cupy=_numpy_engine,
        dask=_numpy_engine,
        generic=_generic_engine,
    )
    assert engines["jax"] is _generic_engine
    own = Engines(
        engine_package,
        numpy=_numpy_engine,
        cupy=_numpy_engine,
        dask=_numpy_engine,
        generic=_generic_engine,
        jax="._slow:engine",
    )
    assert own["jax"] is sys.modules[f"{engine_package}._slow"].engine


def test_engine_kind_cupy(cupy_only):
    import array_api_compat.cupy

    assert engine_kind(cupy_only) == "cupy"
    assert engine_kind(array_api_compat.cupy) == "cupy"


def test_engine_kind_is_remembered_by_name():
    import array_api_strict

    engine_kind(array_api_strict)
    assert _dispatch._KIND_OF_NAMESPACE["array_api_strict"] == "generic"
    assert engine_kind(np) == "numpy"
    assert _dispatch._KIND_OF_NAMESPACE["numpy"] == "numpy"


def test_engine_kind_imports_neither_cupy_nor_dask():
    code = (
        "import sys, types, numpy, array_api_strict; "
        "from xpops._lib._dispatch import engine_kind; "
        "kinds = [engine_kind(m) for m in (numpy, array_api_strict, types.ModuleType('x'))]; "
        "assert kinds == ['numpy', 'generic', 'generic'], kinds; "
        "assert 'cupy' not in sys.modules and 'dask' not in sys.modules; print('ok')"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_dispatch_calls_the_engine_of_the_namespace(engine_package):
    import array_api_strict

    engines = Engines(
        engine_package,
        numpy=_numpy_engine,
        cupy=_numpy_engine,
        dask="._slow:engine",
        generic=_generic_engine,
    )
    assert dispatch(np, engines, 1, 2, c=3) == ("numpy", (1, 2), {"c": 3})
    assert dispatch(array_api_strict, engines, "a") == ("generic", ("a",), {})
    da = pytest.importorskip("dask.array")
    assert dispatch(da, engines, 5) == ("slow", (5,), {})


def test_dispatch_kind_calls_the_engine_of_the_kind(engine_package):
    engines = Engines(
        engine_package,
        numpy=_numpy_engine,
        cupy="._slow:engine",
        dask="._slow:engine",
        generic=_generic_engine,
    )
    assert dispatch_kind("numpy", engines, 1, 2, c=3) == ("numpy", (1, 2), {"c": 3})
    assert dispatch_kind("generic", engines, "a") == ("generic", ("a",), {})
    assert dispatch_kind("cupy", engines, 5) == ("slow", (5,), {})
    assert dispatch_kind("torch", engines, "b") == ("generic", ("b",), {})
    assert dispatch_kind("jax", engines, "c") == ("generic", ("c",), {})
    with pytest.raises(KeyError):
        dispatch_kind("mlx", engines)


# ---- cupy_fast_arrays -----------------------------------------------------------------------


def test_cupy_fast_arrays_without_cupy(monkeypatch):
    monkeypatch.delitem(sys.modules, "cupy", raising=False)
    assert not cupy_fast_arrays(np.ones(3), chars="d")
    assert not cupy_fast_arrays(chars="d")


def test_cupy_fast_arrays_numpy_arrays_are_refused():
    assert not cupy_fast_arrays(np.ones(3), chars="d")
    assert not cupy_fast_arrays(np.ones(3), np.ones(3), chars="fd")


def test_cupy_fast_arrays_accepts(cupy_only):
    cp = cupy_only
    a, b = cp.ones((2, 3)), cp.zeros(3)
    assert cupy_fast_arrays(a, chars="d")
    assert cupy_fast_arrays(a, b, chars="fd")
    assert cupy_fast_arrays(a, chars="d", min_ndim=2)
    assert cupy_fast_arrays(cp.ones(()), chars="d", min_ndim=0)
    assert cupy_fast_arrays(a[:, ::2], chars="d")  # any strides


def test_cupy_fast_arrays_cupy_not_imported(cupy_only, monkeypatch):
    a = cupy_only.ones(3)
    monkeypatch.delitem(sys.modules, "cupy")
    assert not cupy_fast_arrays(a, chars="d")


def test_cupy_fast_arrays_no_arrays(cupy_only):
    assert not cupy_fast_arrays(chars="d")


def test_cupy_fast_arrays_subclass_or_other_library(cupy_only):
    cp = cupy_only

    class Sub(cp.ndarray):
        pass

    a = cp.ones(3)
    sub = Sub((3,), dtype=cp.float64)
    assert isinstance(sub, cp.ndarray)
    assert not cupy_fast_arrays(sub, chars="d")
    assert not cupy_fast_arrays(a, sub, chars="d")
    assert not cupy_fast_arrays(np.ones(3), a, chars="d")
    assert not cupy_fast_arrays(a, np.ones(3), chars="d")


def test_cupy_fast_arrays_mixed_dtypes(cupy_only):
    cp = cupy_only
    assert not cupy_fast_arrays(cp.ones(3), cp.ones(3, dtype=cp.float32), chars="fd")
    assert not cupy_fast_arrays(cp.ones(3, dtype=cp.float32), cp.ones(3), chars="fd")


def test_cupy_fast_arrays_dtype_char_not_allowed(cupy_only):
    cp = cupy_only
    assert not cupy_fast_arrays(cp.ones(3, dtype=cp.float32), chars="d")
    assert not cupy_fast_arrays(cp.ones(3, dtype=cp.complex128), chars="fd")
    assert not cupy_fast_arrays(cp.ones(3, dtype=cp.int64), chars="fd")
    assert cupy_fast_arrays(cp.ones(3, dtype=cp.complex128), chars="FD")


def test_cupy_fast_arrays_min_ndim(cupy_only):
    cp = cupy_only
    assert not cupy_fast_arrays(cp.ones(()), chars="d")  # min_ndim defaults to 1
    assert not cupy_fast_arrays(cp.ones(3), chars="d", min_ndim=2)
    assert not cupy_fast_arrays(cp.ones((2, 2)), cp.ones(3), chars="d", min_ndim=2)


def test_cupy_fast_arrays_zero_size(cupy_only):
    cp = cupy_only
    assert not cupy_fast_arrays(cp.ones((0, 3)), chars="d")
    assert not cupy_fast_arrays(cp.ones(3), cp.ones((3, 0)), chars="d")


def test_cupy_fast_arrays_different_devices(cupy_only):
    cp = cupy_only
    if cp.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs two CUDA devices")
    with cp.cuda.Device(0):
        a = cp.ones(3)
    with cp.cuda.Device(1):
        b = cp.ones(3)
        assert cupy_fast_arrays(b, chars="d")
    assert not cupy_fast_arrays(a, b, chars="d")
    assert not cupy_fast_arrays(b, a, chars="d")
