"""The backend layer: XPOPS_BACKEND, get_namespace, default_namespace, `python -m xpops`."""

import os
import subprocess
import sys

import numpy as np
import pytest

import xpops


def _python(code: str, **env: str) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if k != "XPOPS_BACKEND"}
    full_env.update(env)
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=full_env, check=False
    )


def test_bad_backend_value_fails_at_import():
    proc = _python("import xpops", XPOPS_BACKEND="jax")
    assert proc.returncode != 0
    assert "ValueError: XPOPS_BACKEND must be one of 'numpy', 'cupy'" in proc.stderr
    assert "got 'jax'" in proc.stderr


def test_unset_backend_is_numpy_and_never_imports_cupy():
    code = (
        "import sys, xpops; "
        "assert xpops.default_namespace().__name__ == 'array_api_compat.numpy'; "
        "a = xpops.tril_indices(4); import numpy; assert isinstance(a, numpy.ndarray); "
        "assert 'cupy' not in sys.modules, 'cupy imported'; print('ok')"
    )
    proc = _python(code)
    assert proc.returncode == 0, proc.stderr
    proc = _python(code, XPOPS_BACKEND="numpy")
    assert proc.returncode == 0, proc.stderr


def test_cupy_backend_without_gpu_is_a_clear_error():
    from xpops._backend import cupy_unavailable_reason

    if cupy_unavailable_reason() is None:
        pytest.skip("a CUDA device is available here")
    proc = _python("import xpops; xpops.tril_indices(3)", XPOPS_BACKEND="cupy")
    assert proc.returncode != 0
    assert "RuntimeError: the CuPy backend was requested but cannot be used" in proc.stderr


def test_get_namespace(xp):
    a = xp.asarray([1.0, 2.0])
    ns = xpops.get_namespace(a)
    assert ns.__name__.split(".")[-1] == xp.__name__.split(".")[-1] or ns is xp
    assert xpops.get_namespace(a, None, 2.0, 3) is ns
    assert xpops.get_namespace() is xpops.default_namespace()
    assert xpops.get_namespace(None, 1.5) is xpops.default_namespace()


def test_get_namespace_mixed_libraries():
    import array_api_strict

    with pytest.raises(TypeError, match="arrays from different libraries cannot be mixed, got"):
        xpops.get_namespace(np.ones(2), array_api_strict.ones(2))
    with pytest.raises(TypeError, match=r"array_api_strict\.Array and numpy\.ndarray"):
        xpops.get_namespace(np.ones(2), array_api_strict.ones(2))


def test_get_namespace_mixed_numpy_and_cupy(cupy_only):
    with pytest.raises(TypeError, match=r"cupy.ndarray and numpy.ndarray"):
        xpops.get_namespace(np.ones(2), cupy_only.ones(2))


def test_get_namespace_rejects_non_arrays():
    with pytest.raises(TypeError, match=r"expected an array, got builtins\.list"):
        xpops.get_namespace([1, 2])


