"""A compiled (numba) counting kernel for ``MarginalTables``, for ``bench_compiled_counting.py`` only.

It is not part of the library: it measures whether a compiled pass would bring the in-memory
release within issue 40's 3× ``pl.read_parquet``. The kernel counts a map's joint tables
(``MarginalTables._joint``) in one pass over a chunk: each (column, bins, cuts) axis's bin with
the numpy path's float operations in the same order (no fast-math), then each joint table's
cell, added in the same loop. :func:`install` puts it in place of the numpy path's counting
(``MarginalTables._joint_sum``) in the process that calls it; :func:`same_integers` checks it
against the numpy path on given rows.
"""

from __future__ import annotations

from typing import Any

import numpy as np

EQUAL, CODES, CUTS, UNIT = 0, 1, 2, 3


def _count(X, col, lo, hi, bins, rule, cut_at, cut_len, cuts, axes, strides, offsets, counts):  # type: ignore[no-untyped-def]
    n = X.shape[0]
    codes = np.empty((col.shape[0], n), np.int64)
    for s in range(col.shape[0]):
        j, low, high, b, kind = col[s], lo[s], hi[s], bins[s], rule[s]
        width = high - low
        for r in range(n):
            x = X[r, j]
            if not x >= low:  # NaN and values below to the lower bound (fmax)
                x = low
            if x > high:
                x = high
            if kind == CUTS:  # searchsorted(cuts, x, side="right")
                c = 0
                start = cut_at[s]
                for q in range(cut_len[s]):
                    if cuts[start + q] <= x:
                        c = q + 1
                    else:
                        break
                codes[s, r] = c
                continue
            if kind == CODES:
                t = np.rint(x) - low
            elif kind == UNIT:
                t = x * b
            else:
                t = (x - low) / width * b
            c = 0
            if t >= 0.0 and t < 9.2e18:  # NaN (an overflowing range) to bin 0, as numpy's cast and clip
                c = np.int64(t)
            if c > b - 1:
                c = b - 1
            codes[s, r] = c
    for q in range(axes.shape[0]):
        a0, a1, a2 = axes[q, 0], axes[q, 1], axes[q, 2]
        s1, s2, at = strides[q, 1], strides[q, 2], offsets[q]
        if a2 >= 0:
            for r in range(n):
                counts[at + (codes[a0, r] * s1 + codes[a1, r]) * s2 + codes[a2, r]] += 1
        elif a1 >= 0:
            for r in range(n):
                counts[at + codes[a0, r] * s1 + codes[a1, r]] += 1
        else:
            for r in range(n):
                counts[at + codes[a0, r]] += 1


_KERNEL: list[Any] = []
_NUMPY_PATH: list[Any] = []  # MarginalTables._joint_sum before install()


def kernel() -> Any:
    """The compiled kernel (``numba.njit``, cached on disk): imports numba on first use."""
    if not _KERNEL:
        import numba

        _KERNEL.append(numba.njit(cache=True, nogil=True, boundscheck=False)(_count))
    return _KERNEL[0]


def plan_arrays(fm: Any) -> tuple[tuple[np.ndarray, ...], np.ndarray, int]:
    """The kernel's arrays for map ``fm``'s joint tables, the joints' offsets and total cells."""
    specs: dict[tuple[int, int, Any], int] = {}
    joints = fm._joint
    axes = np.full((len(joints), 3), -1, np.int64)
    strides = np.ones((len(joints), 3), np.int64)
    offsets = np.zeros(len(joints), np.int64)
    total = 0
    for q, joint in enumerate(joints):
        blk = joint.block
        for k, (j, b) in enumerate(zip(blk.subset, blk.shape)):
            axes[q, k] = specs.setdefault((j, b, blk.column_cuts(k)), len(specs))
            strides[q, k] = b
        offsets[q] = total
        total += blk.size
    col, lo, hi, bins, rule, cut_at, cut_len, values = [], [], [], [], [], [], [], []
    for j, b, cuts in specs:
        low, high = float(fm.lower[j]), float(fm.upper[j])
        col.append(j)
        lo.append(low)
        hi.append(high)
        bins.append(b)
        cut_at.append(len(values))
        cut_len.append(0 if cuts is None else len(cuts))
        if cuts is not None:
            rule.append(CUTS)
            values.extend(float(c) for c in cuts)
        elif j in fm.categories:
            rule.append(CODES)
        else:
            rule.append(UNIT if (low, high) == (0.0, 1.0) else EQUAL)
    arrays = (
        np.asarray(col, np.int64),
        np.asarray(lo, np.float64),
        np.asarray(hi, np.float64),
        np.asarray(bins, np.int64),
        np.asarray(rule, np.int64),
        np.asarray(cut_at, np.int64),
        np.asarray(cut_len, np.int64),
        np.asarray([*values, 0.0], np.float64),
        axes,
        strides,
        offsets,
    )
    return arrays, offsets, total


def compiled_joint_sum(fm: Any, X: np.ndarray) -> np.ndarray:
    """``fm``'s exact cell counts of the rows ``X`` by the kernel, in ``fm``'s feature order."""
    cache = fm.__dict__.setdefault("_bench_compiled", [])
    if not cache:
        cache.append(plan_arrays(fm))
    arrays, offsets, total = cache[0]
    flat = np.zeros(total, np.int64)
    kernel()(np.ascontiguousarray(X, dtype=np.float64), *arrays, flat)
    sizes = [joint.block.size for joint in fm._joint]
    return fm._read_joints(flat[int(at) : int(at) + size] for at, size in zip(offsets, sizes))


def install() -> None:
    """Count every ``MarginalTables``' joint tables with the kernel in this process."""
    from opendp_sketch.features.marginals import MarginalTables

    if not _NUMPY_PATH:
        _NUMPY_PATH.append(MarginalTables._joint_sum)
    MarginalTables._joint_sum = lambda self, X, memo: compiled_joint_sum(self, X)  # type: ignore[method-assign]


def same_integers(fm: Any, X: np.ndarray) -> bool:
    """Whether the kernel gives the numpy path's integers for map ``fm`` on rows ``X``."""
    numpy_path = _NUMPY_PATH[0] if _NUMPY_PATH else type(fm)._joint_sum
    expected = numpy_path(fm, np.ascontiguousarray(X, dtype=np.float64), {"marginals.local": True})
    return bool(np.array_equal(compiled_joint_sum(fm, X), expected))
