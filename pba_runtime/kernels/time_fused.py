"""The fused time-window batch: slicing, gaps, slice folds, PBA's lcs/csa and every window, in one compiled call.

The per-tuple slicing layer (:meth:`pba_runtime.algorithms.base.SlicedAggregator._step_time` and
``_advance``) run as one loop in machine code over a batch of ``(timestamp, partial)``, in blocked form
(:func:`_drive`): slices laid out in PBA's rows of ``q``, aligned at the episode's first window; a row's
tuples fold into its slices with no window work, and the windows are computed only at a row's *events*
(the row full, a gap, the end of an episode or of the batch) from the previous row's lcs and a chain
over the current row. Between batches the operator keeps its usual state (the slices of the pending
windows, the open slice's head and rest), so any split gives the per-tuple windows (``max``/``min``/
``count``/``argmax`` bit for bit, float sums to rounding, the spec's rule); the end-of-stream flush is
the same call with ``flush`` set. A call stops when fewer than ``2q + 2`` result rows are left, its row
in the state vector (``RESUME``), and is called again with a larger array until ``DONE``. Each kind of
partial (a float combined by a code of :mod:`.compiled`, two sums, ``argmax``'s pair, ``std``'s
``(n, mean, M2, lo)``) has a kernel of its own (``run_max``, ..., ``run_std``) whose combine, load and
store numba's ``overload`` writes out from a literal kind (:mod:`.time_partials`); helpers run without reference counting
(``_nrt=False``: nothing is allocated inside). Where a long batch may be cut in two is
:mod:`.time_cut`'s; the Python around the call is :mod:`pba_runtime.engines.time_batch`, and the slow
reference is its episode engine (``tests/test_kernels.py``, ``tests/test_engines.py``).
"""

from __future__ import annotations

from numba import njit

from .compiled import _JIT, ADD, FMAX, MAX, MIN, MUL
from .lean_load import lean_loads
from .stepwise.index import uidx
from .time_cut import _BLOCK, SPLIT_MIN, episode_cut, part_windows, timestamps_ok  # noqa: F401  (_BLOCK: tests)
from .time_partials import PAIR, comb, ld, sto

__all__ = ["runner", "RUNNERS", "LIFTED", "LOWERED", "timestamps_ok", "episode_cut", "part_windows", "SPLIT_MIN",
           "LANES_MIN", "FUSE_ROWS", "STATE", "LANES", "FUSE", "HAVE", "SLICE", "NEXT_K", "BASE", "WINDOWS",
           "NEXT_TUPLE", "HIST", "DONE"]

# the int64 state vector a call reads and writes
HAVE, SLICE, NEXT_K, BASE, RO, FR, LR, WINDOWS, NEXT_TUPLE, HIST, RESUME, DONE, LANES, FUSE = range(14)
STATE = 14

# compiled lifts (:class:`pba_runtime.kernels.CompiledKernel`) the kernels do themselves: given the
# values, a 1-D array, they read each value as its partial (the same floats as the lift writes), so
# the batch's partials (32 bytes a value for std) are never written nor read
LIFTED = ("lift_std", "lift_pair")
# and lowers: given a 1-D result array, they store each window's lowered result (std's ``sqrt(M2 / (n -
# 1))``, mean's ratio: the arithmetic of the compiled lower), not its partial
LOWERED = ("lower_std", "lower_ratio")
# helpers: plain calls (LLVM inlines what pays), no reference counting (views are passed, nothing allocated)
_HELPER = {**_JIT, "_nrt": False}


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
    """The loop (see the module doc): index views from ``range(0, ...)`` where a loop may vectorise (numba
    adds no wraparound to such an index; with ``range(i0, i1)`` the loop compiled to gathers and scatters).
    ``st``: the state vector (``HAVE``, ``SLICE``, ...); ``cur_a``,
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
            if K < PAIR:  # scalar partials only (K is a literal: a constant test; wider ones were slower, bench_kernels)
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
