"""PyTorch tensors on xpops' own engines (`xpops._lib._torch`): CPU tensors on the NumPy
engines, CUDA tensors on the CuPy engines by DLPack, the generic engine for the rest.

The CPU tests compare with the same call on NumPy arrays (the same engine: equal bits); the
CUDA tests, with the same call on CuPy arrays, and skip without CUDA and CuPy. cholesky_solve
gives CPU tensors of small systems to ``torch.cholesky_solve`` (`xpops.linalg._torch`): here
that is turned off, except in the tests of that path at the end of the CPU section.
"""

import ctypes
import math
import pickle
import sys
import types
from typing import ClassVar

import numpy as np
import pytest

import xpops
from xpops._lib import _torch
from xpops._lib._dispatch import torch_fast_arrays
from xpops.distributions import _mvn as mvn_module
from xpops.distributions import _torch as mvn_torch
from xpops.linalg import _torch as linalg_torch

torch = pytest.importorskip("torch")

DTYPES = ["float32", "float64", "complex64", "complex128"]
inf, nan = np.inf, np.nan


def _data(rng, shape, dtype, special=True):
    a = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.standard_normal(shape)
    a = a.astype(dtype)
    if special and a.size >= 8:
        flat = a.reshape(-1)
        flat[[1, 3, 5]] = (-inf, nan, inf)  # the scan's special values
    return a


def _factor(rng, batch, m, dtype):
    """A lower factor of a well-conditioned matrix, NaN in the unused triangle."""
    g = rng.standard_normal((*batch, m, m))
    if np.dtype(dtype).kind == "c":
        g = g + 1j * rng.standard_normal((*batch, m, m))
    lower = np.tril(g) / m**0.5
    i = np.arange(m)
    lower[..., i, i] = np.abs(lower[..., i, i]) + 1.0
    lower[..., np.triu(np.ones((m, m), bool), 1)] = nan
    return lower.astype(dtype)


def _same(out, ref, device="cpu"):
    """`out` is a tensor on `device` with the dtype, shape and bits of the NumPy `ref`."""
    assert type(out) is torch.Tensor
    assert out.device == torch.device(device)
    host = out.cpu().numpy()
    assert host.dtype == ref.dtype
    assert host.shape == ref.shape
    assert np.ascontiguousarray(host).tobytes() == np.ascontiguousarray(ref).tobytes()


@pytest.fixture(autouse=True)
def _own_engines_for_small_systems(monkeypatch):
    """cholesky_solve's CPU tensors on the NumPy engine whatever M (see the module docstring)."""
    monkeypatch.setattr(linalg_torch, "_TORCH_MAX_M", 0)


@pytest.fixture
def engines_used(monkeypatch):
    """The kinds of own engine that served tensors in the test ("numpy", "cupy"), in order: a
    hand-over to NumPy, or a run on CuPy (on views of the tensors, or a launch on their
    addresses)."""
    used = []
    for kind, name in (("numpy", "_on_numpy"), ("cupy", "_run_on_cupy"), ("cupy", "_on_stream")):
        original = getattr(_torch, name)

        def spy(*args, _original=original, _kind=kind):
            used.append(_kind)
            return _original(*args)

        monkeypatch.setattr(_torch, name, spy)
    return used


@pytest.fixture
def cupy_views(monkeypatch):
    """One entry for each CuPy view of a CUDA tensor made in the test (`_torch._cupy_view`):
    calls that run by the tensors' addresses make none."""
    views = []
    view = _torch._cupy_view
    monkeypatch.setattr(_torch, "_cupy_view", lambda t: views.append(1) or view(t))
    return views


# ---- CPU: the NumPy engines --------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    ("shape", "axis"),
    [((1000,), 0), ((1000,), None), ((7, 300), 0), ((7, 300), -1), ((3, 4, 50), 1), ((2, 3), None)],
)
@pytest.mark.parametrize(("exclusive", "reverse"), [(False, False), (True, False), (True, True)])
def test_logcumsumexp_cpu_equals_numpy(dtype, shape, axis, exclusive, reverse, engines_used):
    a = _data(np.random.default_rng(0), shape, dtype)
    t = torch.from_numpy(a.copy())
    kw = {"axis": axis, "exclusive": exclusive, "reverse": reverse}
    out = xpops.logcumsumexp(t, **kw)
    _same(out, xpops.logcumsumexp(a, **kw))
    assert engines_used == ["numpy"]
    assert np.array_equal(t.numpy(), a, equal_nan=True)  # input unmodified


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize(
    ("xs", "batch", "m"),
    [
        ((5, 6, 2), (5,), 6),  # one batch shape: the fast path
        ((3, 6, 2), (), 6),  # one factor for three right-hand sides
        ((6,), (), 6),  # a vector
        ((2, 40, 3), (2,), 40),  # larger M: the BLAS path
    ],
)
def test_cholesky_solve_cpu_equals_numpy(dtype, upper, xs, batch, m, engines_used):
    rng = np.random.default_rng(1)
    y = _factor(rng, batch, m, dtype)
    if upper:
        y = np.conj(np.swapaxes(y, -1, -2)).copy()
    x = _data(rng, xs, dtype, special=False)
    tx, ty = torch.from_numpy(x.copy()), torch.from_numpy(y.copy())
    out = xpops.linalg.cholesky_solve(tx, ty, upper=upper)
    _same(out, xpops.linalg.cholesky_solve(x, y, upper=upper))
    assert engines_used == ["numpy"]
    assert np.array_equal(tx.numpy(), x)
    assert np.array_equal(ty.numpy(), y, equal_nan=True)


def test_non_contiguous_tensors(engines_used):
    rng = np.random.default_rng(2)
    t = torch.from_numpy(_data(rng, (40, 30), "float64"))
    for view in (t.T, t[:, ::3], t[::2].T, t[5].expand(4, 30)):
        for axis in (0, 1):
            _same(xpops.logcumsumexp(view, axis=axis), xpops.logcumsumexp(view.numpy(), axis=axis))
    lower = torch.from_numpy(_factor(rng, (3,), 5, "float64"))
    x = torch.from_numpy(rng.standard_normal((3, 2, 5)))
    cases = [
        (x.mT, lower, False),  # strided right-hand sides
        (x.mT, lower.mT, True),  # the upper factor as a transposed view
        (x.mT, lower[:1].expand(3, 5, 5), False),  # a broadcast factor (stride 0), fast path
        (x[:, :1].mT, lower[0], False),  # one factor, strided right-hand sides
    ]
    for rhs, factor, upper in cases:
        out = xpops.linalg.cholesky_solve(rhs, factor, upper=upper)
        _same(out, xpops.linalg.cholesky_solve(rhs.numpy(), factor.numpy(), upper=upper))
    assert set(engines_used) == {"numpy"}


@pytest.mark.parametrize("shape", [(0,), (3, 0), (0, 4)])
def test_zero_size_logcumsumexp(shape):
    for axis in (0, -1, None):
        out = xpops.logcumsumexp(torch.zeros(shape, dtype=torch.float64), axis=axis)
        _same(out, xpops.logcumsumexp(np.zeros(shape), axis=axis))


# ---- CPU: torch.cholesky_solve for small systems ---------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize(
    ("xs", "batch", "m"),
    [
        ((5, 6, 2), (5,), 6),  # one batch shape: the fast path
        ((6,), (), 6),  # a vector
        ((2, 1, 32, 2), (3,), 32),  # broadcast both ways, the largest M for PyTorch
        ((2, 33, 3), (2,), 33),  # the smallest M for the NumPy engine
    ],
)
def test_cholesky_solve_cpu_small_systems_by_torch(
    dtype, upper, xs, batch, m, engines_used, monkeypatch
):
    """Systems of M <= 32: torch.cholesky_solve, the NumPy engine's result to rounding (the
    unused triangle's NaN never read), C-contiguous; larger ones: the NumPy engine, its bits."""
    monkeypatch.setattr(linalg_torch, "_TORCH_MAX_M", 32)
    rng = np.random.default_rng(1)
    y = _factor(rng, batch, m, dtype)
    if upper:
        y = np.conj(np.swapaxes(y, -1, -2)).copy()
    x = _data(rng, xs, dtype, special=False)
    tx, ty = torch.from_numpy(x.copy()), torch.from_numpy(y.copy())
    out = xpops.linalg.cholesky_solve(tx, ty, upper=upper)
    want = xpops.linalg.cholesky_solve(x, y, upper=upper)
    if m > 32:
        _same(out, want)
        assert engines_used == ["numpy"]
        return
    assert engines_used == []
    assert type(out) is torch.Tensor
    assert out.is_contiguous()
    got = out.numpy()
    assert got.dtype == want.dtype
    assert got.shape == want.shape
    tol = 1e-4 if dtype in ("float32", "complex64") else 1e-12
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    assert np.array_equal(tx.numpy(), x)
    assert np.array_equal(ty.numpy(), y, equal_nan=True)


