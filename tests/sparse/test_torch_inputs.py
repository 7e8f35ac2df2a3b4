"""sparse.divide on PyTorch sparse tensors, continued (`test_torch` holds the unions, values,
dtypes and divisors): inputs left alone, errors, larger and empty operands, PyTorch's current
stream on CUDA and agreement with the CPU, and a property test against the brute-force
reference."""

import itertools
import re
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

import xpops

from ._support import Entries, reference
from .test_torch import _batched_entries, check, coo, csr, random_sparse, run

torch = pytest.importorskip("torch")

nan, inf = np.nan, np.inf

pytestmark = [
    pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta"),
    # some PyTorch versions warn when a tensor is built outside an explicit invariant check
    pytest.mark.filterwarnings("ignore:Sparse invariant checks are implicitly disabled"),
]


# ---- inputs, errors ---------------------------------------------------------------------------


@pytest.mark.parametrize("divisor", ["sparse", "scalar", "dense"])
@pytest.mark.parametrize("layout", ["coo", "csr"])
def test_inputs_unchanged_and_result_fresh(device, layout, divisor):
    rng = np.random.default_rng(6)
    shape = (5, 6)
    x = random_sparse(rng, shape, 12, unique=layout == "csr")
    y = random_sparse(rng, shape, 12, unique=layout == "csr")
    maker = coo if layout == "coo" else csr
    xs = maker(x, shape, "float64", device)
    ys = {
        "sparse": maker(y, shape, "float64", device),
        "scalar": 2.0,
        "dense": torch.full(shape, 2.0, device=device),
    }[divisor]

    def parts(t):
        if not isinstance(t, torch.Tensor):
            return []
        if t.layout == torch.sparse_coo:
            return [t._indices(), t._values()]
        if t.layout == torch.sparse_csr:
            return [t.crow_indices(), t.col_indices(), t.values()]
        return [t]

    before = [p.clone() for p in parts(xs) + parts(ys)]
    out = xpops.sparse.divide(xs, ys)
    for b, a in zip(before, parts(xs) + parts(ys), strict=True):
        assert torch.equal(a, b)
    if layout == "coo":
        assert not xs.is_coalesced()  # not coalesced in place
    for mine in parts(out):
        for theirs in parts(xs) + parts(ys):
            assert mine.numel() == 0 or mine.data_ptr() != theirs.data_ptr()


def test_layouts_refused(device):
    d = torch.tensor([[1.0, 0.0], [0.0, 2.0]], device=device)
    good = d.to_sparse()
    for bad in (d.to_sparse_csc(), d.to_sparse_bsr((1, 1)), d.to_sparse_bsc((1, 1))):
        name = str(bad.layout).removeprefix("torch.")
        with pytest.raises(TypeError, match=rf"`x` must be .*PyTorch sparse COO or CSR .*'{name}'"):
            xpops.sparse.divide(bad, good)
        with pytest.raises(TypeError, match=rf"`y` must be .*'{name}'"):
            xpops.sparse.divide(good, bad)


def test_dense_dimensions_must_match():
    shape = (3, 4)
    x = coo(Entries(np.ones((1, 4)), (np.array([0]),)), shape)  # sparse_dim 1, dense_dim 1
    y = coo(Entries(np.ones(1), (np.array([0]), np.array([1]))), shape)
    with pytest.raises(ValueError, match=r"same dense dimensions .*got 1 and 0"):
        xpops.sparse.divide(x, y)


