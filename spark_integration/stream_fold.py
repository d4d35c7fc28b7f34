"""A streaming query's rows folded per time cell while they wait for the watermark (no Spark needed).

A query of time windows whose outputs are all ``max``, ``min``, ``sum``, ``count`` or ``mean`` keeps, per key,
its rows ahead of the watermark as one partial per *cell* (a grid every window boundary of every window of the
query falls on: the gcd of the slides, of ``range % slide`` and of ``offset % slide``) and per fold (``max``,
``min``, ``sum``, ``count``), not row by row: a micro-batch's rows of a key cross the state store as a few
partials a cell, once for all outputs. Released cells feed *primitive* operators per window (a
:class:`~spark_integration.stream_key.KeyWindows` step each, pre-aggregating as for one output): ``max`` and
``min`` over the cells' maxima and minima, ``sum`` over their sums, and ``count`` as a ``sum`` of their counts;
an output is then read from its window's primitives (``mean`` = sum / count). Under ``missing="skip"`` the
folds skip NaN (a cell of NaN alone has a NaN max, a zero sum and count) and an output is null where its
window has fewer than ``min_periods`` values (``max``/``min``/``mean``: fewer than one as well), ``count``
included, as the frames' query.

Examples
--------
>>> import numpy as np, pba_runtime as pr
>>> plan = FoldPlan.of([pr.TimeWindow(4_000, 2_000), pr.TimeWindow(6_000, 2_000)], [(0, "max"), (1, "mean")],
...                    "propagate", 1)
>>> plan.grid, plan.kinds, plan.primitives
(2000, ('count', 'max', 'sum'), ((0, 'max'), (1, 'count'), (1, 'sum')))
>>> cells = plan.fold(np.array([100, 2500, 900]), np.array([1.0, 5.0, 3.0]))
>>> cells[0].tolist(), cells[1]["max"].tolist(), cells[1]["count"].tolist()
([0, 2000], [3.0, 5.0], [2.0, 1.0])
>>> plan.unpack(plan.pack(cells))[1]["sum"].tolist()
[4.0, 5.0]
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

import pba_runtime as pr

__all__ = ["FOLDED_AGGS", "FoldPlan"]

#: The outputs a folded plan answers, and the folds each needs.
FOLDED_AGGS = {"max": ("max",), "min": ("min",), "sum": ("sum",), "count": ("count",), "mean": ("sum", "count")}


@dataclass(frozen=True)
class FoldPlan:
    """How a query's waiting rows are folded (:mod:`spark_integration.stream_fold`); picklable.

    Parameters
    ----------
    grid : int
        The cell length (ms): every window boundary is a multiple of it.
    kinds : tuple of str
        The folds kept per cell, sorted.
    primitives : tuple of (int, str)
        Per primitive operator: its window (an index into the query's windows) and its fold.
    outputs : tuple of (int, str)
        Per output: its window and its aggregation.
    skip : bool
        ``missing="skip"``: the folds skip NaN.
    min_periods : int
    """

    grid: int
    kinds: tuple[str, ...]
    primitives: tuple[tuple[int, str], ...]
    outputs: tuple[tuple[int, str], ...]
    skip: bool
    min_periods: int

    @classmethod
    def of(cls, windows: list[Any], outputs: list[tuple[int, str]], missing: str, min_periods: int) -> FoldPlan | None:
        """The plan of time ``windows`` (ms) and ``outputs`` ``(window, aggregation name)``, or ``None`` when
        an output is not one of :data:`FOLDED_AGGS`."""
        if not all(isinstance(w, pr.TimeWindow) for w in windows) or any(a not in FOLDED_AGGS for _, a in outputs):
            return None
        skip = missing == "skip"
        g = 0
        for w in windows:
            for x in (w.slide, w.range % w.slide, w.offset % w.slide):
                g = math.gcd(g, int(x))
        prims: dict[tuple[int, str], None] = {}
        for wi, a in outputs:
            for k in FOLDED_AGGS[a]:
                prims[(wi, k)] = None
            if skip:
                prims[(wi, "count")] = None  # the null rule counts values
        kinds = tuple(sorted({k for _, k in prims}))
        return cls(g, kinds, tuple(sorted(prims)), tuple(outputs), skip, min_periods)

    def step_agg(self, kind: str) -> tuple[str, str]:
        """``(aggregation, missing)`` of the primitive operator of fold ``kind`` (a count is a sum of counts;
        under skip a cell's max or min is NaN when it holds no value, and is skipped)."""
        if kind in ("max", "min"):
            return kind, "skip" if self.skip else "propagate"
        return "sum", "propagate"

    # ------------------------------------------------------------------ cells
    def fold(self, t: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Rows to cells: ``(cell starts, {fold: partials})``, cells in time order."""
        if len(t) and (t[1:] < t[:-1]).any():
            o = np.argsort(t, kind="stable")
            t, v = t[o], v[o]
        cell = (t // self.grid) * self.grid
        starts = np.flatnonzero(np.r_[True, cell[1:] != cell[:-1]]) if len(t) else np.empty(0, np.int64)
        nan = np.isnan(v) if self.skip else None
        out = {}
        for k in self.kinds:
            if k == "max":
                out[k] = (np.fmax if self.skip else np.maximum).reduceat(v, starts) if len(t) else np.empty(0)
            elif k == "min":
                out[k] = (np.fmin if self.skip else np.minimum).reduceat(v, starts) if len(t) else np.empty(0)
            elif k == "sum":
                x = np.where(nan, 0.0, v) if self.skip else v
                out[k] = np.add.reduceat(x, starts) if len(t) else np.empty(0)
            else:
                x = (~nan).astype(np.float64) if self.skip else np.ones(len(v))
                out[k] = np.add.reduceat(x, starts) if len(t) else np.empty(0)
        return cell[starts], out

    def merge(self, a: tuple[np.ndarray, dict], b: tuple[np.ndarray, dict]) -> tuple[np.ndarray, dict]:
        """Two sets of cells as one (a cell in both combined)."""
        if not len(a[0]):
            return b
        if not len(b[0]):
            return a
        t = np.concatenate([a[0], b[0]])
        o = np.argsort(t, kind="stable")
        t = t[o]
        starts = np.flatnonzero(np.r_[True, t[1:] != t[:-1]])
        out = {}
        for k in self.kinds:
            x = np.concatenate([a[1][k], b[1][k]])[o]
            op = {"max": np.fmax if self.skip else np.maximum, "min": np.fmin if self.skip else np.minimum}.get(
                k, np.add)
            out[k] = op.reduceat(x, starts)
        return t[starts], out

    def take(self, cells: tuple[np.ndarray, dict], mask: np.ndarray) -> tuple[np.ndarray, dict]:
        return cells[0][mask], {k: c[mask] for k, c in cells[1].items()}

    def pack(self, cells: tuple[np.ndarray, dict]) -> bytes:
        t, cols = cells
        return np.ascontiguousarray(t, np.int64).tobytes() + b"".join(
            np.ascontiguousarray(cols[k], np.float64).tobytes() for k in self.kinds)

    def unpack(self, blob: bytes | None) -> tuple[np.ndarray, dict]:
        if not blob:
            return np.empty(0, np.int64), {k: np.empty(0) for k in self.kinds}
        n = len(blob) // (8 * (1 + len(self.kinds)))
        t = np.frombuffer(blob, np.int64, n, 0).copy()
        return t, {k: np.frombuffer(blob, np.float64, n, 8 * n * (i + 1)).copy() for i, k in enumerate(self.kinds)}

    # ------------------------------------------------------------------ outputs
    def output_values(self, results: dict[tuple[int, str], np.ndarray]) -> list[np.ndarray]:
        """Each output's values (NaN where null) from its window's primitives' results (one array per
        ``(window, fold)``, over the same window ends)."""
        out = []
        mp = self.min_periods
        for wi, a in self.outputs:
            if a == "mean":
                c = results[(wi, "count")]
                with np.errstate(invalid="ignore", divide="ignore"):
                    val = results[(wi, "sum")] / c
                least = max(mp, 1)
            else:
                val = np.asarray(results[(wi, a)], np.float64)
                least = max(mp, 1) if a in ("max", "min") else mp
            if self.skip:
                val = np.where(results[(wi, "count")] < least, np.nan, val)
            out.append(val)
        return out
