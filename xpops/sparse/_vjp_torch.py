"""The backward rule of sparse.divide (`_vjp`) for PyTorch's sparse tensors, run by the
PyTorch autograd binding: the same formulas, in PyTorch's own operations on the tensors'
device (and stream), block by block for hybrid tensors.

Positions are the sparse positions of the tensors (`_torch_layout`), keyed row-major (int64)
and looked up among out's keys (coalesced COO, or CSR: sorted, unique) by binary search.
CUDA matrices (CSR, or coalesced COO, without dense dimensions) go to the CuPy kernel of
`_cupyx_grad` instead, through DLPack on PyTorch's current stream.
Each gradient has its operand's layout and stored structure (a COO operand's indices as it
stores them, coalesced or not; a CSR operand's row pointers and columns), a dense divisor's
gradient is dense, a 0-d tensor divisor's a 0-d tensor on its device, and a Python number
divisor gets none.
"""

import sys
from typing import Any

from .._lib import _torch as _bridge
from .._lib._dispatch import Engines
from .._lib._names import type_name
from . import _torch_layout as layout
from ._torch import _scalar as scalar_divisor

__all__ = ["backward"]


def _torch() -> Any:
    return sys.modules["torch"]


def _grad_dtype(primal: Any, ctype: Any) -> Any:
    """The dtype of the gradient of tensor `primal` for a quotient of dtype `ctype`: the
    primal's for floating and complex ones (the real part taken for a real primal)."""
    if primal.dtype.is_floating_point or primal.dtype.is_complex:
        return primal.dtype
    return ctype


def _cast(a: Any, dtype: Any) -> Any:
    if a.is_complex() and not dtype.is_complex:
        a = a.real
    return a.to(dtype)


def _search(keys: Any, queries: Any) -> Any:
    """Where `queries` sit among sorted `keys`: ``searchsorted``."""
    return _torch().searchsorted(keys, queries)


def _check_cotangent(cotangent: Any, ctype: Any) -> None:
    """TypeError naming `cotangent` for anything but a tensor of a dtype that can be the
    cotangent of a quotient of dtype `ctype`."""
    torch = _torch()
    if not isinstance(cotangent, torch.Tensor):
        msg = f"the cotangent of sparse.divide must be a PyTorch tensor, got {type_name(cotangent)}"
        raise TypeError(msg)
    if not (cotangent.dtype.is_floating_point or cotangent.dtype.is_complex) or (
        cotangent.dtype.is_complex and not ctype.is_complex
    ):
        want = "a floating or complex" if ctype.is_complex else "a real floating"
        msg = (
            f"the cotangent of sparse.divide must have {want} dtype (the output is {ctype}), "
            f"got {cotangent.dtype}"
        )
        raise TypeError(msg)


def _cotangent_at(cotangent: Any, out: Any, coords: Any, keys: Any, ctype: Any) -> Any:
    """The cotangent's values (blocks) at out's sparse positions (`coords`, `keys`), as
    `ctype` (checked by `_check_cotangent`)."""
    torch = _torch()
    if cotangent.layout == torch.strided:
        return cotangent[tuple(coords)].to(ctype)
    if cotangent.layout not in (torch.sparse_coo, torch.sparse_csr):
        cotangent = cotangent.to_sparse_coo()
    if cotangent.dense_dim() != out.dense_dim():  # another split of sparse and dense
        return _cotangent_at(cotangent.to_dense(), out, coords, keys, ctype)
    c_coords, c_values = layout.coords(cotangent)
    c_keys = layout.ravel(c_coords, layout.sparse_shape(out))
    n = keys.shape[0]
    at = _search(keys, c_keys).clamp_(max=max(n - 1, 0))
    found = keys[at] == c_keys if n else torch.zeros_like(c_keys, dtype=torch.bool)
    dout = torch.zeros((n, *c_values.shape[1:]), dtype=ctype, device=keys.device)
    dout[at[found]] = c_values[found].to(ctype)  # coalesced: one value a position
    return dout


def _like(a: Any, values: Any) -> Any:
    """A tensor of a's layout and stored structure (its index tensors, copied) holding
    `values` (one block an entry as `a` stores them, batches stacked for CSR)."""
    torch = _torch()
    shape = tuple(a.shape)
    if a.layout == torch.sparse_coo:
        return layout.coo_tensor(a._indices().clone(), values, shape, coalesced=a.is_coalesced())
    stored = a.values()
    return layout.csr_tensor(
        a.crow_indices().clone(), a.col_indices().clone(), values.reshape(stored.shape), shape
    )


