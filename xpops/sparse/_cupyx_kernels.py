"""The CUDA kernels of sparse.divide on cupyx: the union of two canonical CSR patterns.

With both operands canonical CSR (sorted, unique column indices in each row), entries are in
row-major key order. Let ``lb[e]`` be the storage index in `y` of the first entry at or after
entry ``e`` of `x`, and ``C[e]`` the number of entries of `x` before ``e`` that `y` also
stores. Then the union entry made from ``e`` lands at ``e + lb[e] - C[e]``, the entries of `y`
between ``e`` and the next entry of `x` (a "run", all absent from `x`) follow it in order, and
row ``r`` of the union starts at ``x.indptr[r] + y.indptr[r] - C[x.indptr[r]]``. So:

1. ``tile_rows``: for each warp tile of 32 * ITEMS entries of `x`, the rows of its first and
   last entries (a thread a row of `x` writes them, no searching).
2. ``match``: per tile, the row pointers and `y`'s column indices of those rows are staged in
   shared memory, and each entry's ``lb`` found by binary search there; match bits (one word
   per 32 entries) and the tile's match count are written. This pass is instruction-bound:
   the searches use int offsets and a per-lane row cursor.
3. ``scan``: the tile counts into tile prefixes (a block a chunk, decoupled look-back).
4. ``indptr``: the union's row pointers, ``C`` at each row start from the prefixes and bits;
   its last element, the union's size, is the one host synchronisation, made after every
   kernel is queued (the result is written into buffers of nx + ny entries, then cut).
5. ``fill``: per tile, no searching: the tile's entries of `x` and their runs of `y` are one
   contiguous stretch of the result, written 32 consecutive positions a step (coalesced
   reads of `y`, coalesced writes); a run after the tile's last entry longer than RUN is
   queued in chunks of CHUNK for ``runs``, and tiles with long runs inside are written lane
   by lane (runs longer than RUN queued too).

Every warp does bounded work whatever the row lengths (long runs are spread over warps by the
queue), so power-law rows need no balancing. Kernel times on an H100 for two 10^5 x 10^5
float32 operands of 10^7 uniformly placed entries (Nsight Compute, one kernel at a time):
tile_rows 4 us (a binary search a tile instead: 11), match 101, scan 6 (one block of 1024
threads instead: 26; cupy.cumsum: 37), indptr 5, fill 173 (lane by lane: 284), runs 5.

Two helper kernels complete the work: ``sum_runs`` sums the entries of each distinct position
of a sorted operand that is not canonical, and ``values`` divides values element by element (a
scalar divisor, or an empty `x`).

The kernels come in two families, each a module compiled on its own: `_cupyx_match` (steps 1
to 4, on index arrays only: built per index dtype) and `_cupyx_fill` (step 5, the queued runs
and the two helpers: built per value and index dtype). This module holds what both share: the
launch constants, the tiling macros, NumPy's quotient and the compile options. A third
module, `_cupyx_coo`, converts PyTorch's COO coordinates to and from CSR arrays around them,
a fourth, `_cupyx_grad`, holds the backward's kernel, and a fifth, `_cupyx_small`, the two
kernels that take the union of small operands in place of steps 1 to 5.
"""

from typing import Any

import cupy

from .._lib._cuda import FastKernel

__all__ = [
    "BLOCKS_PER_SM",
    "CHUNK",
    "ITEMS",
    "QUOTIENT",
    "RUN",
    "THREADS",
    "TILING",
    "compile_family",
]

