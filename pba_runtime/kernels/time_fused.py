"""The fused time-window batch: slicing, gaps, slice folds, PBA's lcs/csa and every window, in one compiled call.

The per-tuple slicing layer (:meth:`pba_runtime.algorithms.base.SlicedAggregator._step_time` and
``_advance``) run as one loop in machine code over a batch of ``(timestamp, partial)``, in blocked
form. Slices are laid out in PBA's rows of ``q``, aligned at the episode's first window; the loop
works a row at a time:

- *fold*: the row's tuples fold into the open slice (its head, units ``< m``, or the rest), with no
  division (timestamps are sorted); a tuple in the next slice of the row closes the open one, which
  is a store and a counter: no window work per slice;
- *event*: a tuple past the row or after a gap, a tuple whose first window begins after the last
  tuple's slice (it ends the *episode*: every window holding an older tuple is emitted, then the
  slicing restarts), or the end of the batch. Only then are windows computed: the previous row's
  (``lcs[j] (+) csa[j-1]``, ``lcs[0]`` for column 0, ``(+)`` the head of slice ``k+q`` when
  ``m > 0``), the csa a chain over the current row, and the current row's lcs once it is full
  (the common full row: both chains in one loop, ``_emit_lcs``; a full row with columns without a
  tuple or windows already out: the two chains side by side too, ``_emit_then_lcs``). The csa is a
  constant past the row's last tuple (``a (+) ident`` is idempotent), so the windows of a gap or a
  drain are a loop without a chain;
  a row's lcs chains only over the columns that may hold a tuple; empty slices are filled in bulk.

Loops that may vectorise index views from ``range(0, ...)``: numba adds no wraparound to such an
index (with ``range(i0, i1)`` the windows' loop compiled to gathers and scatters, 4x slower). The
scratch: two rows of slices, two rows' lcs, one row of heads.

Between batches the operator keeps its usual state (the slices ``[next_k, S)`` of the pending
windows, the open slice's head and rest, ``S``, ``next_k``); a batch re-aligns its rows at its
first pending window, so any split gives the per-tuple windows, with ``max``/``min``/``count``/
``argmax`` bit for bit and float sums to rounding (the spec's rule). The end-of-stream flush is
the same call with ``flush`` set (with or without tuples: ``sliding_aggregate`` runs its batch and
flush as one call): the open windows are drained in the loop.

A long batch may be cut at an episode's end and run as two calls side by side (episodes share no state):
:func:`episode_cut` finds the cut, :func:`part_windows` counts the first part's windows so that the
second part's go right after them (``PBA._fused_halves`` runs the parts; ``SPLIT_MIN``).

A call stops at an event when fewer than ``2q + 2`` result rows are left (an event emits at most
``2q`` windows), with its row in the state vector (``RESUME``); the caller gives it a larger
result array and calls again until ``DONE``.

Partials are values the loop keeps in registers (``ld``/``sto``/``comb`` move and combine them): a
float combined by a code of :mod:`.compiled` (``max``, ``min``, ``sum``, ``count``, ``ufunc=``
aggregations), a pair of sums (``mean``, ``geomean``), ``argmax``'s ``(value, position)`` and
``std``'s ``(n, mean, M2, lo)`` (Chan et al.'s merge, as ``aggregations._chan``). Each kind of partial has
a kernel of its own (``run_max``, ``run_add``, ..., ``run_std``): the kind reaches the helpers as a
literal, and numba's ``overload`` writes out that kind's combine, load and store, so no code is
tested per combine and a kernel compiles only its own. The helpers are plain calls (LLVM inlines what
pays; numba's own inlining, ``inline="always"``, took most of a compile), without numba's reference
counting (``_nrt=False``: nothing is allocated inside, and the counts of the views handed to the
helpers cost ~40% of a slice). ``std``'s and ``mean``'s kernels read the batch's values and lift each
one as they fold it (``LIFTED``). The slow reference is the operator's episode path (``PBA._episode``,
numpy or compiled merge); ``tests/test_kernels.py`` checks fast == slow.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.extending import overload

from .compiled import _JIT, ADD, FMAX, MAX, MIN, MUL, _argmax, _chan
from .lean_load import lean_loads
from .stepwise.index import uidx

__all__ = ["runner", "RUNNERS", "LIFTED", "LOWERED", "timestamps_ok", "episode_cut", "part_windows", "SPLIT_MIN",
           "LANES_MIN", "FUSE_ROWS", "STATE", "LANES", "FUSE", "HAVE", "SLICE", "NEXT_K", "BASE", "WINDOWS",
           "NEXT_TUPLE", "HIST", "DONE"]

# the int64 state vector a call reads and writes
HAVE, SLICE, NEXT_K, BASE, RO, FR, LR, WINDOWS, NEXT_TUPLE, HIST, RESUME, DONE, LANES, FUSE = range(14)
STATE = 14

# The kind of partial a kernel is compiled for: a scalar combine code of :mod:`.compiled` (ADD .. FMIN),
# or one of these. Passed down as a literal, so each kernel holds one combine, written out where it is used.
PAIR, ARGMAX, STD = 6, 7, 8
_WIDTH = {PAIR: 2, ARGMAX: 2, STD: 4}  # floats per partial (scalars: 1-D arrays)
# compiled lifts (:class:`pba_runtime.kernels.CompiledKernel`) the kernels do themselves: given the
# values, a 1-D array, they read each value as its partial (the same floats as the lift writes), so
# the batch's partials (32 bytes a value for std) are never written nor read
LIFTED = ("lift_std", "lift_pair")
# and lowers: given a 1-D result array, they store each window's lowered result (std's ``sqrt(M2 / (n -
# 1))``, mean's ratio: the arithmetic of the compiled lower), not its partial
LOWERED = ("lower_std", "lower_ratio")
# helpers: plain calls (LLVM inlines what pays), no reference counting (views are passed, nothing allocated)
_HELPER = {**_JIT, "_nrt": False}


def _kind(K):
    """The literal kind of a helper's ``K`` argument, or ``None`` (numba then retries with the literal)."""
    return K.literal_value if isinstance(K, types.IntegerLiteral) else None


