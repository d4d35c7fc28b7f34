"""DABA, FlatFAT and SoE with their per-tuple step compiled: ``insert`` drives the stepwise loop.

The Python operators (:mod:`.daba`, :mod:`.flatfat`, :mod:`.soe`) keep their window state in Python
lists of partials and pay the interpreter on every ``insert``. Here the state lives in the
compiled loop's typed arrays (:class:`pba_runtime.kernels.stepwise.Stepper`: ``si`` its int64 scalars,
``sp`` its partials, the algorithm's rings or tree), and every entry point drives that loop:
``insert`` steps one tuple (one call into machine code), ``insert_many`` the whole batch, ``flush``
ends the stream. The loop is :class:`~.base.SlicedAggregator` and the algorithm's merger as the
Python operators step them, combine for combine, so the results are the Python operator's, bit for
bit, for any mix of ``insert``, ``insert_many`` and ``flush``.

Where it runs (:func:`compiled_step_for`): ``engine="compiled"`` runs it for the built-in aggregations
whose compiled form gives the Python operator's bits (every built-in but ``collect`` for DABA and
FlatFAT; ``sum``, ``count``, ``mean``, ``geomean`` for SoE: its compiled ``std`` is within an ulp or two
of the Python SoE's, not equal), and ``engine="auto"`` only where its ``insert`` is also faster
than the Python step's (``bench/bench_stepwise.py --insert``; ``auto``: DABA and FlatFAT, every one
of those; SoE on time windows only: over count windows one call into its loop costs about what the Python SoE's ``insert`` does). Never with
``allowed_lateness`` (the reorder buffer feeds partials lifted in Python) or without numba. User
aggregations and the rest run the Python operator; ``stats()["step"]`` says which step runs.

Inputs are checked as the Python operators check them, with their functions
(:func:`~.base.check_timestamp`, :func:`~.base.validate_timestamps`, the aggregation's own ``lift``
for a value that is not a float), before any state changes. Values reach the loop as the Python
operator's lift reads them: ``v + 0.0`` (so ``-0.0`` becomes ``0.0``), except where the Python
operator's fused per-tuple path passes a float through unchanged (count windows with slide 1,
``max``/``min``/``sum``), where ``-0.0`` stays ``-0.0`` as it does there.

**Snapshots.** DABA's and FlatFAT's compiled state converts to and from the Python operator's (DABA's
rings and six pointers, FlatFAT's heap-numbered tree with its empty flags, both one to one; the partials
are floats or tuples of floats): their ``snapshot()`` is the Python operator's, and either step restores
either's. SoE's does not convert (Python integers at a scale against the loop's 30-bit limbs): its
snapshot holds the compiled state, the slicing layer's counters, ``si``, ``sp`` and the algorithm's
arrays (copies, numpy arrays: picklable), marked ``"step": "compiled"``, and restores into a
compiled-step operator only; :meth:`WindowOperator.restore` of a Python-step operator refuses it with a
``ValueError`` that says so. A Python SoE's snapshot restores into a compiled-step SoE too: it then runs
the Python operator restored from it (the bits stay the Python ones; ``stats()["step"]`` is ``"python"``
and ``stats()["why"]`` says why).

Examples
--------
>>> import pba_runtime as pr
>>> op = pr.create("daba", pr.CountWindow(range=3, slide=1), "sum")
>>> [op.insert(v) for v in (1.0, 2.0, 3.0, 4.0)]
[[], [], [(3, 6.0)], [(4, 9.0)]]
>>> op.stats()["step"], op.stats()["engine"]
('compiled', 'compiled')
>>> op.insert_many([5.0, 6.0])[1].tolist()
[12.0, 15.0]
"""

from __future__ import annotations

import copy
from typing import Any, ClassVar

import numpy as np

from ..aggregations import BUILTIN_AGGREGATIONS, Aggregation, as_float_array
from ..kernels import Engine, compiled_available
from ..windows import CountWindow, TimeWindow
from .base import (
    SlicedAggregator,
    SlideOneInsert,
    WindowOperator,
    check_order,
    check_timestamp,
    no_timestamps,
)
from .daba import DABA
from .flatfat import EMPTY, FlatFAT, FlatFATAggregator
from .soe import SubtractOnEvict