def test_info_command():
    proc = subprocess.run(
        [sys.executable, "-m", "xpops", "info"], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert f"xpops {xpops.__version__}" in proc.stdout
    assert "default backend:" in proc.stdout
    assert "numpy" in proc.stdout


def test_bench_command_writes_json(tmp_path):
    out = tmp_path / "bench.json"
    env = {k: v for k, v in os.environ.items() if k != "XPOPS_BACKEND"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "xpops",
            "bench",
            "--ops",
            "triu_indices",
            "--repeats",
            "1",
            "--peers",
            "numpy",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    import json

    data = json.loads(out.read_text())
    assert {r["op"] for r in data["results"]} == {"triu_indices"}
    assert all(r["xpops_ms"] > 0 for r in data["results"])
    assert "| triu_indices |" in proc.stdout


def test_bench_rejects_unknown_op():
    proc = subprocess.run(
        [sys.executable, "-m", "xpops", "bench", "--ops", "nope"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert "unknown ops ['nope']" in proc.stderr


def test_resolve_namespace():
    import array_api_compat.numpy

    from xpops._backend import resolve_namespace

    assert resolve_namespace(np) is array_api_compat.numpy
    assert resolve_namespace(array_api_compat.numpy) is array_api_compat.numpy
    assert resolve_namespace(None) is xpops.default_namespace()
    import array_api_strict

    assert resolve_namespace(array_api_strict) is array_api_strict


def test_resolve_namespace_dask():
    pytest.importorskip("dask.array")
    import array_api_compat.dask.array
    import dask.array

    from xpops._backend import resolve_namespace

    assert resolve_namespace(dask.array) is array_api_compat.dask.array
    assert resolve_namespace(array_api_compat.dask.array) is array_api_compat.dask.array


def test_resolve_namespace_rejects_non_namespaces():
    from xpops._backend import resolve_namespace

    with pytest.raises(TypeError, match=r"a module such as numpy\), got builtins\.str"):
        resolve_namespace("numpy")
    with pytest.raises(TypeError, match=r"got numpy\.ndarray"):
        resolve_namespace(np.ones(2))


# ---- array_args: lists, scalars and NumPy next to Dask ----------------------------------------


def test_array_args_lists_and_scalars_become_numpy():
    from xpops._backend import array_args

    xp, (a, b, c) = array_args([1.0, 2.0], None, 3, names=["x", "y", "z"])
    assert xp.__name__ == "array_api_compat.numpy"
    np.testing.assert_array_equal(a, np.array([1.0, 2.0]))
    assert b is None
    assert isinstance(c, np.ndarray)
    assert c.shape == ()
    assert c.dtype == np.asarray(3).dtype


def test_array_args_lists_follow_the_arrays_namespace():
    import array_api_strict

    from xpops._backend import array_args

    x = array_api_strict.asarray([1.0, 2.0])
    xp, (a, b) = array_args(x, [[3.0]], names=["x", "y"])
    assert xp is array_api_strict
    assert a is x
    assert type(b) is type(x)
    assert b.shape == (1, 1)


def test_array_args_numpy_next_to_dask_becomes_dask():
    da = pytest.importorskip("dask.array")
    from xpops._backend import array_args

    x = da.ones((4, 2), chunks=2)
    xp, (a, b, c) = array_args(x, np.arange(2.0), [1.0, 2.0], names=["x", "y", "z"])
    assert "dask" in xp.__name__
    assert a is x
    assert isinstance(b, da.Array)
    assert isinstance(c, da.Array)
    np.testing.assert_array_equal(b.compute(), np.arange(2.0))


def test_array_args_of_one_known_type_pass_as_they_are():
    """Arrays of one type whose namespace the type decides (NumPy's ndarray, torch.Tensor)
    come back as they are with that namespace; a subclass, a list among them, or another
    library next to them take the general path: the same namespace, lists converted, mixes
    refused."""
    torch = pytest.importorskip("torch")
    import array_api_strict

    from xpops._backend import array_args, get_namespace, namespace_of_type

    for a in (np.ones(2), torch.ones(2, dtype=torch.float64)):
        b = a * 2
        get_namespace(a)  # met once: its type's namespace is kept from then on
        assert namespace_of_type(type(a)) is get_namespace(a)
        xp, out = array_args(a, b)
        assert xp is get_namespace(a)
        assert out[0] is a
        assert out[1] is b
        xp, (c, d) = array_args(a, [3.0, 4.0], names=["x", "y"])
        assert xp is get_namespace(a)
        assert c is a
        assert type(d) is type(a)
        with pytest.raises(TypeError, match="arrays from different libraries cannot be mixed"):
            array_args(a, array_api_strict.asarray([1.0]), names=["x", "y"])
    parameter = torch.nn.Parameter(torch.ones(2))
    assert namespace_of_type(type(parameter)) is None
    xp, (p,) = array_args(parameter)
    assert xp.__name__ == "array_api_compat.torch"
    assert p is parameter


def test_array_args_errors():
    import array_api_strict

    from xpops._backend import array_args

    with pytest.raises(TypeError, match=r"`value` must be an array, got builtins\.str"):
        array_args("ab", names=["value"])
    with pytest.raises(TypeError, match="arrays from different libraries cannot be mixed"):
        array_args(np.ones(2), array_api_strict.asarray([1.0]), names=["x", "y"])
    with pytest.raises(ValueError, match=r"`x` must be an array or a nested sequence of one shape"):
        array_args([[1, 2], [3]], names=["x"])
