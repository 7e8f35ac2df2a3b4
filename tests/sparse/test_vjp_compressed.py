"""The backward rule of sparse.divide (`xpops.vjp`) on canonical compressed operands of one
format, CSR or CSC, which the GPU computes with one kernel a gradient: rows longer than a
warp, empty rows (first and last included), rows stored by only one operand, and each kind of
cotangent (canonical in the operands' format, out's own pattern, canonical in the other
format, dense, COO with duplicates). Against the dense formulas of `test_vjp`."""

import numpy as np
import pytest

import xpops

from ._support import Entries, canonical, host_entries, random_entries
from .test_formats import make
from .test_vjp import _assert_values, _expected, _reference, _wide

SHAPE = (40, 300)
X_ROWS = [1, 3, 4, 5, 17, 30]  # compressed slices (rows, columns) of x (the first, last empty)
Y_ROWS = [3, 4, 5, 17, 22, 38]


def _entries(rng, n, slices, fmt, dtype):
    """`n` canonical entries, about n / len(slices) in each of the compressed `slices` (rows
    for CSR, columns for CSC), with explicit zeros of both signs."""
    if fmt == "csr":
        e = random_entries(rng, SHAPE, n, zeros=0.1, rows=slices)
    else:  # drawn transposed, so that `slices` are columns
        t = random_entries(rng, SHAPE[::-1], n, zeros=0.1, rows=slices)
        e = Entries(t.data, t.coords[::-1])
    if np.dtype(dtype).kind == "c":
        e = Entries(e.data + 1j * rng.integers(-8, 9, e.data.size) / 4, e.coords)
    return canonical(e, SHAPE)


def _operand(lib, fmt, e, dtype, *, flagged=False):
    """A `fmt` operand of canonical entries `e`; `flagged`: told that it is canonical (else
    the library finds out when asked)."""
    a = make(lib, fmt, e, SHAPE, dtype=dtype)
    if flagged:
        a.has_canonical_format = True
    return a


@pytest.mark.parametrize("dout_kind", ["own", "out", "other", "dense", "coo"])
@pytest.mark.parametrize("dtype", ["float64", "float32", "complex128"])
@pytest.mark.parametrize("fmt", ["csr", "csc"])
def test_compressed_operands(lib, fmt, dtype, dout_kind, monkeypatch):
    """On CuPy the kernel runs for every kind of cotangent (looked up in place when canonical
    in the operands' format and known to be, gathered on out's pattern otherwise)."""
    lib.require(dtype)
    launched = []
    if lib.name == "cupy":
        from xpops.sparse import _cupyx_grad

        launch = _cupyx_grad._launch
        monkeypatch.setattr(
            _cupyx_grad, "_launch", lambda *a: launched.append(a[3][0] is not None) or launch(*a)
        )
    rng = np.random.default_rng(sum(map(ord, fmt + dtype + dout_kind)))
    shape = SHAPE
    last = shape[0] - 1 if fmt == "csr" else shape[1] - 1
    x = _entries(rng, 900, X_ROWS, fmt, dtype)
    y = _entries(rng, 900, Y_ROWS, fmt, dtype)
    xs, ys = _operand(lib, fmt, x, dtype), _operand(lib, fmt, y, dtype)
    out, pullback = xpops.vjp(xpops.sparse.divide, xs, ys)
    d = _entries(rng, 900, sorted({*X_ROWS[::2], *Y_ROWS[1::2], last}), fmt, dtype)
    if dout_kind == "own":
        dout = _operand(lib, fmt, d, dtype, flagged=True)
    elif dout_kind == "other":
        dout = _operand(lib, "csc" if fmt == "csr" else "csr", d, dtype, flagged=True)
    elif dout_kind == "coo":
        twice = tuple(np.concatenate([c, c[::3]]) for c in d.coords)
        dup = Entries(np.concatenate([d.data, d.data[::3]]), twice)
        dout = make(lib, "coo", dup.shuffled(rng), shape, dtype=dtype)
    elif dout_kind == "dense":
        dense = rng.integers(-8, 9, shape) / 4
        dout = lib.asarray(dense.astype(dtype))
    else:
        dout = out.copy()
        dout.data = lib.asarray((rng.integers(-8, 9, out.data.size) / 4).astype(dtype))
    dx, dy = pullback(dout)
    xe, ye = (Entries(*host_entries(lib, a)) for a in (xs, ys))
    de = Entries(*host_entries(lib, dout)) if lib.sparse.issparse(dout) else lib.host(dout)
    ref = _reference(xe, ye, de, shape, _wide(dtype))
    want_x, want_y = _expected(*ref[:4], xe.coords, ye.coords)
    for g, a, want in ((dx, xs, want_x), (dy, ys, want_y)):
        assert g.format == fmt
        assert g.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(lib.host(g.indptr), lib.host(a.indptr))
        np.testing.assert_array_equal(lib.host(g.indices), lib.host(a.indices))
        _assert_values(lib.host(g.data), want, dtype)
    if np.dtype(dtype).kind == "f":  # y's missing entries and stored zeros: inf and NaN
        assert np.isinf(lib.host(dx.data)).any()
    if lib.name == "cupy":  # the kernel ran, the cotangent searched only where it can be
        assert len(launched) == 1
        if dout_kind != "out":  # a copy of out keeps cupyx's flag or not, by version
            assert launched[0] == (dout_kind == "own")