__all__ = ["CompiledStep", "CompiledDABA", "CompiledFlatFAT", "CompiledSoE", "COMPILED_STEP", "compiled_step_for"]


class CompiledStep(WindowOperator):
    """One algorithm's operator whose state is the compiled per-tuple loop's (see the module doc).

    Parameters
    ----------
    window : CountWindow or TimeWindow
    agg : str or Aggregation
        A built-in the algorithm's compiled step supports (:func:`compiled_step_for`).
    """

    #: the Python operator this one steps as (its name, requirements and the slow reference)
    python: ClassVar[type[SlicedAggregator]]
    #: built-ins whose compiled step gives this algorithm's Python bits (``engine="compiled"``)
    aggregations: ClassVar[tuple[str, ...]] = ()
    #: those ``engine="auto"`` runs on the compiled step, per window kind (``"count"``, ``"time"``): where its
    #: ``insert`` is faster than the Python step's (``bench/bench_stepwise.py --insert``, ``docs/stepwise.md``)
    auto: ClassVar[dict[str, tuple[str, ...]]] = {}
    engines = ("compiled", "python")

    def __init__(self, window: CountWindow | TimeWindow, agg: str | Aggregation):
        super().__init__(window, agg)
        why = self.unavailable(self.window, self.agg, None)
        if why:
            raise ValueError(f"algorithm {self.name!r} has no compiled step for this operator: {why}")
        from ..kernels.stepwise import Stepper

        self.engine = Engine("compiled")
        self._py: SlicedAggregator | None = None  # set by restoring a Python-step snapshot
        self._why = ""
        st = self._st = Stepper(self.name, self.window, self.agg)
        self._run = st._mod.run
        self._vector = st.mono.result == "vector"
        self._int = st.mono.result == "int"
        self._non_negative = st.mono.non_negative
        self._positional = self.agg.positional
        # the Python operator's fused path (SlideOneInsert): a float reaches its merger as itself
        self._fast_float = (issubclass(self.python, SlideOneInsert) and not self._is_time and self._s == 1
                            and not self._positional and self.agg.float_passthrough)
        self._t_lo, self._t_hi = self.window.timestamp_range if self._is_time else (0, 0)
        self._x = np.zeros(1)
        self._t = np.zeros(1, dtype=np.int64)
        self._ts0 = np.zeros(0, dtype=np.int64)
        self._out = st.outputs(0)  # q + 8 windows: what one tuple can complete
        self._bind()

    # ------------------------------------------------------------------ where it runs
    @classmethod
    def unavailable(cls, window: CountWindow | TimeWindow, agg: Aggregation, allowed_lateness: int | None) -> str:
        """Why this algorithm's compiled step cannot run ``window`` and ``agg`` (``""``: it can)."""
        if allowed_lateness is not None:
            return "allowed_lateness feeds the operator partials lifted in Python (its reorder buffer)"
        if BUILTIN_AGGREGATIONS.get(agg.name) is not agg:
            return f"aggregation {agg.name!r} is not a built-in (user aggregations run the Python step)"
        if agg.name not in cls.aggregations:
            return (f"its compiled step gives the Python operator's bits for {', '.join(cls.aggregations)}; "
                    f"not for {agg.name!r}")
        if not compiled_available():
            return "numba does not import here"
        return ""

    def _bind(self) -> None:
        st = self._st
        oe, orr, lat = self._out
        self._mid = (st.si, st.sp, st._ida, *st.arrays)
        # insert's call: everything but the value (and the timestamp) is fixed
        self._args1 = (self._x, self._t, 0, 1, *self._mid, oe, orr, lat, 0, False, st.params)

    # ------------------------------------------------------------------ per tuple
    def insert(self, value: Any, timestamp: int | None = None) -> list[tuple[int, Any]]:
        """Insert one tuple; return ``(window_end, result)`` for each window it completes."""
        if self._py is not None:
            return self._py.insert(value, timestamp)
        if self._flushed or self._closed:
            self._check_open()
        if self._is_time:
            t = timestamp
            if t.__class__ is not int or not self._t_lo <= t <= self._t_hi:  # (an int in range: what it accepts)
                t = check_timestamp(timestamp, self.window)
            if self._t_last is not None and t < self._t_last:
                check_order(t, self._t_last)
            self._t[0] = t
        elif timestamp is not None:
            no_timestamps(timestamp, self.window)
        if value.__class__ is float and (self._fast_float or not self._non_negative or value >= 0.0):
            self._x[0] = value if self._fast_float else value + 0.0  # (the Python lift's v + 0.0: -0.0 is 0.0)
        else:
            self._x[0] = self._value(value, t if self._is_time else self._n)
        i, no, ev = self._run(*self._args1)
        if ev:  # the output is full (a time window's gap completed more than q + 8 windows): rare
            if i:
                raise AssertionError("the compiled step stopped after the tuple with its output full")
            ends, res = self._steps(self._x, self._t if self._is_time else None, False)
            return list(zip(ends.tolist(), self._lowered(res)))
        self._n += 1
        if self._is_time:
            self._t_last = t
        if not no:
            return []
        self._emitted += no
        oe, orr, _ = self._out
        if no == 1 and not self._vector:
            r = orr.item(0)
            return [(oe.item(0), int(r) if self._int else r)]
        return list(zip(oe[:no].tolist(), self._lowered(orr[:no])))

    def _value(self, value: Any, pos: Any) -> float:
        """A value that is not a plain float, read as the Python operator's lift reads it (its errors too)."""
        agg = self.agg
        if self._positional:
            agg.lift(value, pos)
        else:
            agg.lift(value)
        if self._fast_float and value.__class__ is float:
            return value
        return float(value + 0.0)

    def _lowered(self, res: np.ndarray) -> list:
        if self._vector:
            return [np.array(r) for r in res]
        if self._int:
            return [int(r) for r in res.tolist()]
        return res.tolist()

    # ------------------------------------------------------------------ batches
    def insert_many(self, values: Any, timestamps: Any = None) -> tuple[np.ndarray, Any]:
        """Insert a batch; return ``(ends, results)`` (as the Python operator's ``insert_many``)."""
        if self._py is not None:
            return self._py.insert_many(values, timestamps)
        values, ts = self._batch_input(values, timestamps)
        vals = as_float_array(values, agg_name=self.agg.name, missing=self.agg.missing)
        if self._non_negative and (vals < 0).any():
            j = int(np.argmax(vals < 0))
            self._value(vals[j].item(), None if ts is None else int(ts[j]))  # the Python lift's error
        vals = vals + 0.0  # the Python operator lifts each value (``v + 0.0``: -0.0 is 0.0), also on its fused path
        ends, res = self._steps(vals, ts, False)
        return ends, self._packed(res)

    def _steps(self, vals: np.ndarray, ts: np.ndarray | None, final: bool) -> tuple[np.ndarray, np.ndarray]:
        """Step ``vals`` (and ``ts``) through the loop, growing the output as needed; ``final`` ends the stream."""
        st = self._st
        oe, orr, lat = st.outputs(len(vals)) if len(vals) or final else self._out
        tsa = ts if ts is not None else self._ts0
        i = no = 0
        hi = len(vals)
        while True:
            i, no, ev = self._run(vals, tsa, i, hi, *self._mid, oe, orr, lat, no, final, st.params)
            if ev == 0:
                break
            oe = np.concatenate([oe, np.empty_like(oe)])
            orr = np.concatenate([orr, np.empty_like(orr)])
        self._n += hi
        if ts is not None and hi:
            self._t_last = int(ts[-1])
        self._emitted += no
        return oe[:no].copy(), orr[:no].copy()

    def _packed(self, res: np.ndarray) -> Any:
        if self._int:
            return res.astype(np.int64)
        return res

    def flush(self) -> tuple[np.ndarray, Any]:
        """End of stream: emit what it completes (time windows still holding tuples)."""
        if self._py is not None:
            return self._py.flush()
        if self._flushed and not self._closed:
            return self._packed_empty()
        self._check_open()
        if self._is_time:
            ends, res = self._steps(np.zeros(0), self._ts0, True)
        else:
            ends, res = np.zeros(0, dtype=np.int64), self._empty_results()
        self._flushed = True
        return ends, self._packed(res)

    def _empty_results(self) -> np.ndarray:
        return self._out[1][:0].copy()

    def _packed_empty(self) -> tuple[np.ndarray, Any]:
        return np.zeros(0, dtype=np.int64), self._packed(self._empty_results())

    # ------------------------------------------------------------------ what the reorder buffer would call
    def lift_all(self, values: Any, timestamps: np.ndarray | None) -> list:
        raise ValueError(f"the compiled step of {self.name!r} keeps no Python partials; an operator with "
                         f"allowed_lateness runs the Python step (pr.create(..., engine='python'))")

    def insert_lifted(self, partial: Any, timestamp: int | None) -> list[tuple[int, Any]]:
        return self.lift_all([], None)

    # ------------------------------------------------------------------ state
    def close(self) -> None:
        if self._py is not None:
            self._py.close()
        super().close()

    def _check_open(self) -> None:
        if self._py is not None:
            self._py.check_open()
        super()._check_open()

    @property
    def flushed(self) -> bool:
        return self._py.flushed if self._py is not None else self._flushed

    @property
    def emitted(self) -> int:
        return self._py.emitted if self._py is not None else self._emitted

    #: whether the merger's state converts to and from the Python operator's (DABA: its rings and pointers map
    #: one to one): then a snapshot is the Python operator's, and either step restores it
    converts: ClassVar[bool] = False

    def snapshot(self) -> dict[str, Any]:
        """A picklable copy of the state (see the module doc): the Python operator's form where the merger
        converts (DABA), else the compiled loop's (``"step": "compiled"``)."""
        if self._py is not None:
            return self._py.snapshot()
        if self.converts:
            return super().snapshot()  # self._get_state(): the Python operator's state, converted
        st = self._st
        return {**self._snapshot_header(), "step": "compiled",
                "state": {"n": self._n, "t_last": self._t_last, "emitted": self._emitted, "flushed": self._flushed,
                          "si": st.si.copy(), "sp": st.sp.copy(), "arrays": [a.copy() for a in st.arrays]}}

    def restore(self, state: dict[str, Any]) -> WindowOperator:
        """Load a :meth:`snapshot` of this algorithm, window and aggregation (either step); returns ``self``."""
        if isinstance(state, dict) and state.get("step") == "compiled":
            self._check_snapshot(state)  # version, algorithm, window, aggregation
            d = state["state"]
            st = self._st
            mine, theirs = (st.si, st.sp, *st.arrays), (d["si"], d["sp"], *d["arrays"])
            if len(theirs) != len(mine) or any(np.shape(b) != a.shape for a, b in zip(mine, theirs)):
                raise ValueError("state is a compiled-step snapshot of another layout; take it again")
            for a, b in zip(mine, theirs):
                a[...] = b
            self._n, self._t_last, self._emitted, self._flushed = d["n"], d["t_last"], d["emitted"], d["flushed"]
            self._leave_python_step()
            return self
        if self.converts:
            self._check_snapshot(state)
            self._set_state(copy.deepcopy(state["state"]))
            self._leave_python_step()
            return self
        py = self.python(self.window, self.agg)
        py.restore(state)  # its checks and errors
        self._leave_python_step()
        self._py = py
        self._why = "restored from a snapshot of the Python step: it runs on the Python step"
        return self

    def _leave_python_step(self) -> None:
        """Close the Python operator a restored Python snapshot left running, if any: the loop runs again."""
        if self._py is not None:
            self._py.close()
            self._py = None
            self._why = ""

    # ------------------------------------------------------------------ the Python operator's state (converts)
    def _part(self, row: Any) -> Any:
        """A partial of the loop (a row of ``sp`` or of a ring) as the Python operator holds it."""
        return float(row) if self._st.mono.width == 0 else tuple(row.tolist())

    def _get_state(self) -> dict[str, Any]:
        """The slicing layer's fields of the Python operator's state, from the loop's scalars and partials."""
        st = self._st
        c = st.counter
        return {"_n": self._n, "_t_last": self._t_last, "_emitted": self._emitted, "_flushed": self._flushed,
                "_cur": self._part(st.sp[0]), "_head": self._part(st.sp[1]), "_fill": c("fill"),
                "_slice": c("slc") if c("has_slice") else None, "_next_k": c("next_k"), "_front": c("front"),
                "_back": c("back")}

    def _set_state(self, d: dict[str, Any]) -> None:
        """Load the slicing layer's fields of a Python operator's state into the loop (the inverse of ``_get_state``)."""
        st = self._st
        self._n, self._t_last, self._emitted, self._flushed = d["_n"], d["_t_last"], d["_emitted"], d["_flushed"]
        st.si[:] = 0
        for name, v in (("n", d["_n"]), ("fill", d["_fill"]), ("front", d["_front"]), ("back", d["_back"]),
                        ("next_k", d["_next_k"]), ("slc", d["_slice"] or 0), ("has_slice", d["_slice"] is not None),
                        ("t_last", d["_t_last"] or 0)):
            st.si[st._int(name)] = int(v)
        st.sp[0] = d["_cur"]
        st.sp[1] = d["_head"]

    def stats(self) -> dict[str, Any]:
        if self._py is not None:
            st = self._py.stats()
            st.update(step="python", why=self._why)
            return st
        st = super().stats()
        st.update(self._st.stats())
        st.update(algorithm=self.name, tuples=self._n, step="compiled")
        return st

    def state_bytes(self) -> int:
        if self._py is not None:
            return self._py.state_bytes()
        st = self._st
        return st.si.nbytes + st.sp.nbytes + sum(a.nbytes for a in st.arrays)