def test_shapes_devices_and_libraries():
    x = coo(Entries(np.ones(1), (np.array([0]), np.array([1]))), (2, 3))
    with pytest.raises(ValueError, match=re.escape("got (2, 3) and (3, 2)")):
        xpops.sparse.divide(x, coo(Entries(np.ones(1), (np.array([0]), np.array([1]))), (3, 2)))
    with pytest.raises(ValueError, match="a dense `y` is not broadcast"):
        xpops.sparse.divide(x, torch.ones(1, 3))
    with pytest.raises(TypeError, match="same library"):
        xpops.sparse.divide(x, sp.csr_array(np.ones((2, 3))))
    with pytest.raises(TypeError, match=r"a strided PyTorch tensor of x's shape, or a scalar"):
        xpops.sparse.divide(x, np.ones((2, 3)))
    meta = torch.sparse_coo_tensor(
        torch.zeros(2, 1, dtype=torch.long),
        torch.ones(1),
        (2, 3),
        device="meta",
        check_invariants=False,
    )
    with pytest.raises(ValueError, match=r"same device, got cpu and meta"):
        xpops.sparse.divide(x, meta)
    with pytest.raises(ValueError, match=r"same device, got cpu and meta"):
        xpops.sparse.divide(x, torch.ones(2, 3, device="meta"))
    with pytest.raises(NotImplementedError, match=r"got a tensor on meta"):
        xpops.sparse.divide(meta, meta)
    with pytest.raises(TypeError, match=r"`x` must have a numeric dtype"):
        xpops.sparse.divide(x.to(torch.float8_e4m3fn) if hasattr(torch, "float8_e4m3fn")
                            else x.to(torch.qint8), x)  # fmt: skip


def test_quick_pair_check_agrees_with_the_general_checks(monkeypatch):
    """Two sparse tensors pass the quick check (`_common._torch_pair`) exactly when they pass
    the general checks, which give the same answer for them."""
    from xpops.sparse import _common

    d = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    coo_, csr_ = d.to_sparse(), d.to_sparse_csr()
    pairs = [
        (coo_, coo_), (coo_, csr_), (csr_, coo_), (csr_, csr_),
        (coo_, coo_.double()), (coo_.to(torch.int8), coo_), (coo_.bool(), csr_),
        (coo_, d[:1].to_sparse()), (d.to_sparse_csc(), coo_), (coo_, d.to_sparse_csc()),
        (d.to_sparse(1), coo_), (coo_, d), (coo_, 2.0), (coo_, sp.csr_array(d.numpy())),
    ]  # fmt: skip
    for x, y in pairs:
        quick = _common._torch_pair(x, y)
        monkeypatch.setattr(_common, "_torch_pair", lambda x, y: False)
        try:
            general = _common.check_operands(x, y)
        except (TypeError, ValueError):
            general = None
        monkeypatch.undo()
        assert quick == (general == ("torch", "sparse")), (x, y)


# ---- larger, on the helper thread and in row blocks ------------------------------------------


def test_larger_against_dense(device):
    rng = np.random.default_rng(12)
    shape = (300, 400)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        x = random_sparse(rng, shape, 40_000, unique=True, zeros=0.0)
        y = random_sparse(rng, shape, 40_000, unique=True, zeros=0.0)
    for maker in (coo, csr):
        out = xpops.sparse.divide(maker(x, shape, device=device), maker(y, shape, device=device))
        mask, want = reference(x, "float64", y, "float64", shape)
        check(out, maker(x, shape, device=device), mask, want, torch.float64)


@pytest.mark.parametrize(("lx", "ly"), list(itertools.product(["coo", "csr"], repeat=2)))
def test_empty_operands(device, lx, ly):
    shape = (3, 4)
    e = Entries(np.zeros(0), (np.zeros(0, int), np.zeros(0, int)))
    f = Entries(np.array([2.0, -0.0]), (np.array([0, 2]), np.array([1, 3])))
    makers = {"coo": coo, "csr": csr}
    for a, b in ((e, f), (f, e), (e, e)):
        run(a, b, shape, "float64", "float64",
            lambda v, d: makers[lx](v, shape, d, device),
            lambda v, d: makers[ly](v, shape, d, device))  # fmt: skip


# ---- CUDA: PyTorch's current stream, agreement with the CPU ----------------------------------