def test_cholesky_solve_cpu_zero_pivot_by_torch(engines_used, monkeypatch):
    """A zero pivot gives inf or NaN in its own system, no error, the others untouched; the
    gradients (the backward's own solve by torch.cholesky_solve too, the factor's cotangent
    on the NumPy engine) match PyTorch's."""
    monkeypatch.setattr(linalg_torch, "_TORCH_MAX_M", 32)
    rng = np.random.default_rng(3)
    y = _factor(rng, (3,), 5, "float64")
    y[1, 2, 2] = 0.0
    x = _data(rng, (3, 5, 1), "float64", special=False)
    out = xpops.linalg.cholesky_solve(torch.from_numpy(x), torch.from_numpy(y)).numpy()
    assert engines_used == []
    assert not np.isfinite(out[1]).all()
    want = xpops.linalg.cholesky_solve(x[[0, 2]], y[[0, 2]])
    np.testing.assert_allclose(out[[0, 2]], want, rtol=1e-12, atol=1e-12)
    lower = torch.from_numpy(np.nan_to_num(np.tril(y[[0, 2]])))
    ours = [torch.from_numpy(x[[0, 2]]).requires_grad_(), lower.clone().requires_grad_()]
    theirs = [torch.from_numpy(x[[0, 2]]).requires_grad_(), lower.clone().requires_grad_()]
    xpops.linalg.cholesky_solve(*ours).sum().backward()
    torch.cholesky_solve(*theirs).sum().backward()
    torch.testing.assert_close(ours[0].grad, theirs[0].grad, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(ours[1].grad, torch.tril(theirs[1].grad), rtol=1e-10, atol=1e-10)
    assert engines_used == ["numpy"]  # the factor's cotangent, by products on NumPy's side


@pytest.mark.parametrize(("xs", "ys"), [((0, 3, 2), (0, 3, 3)), ((3, 0), (3, 3)), ((0,), (0, 0))])
def test_zero_size_cholesky_solve(xs, ys):
    out = xpops.linalg.cholesky_solve(torch.zeros(xs), torch.ones(ys))
    _same(out, xpops.linalg.cholesky_solve(np.zeros(xs, np.float32), np.ones(ys, np.float32)))


@pytest.mark.parametrize("dtype", ["int64", "int32", "bool", "float16", "bfloat16"])
def test_other_dtypes(dtype):
    """Integer and bool tensors compute in PyTorch's default float (float32), float16 and
    bfloat16 in float32 rounded once at the end: the float32 results, cast."""
    torch_dtype = getattr(torch, dtype)
    t = (torch.arange(24).reshape(4, 6) % 5).to(torch_dtype)
    out = xpops.logcumsumexp(t, axis=1)
    expected = xpops.logcumsumexp(t.to(torch.float32), axis=1)
    out_dtype = torch_dtype if torch_dtype.is_floating_point else torch.float32
    assert out.dtype == out_dtype
    assert torch.equal(out, expected.to(out_dtype))
    factor = torch.eye(6, dtype=torch_dtype) * 2 if dtype != "bool" else torch.eye(6).bool()
    solved = xpops.linalg.cholesky_solve(t.T, factor)
    reference = xpops.linalg.cholesky_solve(t.T.float(), factor.float())
    assert solved.dtype == out_dtype
    assert torch.equal(solved, reference.to(out_dtype))


def test_conjugate_and_negative_views():
    """Tensors whose conjugate or negative bit is set are read as their values."""
    rng = np.random.default_rng(3)
    z = torch.from_numpy(_data(rng, (50,), "complex128", special=False))
    _same(xpops.logcumsumexp(z.conj()), xpops.logcumsumexp(np.conj(z.numpy())))
    negative = z.conj().imag
    assert negative.is_neg()
    _same(xpops.logcumsumexp(negative), xpops.logcumsumexp(-z.numpy().imag))
    lower = torch.from_numpy(_factor(rng, (), 4, "complex128"))
    x = torch.from_numpy(_data(rng, (4, 2), "complex128", special=False))
    out = xpops.linalg.cholesky_solve(x.conj(), lower.conj())
    _same(out, xpops.linalg.cholesky_solve(np.conj(x.numpy()), np.conj(lower.numpy())))


def test_results_own_their_memory():
    t = torch.randn(100, dtype=torch.float64)
    before = t.clone()
    out = xpops.logcumsumexp(t)
    out.fill_(7.0)  # a result is writable and shares nothing with the input
    assert torch.equal(t, before)


def test_flipped_results_are_handed_over_as_copies():
    """PyTorch has no negative strides (its from_dlpack aborts the process on them): a flipped
    view from an engine comes back as a tensor with the same values."""
    flipped = np.arange(12.0).reshape(3, 4)[:, ::-1]
    out = _torch._from_numpy((flipped, np.float64(2.0)))
    _same(out[0], np.ascontiguousarray(flipped))
    _same(out[1], np.asarray(2.0))


def test_requires_grad_goes_through_autograd(engines_used):
    """The autograd binding's forward runs on detached tensors, by the NumPy engine; the
    gradients match PyTorch's own ops'."""
    rng = np.random.default_rng(4)
    a = torch.from_numpy(rng.standard_normal((3, 20))).requires_grad_()
    b = a.detach().clone().requires_grad_()
    weights = torch.from_numpy(rng.standard_normal((3, 20)))
    (xpops.logcumsumexp(a, axis=1) * weights).sum().backward()
    (torch.logcumsumexp(b, dim=1) * weights).sum().backward()
    assert "numpy" in engines_used
    torch.testing.assert_close(a.grad, b.grad, rtol=1e-12, atol=1e-12)

    lower = torch.from_numpy(np.tril(_factor(rng, (2,), 5, "float64"))).nan_to_num(0.0)
    x = torch.from_numpy(rng.standard_normal((2, 5, 3)))
    ours = [x.clone().requires_grad_(), lower.clone().requires_grad_()]
    theirs = [x.clone().requires_grad_(), lower.clone().requires_grad_()]
    xpops.linalg.cholesky_solve(*ours).sum().backward()
    torch.cholesky_solve(*theirs).sum().backward()
    torch.testing.assert_close(ours[0].grad, theirs[0].grad, rtol=1e-10, atol=1e-10)
    # PyTorch's factor gradient covers both triangles; ours is its used (lower) one
    torch.testing.assert_close(ours[1].grad, torch.tril(theirs[1].grad), rtol=1e-10, atol=1e-10)


def test_requires_grad_without_grad_mode(engines_used):
    t = torch.randn(30, dtype=torch.float64, requires_grad=True)
    with torch.no_grad():
        out = xpops.logcumsumexp(t)
    assert out.grad_fn is None
    assert not out.requires_grad
    assert engines_used == ["numpy"]
    _same(out, xpops.logcumsumexp(t.detach().numpy()))


def test_tensor_subclasses_take_the_generic_engine(engines_used):
    class Tagged(torch.Tensor):
        pass

    a = np.random.default_rng(5).standard_normal(64)
    out = xpops.logcumsumexp(torch.from_numpy(a).as_subclass(Tagged))
    assert engines_used == []
    np.testing.assert_allclose(out.detach().numpy(), xpops.logcumsumexp(a), rtol=1e-13)


def test_engine_for():
    t = torch.ones(3)
    assert _torch.engine_for([t, 2, None, t + 1]) == ("numpy", -1)
    assert _torch.engine_for([1, "a"]) == ("generic", -1)  # no tensor
    assert _torch.engine_for([t, torch.ones(3, dtype=torch.int32)]) == ("generic", -1)
    assert _torch.engine_for([torch.ones(0)]) == ("generic", -1)
    assert _torch.engine_for([torch.ones(3, device="meta")]) == ("generic", -1)
    assert _torch.engine_for([t, torch.ones(3, device="meta")]) == ("generic", -1)
    assert _torch.engine_for([torch.ones(3, dtype=torch.float16)]) == ("generic", -1)
    assert _torch.engine_for([torch.nn.Parameter(torch.ones(3))]) == ("numpy", -1)
    kinds = []
    torch.func.vmap(lambda row: kinds.append(_torch.engine_for([row])) or row)(torch.ones(2, 3))
    assert kinds == [("generic", -1)]  # functorch's batched tensors


def test_torch_fast_arrays():
    t = torch.ones(2, 3)
    assert torch_fast_arrays(t, chars="f")
    assert torch_fast_arrays(t, t.T, chars="fd", min_ndim=2)
    assert not torch_fast_arrays(chars="f")
    assert not torch_fast_arrays(t, chars="d")  # dtype not allowed
    assert not torch_fast_arrays(t, t.double(), chars="fd")  # two dtypes
    assert not torch_fast_arrays(t, chars="f", min_ndim=3)
    assert not torch_fast_arrays(torch.ones(2, 0), chars="f")
    assert not torch_fast_arrays(t.requires_grad_(), chars="f")
    with torch.no_grad():  # nothing recorded: a tensor that requires grad is like any other
        assert torch_fast_arrays(t, chars="f")
    assert not torch_fast_arrays(torch.ones(3, device="meta"), chars="f")
    assert not torch_fast_arrays(np.ones(3, np.float32), chars="f")
    assert not torch_fast_arrays(
        t.detach().as_subclass(type("Sub", (torch.Tensor,), {})), chars="f"
    )


# ---- CUDA plumbing, checked on the CPU with a stand-in CuPy -----------------------------------


class _FakeArray(np.ndarray):
    """A stand-in CuPy array: a NumPy array whose DLPack export takes a stream, made on the
    memory of a `_FakeMemory` as CuPy's ``ndarray(shape, dtype, memptr, strides)``."""

    exported_on: ClassVar[list] = []  # the streams the result's capsules were asked for

    def __new__(cls, shape, dtype, memptr, strides=None):
        if strides is None:  # C-contiguous
            strides = tuple(
                np.empty(0, dtype).itemsize * math.prod(shape[i + 1 :]) for i in range(len(shape))
            )
        memory = memptr.mem
        buffer = (ctypes.c_char * memory.size).from_address(memory.ptr + memptr.offset)
        flat = np.frombuffer(buffer, dtype=np.uint8).view(dtype)
        out = np.lib.stride_tricks.as_strided(flat, shape, strides).view(cls)
        out.memory = memory  # holds the memory's owner, as CuPy's arrays do
        return out

    def __dlpack__(self, *, stream=None, **kwargs):
        _FakeArray.exported_on.append(stream)
        return np.asarray(self).__dlpack__()


@pytest.fixture
def fake_cupy(monkeypatch):
    """A stand-in CuPy module that records the current device and stream."""
    state = {"device": None, "stream": None, "log": []}

    class Device:
        def __init__(self, index):
            self.index = index

        def __enter__(self):
            state["log"].append(("device", self.index))
            state["device"] = self.index

        def __exit__(self, *exc):
            state["device"] = None

    class Stream:
        null: "Stream"

        def __init__(self, ptr):
            self.ptr = ptr

        def __enter__(self):
            assert state["device"] is not None  # entered on the tensors' device
            state["stream"] = self.ptr

        def __exit__(self, *exc):
            state["stream"] = None

        @classmethod
        def from_external(cls, obj):
            version, ptr = obj.__cuda_stream__()
            assert version == 0
            return cls(ptr)

    Stream.null = Stream(0)

    def from_dlpack(obj):  # as CuPy's: the capsule asked for on its current stream
        assert state["stream"] is not None
        assert obj.__dlpack_device__()[0] == 2  # kDLCUDA
        capsule = obj.__dlpack__(stream=state["stream"] or 1)
        return torch.utils.dlpack.from_dlpack(capsule).numpy().view(_FakeArray)

    class UnownedMemory:
        def __init__(self, ptr, size, owner, device_id):
            assert device_id == owner.device.index  # told the tensor's device: no look-up
            self.ptr, self.size, self.owner = ptr, size, owner

    def memory_pointer(memory, offset):
        return types.SimpleNamespace(mem=memory, offset=offset)

    cuda = types.SimpleNamespace(
        Device=Device, Stream=Stream, UnownedMemory=UnownedMemory, MemoryPointer=memory_pointer
    )
    fake = types.SimpleNamespace(cuda=cuda, from_dlpack=from_dlpack, ndarray=_FakeArray)
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(_torch, "_STREAMS", {})
    return state


@pytest.mark.parametrize("ptr", [0, 1234])
def test_cupy_plumbing(fake_cupy, monkeypatch, ptr):
    monkeypatch.setattr(_torch, "_raw_stream_getter", lambda: lambda index: ptr)
    seen = []

    def engine(x, k, *, y):
        seen.append((fake_cupy["device"], fake_cupy["stream"]))
        assert type(x) is _FakeArray
        assert type(y) is _FakeArray
        return (x * k + y).view(_FakeArray), 7

    x = torch.arange(6.0).reshape(2, 3)
    y = torch.ones(3, requires_grad=True)  # detached for the export
    monkeypatch.setattr(_FakeArray, "exported_on", [])
    for first in (x.T, x.T.contiguous()):  # strided, then contiguous
        out, seven = _torch._on_cupy(engine, 3, (first, 2), {"y": y[None].expand(3, 3)[:, :2]})
        assert type(out) is torch.Tensor
        assert seven == 7
        assert torch.equal(out, x.T * 2 + 1)
    assert seen == [(3, ptr), (3, ptr)]  # the tensors' device, PyTorch's stream
    assert _FakeArray.exported_on == [ptr or 1] * 2  # results exported on it (1: legacy)
    assert fake_cupy["device"] is None  # both restored
    assert fake_cupy["stream"] is None
    assert len(_torch._STREAMS) == (ptr != 0)  # a stream object made once, the null one never


@pytest.fixture
def handed_over(fake_cupy, monkeypatch):
    """The autograd binding's hand-over to CuPy (`xpops._autodiff._torch`), run on CPU tensors:
    the binding takes them for CUDA tensors that CuPy sees, and the stand-in CuPy's arrays are
    NumPy views (the rule runs on NumPy's engines). Returns the devices of the hand-overs, in
    order."""
    from xpops._autodiff import _torch as autograd

    engine_for = _torch.engine_for

    def as_cuda(values):
        kind, index = engine_for(values)
        return ("cupy", 3) if kind == "numpy" else (kind, index)

    monkeypatch.setattr(autograd, "engine_for", as_cuda)
    monkeypatch.setattr(mvn_torch, "engine_for", as_cuda)  # the distributions' torch engines
    sys.modules["cupy"].random = types.SimpleNamespace(Generator=type("Generator", (), {}))
    monkeypatch.setattr(_torch, "_raw_stream_getter", lambda: lambda index: 0)
    monkeypatch.setattr(_torch, "_cupy_view", _torch._numpy_view)
    monkeypatch.setattr(_torch, "_from_cupy", lambda out, stream: _torch._from_numpy(out))
    runs = []
    run_on_cupy = _torch._run_on_cupy

    def spy(index, run):
        def on_device(view):
            runs.append(fake_cupy["device"])
            return run(view)

        return run_on_cupy(index, on_device)

    monkeypatch.setattr(_torch, "_run_on_cupy", spy)
    return runs


def _leaves(*arrays):
    return [torch.from_numpy(a).requires_grad_() for a in arrays]


def test_autograd_hands_a_call_over_once(handed_over):
    """Forward and backward each run the whole rule on the views: one hand-over each, the
    gradients those of PyTorch's own ops (cholesky_solve's factor on its used triangle, where
    PyTorch differentiates the whole matrix)."""
    rng = np.random.default_rng(11)
    x, w = rng.standard_normal((2, 3, 5, 2)), rng.standard_normal((2, 3, 5, 2))
    lower = np.tril(rng.standard_normal((3, 5, 5))) / 3 + 2 * np.eye(5)
    for upper in (False, True):
        y = np.swapaxes(lower, -1, -2).copy() if upper else lower
        ours, theirs = _leaves(x, y), _leaves(x, y)
        (xpops.linalg.cholesky_solve(*ours, upper=upper) * torch.from_numpy(w)).sum().backward()
        (torch.cholesky_solve(*theirs, upper=upper) * torch.from_numpy(w)).sum().backward()
        torch.testing.assert_close(ours[0].grad, theirs[0].grad, rtol=1e-12, atol=1e-12)
        used = torch.triu if upper else torch.tril
        torch.testing.assert_close(ours[1].grad, used(theirs[1].grad), rtol=1e-12, atol=1e-12)
    assert handed_over == [3, 3, 3, 3]  # forward and backward, each on the tensors' device

    (a,) = _leaves(rng.standard_normal((4, 30)).astype(np.float32))
    b = a.detach().double().requires_grad_()
    out = xpops.logcumsumexp(a, axis=1, dtype=torch.float64)  # a PyTorch dtype: NumPy's
    assert out.dtype == torch.float64
    (out * torch.from_numpy(w.reshape(-1)[:30])).sum().backward()
    (torch.logcumsumexp(b, dim=1) * torch.from_numpy(w.reshape(-1)[:30])).sum().backward()
    assert a.grad.dtype == torch.float32
    torch.testing.assert_close(a.grad.double(), b.grad, rtol=1e-6, atol=1e-6)
    assert len(handed_over) == 6


def test_autograd_hands_distributions_over(handed_over):
    """A distribution in the rule's keywords runs on the views of its arrays: log_prob,
    kl_divergence, prob and entropy against torch.distributions."""
    mvn = xpops.distributions.MultivariateNormal
    tmvn = torch.distributions.MultivariateNormal
    rng = np.random.default_rng(12)
    g = rng.standard_normal((5, 4))
    cov = g @ g.T / 4 + np.eye(5)
    loc, value = rng.standard_normal(5), rng.standard_normal((7, 5))
    ours, theirs = _leaves(loc, cov, value), _leaves(loc, cov, value)
    mvn(ours[0], covariance_matrix=ours[1]).log_prob(ours[2]).sum().backward()
    tmvn(theirs[0], covariance_matrix=theirs[1]).log_prob(theirs[2]).sum().backward()
    for o, t in zip(ours, theirs, strict=True):
        torch.testing.assert_close(o.grad, t.grad, rtol=1e-10, atol=1e-10)
    assert handed_over == [3, 3, 3]  # the constructor's checks, the forward, the backward

    p, q = _leaves(loc, np.linalg.cholesky(cov)), _leaves(value[0], 2 * np.eye(5))
    tp, tq = _leaves(loc, np.linalg.cholesky(cov)), _leaves(value[0], 2 * np.eye(5))
    kl = xpops.distributions.kl_divergence(mvn(p[0], scale_tril=p[1]), mvn(q[0], scale_tril=q[1]))
    kl.backward()
    torch.distributions.kl_divergence(
        tmvn(tp[0], scale_tril=tp[1]), tmvn(tq[0], scale_tril=tq[1])
    ).backward()
    for o, t in zip(p + q, tp + tq, strict=True):
        expected = torch.tril(t.grad) if t.ndim == 2 else t.grad  # the used triangle
        torch.testing.assert_close(o.grad, expected, rtol=1e-10, atol=1e-10)
    assert len(handed_over) == 7  # two constructors' checks

    # prob and entropy, of a batch of precision matrices
    prec = np.stack([np.linalg.inv(cov), np.eye(5)])
    ours, theirs = _leaves(loc, prec, value[:, None]), _leaves(loc, prec, value[:, None])
    d = mvn(ours[0], precision_matrix=ours[1])
    t = tmvn(theirs[0], precision_matrix=theirs[1])
    (d.prob(ours[2]).sum() + d.entropy().sum()).backward()
    (t.log_prob(theirs[2]).exp().sum() + t.entropy().sum()).backward()
    for o, t in zip(ours, theirs, strict=True):
        torch.testing.assert_close(o.grad, t.grad, rtol=1e-9, atol=1e-10)
    assert len(handed_over) == 12


def test_distribution_methods_hand_over(handed_over):
    """Unrecorded, a distribution of tensors that CuPy takes is checked and factored on their
    views, and log_prob and prob run there (one hand-over each); results and errors are those
    of the tensors' own path. Recorded, only the checks are handed over: PyTorch's operations
    make the factor, so that the properties computed from it carry gradients."""
    mvn = xpops.distributions.MultivariateNormal
    tmvn = torch.distributions.MultivariateNormal
    rng = np.random.default_rng(15)
    g = rng.standard_normal((2, 4, 4))
    cov = g @ np.swapaxes(g, -1, -2) / 4 + np.eye(4)
    loc, value = rng.standard_normal(4), rng.standard_normal((6, 2, 4))
    tloc, tcov, tvalue = (torch.from_numpy(a) for a in (loc, cov, value))
    for name, matrix in [
        ("covariance_matrix", tcov),
        ("precision_matrix", torch.linalg.inv(tcov)),
        ("scale_tril", torch.linalg.cholesky(tcov)),
    ]:
        handed_over.clear()
        d, t = mvn(tloc, **{name: matrix}), tmvn(tloc, **{name: matrix})
        assert handed_over == [3]  # the checks and the factor
        assert type(d.scale_tril) is torch.Tensor
        torch.testing.assert_close(d.scale_tril, t.scale_tril, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(d.log_prob(tvalue), t.log_prob(tvalue), rtol=1e-12, atol=1e-12)
        prob = t.log_prob(tvalue).exp()
        torch.testing.assert_close(d.prob(value.tolist()), prob, rtol=1e-12, atol=0)
        assert handed_over == [3, 3, 3]
    # the CuPy mirror is made once and kept while the distribution's arrays are the same;
    # neither a pickle nor a Dask chunk's part of the batch takes it
    mirror = vars(d)["_mirror_of"][2]
    d.log_prob(tvalue)
    assert vars(d)["_mirror_of"][2] is mirror
    assert "_mirror_of" not in vars(pickle.loads(pickle.dumps(d)))
    part = mvn_module._batch_part(d, (slice(1, 2),))
    torch.testing.assert_close(part.log_prob(tvalue[:, 1:]), d.log_prob(tvalue)[:, 1:])
    assert vars(part)["_mirror_of"][2] is not mirror
    bad = tvalue.clone()
    bad[1, 0, 2] = float("nan")
    with pytest.raises(ValueError, match=r"`value` must be finite, got shape \(6, 2, 4\)"):
        d.log_prob(bad)
    with pytest.raises(ValueError, match="`loc` must be finite"):
        mvn(torch.full((4,), float("inf"), dtype=torch.float64), covariance_matrix=tcov)
    with pytest.raises(ValueError, match="`covariance_matrix` must be symmetric"):
        mvn(tloc, covariance_matrix=tcov + torch.triu(torch.ones(4, 4), 1))
    with pytest.raises(ValueError, match="`scale_tril` must have a positive diagonal"):
        mvn(tloc, scale_tril=-torch.eye(4, dtype=torch.float64))
    # an array of another library stays refused; unchecked, PyTorch factors a covariance
    with pytest.raises(TypeError, match="`value` must be an array of the distribution's"):
        d.log_prob(value)
    handed_over.clear()
    with pytest.raises(ValueError, match=r"factorization of `covariance_matrix` .* failed"):
        mvn(tloc, covariance_matrix=-tcov[0], validate_args=False)
    assert handed_over == []

    # recorded: the checks on the views, the factor by PyTorch (a gradient through it)
    handed_over.clear()
    ours, theirs = _leaves(loc, cov[0]), _leaves(loc, cov[0])
    mvn(ours[0], covariance_matrix=ours[1]).scale_tril.sum().backward()
    tmvn(theirs[0], covariance_matrix=theirs[1]).scale_tril.sum().backward()
    torch.testing.assert_close(ours[1].grad, theirs[1].grad, rtol=1e-12, atol=1e-12)
    assert handed_over == [3]
    with pytest.raises(ValueError, match="`covariance_matrix` must be positive definite"):
        mvn(ours[0], covariance_matrix=-ours[1])


def test_autograd_hand_over_keeps_the_in_place_check_and_the_generators(handed_over):
    rng = np.random.default_rng(13)
    (x0,) = _leaves(rng.standard_normal((4, 3, 1)))
    lower = torch.from_numpy(np.eye(3) * 2)
    x = x0 * 1.0
    out = xpops.linalg.cholesky_solve(x, lower)
    x.mul_(2.0)  # the residual `x` changed after the forward
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()
    # a result that the backward does not read may change in place (log_prob's), as on the
    # other paths
    loc, tril, value = _leaves(np.zeros(3), np.eye(3), rng.standard_normal((4, 3)))
    lp = xpops.distributions.MultivariateNormal(loc, scale_tril=tril).log_prob(value)
    lp.mul_(2.0)
    lp.sum().backward()
    torch.testing.assert_close(value.grad, -2.0 * value.detach())
    # the residuals are PyTorch's saved tensors: its hooks see them
    packed = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: packed.append(t) or t, lambda t: t):
        solved = xpops.linalg.cholesky_solve(x0 * 1.0, lower)
    assert any(t is solved for t in packed)  # the result, a residual of cholesky_solve's rule
    assert len(packed) == 3  # x, the factor, the result
    # draws stay on PyTorch's generators: no hand-over
    loc, tril = _leaves(np.zeros(3), np.eye(3))
    d = xpops.distributions.MultivariateNormal(loc, scale_tril=tril)
    d.rsample((4,), rng=torch.Generator().manual_seed(0)).sum().backward()
    assert torch.equal(loc.grad, torch.full((3,), 4.0, dtype=torch.float64))
    assert handed_over == [3] * 6  # the constructors' checks, not rsample's draws


# ---- CUDA: the CuPy engines (skipped without CUDA and CuPy) ------------------------------------


@pytest.fixture
def cuda(cupy_only):
    """(CuPy, the first CUDA device of PyTorch), or skip."""
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA device")
    return cupy_only, torch.device("cuda", 0)


def _cuda_same(out, ref, device):
    """`out`, a tensor on `device`, has the dtype and shape of the CuPy array `ref`, its special
    values and, within a few rounding errors, its values: the scan kernels' look-back may
    combine a row's tiles in another order from one run to the next."""
    assert type(out) is torch.Tensor
    assert out.device == device
    host, ref = out.cpu().numpy(), ref.get()
    assert host.dtype == ref.dtype
    assert host.shape == ref.shape
    finite = np.isfinite(ref)
    scale = max(1.0, float(np.abs(ref[finite]).max(initial=0.0)))
    tol = 64 * np.finfo(ref.dtype).eps
    np.testing.assert_allclose(host, ref, rtol=tol, atol=tol * scale, equal_nan=True)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    ("shape", "axis"),
    [((1 << 16,), 0), ((1000,), None), ((4096, 64), -1), ((64, 4096), 0), ((9, 8, 300), 1)],
)
@pytest.mark.parametrize(("exclusive", "reverse"), [(False, False), (True, True)])
def test_logcumsumexp_cuda_equals_cupy(cuda, dtype, shape, axis, exclusive, reverse, engines_used):
    cp, device = cuda
    t = torch.from_numpy(_data(np.random.default_rng(6), shape, dtype)).to(device)
    kw = {"axis": axis, "exclusive": exclusive, "reverse": reverse}
    out = xpops.logcumsumexp(t, **kw)
    _cuda_same(out, xpops.logcumsumexp(cp.from_dlpack(t), **kw), device)
    assert engines_used == ["cupy"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize(
    ("xs", "batch", "m"),
    [((1000, 16, 1), (1000,), 16), ((3, 48, 2), (), 48), ((16,), (), 16), ((2, 80, 3), (2,), 80)],
)
def test_cholesky_solve_cuda_equals_cupy(cuda, dtype, upper, xs, batch, m, engines_used):
    cp, device = cuda
    rng = np.random.default_rng(7)
    y = _factor(rng, batch, m, dtype)
    if upper:
        y = np.conj(np.swapaxes(y, -1, -2)).copy()
    tx = torch.from_numpy(_data(rng, xs, dtype, special=False)).to(device)
    ty = torch.from_numpy(y).to(device)
    out = xpops.linalg.cholesky_solve(tx, ty, upper=upper)
    ref = xpops.linalg.cholesky_solve(cp.from_dlpack(tx), cp.from_dlpack(ty), upper=upper)
    _cuda_same(out, ref, device)
    assert engines_used == ["cupy"]


@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_small_solves_by_address(cuda, dtype, cupy_views):
    """Contiguous CUDA tensors of small systems (M <= 64) of one batch go to the lanes kernel
    (M <= 32) or the small kernel by address, no view made; strided ones, lazily conjugated
    ones, and M > 64, through views: results equal the same calls on CuPy arrays either way."""
    cp, device = cuda
    rng = np.random.default_rng(18)
    real = np.dtype(dtype).kind == "f"
    for m, k, strided, column_major, upper, viewed in [
        (16, 1, False, False, False, 0),
        (32, 3, False, False, True, 0),
        (16, 2, True, False, False, 2),
        (40, 1, False, False, False, 0),
        (64, 8, False, False, True, 0),
        (33, 3, True, False, False, 2),
        (70, 1, False, False, False, 2),
        # the layout torch.linalg.cholesky gives its factors: real ones go by address too
        (16, 1, False, True, False, 0 if real else 2),
        (7, 2, False, True, True, 0 if real else 2),
        (48, 5, False, True, False, 0 if real else 2),
    ]:
        lower = _factor(rng, (50,), m, dtype)
        y = np.conj(np.swapaxes(lower, -1, -2)) if upper else lower
        y = torch.from_numpy(np.ascontiguousarray(y)).to(device)
        if column_major:
            y = y.mT.contiguous().mT
        x = torch.from_numpy(_data(rng, (50, m, k), dtype, special=False)).to(device).contiguous()
        if strided:
            x = x.mT.contiguous().mT
        cupy_views.clear()
        out = xpops.linalg.cholesky_solve(x, y, upper=upper)
        assert len(cupy_views) == viewed
        ref = xpops.linalg.cholesky_solve(cp.from_dlpack(x), cp.from_dlpack(y), upper=upper)
        _cuda_same(out, ref, device)
    if np.dtype(dtype).kind == "c":
        # PyTorch's lazy conjugates share the memory of the unconjugated values: they take
        # the views (which resolve them), and the results are those of the conjugated arrays
        y = torch.from_numpy(_factor(rng, (50,), 16, dtype)).to(device)
        x = torch.from_numpy(_data(rng, (50, 16, 2), dtype, special=False)).to(device)
        for a, b in [(x, y.conj()), (x.conj(), y), (x.conj(), y.conj())]:
            assert a.is_contiguous()
            assert b.is_contiguous()
            cupy_views.clear()
            out = xpops.linalg.cholesky_solve(a, b)
            assert len(cupy_views) == 2
            ref = xpops.linalg.cholesky_solve(
                cp.from_dlpack(a.resolve_conj()), cp.from_dlpack(b.resolve_conj())
            )
            _cuda_same(out, ref, device)


def test_cuda_views_share_the_tensors_memory(cuda):
    """`_cupy_view` of tensors of every dtype NumPy has (and bfloat16, handed over by DLPack):
    contiguous, transposed, strided, offset and broadcast views; same values, same memory
    (a write through the view shows in the tensor), and the view keeps the memory alive."""
    _, device = cuda
    base = torch.arange(7 * 300, device=device).reshape(7, 300) % 11 - 5
    for name in ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32"):
        for t in (base.to(getattr(torch, name)), base.to(getattr(torch, name))[2:, 3::7].T):
            view = _torch._cupy_view(t)
            assert view.dtype == np.dtype(name)
            np.testing.assert_array_equal(view.get(), t.cpu().numpy())
    for name in ("float64", "complex64", "complex128"):
        t = torch.randn(5, 40, dtype=getattr(torch, name), device=device)
        for v in (t, t.mT, t[1:, 5:30:4], t[3].expand(6, 40), t[2, 7]):
            view = _torch._cupy_view(v)
            assert view.shape == tuple(v.shape)
            np.testing.assert_array_equal(view.get(), v.cpu().numpy())
        view = _torch._cupy_view(t[1:, 5:30:4])
        view[...] = 2.5
        assert bool((t[1:, 5:30:4] == 2.5).all())
        assert bool((t[0] != 2.5).all())
    kept = _torch._cupy_view(torch.full((1 << 20,), 3.0, device=device))
    junk = torch.full((1 << 20,), -1.0, device=device)  # would reuse freed memory
    assert bool((kept == 3.0).all())
    del junk
    half = torch.randn(4, 9, device=device).to(torch.bfloat16)
    try:
        view = _torch._cupy_view(half)
    except (TypeError, ValueError, BufferError):
        pass  # a CuPy without bfloat16 refuses it, as DLPack's hand-over always did
    else:
        assert view.shape == (4, 9)


def test_cuda_non_contiguous_and_other_tensors(cuda, engines_used):
    cp, device = cuda
    t = torch.randn(300, 200, dtype=torch.float64, device=device)
    for view in (t.T, t[:, ::3], t[7].expand(5, 200)):
        for axis in (0, 1):
            ref = xpops.logcumsumexp(cp.from_dlpack(view), axis=axis)
            _cuda_same(xpops.logcumsumexp(view, axis=axis), ref, device)
    lower = torch.eye(8, dtype=torch.float64, device=device) * 2
    x = torch.randn(4, 3, 8, dtype=torch.float64, device=device)
    ref = xpops.linalg.cholesky_solve(cp.from_dlpack(x.mT), cp.from_dlpack(lower.expand(4, 8, 8)))
    _cuda_same(xpops.linalg.cholesky_solve(x.mT, lower.expand(4, 8, 8)), ref, device)
    assert set(engines_used) == {"cupy"}
    # what the CuPy engines do not take runs generically, on the device
    for other in (torch.zeros(0, 3, device=device), torch.arange(5, device=device)):
        out = xpops.logcumsumexp(other, axis=0)
        assert out.device == device
        assert out.dtype == torch.float32
    half = torch.randn(64, device=device).half()
    assert xpops.logcumsumexp(half).dtype == torch.float16


def test_cuda_gradients(cuda):
    _, device = cuda
    a = torch.randn(3, 50, dtype=torch.float64, device=device, requires_grad=True)
    b = a.detach().clone().requires_grad_()
    xpops.logcumsumexp(a, axis=1).sum().backward()
    torch.logcumsumexp(b, dim=1).sum().backward()
    torch.testing.assert_close(a.grad, b.grad, rtol=1e-12, atol=1e-12)
    assert a.grad.device == device


@pytest.fixture
def cupy_hand_overs(monkeypatch):
    """The devices of the runs on CuPy (views, or a launch on the tensors' addresses), in order."""
    runs = []
    for name in ("_run_on_cupy", "_on_stream"):
        original = getattr(_torch, name)

        def spy(index, run, _original=original):
            runs.append(index)
            return _original(index, run)

        monkeypatch.setattr(_torch, name, spy)
    return runs


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("upper", [False, True])
def test_cuda_gradients_run_on_cupy(cuda, dtype, upper, cupy_hand_overs):
    """Each rule on CUDA tensors runs on CuPy, forward and backward, called on a side stream of
    PyTorch's (whose ordering `test_cuda_side_stream` checks); its gradients are those of
    PyTorch's own ops in float64."""
    _, device = cuda
    rng = np.random.default_rng(14)
    tol = {"float32": 2e-4, "float64": 1e-10}[dtype]
    stream = torch.cuda.Stream(device)

    def leaves(*arrays):
        ours = [torch.tensor(a, dtype=getattr(torch, dtype), device=device) for a in arrays]
        ref = [t.detach().double().requires_grad_() for t in ours]
        return [t.requires_grad_() for t in ours], ref

    def close(ours, ref):
        for o, r in zip(ours, ref, strict=True):
            assert o.grad.dtype == o.dtype
            scale = float(r.grad.abs().max())
            torch.testing.assert_close(o.grad.double(), r.grad, rtol=tol, atol=tol * scale)

    x, w = rng.standard_normal((4, 300, 16, 2)), rng.standard_normal((4, 300, 16, 2))
    lower = np.tril(rng.standard_normal((300, 16, 16))) / 4 + 2 * np.eye(16)
    y = np.swapaxes(lower, -1, -2).copy() if upper else lower
    ours, ref = leaves(x, y)
    tw = torch.from_numpy(w).to(device)
    stream.wait_stream(torch.cuda.current_stream(device))  # the inputs are made
    with torch.cuda.stream(stream):
        (xpops.linalg.cholesky_solve(*ours, upper=upper) * tw).sum().backward()
    (torch.cholesky_solve(*ref, upper=upper) * tw).sum().backward()
    ref[1].grad = torch.triu(ref[1].grad) if upper else torch.tril(ref[1].grad)
    stream.synchronize()
    close(ours, ref)

    # large systems: cuBLAS calls, the forward's first solve kept as a residual
    x, w = rng.standard_normal((3, 100, 4)), rng.standard_normal((3, 100, 4))
    lower = np.tril(rng.standard_normal((3, 100, 100))) / 10 + 2 * np.eye(100)
    y = np.swapaxes(lower, -1, -2).copy() if upper else lower
    ours, ref = leaves(x, y)
    tw = torch.from_numpy(w).to(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        (xpops.linalg.cholesky_solve(*ours, upper=upper) * tw).sum().backward()
    (torch.cholesky_solve(*ref, upper=upper) * tw).sum().backward()
    ref[1].grad = torch.triu(ref[1].grad) if upper else torch.tril(ref[1].grad)
    stream.synchronize()
    close(ours, ref)

    ours, ref = leaves(rng.standard_normal((64, 2000)))
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        xpops.logcumsumexp(ours[0], axis=1, reverse=upper).sum().backward()
    scan = torch.logcumsumexp(ref[0].flip(1) if upper else ref[0], dim=1)
    (scan.flip(1) if upper else scan).sum().backward()
    stream.synchronize()
    close(ours, ref)

    g = rng.standard_normal((16, 16))
    loc, cov, value = (
        rng.standard_normal(16),
        g @ g.T / 16 + np.eye(16),
        rng.standard_normal((5000, 16)),
    )
    ours, ref = leaves(loc, cov, value)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        xpops.distributions.MultivariateNormal(ours[0], covariance_matrix=ours[1]).log_prob(
            ours[2]
        ).sum().backward()
    torch.distributions.MultivariateNormal(ref[0], covariance_matrix=ref[1]).log_prob(
        ref[2]
    ).sum().backward()
    stream.synchronize()
    close(ours, ref)
    # forward and backward of each, and the distribution's checks
    assert cupy_hand_overs == [0] * 9


@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_gradients_by_address(cuda, dtype, cupy_views, cupy_hand_overs):
    """cholesky_solve's rule on contiguous CUDA tensors of small systems of one batch runs on
    the tensors (`linalg._torch.rule_by_address`): forward and backward each launch their
    lanes kernel by address, no view made, on a side stream of PyTorch's (whose work waits
    behind a sleep: a kernel on another stream would read the operands before they are
    written); strided, lazily conjugated or negated, or broadcast operands take the views.
    Gradients those of PyTorch's own cholesky_solve in double precision (on factors without
    the NaN that ours hold in the unused triangle), the factor's on the used triangle and
    exact zeros on the other."""
    _, device = cuda
    rng = np.random.default_rng(19)
    complex_ = np.dtype(dtype).kind == "c"
    wide = torch.complex128 if complex_ else torch.float64
    tol = 1e-10 if dtype in ("float64", "complex128") else 3e-4
    stream = torch.cuda.Stream(device)
    m = 8 if dtype == "complex128" else 16  # the backward kernel's rows: <= 128 bytes
    cases = [  # (M, K, upper, x's batch, layout, by address)
        (m, 1, False, (300,), "contiguous", True),
        (5, 3, True, (2, 7), "contiguous", True),
        (m, 2, False, (300,), "cotangent strided", True),
        (m, 2, True, (300,), "strided", False),
        (5, 2, False, (4, 300), "broadcast", False),
        # the layout torch.linalg.cholesky gives its factors: real ones go by address too
        (m, 1, False, (300,), "factor column-major", not complex_),
        (7, 2, True, (3, 5), "factor column-major", not complex_),
    ]
    # a lazy view of the factor's leaf, whose memory holds conj(y) or -y
    lazy = (np.conj, torch.conj) if complex_ else (np.negative, torch._neg_view)
    cases.append((5, 2, True, (300,), "lazy", False))
    for m, k, upper, batch, layout, by_address in cases:
        y_batch = batch[1:] if layout == "broadcast" else batch
        lower = _factor(rng, y_batch, m, dtype)  # NaN in the unused triangle
        clean = np.where(np.isnan(lower), 0, lower)
        y, y_clean = (np.conj(np.swapaxes(a, -1, -2)) if upper else a for a in (lower, clean))
        x = _data(rng, (*batch, m, k), dtype, special=False)
        w = _data(rng, (*batch, m, k), dtype, special=False)
        tx = torch.from_numpy(x).to(device)
        if layout == "strided":
            tx = tx.mT.contiguous().mT
        stored = lazy[0](y) if layout == "lazy" else y
        ty = torch.from_numpy(np.ascontiguousarray(stored)).to(device)
        if layout == "factor column-major":
            ty = ty.mT.contiguous().mT
        ours = [tx.requires_grad_(), ty.requires_grad_()]
        ref = [torch.from_numpy(a.copy()).to(device, wide).requires_grad_() for a in (x, y_clean)]
        tw = torch.from_numpy(w).to(device)
        cupy_views.clear()
        cupy_hand_overs.clear()
        stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(stream):
            torch.cuda._sleep(20_000_000)
            twice = tx * 2  # written on the side stream after the sleep
            factor = lazy[1](ty) if layout == "lazy" else ty
            out = xpops.linalg.cholesky_solve(twice, factor, upper=upper)
            loss = out.sum() if layout == "cotangent strided" else (out * tw).sum()
            (loss.real if complex_ else loss).backward()
        theirs = torch.cholesky_solve(ref[0] * 2, ref[1], upper=upper)
        loss = theirs.sum() if layout == "cotangent strided" else (theirs * tw.to(wide)).sum()
        (loss.real if complex_ else loss).backward()
        stream.synchronize()
        assert (not cupy_views) == by_address, (m, k, upper, layout)
        assert len(cupy_hand_overs) == 2  # forward and backward: a launch each, or the views
        dy = ours[1].grad  # of the leaf: of y through the lazy view's own rule
        if layout == "lazy":
            dy = dy.conj() if complex_ else -dy
        used = np.triu(np.ones((m, m), bool)) if upper else np.tril(np.ones((m, m), bool))
        used = torch.from_numpy(used).to(device)
        want_dy = torch.where(used, ref[1].grad, 0)
        for got, want, primal in ((ours[0].grad, ref[0].grad, tx), (dy, want_dy, ty)):
            assert got.dtype == primal.dtype
            assert got.shape == primal.shape
            scale = float(want.abs().max())
            torch.testing.assert_close(got.to(wide), want, rtol=tol, atol=tol * scale)
        assert (dy[..., ~used] == 0).all()


def test_cuda_cholesky_pullback_by_address(cuda, cupy_views):
    """`xpops.vjp` of cholesky_solve on CUDA tensors that autograd does not record: one batch
    runs forward and pull-back by address (no view), right-hand sides broadcast against the
    factors' batch take the views and the two steps, whose cotangent of x is summed back to
    x's shape. Cotangents those of PyTorch's own cholesky_solve in double precision."""
    _, device = cuda
    rng = np.random.default_rng(21)
    for x_batch, y_batch in [((300,), (300,)), ((300,), (4, 300)), ((4, 300), (300,))]:
        lower = _factor(rng, y_batch, 16, "float32")
        clean = np.where(np.isnan(lower), 0, lower)
        x = _data(rng, (*x_batch, 16, 2), "float32", special=False)
        tx, ty = (torch.from_numpy(a).to(device) for a in (x, lower))
        cupy_views.clear()
        out, pullback = xpops.vjp(xpops.linalg.cholesky_solve, tx, ty)
        tw = torch.from_numpy(_data(rng, tuple(out.shape), "float32", special=False)).to(device)
        dx, dy = pullback(tw)
        assert (not cupy_views) == (x_batch == y_batch)
        ref = [torch.from_numpy(a).to(device, torch.float64).requires_grad_() for a in (x, clean)]
        (torch.cholesky_solve(*ref) * tw.double()).sum().backward()
        for got, want in ((dx, ref[0].grad), (dy, torch.tril(ref[1].grad))):
            assert got.dtype == torch.float32
            assert got.shape == want.shape
            scale = float(want.abs().max())
            torch.testing.assert_close(got.double(), want, rtol=3e-4, atol=3e-4 * scale)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_cuda_distribution_runs_on_cupy(cuda, dtype, cupy_hand_overs):
    """A distribution of CUDA tensors is checked and factored on CuPy, and its log_prob and
    prob run there (the fused kernels for D <= 32, the generic code on CuPy arrays above):
    results those of the same calls on CuPy arrays, errors theirs."""
    cp, device = cuda
    mvn = xpops.distributions.MultivariateNormal
    rng = np.random.default_rng(16)
    for d, name in [(16, "scale_tril"), (16, "covariance_matrix"), (40, "scale_tril")]:
        g = rng.standard_normal((d, d))
        cov = g @ g.T / d + np.eye(d)
        matrix = np.linalg.cholesky(cov) if name == "scale_tril" else cov
        arrays = (rng.standard_normal(d), matrix, rng.standard_normal((3000, d)))
        kind = getattr(torch, dtype)
        loc, m, value = (torch.tensor(a, dtype=kind, device=device) for a in arrays)
        cupy_hand_overs.clear()
        ours = mvn(loc, **{name: m})
        ref = mvn(cp.from_dlpack(loc), **{name: cp.from_dlpack(m)})
        _cuda_same(ours.log_prob(value), ref.log_prob(cp.from_dlpack(value)), device)
        _cuda_same(ours.prob(value[:10]), ref.prob(cp.from_dlpack(value[:10])), device)
        _cuda_same(ours.scale_tril, ref.scale_tril, device)
        assert cupy_hand_overs == [0, 0, 0]
        if d == 16 and name == "scale_tril":  # the fused kernels' checks
            bad = value.clone()
            bad[5, 3] = float("nan")
            with pytest.raises(ValueError, match=r"`value` must be finite, got shape \(3000, 16\)"):
                ours.log_prob(bad)
            with pytest.raises(ValueError, match="`scale_tril` must be lower triangular"):
                mvn(loc, scale_tril=m + torch.triu(torch.ones_like(m), 1))
            with pytest.raises(TypeError, match="`value` must be an array of the distribution's"):
                ours.log_prob(cp.from_dlpack(value))
    # unchecked, a covariance that is not positive definite still fails to factor (PyTorch's
    # factorization; CuPy's would give NaN)
    with pytest.raises(ValueError, match=r"factorization of `covariance_matrix` .* failed"):
        mvn(loc, covariance_matrix=-m @ m.T, validate_args=False)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_cuda_log_prob_gradients_on_tensors(cuda, dtype, cupy_views, cupy_hand_overs):
    """log_prob's and prob's rules for one distribution of CUDA tensors at contiguous points
    run on the tensors (`distributions._torch.log_prob_on_tensors`): the backward's kernels
    read them by address, no view made, on a side stream of PyTorch's. A strided value, a
    batched distribution and D > 32 take the views. Gradients with respect to the value, the
    mean and the matrix (each parameter) are those of torch.distributions in float64."""
    _, device = cuda
    mvn = xpops.distributions.MultivariateNormal
    rng = np.random.default_rng(20)
    kind = getattr(torch, dtype)
    tol = 1e-10 if dtype == "float64" else 3e-4
    stream = torch.cuda.Stream(device)
    cases = [  # (D, parameter, distributions, points, layout, by address)
        (16, "scale_tril", (), (4000,), "contiguous", True),
        (5, "covariance_matrix", (), (3, 70), "contiguous", True),
        (32, "precision_matrix", (), (500,), "contiguous", True),
        (16, "scale_tril", (), (4000,), "strided", False),
        (16, "scale_tril", (2,), (300, 2), "contiguous", False),
        (40, "scale_tril", (), (200,), "contiguous", False),
    ]
    for d, name, batch, points, layout, by_address in cases:
        for method in ("log_prob", "prob"):
            g = rng.standard_normal((*batch, d, d))
            cov = g @ np.swapaxes(g, -1, -2) / d + np.eye(d)
            matrix = {
                "scale_tril": np.linalg.cholesky(cov),
                "covariance_matrix": cov,
                "precision_matrix": np.linalg.inv(cov),
            }[name]
            value = rng.standard_normal((*points, d)) / (4 if method == "prob" else 1)
            w = rng.standard_normal(points)
            arrays = (rng.standard_normal((*batch, d)), matrix, value)
            ours = [torch.tensor(a, dtype=kind, device=device) for a in arrays]
            if layout == "strided":
                ours[2] = ours[2].T.contiguous().T
            ours = [t.requires_grad_() for t in ours]
            ref = [torch.tensor(a, dtype=torch.float64, device=device) for a in arrays]
            ref = [t.requires_grad_() for t in ref]
            tw = torch.tensor(w, dtype=kind, device=device)
            stream.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(stream):
                out = getattr(mvn(ours[0], **{name: ours[1]}), method)(ours[2])
                cupy_views.clear()
                cupy_hand_overs.clear()
                (out * tw).sum().backward()
            theirs = torch.distributions.MultivariateNormal(ref[0], **{name: ref[1]})
            density = theirs.log_prob(ref[2])
            if method == "prob":
                density = density.exp()
            (density * tw.double()).sum().backward()
            stream.synchronize()
            assert (not cupy_views) == by_address, (d, name, layout, method)
            assert len(cupy_hand_overs) == 1  # the backward's launch, or its views
            for o, r in zip(ours, ref, strict=True):
                assert o.grad.dtype == o.dtype
                assert o.grad.shape == o.shape
                want = torch.tril(r.grad) if name == "scale_tril" and o is ours[1] else r.grad
                scale = float(want.abs().max())
                torch.testing.assert_close(o.grad.double(), want, rtol=tol, atol=tol * scale)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_cuda_log_prob_by_address(cuda, dtype, cupy_views):
    """After its first log_prob, an unbatched distribution of CUDA tensors computes log_prob at
    a C-contiguous tensor of its dtype by the fused kernel on the tensors' memory, no view
    made (`distributions._torch.log_prob_of_tensor`): results, shapes and the error of a
    non-finite value are those of the same calls on CuPy arrays; other values (another
    dtype, a strided tensor) and a batched distribution take the general engine (views)."""
    cp, device = cuda
    mvn = xpops.distributions.MultivariateNormal
    rng = np.random.default_rng(17)
    d = 16
    g = rng.standard_normal((d, d))
    tril = np.linalg.cholesky(g @ g.T / d + np.eye(d))
    kind = getattr(torch, dtype)
    loc, m = (torch.tensor(a, dtype=kind, device=device) for a in (rng.standard_normal(d), tril))

    def check(dist, ref, value, viewed=None):
        cupy_views.clear()
        out = dist.log_prob(value)
        assert viewed is None or len(cupy_views) == viewed
        _cuda_same(out, ref.log_prob(cp.from_dlpack(value.contiguous())), device)

    for validate in (True, False):
        dist = mvn(loc, scale_tril=m, validate_args=validate)
        ref = mvn(cp.from_dlpack(loc), scale_tril=cp.from_dlpack(m), validate_args=validate)
        value = torch.tensor(rng.standard_normal((3000, d)), dtype=kind, device=device)
        check(dist, ref, value)  # the first call makes the mirror (views) and its layout
        check(dist, ref, value, 0)
        check(dist, ref, value[7], 0)  # one point: a 0-d result
        check(dist, ref, value.reshape(30, 100, d), 0)
        check(dist, ref, value.t().contiguous().t(), 1)  # strided
        bad = value.clone()
        bad[5, 3] = float("nan")
        if validate:
            with pytest.raises(ValueError, match=r"`value` must be finite, got shape \(3000, 16\)"):
                dist.log_prob(bad)
        else:
            check(dist, ref, bad, 0)
    other = torch.float64 if dtype == "float32" else torch.float32
    cupy_views.clear()
    out = dist.log_prob(value.to(other))
    assert len(cupy_views) == 1
    assert out.dtype == kind
    batched = mvn(loc.expand(2, d), scale_tril=m)
    ref = mvn(cp.from_dlpack(loc).reshape(1, d).repeat(2, axis=0), scale_tril=cp.from_dlpack(m))
    batched.log_prob(value[:, None])
    check(batched, ref, value[:, None], 1)


def test_cuda_side_stream(cuda):
    """On a side stream of PyTorch's, the scan queues behind the copy that makes its input
    (held back by a long sleep on that stream): read on another stream, it would see zeros."""
    cp, device = cuda
    data = torch.randn(1 << 20, device=device)
    expected = xpops.logcumsumexp(data)
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))  # `data` is made
    before = cp.cuda.get_current_stream().ptr
    with torch.cuda.stream(stream):
        x = torch.zeros_like(data)
        torch.cuda._sleep(100_000_000)  # about 0.1 s of GPU cycles
        x.copy_(data)
        out = xpops.logcumsumexp(x)
        solved = xpops.linalg.cholesky_solve(x[:64].reshape(4, 16, 1), torch.eye(16, device=device))
    stream.synchronize()
    assert cp.cuda.get_current_stream().ptr == before  # CuPy's stream restored
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(solved.reshape(-1), data[:64])