class CompiledDABA(CompiledStep):
    """DABA (:class:`~.daba.DABA`) with its state in the compiled loop's two rings."""

    name = "daba"
    python = DABA
    converts = True
    aggregations = ("max", "min", "sum", "count", "mean", "std", "geomean", "argmax", "moment_sketch")
    auto = {"count": aggregations, "time": aggregations}

    def _get_state(self) -> dict[str, Any]:
        st = super()._get_state()
        c = self._st.counter
        ptr = F, L, R, A, B, E = tuple(c(x) for x in ("F", "L", "R", "A", "B", "E"))
        vals, aggs = self._st.arrays
        mask = len(vals) - 1
        st["daba"] = {"ptr": ptr, "vals": [self._part(vals[p & mask]) for p in range(F, E)],
                      "aggs": [self._part(aggs[p & mask]) for p in range(F, E)], "flips": c("flips")}
        return st

    def _set_state(self, st: dict[str, Any]) -> None:
        d = st["daba"]
        ptr = F, L, R, A, B, E = d["ptr"]
        vals, aggs = self._st.arrays
        if E - F > len(vals) or len(d["vals"]) != E - F or len(d["aggs"]) != E - F:
            raise ValueError(f"state holds {E - F} slices in DABA's rings; this window holds at most {len(vals)}")
        super()._set_state(st)
        mask = len(vals) - 1
        for k, (v, a) in enumerate(zip(d["vals"], d["aggs"]), F):
            vals[k & mask] = v
            aggs[k & mask] = a
        for name, x in zip(("F", "L", "R", "A", "B", "E", "flips"), ptr + (d["flips"],)):
            self._st.si[self._st._int(name)] = x