def test_cuda_runs_on_the_current_stream(device):
    """On a side stream the kernels queue behind the work that made the operands (scaled on
    that stream just before), and the result is ready for work queued after them there."""
    if device.type != "cuda":
        pytest.skip("CUDA only")
    rng = np.random.default_rng(20)
    shape = (2000, 3000)
    x = random_sparse(rng, shape, 200_000, unique=True, zeros=0.0)
    y = random_sparse(rng, shape, 200_000, unique=True, zeros=0.0)
    want = xpops.sparse.divide(coo(x, shape, "float32"), csr(y, shape, "float32") * 2)
    stream = torch.cuda.Stream(device)
    with torch.cuda.stream(stream):
        xs = coo(x, shape, "float32", device)
        ys = csr(y, shape, "float32", device) * 2  # queued on the side stream
        out = xpops.sparse.divide(xs, ys).coalesce() * 1  # work after it, on the stream
    stream.synchronize()
    assert torch.equal(out.indices().cpu(), want.indices())
    assert torch.equal(out.values().cpu(), want.values())


@pytest.mark.parametrize(("layout", "shape", "sdim"), [
    ("coo", (3000, 4000), 2), ("coo", (200, 300, 4), 2), ("coo", (50, 60, 70), 3),
    ("csr", (3000, 4000), 2), ("csr", (6, 500, 400), 3),
])  # fmt: skip
def test_cuda_matches_the_cpu(device, layout, shape, sdim):
    """Larger operands (hybrid COO, 3 sparse dimensions, batched CSR): the CUDA result equals
    the CPU's, entry for entry (IEEE division is correctly rounded on both)."""
    if device.type != "cuda":
        pytest.skip("CUDA only")
    rng = np.random.default_rng(21)
    if layout == "coo":
        x = random_sparse(rng, shape[:sdim], 100_000, shape[sdim:], zeros=0.01)
        y = random_sparse(rng, shape[:sdim], 100_000, shape[sdim:], zeros=0.01)
        make = coo
    else:
        per = 20_000
        x = _batched_entries(rng, shape, len(shape), per, ())
        y = Entries(np.asarray(x.data)[::-1].copy(), x.coords) if len(shape) > 2 else None
        y = y or _batched_entries(rng, shape, len(shape), per, ())
        make = csr
    for dtype in ("float32", "float64"):  # (complex x / 0 has no single IEEE answer)
        want = xpops.sparse.divide(make(x, shape, dtype), make(y, shape, dtype))
        got = xpops.sparse.divide(make(x, shape, dtype, device), make(y, shape, dtype, device))
        if layout == "coo":
            assert torch.equal(got.indices().cpu(), want.indices())
        else:
            assert torch.equal(got.crow_indices().cpu(), want.crow_indices())
            assert torch.equal(got.col_indices().cpu(), want.col_indices())
        np.testing.assert_array_equal(got.values().cpu().numpy(), want.values().numpy())


@pytest.mark.parametrize(("xi", "yi"), [("int32", "int32"), ("int32", "int64"), ("int64", "int64")])
def test_cuda_csr_index_dtypes(device, xi, yi):
    """CSR operands of each pair of index dtypes, large enough for the tiled kernels: the
    CUDA result equals the CPU's, in x's index dtype."""
    if device.type != "cuda":
        pytest.skip("CUDA only")
    rng = np.random.default_rng(22)
    shape = (3000, 4000)
    x = random_sparse(rng, shape, 60_000, unique=True, zeros=0.01)
    y = random_sparse(rng, shape, 50_000, unique=True, zeros=0.01)
    cpu = [csr(x, shape, "float32", index=xi), csr(y, shape, "float32", index=yi)]
    want = xpops.sparse.divide(*cpu)
    got = xpops.sparse.divide(*(t.to(device) for t in cpu))
    assert got.crow_indices().dtype == want.crow_indices().dtype == getattr(torch, xi)
    assert torch.equal(got.crow_indices().cpu(), want.crow_indices())
    assert torch.equal(got.col_indices().cpu(), want.col_indices())
    np.testing.assert_array_equal(got.values().cpu().numpy(), want.values().numpy())