def test_cuda_on_stream(cuda, monkeypatch):
    """`on_stream` hands a launch PyTorch's current stream of the device: as its pointer where
    that device is the current one and kernels launch through the driver (nothing of CuPy's
    switched), else as CuPy's current stream for the launch (the pointer None); CuPy's
    stream is the one it was afterwards, and the launch's result comes back."""
    cp, device = cuda
    side = torch.cuda.Stream(device)
    before = cp.cuda.get_current_stream().ptr

    def launch(stream):
        return stream, cp.cuda.get_current_stream().ptr

    for direct in (True, False):
        monkeypatch.setattr(_torch, "_driver_launch", lambda direct=direct: direct)
        with torch.cuda.device(device):
            for chosen in (side, torch.cuda.default_stream(device)):
                with torch.cuda.stream(chosen):
                    stream, current = _torch.on_stream(device.index, launch)
                if direct:
                    assert (stream, current) == (chosen.cuda_stream, before)
                else:
                    assert (stream, current) == (None, chosen.cuda_stream)
                assert cp.cuda.get_current_stream().ptr == before


def _current(cp):
    return cp.cuda.get_current_stream().ptr


def test_cuda_second_device(cuda, engines_used):
    cp, _ = cuda
    if torch.cuda.device_count() < 2:
        pytest.skip("one CUDA device")
    device = torch.device("cuda", 1)
    t = torch.randn(5000, 30, dtype=torch.float64, device=device)
    with torch.cuda.device(0):  # the current device is another one
        # a launch by address on device 1 switches CuPy there, with PyTorch's stream of it
        got = _torch.on_stream(1, lambda s: (s, cp.cuda.Device().id, _current(cp)))
        assert got == (None, 1, torch.cuda.current_stream(device).cuda_stream)
        assert cp.cuda.Device().id == 0
        engines_used.clear()
        out = xpops.logcumsumexp(t, axis=0)
        lower = torch.eye(30, dtype=torch.float64, device=device) * 3
        solved = xpops.linalg.cholesky_solve(t[:30], lower)
        assert torch.cuda.current_device() == 0  # left as it was
    with cp.cuda.Device(1):
        ref = xpops.logcumsumexp(cp.from_dlpack(t), axis=0)
        ref_solved = xpops.linalg.cholesky_solve(cp.from_dlpack(t[:30]), cp.from_dlpack(lower))
    _cuda_same(out, ref, device)
    _cuda_same(solved, ref_solved, device)
    assert engines_used == ["cupy", "cupy"]