class CompiledFlatFAT(CompiledStep):
    """FlatFAT (:class:`~.flatfat.FlatFATAggregator`) with its tree in the compiled loop's arrays."""

    name = "flatfat"
    python = FlatFATAggregator
    aggregations = ("max", "min", "sum", "count", "mean", "std", "geomean", "argmax", "moment_sketch")
    auto = {"count": aggregations, "time": aggregations}
    converts = True

    # The tree is heap-numbered on both steps (node v at index v, leaf i at cap + i); the loop flags a
    # node empty (``tf``) where the Python tree holds EMPTY. The Python aggregator's pending dirty slots
    # are the loop's ``d0``/``d1`` (the loop repairs the first two when a third arrives); a node's value is
    # combine(its children) once repaired, whatever the grouping of the repairs, so more than two pending
    # slots are repaired first, as the loop would have. ``combines`` (a Python counter) is not kept: 0.
    def _get_state(self) -> dict[str, Any]:
        st = super()._get_state()
        c = self._st.counter
        tv, tf, _ = self._st.arrays
        cap = c("fcap")
        nodes = [EMPTY] + [self._part(tv[v]) if tf[v] else EMPTY for v in range(1, 2 * cap)]
        st["flatfat"] = {"tree": {"nodes": nodes, "combines": 0}, "slot0": c("slot0"), "span": c("span"),
                         "count": c("count"), "dirty": [d for d in (c("d0"), c("d1")) if d >= 0],
                         "resizes": c("resizes"), "compacts": 0}
        return st

    def _set_state(self, st: dict[str, Any]) -> None:
        d = st["flatfat"]
        nodes = d["tree"]["nodes"]
        tv, tf, _ = self._st.arrays
        cap = len(nodes) // 2
        if 2 * cap > len(tf) or cap & (cap - 1) or d["compacts"]:
            raise ValueError(f"state holds a FlatFAT of {cap} slots (or compacted, non-FIFO); this window's "
                             f"compiled tree holds at most {len(tf) // 2}")
        dirty = list(d["dirty"])
        if len(dirty) > 2:
            fat = FlatFAT.from_state(self.agg.combine, d["tree"])
            fat.repair(dirty)
            nodes, dirty = fat.state()["nodes"], []
        super()._set_state(st)
        tf[:] = 0
        for v in range(1, 2 * cap):
            x = nodes[v]
            if x is not EMPTY:
                tv[v] = x
                tf[v] = 1
        dirty += [-1, -1]
        for name, x in (("fcap", cap), ("slot0", d["slot0"]), ("span", d["span"]), ("count", d["count"]),
                        ("d0", dirty[0]), ("d1", dirty[1]), ("resizes", d["resizes"])):
            self._st.si[self._st._int(name)] = x