def backward(x: Any, y: Any, out: Any, cotangent: Any) -> tuple[Any, Any]:
    """``(dx, dy)`` of ``out = divide(x, y)`` for PyTorch operands (see the module docstring
    and `_vjp`)."""
    torch = _torch()
    ctype = out.dtype
    _check_cotangent(cotangent, ctype)
    fast = _on_gpu(x, y, out, cotangent)
    if fast is not None:
        return fast
    shape = layout.sparse_shape(out)
    o_coords, o = layout.coords(out)
    o_keys = layout.ravel(o_coords, shape)
    dout = _cotangent_at(cotangent, out, o_coords, o_keys, ctype)
    o = o.to(ctype)
    x_coords, _ = layout.raw_coords(x)
    at_x = _search(o_keys, layout.ravel(x_coords, shape))
    if not isinstance(y, torch.Tensor) or (y.layout == torch.strided and y.ndim == 0):
        # a Python int past int64 as the forward took it (the float it converts to)
        yv = y.detach().to(ctype) if isinstance(y, torch.Tensor) else scalar_divisor(y)
        dx = dout[at_x] / (yv.conj() if isinstance(yv, torch.Tensor) else _conj_number(yv))
        dy = None
        if isinstance(y, torch.Tensor):
            dy = _cast(-(dout * (o / yv).conj()).sum(), _grad_dtype(y, ctype)).to(y.device)
        return _like(x, _cast(dx, _grad_dtype(x, ctype))), dy
    if y.layout == torch.strided:  # out's pattern is x's
        yu = y.detach()[tuple(o_coords)].to(ctype)
        dx = dout[at_x] / yu[at_x].conj()
        dy = torch.zeros_like(y, dtype=_grad_dtype(y, ctype))
        dy[tuple(o_coords)] = _cast(-dout * (o / yu).conj(), dy.dtype)
        return _like(x, _cast(dx, _grad_dtype(x, ctype))), dy
    y_coords, y_values = layout.coords(y)  # coalesced: duplicates summed
    yu = torch.zeros_like(o)
    yu[_search(o_keys, layout.ravel(y_coords, shape))] = y_values.to(ctype)
    y_raw, _ = layout.raw_coords(y)
    at_y = _search(o_keys, layout.ravel(y_raw, shape))
    dx = dout[at_x] / yu[at_x].conj()
    dy = -dout[at_y] * (o[at_y] / yu[at_y]).conj()
    return _like(x, _cast(dx, _grad_dtype(x, ctype))), _like(y, _cast(dy, _grad_dtype(y, ctype)))


# ---- CUDA tensors of two sparse dimensions: the CuPy kernel of the compressed rule ---------------


def _no_engine(*args: Any) -> Any:  # pragma: no cover - only CUDA tensors are handed over
    msg = "the kernel of sparse.divide's backward runs on CuPy arrays only"
    raise NotImplementedError(msg)


_GRAD_ENGINES = Engines(
    __package__,
    numpy=_no_engine,
    cupy="._cupyx_grad:divide_grad",
    dask=_no_engine,
    generic=_no_engine,
)


def _structure(a: Any) -> tuple[Any, Any] | None:
    """(row pointers, columns) of a 2-D CSR tensor, ((2, n) indices, None) of a coalesced
    2-D COO tensor (both sorted row-major without repeats); None for other tensors."""
    torch = _torch()
    if a.ndim != 2 or a.dense_dim() != 0:
        return None
    if a.layout == torch.sparse_csr:
        return a.crow_indices(), a.col_indices()
    if a.layout == torch.sparse_coo and a.is_coalesced():
        return a.indices(), None
    return None


def _on_gpu(x: Any, y: Any, out: Any, cotangent: Any) -> tuple[Any, Any] | None:
    """``(dx, dy)`` by the CuPy kernel of `_cupyx_grad` (one launch a gradient, no sorting
    or searching of keys) for CUDA matrices: x, y and out CSR or coalesced COO without dense
    dimensions, the cotangent one of those or a dense tensor; None for anything else."""
    torch = _torch()
    ctype = out.dtype
    if (
        not isinstance(y, torch.Tensor)
        or x.device.type != "cuda"
        or ctype not in (torch.float32, torch.float64, torch.complex64, torch.complex128)
        or any(a.device != x.device for a in (y, out, cotangent))
    ):
        return None
    xs, ys, os_ = (_structure(a) for a in (x, y, out))
    if xs is None or ys is None or os_ is None:
        return None
    if cotangent.layout == torch.strided:
        if cotangent.ndim != 2:
            return None
        o_coords, _ = layout.coords(out)
        c0, c1, c_values = None, None, _cotangent_at(cotangent, out, o_coords, None, ctype)
    else:
        c = _structure(cotangent)
        if c is None:
            return None
        (c0, c1), c_values = c, cotangent.values().to(ctype)
    (x0, x1), (y0, y1), (o0, o1) = xs, ys, os_
    dx, dy = _bridge.on_device(
        _GRAD_ENGINES, x.device, x0, x1, y0, y1, y.values().to(ctype), o0, o1, out.values(),
        c0, c1, c_values, tuple(out.shape), str(ctype).removeprefix("torch."),
    )  # fmt: skip
    return _like(x, _cast(dx, _grad_dtype(x, ctype))), _like(y, _cast(dy, _grad_dtype(y, ctype)))


def _conj_number(y: Any) -> Any:
    return y.conjugate() if isinstance(y, complex) else y