# A partial as a value the loop keeps in registers: a float, or a tuple of floats. ``ld``/``sto`` move
# it from/to row ``i`` of an array, ``comb`` combines two; each resolved at compile time from the kind
# ``K`` (numba's ``overload``), so a kernel holds its own combine only (no code tested per combine).
def ld(a, i, K):
    """Row ``i`` of ``a`` as a partial of kind ``K``."""


def sto(a, i, v, K):
    """Store partial ``v`` of kind ``K`` at row ``i`` of ``a``."""


def comb(a, b, K):
    """Two partials of kind ``K`` combined."""


@overload(ld, prefer_literal=True, jit_options=_HELPER)
def _ld(a, i, K):
    k = _kind(K)
    if k is None:
        return None
    w = _WIDTH.get(k, 0)
    if w == 0:
        return lambda a, i, K: a[i]
    if a.ndim == 1:  # the batch's values, lifted here (see LIFTED): std's (1, x, 0, 0), mean's (x, 1)
        if k == STD:
            return lambda a, i, K: (1.0, a[i], 0.0, 0.0)
        if k == PAIR:
            return lambda a, i, K: (a[i], 1.0)
        return None
    if w == 2:
        return lambda a, i, K: (a[i, 0], a[i, 1])
    return lambda a, i, K: (a[i, 0], a[i, 1], a[i, 2], a[i, 3])


@overload(sto, prefer_literal=True, jit_options=_HELPER)
def _sto(a, i, v, K):
    k = _kind(K)
    if k is None:
        return None
    w = _WIDTH.get(k, 0)
    if w == 0:
        def store1(a, i, v, K):
            a[i] = v
        return store1
    if a.ndim == 1:  # the results, lowered as they are stored (see LOWERED)
        if k == STD:
            def store_std(a, i, v, K):  # compiled.lower_std's arithmetic
                n = v[0]
                mu = v[1]
                a[i] = np.sqrt(v[2] / (n - 1.0)) if (n > 1.0 and mu - mu == 0.0) else np.nan
            return store_std
        if k == PAIR:
            def store_ratio(a, i, v, K):  # compiled.lower_ratio's
                a[i] = v[0] / v[1]
            return store_ratio
        return None
    if w == 2:
        def store2(a, i, v, K):
            a[i, 0] = v[0]
            a[i, 1] = v[1]
        return store2

    def store4(a, i, v, K):
        a[i, 0] = v[0]
        a[i, 1] = v[1]
        a[i, 2] = v[2]
        a[i, 3] = v[3]
    return store4


@overload(comb, prefer_literal=True, jit_options=_HELPER)
def _comb(a, b, K):
    """The combines of :mod:`.compiled` (``c_add``, ``c_max``, ...), two sums (``mean``'s and
    ``geomean``'s partials: the only two-column built-ins), ``argmax``'s and Chan et al.'s update."""
    k = _kind(K)
    if k is None:
        return None
    if k == ADD:
        return lambda a, b, K: a + b
    if k == MAX:
        return lambda a, b, K: a if (a >= b or a != a) else b
    if k == MIN:
        return lambda a, b, K: a if (a <= b or a != a) else b
    if k == MUL:
        return lambda a, b, K: a * b
    if k == FMAX:
        return lambda a, b, K: a if (a >= b or b != b) else b
    if k == PAIR:
        return lambda a, b, K: (a[0] + b[0], a[1] + b[1])
    if k == ARGMAX:
        return lambda a, b, K: _argmax(a[0], a[1], b[0], b[1])
    if k == STD:
        return lambda a, b, K: _chan(a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3])
    return lambda a, b, K: a if (a <= b or b != b) else b  # FMIN


@njit(**_HELPER)
def _fill(a, i0, i1, v, K):
    """``a[i0:i1] = v``, through a view: an index from ``range(0, ...)`` is known not negative, so
    numba adds no wraparound to it and the loop vectorises (with ``range(i0, i1)`` it became a scatter)."""
    seg = a[i0:i1]
    for e in range(seg.shape[0]):
        sto(seg, e, v, K)