# Launch constants. On an H100 (10^5 x 10^5, 10^7 + 10^7 float32 entries), capping registers
# at 64 (MIN_BLOCKS), staging the tile's rows in shared memory, and int offsets with a per-lane
# row cursor in the searches together make `match` about 1.9x faster than without them. ITEMS,
# RUN, CHUNK and the staging sizes are sensible values, not swept.
THREADS = 256  # threads a block of every kernel here
ITEMS = 8  # entries a lane in the warp tiles of the match and fill kernels
RUN = 32  # runs of y between two entries of x longer than this go to the `runs` kernel
CHUNK = 2048  # entries of y a queued chunk of a long run
SEG_BYTES = 2048  # shared memory a warp for the partner operand's indices of a tile's rows
ROW_BYTES = 1024  # shared memory a warp for each operand's row pointers of a tile's rows
MIN_BLOCKS = 4  # resident blocks an SM asked of the compiler (caps registers at 64)
BLOCKS_PER_SM = 32  # grid-stride kernels: enough resident blocks to fill the device

# x / y with NumPy's semantics, for the kernels of the forward and of the backward (each
# family's source starts with it).
QUOTIENT = r"""
#include <cupy/complex.cuh>

// x / y with NumPy's semantics, so that the GPU and the CPU agree (also on complex x / 0).
__device__ __forceinline__ float quotient(float a, float b) { return a / b; }
__device__ __forceinline__ double quotient(double a, double b) { return a / b; }
template <typename R>
__device__ __forceinline__ complex<R> quotient(complex<R> a, complex<R> b) {
    const R ar = a.real(), ai = a.imag(), br = b.real(), bi = b.imag();
    if (fabs(br) >= fabs(bi)) {
        if (br == R(0) && bi == R(0)) {
            return complex<R>(ar / fabs(br), ai / fabs(br));
        }
        const R rat = bi / br, scl = R(1) / (br + bi * rat);
        return complex<R>((ar + ai * rat) * scl, (ai - ar * rat) * scl);
    }
    const R rat = br / bi, scl = R(1) / (bi + br * rat);
    return complex<R>((ar * rat + ai) * scl, (ai * rat - ar) * scl);
}
"""

# The tiling macros of both families (every kernel that takes warp tiles of x).
TILING = r"""
// Entries are taken in warp tiles of TILE = 32 * ITEMS consecutive ones of one operand (lane
// l holds base + 32 k + l: coalesced). `tile_rows` finds the rows of each tile's first and
// last entries once for both passes. A pass stages in shared memory the tile's row pointers
// of both operands (up to NROWS rows) and the partner's column indices of those rows (up to
// SEG), so that every search after the staging loads is a shared-memory one; tiles over more
// rows or longer partner rows search global memory instead.
#define TILE (32 * ITEMS)
#define SCAN_TILE (4 * THREADS)  // counts a block of `scan`
#define STEPS 4  // fill: steps of 32 slots whose loads are issued together
#define SEG (SEG_BYTES / (int)sizeof(I))
#define NROWS (ROW_BYTES / (int)sizeof(I) - 2)
"""

_OPTIONS = (
    "-std=c++17",
    f"-DITEMS={ITEMS}",
    f"-DSEG_BYTES={SEG_BYTES}",
    f"-DROW_BYTES={ROW_BYTES}",
    f"-DTHREADS={THREADS}",
    f"-DMIN_BLOCKS={MIN_BLOCKS}",
    f"-DRUN={RUN}",
    f"-DCHUNK={CHUNK}",
)


def compile_family(
    source: str, names: dict[str, str], signatures: dict[str, str] | None = None
) -> dict[str, Any]:
    """The kernels `names` (key: name expression) of one family's `source`, compiled with the
    launch constants for the current device: a `FastKernel` where `signatures` gives the
    key's parameters (``_cuda.FastKernel``'s letters; kernels of pointers and integers
    only), a ``cupy.RawKernel`` otherwise."""
    module = cupy.RawModule(code=source, options=_OPTIONS, name_expressions=list(names.values()))
    signatures = signatures or {}
    kernels: dict[str, Any] = {}
    for key, name in names.items():
        kernel = module.get_function(name)
        kernels[key] = FastKernel(kernel, signatures[key]) if key in signatures else kernel
    return kernels
