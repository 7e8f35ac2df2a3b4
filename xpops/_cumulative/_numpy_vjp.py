"""The NumPy engine of logcumsumexp's real pull-back, where it applies (`._vjp` takes the
generic rule elsewhere).

The rule's sum ``dx_j = sum_{i covers j} g_i exp(x_j - y_i)`` is, against one reference ``r``
a row (its smallest finite output),

    dx_j = exp(x_j - r) C_j,    C = the covering scan's cumulative sum of g_i exp(r - y_i),

one plain cumulative sum in place of the generic rule's two log-space scans (and their twenty
whole-array operations). Every term ``exp(r - y_i)`` is at most 1 and every weight
``exp(x_j - r)`` at most ``exp(RANGE)`` where the row's outputs lie within RANGE of ``r``
(inputs held by an output lie below it). Outputs of -inf hold no term. The sums are taken in
float64, float32 input too. A weight below ``exp(-LOW)``, which would be subnormal, is applied
in log space: ``sign(C_j) exp(x_j - r + log|C_j|)``.

It applies to a call of float32 or float64 arrays whose every row has outputs that are finite
or -inf and lie within RANGE of the reference (with an exclusive scan's input that no output
holds), and whose cotangents of outputs that hold a term are finite, with no sum that could
overflow (a row's length times the largest cotangent under SUM_LIMIT). For anything else (NaN,
+inf, a row that spans more than RANGE) it returns None, and the call takes the generic rule,
which handles the special values.
"""

import numpy as np

__all__ = ["LOW", "RANGE", "SUM_LIMIT", "real_pullback"]

# exp(600) is about 4e260: a weight times a sum of at most SUM_LIMIT stays finite, and a term
# exp(-600) is a normal float64, as is every weight above exp(-LOW)
RANGE = 600.0
SUM_LIMIT = 1e40
LOW = 700.0
_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def real_pullback(
    x: np.ndarray, y: np.ndarray, g: np.ndarray, axis: int, exclusive: bool, reverse: bool
) -> np.ndarray | None:
    """``sum_{i covers j} g_i exp(x_j - y_i)`` along `axis` (arrays of one real dtype and
    shape), where the scan that covers is logcumsumexp with `exclusive` and `reverse` as given
    (the forward's `reverse` already flipped); None where the closed form does not apply."""
    if x.dtype not in _DTYPES or x.size == 0:
        return None
    # rows along the last axis, in the covering scan's order
    xm, ym, gm = (np.moveaxis(a, axis, -1) for a in (x, y, g))
    if reverse:
        xm, ym, gm = xm[..., ::-1], ym[..., ::-1], gm[..., ::-1]
    # The outputs never decrease along the forward's order, which is the covering scan's
    # reversed: a row's smallest output is its last in scan order and its largest its first.
    # NaN and +inf reach the forward's last output; -inf outputs are a prefix of the forward's,
    # and an exclusive scan's first output (the scan's last) is the empty sum, -inf.
    held = slice(None, -1) if exclusive else slice(None)  # the outputs that may hold a term
    if ym[..., held].shape[-1] == 0:
        return None
    kept = None
    ref = ym[..., held][..., -1:].copy()
    if not np.all(np.isfinite(ref)):  # -inf outputs (or NaN: refused below)
        kept = ym != -np.inf
        ref = np.min(np.where(kept, ym, np.inf), axis=-1, keepdims=True)
        ref[ref == np.inf] = 0.0  # a row of no finite output holds no term
    top = ym[..., :1]
    if exclusive:  # the scan's first input is held by no output
        top = np.maximum(top, xm[..., :1])
    if not np.all(top <= ref + RANGE):  # NaN or +inf, or a row too wide
        return None
    # the cotangents of the outputs that hold a term: finite, and no sum can overflow
    gh = gm[..., held] if kept is None else np.where(kept, gm, 0.0)
    largest = max(abs(float(np.max(gh))), abs(float(np.min(gh))))  # NaN if any is NaN
    if not largest * gh.shape[-1] < SUM_LIMIT:
        return None
    terms = np.subtract(ref, ym, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):  # at outputs of -inf, cleared below
        np.exp(terms, out=terms)
        terms *= gm
    if kept is not None:
        terms[~kept] = 0.0
    elif exclusive:
        terms[..., -1] = 0.0
    sums = np.cumsum(terms, axis=-1, out=terms)
    if not np.all(np.isfinite(sums[..., -1])):  # a term out of range: outputs not in order
        return None
    if exclusive:  # the sums of the terms strictly before each position
        sums[..., 1:] = sums[..., :-1]
        sums[..., 0] = 0.0
    # the weights, written through the rows' view of the result
    dx = np.empty(x.shape, dtype=np.float64)
    rows = np.moveaxis(dx, axis, -1)
    if reverse:
        rows = rows[..., ::-1]
    with np.errstate(over="ignore"):  # inputs far below the reference: -inf, weight 0
        np.subtract(xm, ref, out=rows)
    low = rows < -LOW if float(np.min(rows)) < -LOW else None
    exponents = rows[low] if low is not None else None
    np.exp(rows, out=rows)
    rows *= sums
    if low is not None:  # subnormal weights: in log space, with the sums' signs
        c = sums[low]
        with np.errstate(divide="ignore"):  # a sum of 0: log 0 = -inf, weight 0
            rows[low] = np.sign(c) * np.exp(exponents + np.log(np.abs(c)))
    return dx if x.dtype == dx.dtype else dx.astype(x.dtype)