@njit(**_HELPER)
def _emit(out, ends, w, k0, jn, j_end, lcs, ring, ro, hd, m, lr, end0, s, K):
    """Windows ``k0 + j``, ``j`` in ``[jn, j_end)``, of the previous row, into ``out[w:]``: ``lcs[j] (+)
    csa[j - 1]`` (``lcs[0]`` for column 0) ``(+) hd[j]`` (``m > 0``), the csa over the current row (at
    ``ring[ro:]``) as a chain. Columns ``>= lr`` of the current row are the identity, and ``a (+) ident``
    is idempotent (``(a (+) ident) (+) ident == a (+) ident``, bit for bit, for every covered layout):
    from column ``lr + 1`` on the csa is a constant, and the windows there are one loop without a chain.
    Returns ``w`` after them."""
    j = max(jn, 0)
    if j >= j_end:
        return w
    if j == 0:
        v = ld(lcs, 0, K)
        sto(out, w, comb(v, ld(hd, 0, K), K) if m else v, K)
        ends[w] = end0 + k0 * s
        w += 1
        j = 1
    jc = max(lr, 0) + 2  # the csa before column j is constant for j >= jc
    run = ld(ring, ro, K)  # the csa up to column j - 1 (resumed past column 0: jn > 1 is rare)
    for c in range(1, min(j - 1, jc - 1) + 1):
        run = comb(run, ld(ring, ro + c, K), K)
    jj = min(j_end, jc)
    o = w - j  # out index of column j is o + j
    e0 = end0 + k0 * s
    while j < jj:  # (one body for m and not: each inlined combine costs compile time)
        u = uidx(j)  # (j >= 1, o + j >= 0: unsigned subscripts)
        v = comb(ld(lcs, u, K), run, K)
        sto(out, uidx(o + j), comb(v, ld(hd, u, K), K) if m else v, K)
        ends[uidx(o + j)] = e0 + j * s
        run = comb(run, ld(ring, uidx(ro + j), K), K)
        j += 1
    # the rest: no chain, through views (see _fill)
    j = min(j, j_end)
    ov = out[o + j : o + j_end]
    lv = lcs[j:j_end]
    if m:
        hv = hd[j:j_end]
        for u in range(ov.shape[0]):
            sto(ov, u, comb(comb(ld(lv, u, K), run, K), ld(hv, u, K), K), K)
    else:  # (a loop of its own: it vectorises)
        for u in range(ov.shape[0]):
            sto(ov, u, comb(ld(lv, u, K), run, K), K)
    ev = ends[o + j : o + j_end]
    e1 = e0 + j * s
    for u in range(ev.shape[0]):
        ev[u] = e1 + u * s
    return o + j_end


@njit(**_HELPER)
def _emit_lcs(out, ends, w, k0, lcs_prev, lcs_cur, ring, ro, hd, m, q, end0, s, K):
    """A full row whose every column may hold a tuple, the previous row's windows all pending: those
    ``q`` windows (:func:`_emit`'s chain) and the row's lcs (:func:`_lcs`'s chain, into ``lcs_cur``)
    in one loop, two independent chains side by side. Returns ``w`` after the windows."""
    rv = ring[ro : ro + q]
    ov = out[w : w + q]
    ev = ends[w : w + q]
    acc = ld(rv, q - 1, K)
    sto(lcs_cur, q - 1, acc, K)
    v = ld(lcs_prev, 0, K)
    sto(ov, 0, comb(v, ld(hd, 0, K), K) if m else v, K)
    run = ld(rv, 0, K)
    e0 = end0 + k0 * s
    for j in range(1, q):  # (unsigned subscripts: every index here is >= 0)
        b = uidx(q - 1 - j)
        u = uidx(j)
        acc = comb(ld(rv, b, K), acc, K)
        sto(lcs_cur, b, acc, K)
        v = comb(ld(lcs_prev, u, K), run, K)
        sto(ov, u, comb(v, ld(hd, u, K), K) if m else v, K)
        run = comb(run, ld(rv, u, K), K)
    for j in range(q):
        ev[j] = e0 + j * s
    return w + q


@njit(**_HELPER)
def _lcs(ring, ro, lcs, fr, lr, q, K):
    """The lcs of the full row at ``ring[ro:]`` into ``lcs``. ``[fr, lr)``: the columns that may hold
    a tuple; the lcs is a chain over those only, the identity after them and a constant before
    (``ident (+) a`` is ``a``, up to the sign of a zero sum)."""
    lv = lcs[lr:q]  # the identity (views: see _fill)
    rv = ring[ro + lr : ro + q]
    for u in range(lv.shape[0]):
        sto(lv, u, ld(rv, u, K), K)
    if lr == 0:  # no column holds a tuple
        fr = 0
        lr = 1
    acc = ld(ring, ro + lr - 1, K)
    sto(lcs, lr - 1, acc, K)
    for jj in range(lr - 2, fr - 1, -1):  # (jj >= fr >= 0)
        acc = comb(ld(ring, uidx(ro + jj), K), acc, K)
        sto(lcs, uidx(jj), acc, K)
    for jj in range(fr):
        sto(lcs, jj, acc, K)