@pytest.mark.parametrize("layout", ["coo", "csr"])
def test_cuda_overlapping_patterns(device, layout):
    """Large operands (the tiled kernels) sharing half of x's positions, with long runs of
    y alone: the CUDA result (COO: the columns written into the coordinates by the union's
    kernels; CSR of int64 indices: int32 kernels writing int64 ones) equals the CPU's."""
    if device.type != "cuda":
        pytest.skip("CUDA only")
    rng = np.random.default_rng(23)
    shape = (500, 70_000)
    x = random_sparse(rng, shape, 40_000, unique=True, zeros=0.01)
    keys = np.ravel_multi_index(x.coords, shape)
    shared = rng.choice(keys, keys.size // 2, replace=False)
    run_of_y = np.arange(3 * 70_000 + 5, 3 * 70_000 + 20_005)  # one long row stretch
    own = np.setdiff1d(rng.choice(shape[0] * shape[1], 30_000, replace=False), keys)
    ykeys = np.unique(np.concatenate([shared, np.setdiff1d(run_of_y, keys), own]))
    vals = rng.integers(1, 9, ykeys.size) * rng.choice([-1.0, 1.0], ykeys.size) / 4
    y = Entries(vals, np.unravel_index(ykeys, shape))
    make = coo if layout == "coo" else csr
    for dtype in ("float32", "float64"):
        cpu = [make(x, shape, dtype), make(y, shape, dtype)]
        want = xpops.sparse.divide(*cpu)
        got = xpops.sparse.divide(*(t.to(device) for t in cpu))
        if layout == "coo":
            assert got.is_coalesced()
            assert torch.equal(got.indices().cpu(), want.indices())
        else:
            assert got.col_indices().dtype == torch.int64
            assert torch.equal(got.crow_indices().cpu(), want.crow_indices())
            assert torch.equal(got.col_indices().cpu(), want.col_indices())
        np.testing.assert_array_equal(got.values().cpu().numpy(), want.values().numpy())


# ---- property test ----------------------------------------------------------------------------

_VALUES = [-4.0, -2.5, -1.0, -0.0, 0.0, 0.5, 1.0, 3.0]


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_property_against_brute_force(data):
    """Random COO tensors on the CPU: shapes of 1 to 4 dimensions (zero ones included), a
    random split into sparse and dense dimensions, raw entries (duplicates, any order, signed
    zeros), coalesced or not; each against the reference."""
    ndim = data.draw(st.integers(1, 4), label="ndim")
    shape = tuple(data.draw(st.lists(st.integers(0, 4), min_size=ndim, max_size=ndim)))
    sdim = data.draw(st.integers(1, ndim), label="sparse_dim")
    sshape, block = shape[:sdim], shape[sdim:]

    def entries():
        n = data.draw(st.integers(0, 0 if 0 in sshape else 10))
        coords = tuple(
            np.array(
                data.draw(st.lists(st.integers(0, max(d - 1, 0)), min_size=n, max_size=n)),
                dtype=np.int64,
            )
            for d in sshape
        )
        size = n * int(np.prod(block))
        vals = data.draw(st.lists(st.sampled_from(_VALUES), min_size=size, max_size=size))
        return Entries(np.array(vals, dtype=float).reshape(n, *block), coords)

    x, y = entries(), entries()
    cx, cy = data.draw(st.booleans()), data.draw(st.booleans())

    def make_x(e, d):
        return coo(e, shape, d, coalesce=cx)

    def make_y(e, d):
        return coo(e, shape, d, coalesce=cy)

    run(x, y, shape, "float64", "float64", make_x, make_y)