class CompiledSoE(CompiledStep):
    """SoE (:class:`~.soe.SubtractOnEvict`) with its exact accumulators in the compiled loop's limbs."""

    name = "soe"
    python = SubtractOnEvict
    requires = SubtractOnEvict.requires
    aggregations = ("sum", "count", "mean", "geomean")
    # count windows: one call into the loop costs about what the Python SoE's insert does; time windows:
    # the loop is faster (bench/bench_stepwise.py --insert)
    auto = {"time": aggregations}


#: algorithm name -> its compiled-step operator
COMPILED_STEP: dict[str, type[CompiledStep]] = {c.name: c for c in (CompiledDABA, CompiledFlatFAT, CompiledSoE)}


def compiled_step_for(algorithm: str, window: CountWindow | TimeWindow, agg: Aggregation, engine: str,
                      allowed_lateness: int | None = None) -> type[CompiledStep] | None:
    """The compiled-step operator ``create`` builds for ``algorithm`` (``None``: the Python operator).

    ``engine="python"`` always gets the Python operator, ``"auto"`` the compiled step where it runs
    (see the module doc), ``"compiled"`` the compiled step or a ``ValueError`` saying why not.
    """
    cls = COMPILED_STEP.get(algorithm)
    if cls is None or engine == "python" or not all(getattr(agg, attr) for attr, _ in cls.requires):
        return None  # (the Python operator raises its own error for a missing capability)
    why = cls.unavailable(window, agg, allowed_lateness)
    kind = "time" if isinstance(window, TimeWindow) else "count"
    if not why and engine == "auto" and agg.name not in cls.auto.get(kind, ()):
        why = f"its insert is no faster than the Python step's for {agg.name!r} over {kind} windows (docs/stepwise.md)"
    if not why:
        return cls
    if engine == "compiled":
        raise ValueError(f"engine='compiled' is not available for algorithm {algorithm!r} here: {why}")
    return None