@njit(**_HELPER)
def _emit_then_lcs(out, ends, w, k0, jn, lcs_prev, lcs_cur, ring, ro, hd, m, fr, lr, q, end0, s, K):
    """:func:`_emit` of the previous row's windows ``[jn, q)`` then :func:`_lcs` of the current row (into
    ``lcs_cur``), for a full row that is not :func:`_emit_lcs`'s (some columns hold no tuple, or some
    windows were emitted): the two chains (the csa forward, the lcs backward) side by side in one loop.
    Each chain does the same operations in the same order as in those two, and they share nothing
    they write, so the bits are theirs. Returns ``w`` after the windows."""
    # the lcs's start (as _lcs)
    lv = lcs_cur[lr:q]
    rv = ring[ro + lr : ro + q]
    for u in range(lv.shape[0]):
        sto(lv, u, ld(rv, u, K), K)
    jc = max(lr, 0) + 2  # (_emit's: the csa before column j is constant for j >= jc)
    if lr == 0:
        fr = 0
        lr = 1
    acc = ld(ring, ro + lr - 1, K)
    sto(lcs_cur, lr - 1, acc, K)
    jl = lr - 2  # the lcs's next column, down to fr
    # the windows' start (as _emit, with j_end = q)
    j = max(jn, 0)
    if j < q:
        if j == 0:
            v = ld(lcs_prev, 0, K)
            sto(out, w, comb(v, ld(hd, 0, K), K) if m else v, K)
            ends[w] = end0 + k0 * s
            w += 1
            j = 1
        run = ld(ring, ro, K)
        for c in range(1, min(j - 1, jc - 1) + 1):
            run = comb(run, ld(ring, ro + c, K), K)
        jj = min(q, jc)
        o = w - j
        e0 = end0 + k0 * s
        while j < jj and jl >= fr:  # both chains
            u = uidx(j)
            v = comb(ld(lcs_prev, u, K), run, K)
            sto(out, uidx(o + j), comb(v, ld(hd, u, K), K) if m else v, K)
            ends[uidx(o + j)] = e0 + j * s
            run = comb(run, ld(ring, uidx(ro + j), K), K)
            j += 1
            acc = comb(ld(ring, uidx(ro + jl), K), acc, K)
            sto(lcs_cur, uidx(jl), acc, K)
            jl -= 1
        while j < jj:
            u = uidx(j)
            v = comb(ld(lcs_prev, u, K), run, K)
            sto(out, uidx(o + j), comb(v, ld(hd, u, K), K) if m else v, K)
            ends[uidx(o + j)] = e0 + j * s
            run = comb(run, ld(ring, uidx(ro + j), K), K)
            j += 1
        ov = out[o + j : o + q]
        lv = lcs_prev[j:q]
        if m:
            hv = hd[j:q]
            for u in range(ov.shape[0]):
                sto(ov, u, comb(comb(ld(lv, u, K), run, K), ld(hv, u, K), K), K)
        else:
            for u in range(ov.shape[0]):
                sto(ov, u, comb(ld(lv, u, K), run, K), K)
        ev = ends[o + j : o + q]
        e1 = e0 + j * s
        for u in range(ev.shape[0]):
            ev[u] = e1 + u * s
        w = o + q
    while jl >= fr:  # the rest of the lcs
        acc = comb(ld(ring, uidx(ro + jl), K), acc, K)
        sto(lcs_cur, uidx(jl), acc, K)
        jl -= 1
    for jx in range(fr):
        sto(lcs_cur, jx, acc, K)
    return w


# a full row's windows and lcs in one loop (:func:`_emit_then_lcs`) when True; the caller puts it in the
# state vector (``st[FUSE]``: a test turns it off, and has _emit then _lcs as reference)
FUSE_ROWS = True

# rows of at least this many tuples fold in two lanes (:func:`_fold_lanes`); the caller puts it in the
# state vector (``st[LANES]``: a test turns the lanes off, and has the one-lane loop as reference)
LANES_MIN = 256


@njit(**_HELPER)
def _lane_step(t, x, rv, B, s, col, hi, cur, ident, K):
    """One tuple (at ``t``, partial ``x``) of a lane folding into the row's slices ``rv`` (no heads), no
    branch at a slice boundary: a select starts the next slice, and every tuple stores its slice's
    running partial (the slice's last store is its partial). A gap (rare) fills the empty slices."""
    if t >= hi + s:  # slices skipped: empty
        g = t // s - B
        for c in range(col + 1, g):
            sto(rv, c, ident, K)
        col = g - 1
        hi = (B + g) * s
    nb = t >= hi
    col += 1 if nb else 0
    hi += s if nb else 0
    cur = comb(ident if nb else cur, x, K)
    sto(rv, uidx(col), cur, K)
    return col, hi, cur


@njit(**_HELPER)
def _fold_lanes(ts, P, rv, i, iend, off, s, B, col, hi, cur, ident, K):
    """The tuples ``[i, iend)``, all in the row's slices (``ts - off < (B + q) * s``), folded as
    :func:`_drive`'s loop does (``m == 0``), in two lanes side by side: the tuples from ``i``, and those
    from the first slice boundary past the middle. Each slice is folded by one lane in the same order
    (the same bits); two independent chains, and no mispredicted branch per slice. Returns the open
    slice's ``(col, hi, cur)``."""
    sto(rv, col, cur, K)  # the open slice, if no tuple falls in it
    mid = (i + iend) // 2
    bound = ((ts[mid - 1] - off) // s + 1) * s  # the end of the slice of tuple mid - 1
    while mid < iend and ts[mid] - off < bound:
        mid += 1
    ca, ha, ua = col, hi, cur
    if mid == iend:  # one lane
        for a in range(i, iend):
            ca, ha, ua = _lane_step(ts[uidx(a)] - off, ld(P, uidx(a), K), rv, B, s, ca, ha, ua, ident, K)
        return ca, ha, ua
    gb = (ts[mid] - off) // s  # lane b starts a slice: from a virtual column before it
    cb, hb, ub = gb - B - 1, gb * s, ident
    k = min(mid - i, iend - mid)
    for u in range(k):
        a = uidx(i + u)
        b = uidx(mid + u)
        ca, ha, ua = _lane_step(ts[a] - off, ld(P, a, K), rv, B, s, ca, ha, ua, ident, K)
        cb, hb, ub = _lane_step(ts[b] - off, ld(P, b, K), rv, B, s, cb, hb, ub, ident, K)
    for a in range(i + k, mid):
        ca, ha, ua = _lane_step(ts[uidx(a)] - off, ld(P, uidx(a), K), rv, B, s, ca, ha, ua, ident, K)
    for b in range(mid + k, iend):
        cb, hb, ub = _lane_step(ts[uidx(b)] - off, ld(P, uidx(b), K), rv, B, s, cb, hb, ub, ident, K)
    for c in range(ca + 1, gb - B):  # between the lanes: empty slices
        sto(rv, c, ident, K)
    return cb, hb, ub


@njit(**_HELPER)
def _drive(P, ts, s, off, r, q, m, hist, flush, ident_a, st, cur_a, head_a, ring, lcs, hd, out, ends, hist_out,
           K):
    """The loop (see the module doc). ``st``: the state vector (``HAVE``, ``SLICE``, ...); ``cur_a``,
    ``head_a`` (row 0): the open slice's rest and head; ``ring``: two rows of slices (the previous
    and the current one, at ``ring[q - ro:]`` and ``ring[ro:]``); ``lcs``: the previous row's;
    ``hd``: the current row's heads (``m > 0``). ``hist`` (slices ``next_k ..``) is the first row
    when the call starts a batch.

    Blocked: the tuples of a row fold into its slices with no window work (a slice boundary is a
    store and a counter); the windows are computed at the row's *events* (the row full, the
    episode's end, the batch's end), from the previous row's lcs and a chain over the current row."""
    cap = out.shape[0]
    ident = ld(ident_a, 0, K)
    cur = ld(cur_a, 0, K)
    head = ld(head_a, 0, K)
    have = st[HAVE] != 0
    S = st[SLICE]
    next_k = st[NEXT_K]
    n = ts.shape[0]
    i = st[NEXT_TUPLE]
    if st[RESUME]:  # a call that stopped for room in ``out``: the row as it was
        B = st[BASE]
        ro = st[RO]
        fr = st[FR]
        lr = st[LR]
    else:
        B = next_k
        ro = 0
        fr = q
        lr = 0
        if have:  # a new batch: rows re-aligned at the first pending window, its slices [next_k, S) row 0
            L = hist.shape[0]
            for j in range(L):
                sto(ring, j, ld(hist, j, K), K)
            fr = 0
            lr = L
            if L == q:  # row 0 is full: its lcs
                _lcs(ring, 0, lcs[:q], 0, q, q, K)
                B += q
                ro = q
                fr = q
                lr = 0
    st[RESUME] = 0
    end0 = off + r  # window k ends at end0 + k*s
    w = 0
    col = S - B
    lo = S * s  # the open slice is [lo, lo + s) (relative to off)
    hi = lo + s
    done = False
    while True:
        if not have:  # the first tuple of an episode: its first window starts the rows
            if i >= n:
                done = True
                break
            t = ts[i] - off
            S = t // s
            next_k = (t - r) // s + 1
            B = next_k
            ro = 0
            col = S - B
            # the slices before the tuple's are empty (at most q of them); no window completes
            _fill(ring, 0, col, ident, K)
            if m:
                _fill(hd, 0, col, ident, K)
            fr = q
            lr = 0
            if col == q:  # row 0 is full (of empty slices): its lcs is the identity
                _fill(lcs, 0, q, ident, K)
                B += q
                ro = q
                col = 0
            lo = S * s
            hi = lo + s
            cur = ident
            head = ident
            have = True
        # the row's tuples: fold into the open slice; a tuple in the next slice of the row closes it
        col0 = col
        if m == 0:  # no heads: the loop of the common case, one combine per tuple
            rv = ring[ro : ro + q]
            if K < PAIR:  # scalar partials only (K is a literal: a constant test; wider ones measured slower)
                iend = i + _first_at_least(ts[i:n], (B + q) * s + off)  # the tuples of the row's slices
                if iend - i >= st[LANES]:
                    col, hi, cur = _fold_lanes(ts, P, rv, i, iend, off, s, B, col, hi, cur, ident, K)
                    i = iend
            while i < n:  # (i, col >= 0: unsigned subscripts, no test for an index from the end)
                t = ts[uidx(i)] - off
                if t >= hi:
                    if t >= hi + s or col + 1 == q:  # (as below)
                        break
                    sto(rv, uidx(col), cur, K)
                    col += 1
                    hi += s
                    cur = ident
                cur = comb(cur, ld(P, uidx(i), K), K)
                i += 1
            lo = hi - s
        while i < n:  # (m > 0; with m == 0 the loop above has left no tuple of the row)
            t = ts[i] - off
            if t >= hi:
                if t >= hi + s or col + 1 == q:  # (the next slice is never a new episode: r >= 2s when q > 1)
                    break
                sto(ring, ro + col, comb(head, cur, K) if m else cur, K)
                if m:
                    sto(hd, col, head, K)
                col += 1
                lo = hi
                hi += s
                cur = ident
                head = ident
            if m and t - lo < m:
                head = comb(head, ld(P, i, K), K)
            else:
                cur = comb(cur, ld(P, i, K), K)
            i += 1
        if col > col0:  # the slices closed above held tuples
            fr = min(fr, col0)
            lr = col
        # an event: a tuple past the row, or after a gap, or starting a new episode; or the end of the batch
        if cap - w < 2 * q + 2:  # at most 2q windows: stop here, the caller gives more room
            st[RESUME] = 1
            break
        batch_end = i >= n and not flush
        if i < n:
            t = ts[i] - off
            fresh = t >= lo + r  # its first window starts after the last tuple's slice
        else:
            t = hi
            fresh = True
        if batch_end:
            if m:
                sto(hd, col, head, K)
        else:  # close the open slice
            sto(ring, ro + col, comb(head, cur, K) if m else cur, K)
            if m:
                sto(hd, col, head, K)
            if fr > col:
                fr = col
            lr = col + 1
        g = t // s
        full = not batch_end and (fresh or g - B >= q)  # the row is full (its rest empty)
        if not batch_end and not full:  # a gap inside the row: its slices are empty
            _fill(ring, ro + col + 1, ro + g - B, ident, K)
            if m:
                _fill(hd, col + 1, g - B, ident, K)
        last = B + col
        # the windows, in at most two passes through one (inlined) loop: pass 0, the row is full: the
        # previous row's windows, then its lcs, and the rows move on; pass 1: the windows the batch's end
        # completes (in the previous row), or, the episode ending, those up to its last tuple's slice
        # (the row just full, over an empty one)
        for ph in range(2):
            k0 = B - q  # the previous row's windows are k0 + j
            if ph == 0:
                if not full:
                    continue
                _fill(ring, ro + col + 1, ro + q, ident, K)
                if m:
                    _fill(hd, col + 1, q, ident, K)
                j_end = q
                if next_k == k0 and fr == 0 and lr == q:  # the common full row: both chains in one loop
                    w = _emit_lcs(out, ends, w, k0, lcs[q - ro : 2 * q - ro], lcs[ro : ro + q], ring, ro, hd, m, q,
                                  end0, s, K)
                    j_end = -1
            elif batch_end:
                if n == 0:
                    break
                j_end = min(q, (ts[n - 1] - off - m) // s - B + 1)
            elif fresh:
                j_end = last - k0 + 1
            else:
                break
            if j_end >= 0 and ph == 0 and st[FUSE]:  # this row's windows and its lcs, two chains in one loop
                w = _emit_then_lcs(out, ends, w, k0, next_k - k0, lcs[q - ro : 2 * q - ro], lcs[ro : ro + q], ring, ro,
                                   hd, m, fr, lr, q, end0, s, K)
                next_k = max(next_k, k0 + j_end)
                j_end = -1
            if j_end >= 0:  # (a row's lcs sits at its offset in the ring)
                w = _emit(out, ends, w, k0, next_k - k0, j_end, lcs[q - ro : 2 * q - ro], ring, ro, hd, m, lr, end0,
                          s, K)
                next_k = max(next_k, k0 + j_end)
            if ph == 0:
                if j_end >= 0:
                    _lcs(ring, ro, lcs[ro : ro + q], fr, lr, q, K)
                next_k = max(next_k, B)
                ro = q - ro
                B += q
                fr = q
                lr = 0
                if fresh:  # the next row is empty (the windows read no column past 1: lr = 0)
                    _fill(ring, ro, ro + 2, ident, K)
                    if m:
                        _fill(hd, 0, last - B + q + 1, ident, K)
        if batch_end:
            done = True
            break
        if fresh:
            have = False
            continue
        if full:
            _fill(ring, ro, ro + g - B, ident, K)
            if m:
                _fill(hd, 0, g - B, ident, K)
        col = g - B
        lo = g * s
        hi = lo + s
        cur = ident
        head = ident
    S = B + col
    sto(cur_a, 0, cur, K)
    sto(head_a, 0, head, K)
    st[HAVE] = 1 if have else 0
    st[SLICE] = S
    st[NEXT_K] = next_k
    st[BASE] = B
    st[RO] = ro
    st[FR] = fr
    st[LR] = lr
    st[WINDOWS] = w
    st[NEXT_TUPLE] = i
    st[DONE] = 1 if done else 0
    L = 0
    if done and have:  # the slices of the pending windows, [next_k, S), for the operator's state
        for x in range(next_k, S):
            if x < B:
                sto(hist_out, L, ld(ring, q - ro + x - (B - q), K), K)
            else:
                sto(hist_out, L, ld(ring, ro + x - B, K), K)
            L += 1
    st[HIST] = L


@njit(**_JIT)
def timestamps_ok(ts, lo, hi, first):
    """Whether ``ts`` is non-decreasing, from ``first`` on, within ``[lo, hi]``: one pass, no branch per
    timestamp (:func:`pba_runtime.algorithms.base.validate_timestamps` in three numpy passes and a
    temporary; the caller runs that one when this says no, for its error message)."""
    bad = False
    prev = first
    for i in range(ts.shape[0]):
        t = ts[i]
        bad |= (t < prev) | (t < lo) | (t > hi)
        prev = t
    return not bad


# batches of at least this many records are cut in two at an episode's end, the second part run by a
# pool thread (:func:`episode_cut`; the caller reads it here: a test lowers it, 2**62 runs one call)
SPLIT_MIN = 1 << 18


_BLOCK = 512  # timestamps tested for a gap in one vectorised loop


@njit(**_HELPER)
def _first_at_least(a, v):
    """``np.searchsorted(a, v)`` of a non-decreasing ``a``: the first index whose value is ``>= v`` (``len(a)``
    if none), by a binary search of its own: numba's searchsorted makes a kernel loaded from the disk cache
    import ``numba.np.arraymath`` and what it imports (``bench/bench_first_call.py --time``)."""
    lo = 0
    hi = a.shape[0]
    while lo < hi:
        mid = (lo + hi) >> 1
        if a[mid] < v:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(**_HELPER)
def _any_gap(a, gap):
    """Whether two neighbours of ``a`` are ``gap`` or more apart (a loop that vectorises: no exit)."""
    hit = False
    for u in range(a.shape[0] - 1):
        hit |= a[uidx(u + 1)] - a[uidx(u)] >= gap
    return hit


@njit(**_JIT)
def episode_cut(ts, off, s, r, i0, i1):
    """The first ``i`` in ``[max(i0, 1), i1)`` whose tuple starts an episode (its first window begins after
    the slice of tuple ``i - 1``: every window holding an older tuple is complete), or ``-1``. Such a tuple
    is at least ``r - s + 1`` after the one before it: blocks without such a gap are passed over in a
    vectorised test, and the division runs only at the gaps."""
    gap = r - s + 1
    i1 = min(i1, ts.shape[0])
    for b0 in range(max(i0, 1), i1, _BLOCK):
        b1 = min(b0 + _BLOCK, i1)
        if not _any_gap(ts[b0 - 1 : b1], gap):
            continue
        for i in range(b0, b1):
            if ts[i] - ts[i - 1] >= gap and ts[i] - off >= ((ts[i - 1] - off) // s) * s + r:
                return i
    return -1


@njit(**_JIT)
def part_windows(ts, off, s, r, n, have, S, next_k):
    """How many windows a call over the tuples ``ts[:n]`` emits when it drains its last episode (``flush``),
    from the state ``have``, ``S`` (the open slice) and ``next_k`` (the first pending window). An episode
    emits every window from its first (``next_k`` for the one carried in, else the first holding its
    first tuple) to the last holding its last tuple (each of those holds a tuple: a window between two
    tuples of an episode that held none would make the later one start an episode). Blocks without a
    gap of ``r - s + 1`` are passed over as in :func:`episode_cut`."""
    gap = r - s + 1
    t = ts[0] - off
    w = 0
    first = (t - r) // s + 1
    if have:
        if t >= S * s + r:  # the carried episode ends: its windows up to its last slice
            w += max(0, S - next_k + 1)
        else:
            first = next_k
    for b0 in range(1, n, _BLOCK):
        b1 = min(b0 + _BLOCK, n)
        if not _any_gap(ts[b0 - 1 : b1], gap):
            continue
        for i in range(b0, b1):
            if ts[i] - ts[i - 1] >= gap:
                tp = ts[i - 1] - off
                ti = ts[i] - off
                if ti >= (tp // s) * s + r:
                    w += tp // s - first + 1
                    first = (ti - r) // s + 1
    return w + (ts[n - 1] - off) // s - first + 1


# One kernel per kind, each with its combine written out (compiled on first use, cached on disk).
# Signature: ``(P, ts, s, off, r, q, m, hist, flush, ident, st, cur, head, ring, lcs, hd, out, ends,
# hist_out, ops)``, see :func:`_drive` (``ops``: unused, kept so that every kernel is called alike).
@njit(**_JIT, _nrt=False)
def run_add(P, ts, s, off, r, q, m, hist, flush, ident, st, cur, head, ring, lcs, hd, out, ends, hist_out, ops):
    """Scalar partials that add (``sum``, ``count``, ``ufunc=np.add``)."""
    _drive(P, ts, s, off, r, q, m, hist, flush, ident, st, cur, head, ring, lcs, hd, out, ends, hist_out, 0)


@njit(**_JIT, _nrt=False)
def run_max(P, ts, s, off, r, q, m, hist, flush, ident, st, cur, head, ring, lcs, hd, out, ends, hist_out, ops):
    """Scalar partials combined by ``np.maximum`` (NaN propagates)."""
    _drive(P, ts, s, off, r, q, m, hist, flush, ident, st, cur, head, ring, lcs, hd, out, ends, hist_out, 1)


@njit(**_JIT, _nrt=False)
def run_min(P, ts, s, off, r, q, m, hist, flush, ident, st, cur, head, ring, lcs, hd, out, ends, hist_out, ops):
    """Scalar partials combined by ``np.minimum`` (NaN propagates)."""
    _drive(P, ts, s, off, r, q, m, hist, flush, ident, st, cur, head, ring, lcs, hd, out, ends, hist_out, 2)


@njit(**_JIT, _nrt=False)
def run_mul(P, ts, s, off, r, q, m, hist, flush, ident, st, cur, head, ring, lcs, hd, out, ends, hist_out, ops):
    """Scalar partials combined by ``np.multiply``."""
    _drive(P, ts, s, off, r, q, m, hist, flush, ident, st, cur, head, ring, lcs, hd, out, ends, hist_out, 3)


@njit(**_JIT, _nrt=False)
def run_fmax(P, ts, s, off, r, q, m, hist, flush, ident, st, cur, head, ring, lcs, hd, out, ends, hist_out, ops):
    """Scalar partials combined by ``np.fmax`` (NaN ignored)."""
    _drive(P, ts, s, off, r, q, m, hist, flush, ident, st, cur, head, ring, lcs, hd, out, ends, hist_out, 4)


@njit(**_JIT, _nrt=False)
def run_fmin(P, ts, s, off, r, q, m, hist, flush, ident, st, cur, head, ring, lcs, hd, out, ends, hist_out, ops):
    """Scalar partials combined by ``np.fmin`` (NaN ignored)."""
    _drive(P, ts, s, off, r, q, m, hist, flush, ident, st, cur, head, ring, lcs, hd, out, ends, hist_out, 5)


@njit(**_JIT, _nrt=False)
def run_pair(P, ts, s, off, r, q, m, hist, flush, ident, st, cur, head, ring, lcs, hd, out, ends, hist_out, ops):
    """Two-column partials whose columns both add (``mean``, ``geomean``)."""
    _drive(P, ts, s, off, r, q, m, hist, flush, ident, st, cur, head, ring, lcs, hd, out, ends, hist_out, 6)


@njit(**_JIT, _nrt=False)
def run_argmax(P, ts, s, off, r, q, m, hist, flush, ident, st, cur, head, ring, lcs, hd, out, ends, hist_out, ops):
    """``argmax`` partials ``(value, position)``."""
    _drive(P, ts, s, off, r, q, m, hist, flush, ident, st, cur, head, ring, lcs, hd, out, ends, hist_out, 7)


@njit(**_JIT, _nrt=False)
def run_std(P, ts, s, off, r, q, m, hist, flush, ident, st, cur, head, ring, lcs, hd, out, ends, hist_out, ops):
    """``std`` partials ``(n, mean, M2, lo)``, merged by Chan et al.'s update."""
    _drive(P, ts, s, off, r, q, m, hist, flush, ident, st, cur, head, ring, lcs, hd, out, ends, hist_out, 8)


# the scalar kernels by combine code (ADD .. FMIN: the codes the literals above spell out)
RUNNERS = (run_add, run_max, run_min, run_mul, run_fmax, run_fmin)
assert (ADD, MAX, MIN, MUL, FMAX) == (0, 1, 2, 3, 4)


def runner(layout: str, ops: tuple):
    """The fused kernel for an engine's ``layout`` and column codes ``ops``, or ``None`` (not covered:
    column partials other than two sums, user aggregations)."""
    ops = tuple(int(o) for o in ops)
    if layout == "scalar":
        return RUNNERS[ops[0]]
    if layout == "columns" and ops == (ADD, ADD):
        return run_pair
    return {"argmax": run_argmax, "std": run_std}.get(layout)


# Loading from the disk cache without numba's compiler set-up (lean_load.py).
lean_loads(globals())
