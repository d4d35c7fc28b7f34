"""The fused time-window batch: slicing, gaps, slice folds, PBA's lcs/csa and every window, in one compiled call.

The per-tuple slicing layer (:meth:`pba_runtime.algorithms.base.SlicedAggregator._step_time` and
``_advance``) run as one loop in machine code over a batch of ``(timestamp, partial)``: each
tuple folds into its slice (its head, units ``< m``, or the rest), a tuple in a later slice
closes the slices up to it, and a tuple whose first window begins after the last tuple's slice
ends the *episode* (every window holding an older tuple is emitted, then the slicing restarts).
A closed slice is pushed into PBA's rows of ``q`` slices, aligned at the episode's first window:
the row's csa grows as it goes (kept per column), and when the row is full its lcs is built (from
its end) into a buffer of ``q`` partials. A window completes in lockstep with the pushes (window
``k`` when the slices ``k .. k+q-1`` are pushed and, for ``r % s != 0``, a tuple at or past its end
has come): its end is written then, and its value, ``lcs[j] (+) csa[j-1]`` (``lcs[0]`` for column 0)
``(+) head`` of slice ``k+q``, with the other windows of its row in one loop once the next row is
full (or the call ends). The empty slices of a gap, of a drain and before an episode's first tuple
are written a row at a time, and a row's lcs chains only over the columns that may hold a tuple.
The scratch (``2q`` slices, ``q`` lcs, ``q`` csa) stays in cache for the ranges that matter.

Between batches the operator keeps its usual state (the slices ``[next_k, S)`` of the pending
windows, the open slice's head and rest, ``S``, ``next_k``); a batch re-aligns its rows at its
first pending window, so any split gives the per-tuple windows, with ``max``/``min``/``count``/
``argmax`` bit for bit and float sums to rounding (the spec's rule). The end-of-stream flush is
the same call with no tuple: the open windows are drained in the loop.

A call stops early, between two tuples, when fewer than ``q + 2`` result rows are left (one tuple
emits at most ``q + 1`` windows); the caller gives it a larger result array and calls again.

Partials are values the loop keeps in registers (``load``/``store``/``comb`` move and combine them):
a float combined by a code of :mod:`.compiled` (``max``, ``min``, ``sum``, ``count``, ``ufunc=``
aggregations), a pair of sums (``mean``, ``geomean``), ``argmax``'s ``(value, position)`` and
``std``'s ``(n, mean, M2)`` (Chan et al.'s merge, as ``aggregations._chan``). Compiled without
numba's reference counting (``_nrt=False``): nothing is allocated inside, and the counts of the
arrays handed to the inlined helpers cost ~40% of a slice. The slow reference is the operator's
episode path (``PBA._episode``, numpy or compiled merge); ``tests/test_kernels.py`` checks fast == slow.
"""

from __future__ import annotations

from numba import njit

from .compiled import _JIT, ADD, FMAX, MAX, MIN, MUL, _argmax, _chan

__all__ = ["runner", "run_scalar", "run_pair", "run_argmax", "run_std", "STATE", "HAVE", "SLICE", "NEXT_K", "BASE", "WINDOWS",
           "NEXT_TUPLE", "HIST"]

# the int64 state vector a call reads and writes
HAVE, SLICE, NEXT_K, BASE, COL, WINDOWS, NEXT_TUPLE, HIST = range(8)
STATE = 8


@njit(inline="always", cache=True)
def _op(code, a, b):
    """The combine of code ``code`` (:mod:`.compiled`'s ``c_add``, ``c_max``, ...), written out: one
    inlined body per call site, not five (numba's inlining is most of the compile time here)."""
    if code == ADD:
        return a + b
    if code == MAX:
        return a if (a >= b or a != a) else b
    if code == MIN:
        return a if (a <= b or a != a) else b
    if code == MUL:
        return a * b
    if code == FMAX:
        return a if (a >= b or b != b) else b
    return a if (a <= b or b != b) else b


# A partial as a value the loop keeps in registers: a float, or a tuple of floats; ``load``/``store``
# move it from/to row ``i`` of an array, ``comb`` combines two (``c0``, ``c1``: the column codes).
@njit(inline="always", cache=True)
def load_scalar(a, i):
    return a[i]


@njit(inline="always", cache=True)
def store_scalar(a, i, v):
    a[i] = v


@njit(inline="always", cache=True)
def comb_scalar(a, b, c0, c1):
    return _op(c0, a, b)


@njit(inline="always", cache=True)
def load_pair(a, i):
    return (a[i, 0], a[i, 1])


@njit(inline="always", cache=True)
def store_pair(a, i, v):
    a[i, 0] = v[0]
    a[i, 1] = v[1]


@njit(inline="always", cache=True)
def comb_pair(a, b, c0, c1):
    """Two sums (``mean``'s and ``geomean``'s partials): the only two-column built-ins."""
    return (a[0] + b[0], a[1] + b[1])


@njit(inline="always", cache=True)
def comb_argmax(a, b, c0, c1):
    return _argmax(a[0], a[1], b[0], b[1])


@njit(inline="always", cache=True)
def load_triple(a, i):
    return (a[i, 0], a[i, 1], a[i, 2])


@njit(inline="always", cache=True)
def store_triple(a, i, v):
    a[i, 0] = v[0]
    a[i, 1] = v[1]
    a[i, 2] = v[2]


@njit(inline="always", cache=True)
def comb_std(a, b, c0, c1):
    return _chan(a[0], a[1], a[2], b[0], b[1], b[2])


@njit(inline="always", cache=True)
def _flush(out, pw, pj, pn, lcs, csa, m, load, store, comb, c0, c1):
    """The ``pn`` windows recorded at ``out[pw:]``, columns ``pj ..`` of the row before the current one:
    ``lcs[j] (+) csa[j - 1]`` (``lcs[0]`` for column 0), ``(+)`` the head recorded in ``out`` (``m > 0``).
    One loop over contiguous rows, without a branch (it vectorises for scalar partials)."""
    k = 0
    if pn > 0 and pj == 0:
        v = load(lcs, 0)
        store(out, pw, comb(v, load(out, pw), c0, c1) if m else v)
        k = 1
    o = pw - pj  # out index of column j is o + j
    if m:
        for j in range(pj + k, pj + pn):
            store(out, o + j, comb(comb(load(lcs, j), load(csa, j - 1), c0, c1), load(out, o + j), c0, c1))
    else:
        for j in range(pj + k, pj + pn):
            store(out, o + j, comb(load(lcs, j), load(csa, j - 1), c0, c1))


@njit(inline="always", cache=True)
def _push(x, real, ring, lcs, csa, run, col, ri, q, out, pw, pj, pn, m, fr, lr, load, store, comb, c0, c1):
    """Push slice partial ``x``: into the ring at ``ri`` and the row's csa (``run``: its last value); a
    full row first finishes the windows recorded over the previous one, then builds its own lcs.

    ``[fr, lr)``: the columns of the row that may hold a tuple (``real`` pushes; the others are empty
    slices, the identity): the lcs is a chain over those only, the identity after them and a constant
    before (``ident (+) a`` is ``a``, up to the sign of a zero sum). Returns ``(run, col, ri, pn, fr, lr)``."""
    store(ring, ri, x)
    run = x if col == 0 else comb(run, x, c0, c1)
    store(csa, col, run)
    if real:
        if fr == q:
            fr = col
        lr = col + 1
    col += 1
    if col == q:  # the row is ring[ri - q + 1 .. ri] (rows start at 0 or q in the ring)
        _flush(out, pw, pj, pn, lcs, csa, m, load, store, comb, c0, c1)
        pn = 0
        r0 = ri - (q - 1)
        for jj in range(lr, q):
            store(lcs, jj, load(ring, r0 + jj))  # the identity
        if lr == 0:  # no slice of the row holds a tuple
            fr = 0
            lr = 1
        acc = load(ring, r0 + lr - 1)
        store(lcs, lr - 1, acc)
        for jj in range(lr - 2, fr - 1, -1):
            acc = comb(load(ring, r0 + jj), acc, c0, c1)
            store(lcs, jj, acc)
        for jj in range(fr):
            store(lcs, jj, acc)
        col = 0
        fr = q
        lr = 0
    ri += 1
    if ri == 2 * q:
        ri = 0
    return run, col, ri, pn, fr, lr


@njit(inline="always", cache=True)
def _record(out, ends, w, k, head, col, pw, pj, pn, m, end0, s, store):
    """Window ``k`` is complete: its end now, its value at the next flush (the head kept in ``out``).
    Returns ``(w, k, pw, pj, pn)`` after it."""
    if pn == 0:
        pw = w
        pj = col
    if m:
        store(out, w, head)
    ends[w] = end0 + k * s
    return w + 1, k + 1, pw, pj, pn + 1


@njit(inline="always", cache=True)
def _drive(P, ts, s, off, r, q, m, hist, flush, ident_a, st, cur_a, head_a, ring, lcs, csa, out, ends, hist_out,
           load, store, comb, c0, c1):
    """The loop (see the module doc). ``st``: the state vector (``HAVE``, ``SLICE``, ...); ``cur_a``,
    ``head_a`` (row 0): the open slice's rest and head; ``ring``: the last ``2q`` slices pushed (slice
    ``x`` at ``(x - base) % 2q``); ``lcs``: the last full row's lcs; ``csa``: the current row's.
    ``hist`` (slices ``next_k ..``) is pushed first when ``st[NEXT_TUPLE] == 0``.

    A window is recorded when it completes (its end, and its head in ``out``) and computed when
    the row after its first is full, or at the end of the call (:func:`_flush`): the windows of a
    row in one loop."""
    cap = out.shape[0]
    ident = load(ident_a, 0)
    cur = load(cur_a, 0)
    head = load(head_a, 0)
    have = st[HAVE] != 0
    S = st[SLICE]
    next_k = st[NEXT_K]
    base = st[BASE]
    col = st[COL]
    q2 = 2 * q
    ri = (S - base) % q2 if have else 0
    run = load(csa, col - 1) if col > 0 else ident
    fr = 0  # the current row's columns that may hold a tuple: [fr, lr) (resumed: all so far)
    lr = col
    end0 = off + r  # window k ends at end0 + k*s
    w = 0
    pw = 0  # windows recorded, not yet computed: out[pw:pw+pn], columns pj..
    pj = 0
    pn = 0
    n = ts.shape[0]
    i = st[NEXT_TUPLE]
    if i == 0 and have:  # a new batch: rows re-aligned at the first pending window
        base = next_k
        col = 0
        ri = 0
        # the pending windows' slices, [next_k, S), fill row 0 (at most q of them): copied, not pushed
        # one by one (row 0's csa is never read: no window starts in a row before it)
        L = hist.shape[0]
        for j in range(L):
            store(ring, j, load(hist, j))
        fr = 0
        lr = L
        if L == q:  # row 0 is full: its lcs
            acc = load(ring, q - 1)
            store(lcs, q - 1, acc)
            for jj in range(q - 2, -1, -1):
                acc = comb(load(ring, jj), acc, c0, c1)
                store(lcs, jj, acc)
            L = 0
            fr = q
            lr = 0
        col = L
        ri = hist.shape[0]
        run = ident
    lo = S * s  # the open slice is [lo, lo + s) (relative to off)
    hi = lo + s
    while True:
        if have:  # fold the tuples of the open slice (no division: timestamps are sorted)
            if m:
                while i < n:
                    t = ts[i] - off
                    if t >= hi:
                        break
                    if t - lo < m:
                        head = comb(head, load(P, i), c0, c1)
                    else:
                        if next_k == S - q:  # window S-q ends inside slice S, at or before t
                            w, next_k, pw, pj, pn = _record(out, ends, w, next_k, head, col, pw, pj, pn, m, end0,
                                                            s, store)
                        cur = comb(cur, load(P, i), c0, c1)
                    i += 1
            else:
                fast = r >= 2 * s  # a tuple in the next slice never ends the episode
                while i < n:
                    t = ts[i] - off
                    if t >= hi:
                        if not fast or t >= hi + s or cap - w < q + 2:
                            break
                        # the next slice: close this one and its window here, the common step (the
                        # loop below does the same, for any distance)
                        run, col, ri, pn, fr, lr = _push(cur, True, ring, lcs, csa, run, col, ri, q, out, pw, pj, pn,
                                                         m, fr, lr, load, store, comb, c0, c1)
                        S += 1
                        lo = hi
                        hi += s
                        if next_k == S - q:
                            w, next_k, pw, pj, pn = _record(out, ends, w, next_k, head, col, pw, pj, pn, m, end0,
                                                            s, store)
                        cur = comb(ident, load(P, i), c0, c1)
                    else:
                        cur = comb(cur, load(P, i), c0, c1)
                    i += 1
        # a tuple past the open slice (or the end of stream): at most q + 1 windows complete
        if i < n:
            if cap - w < q + 2:
                break
            t = ts[i] - off
            fresh = not have or t >= lo + r
        elif flush and have:
            if cap - w < q + 2:
                break
            t = hi
            fresh = True
        else:
            break
        if have:
            # close slices from S on, emitting windows as they complete: up to t's slice, or (fresh:
            # the episode ends) until every window holding the last tuple is out
            last = S
            g = S + 1
            if not fresh and t >= hi + s:
                g = t // s  # one division per gap, not per slice
            first = True
            while True:
                if m and next_k == S - q:
                    w, next_k, pw, pj, pn = _record(out, ends, w, next_k, head, col, pw, pj, pn, m, end0, s, store)
                x = comb(head, cur, c0, c1) if m else cur
                head = ident
                cur = ident
                run, col, ri, pn, fr, lr = _push(x, first, ring, lcs, csa, run, col, ri, q, out, pw, pj, pn, m, fr, lr,
                                         load, store, comb, c0, c1)
                first = False
                S += 1
                lo = hi
                hi += s
                if not m and next_k == S - q:
                    w, next_k, pw, pj, pn = _record(out, ends, w, next_k, head, col, pw, pj, pn, m, end0, s, store)
                if fresh:
                    if next_k > last:
                        have = False
                        break
                elif t < hi:
                    break
                # empty slices follow, each with one window (in lockstep since the first push): all of
                # them up to the row's last column at once
                rem = last - next_k + 1 if fresh else g - S
                E = min(rem, q - 1 - col)
                if E > 0:
                    if col == 0:  # the row's first slice: its csa is the empty slice
                        run = ident
                    for e in range(E):
                        store(ring, ri + e, ident)
                        store(csa, col + e, run)
                    c1st = col if m else col + 1  # the column of the first window
                    if pn == 0:
                        pw = w
                        pj = c1st
                    for e in range(E):
                        if m:
                            store(out, w + e, ident)
                        ends[w + e] = end0 + (next_k + e) * s
                    w += E
                    pn += E
                    next_k += E
                    col += E
                    ri += E
                    S += E
                    lo += E * s
                    hi += E * s
                    if fresh:
                        if next_k > last:
                            have = False
                            break
                    elif t < hi:
                        break
        if i >= n:  # the flush's drain
            break
        if not have:  # the first tuple of an episode: its first window starts the rows
            _flush(out, pw, pj, pn, lcs, csa, m, load, store, comb, c0, c1)
            pn = 0
            S = t // s
            lo = S * s
            hi = lo + s
            next_k = (t - r) // s + 1
            base = next_k
            head = ident
            cur = ident
            run = ident
            # the slices before the tuple's are empty (at most q of them); no window completes
            E = S - next_k
            for e in range(E):
                store(ring, e, ident)
                store(csa, e, ident)
            col = E
            ri = E
            fr = q
            lr = 0
            if E == q:  # row 0 is full (of empty slices): its lcs is the identity
                for e in range(q):
                    store(lcs, e, ident)
                col = 0
            have = True
        # t's slice is now the open one: the fold above takes it
    _flush(out, pw, pj, pn, lcs, csa, m, load, store, comb, c0, c1)
    store(cur_a, 0, cur)
    store(head_a, 0, head)
    st[HAVE] = 1 if have else 0
    st[SLICE] = S
    st[NEXT_K] = next_k
    st[BASE] = base
    st[COL] = col
    st[WINDOWS] = w
    st[NEXT_TUPLE] = i
    L = 0
    if have:  # the slices of the pending windows, [next_k, S), for the operator's state
        j = (next_k - base) % q2
        for _x in range(next_k, S):
            store(hist_out, L, load(ring, j))
            L += 1
            j += 1
            if j == q2:
                j = 0
    st[HIST] = L


@njit(**_JIT, _nrt=False)
def run_scalar(P, ts, s, off, r, q, m, hist, flush, ident, st, cur, head, ring, lcs, csa, out, ends, hist_out, ops):
    """Scalar partials (1-D arrays) combined by code ``ops[0]``: see :func:`_drive`."""
    _drive(P, ts, s, off, r, q, m, hist, flush, ident, st, cur, head, ring, lcs, csa, out, ends, hist_out,
           load_scalar, store_scalar, comb_scalar, ops[0], ops[0])


@njit(**_JIT, _nrt=False)
def run_pair(P, ts, s, off, r, q, m, hist, flush, ident, st, cur, head, ring, lcs, csa, out, ends, hist_out, ops):
    """Two-column partials whose columns both add (``mean``, ``geomean``)."""
    _drive(P, ts, s, off, r, q, m, hist, flush, ident, st, cur, head, ring, lcs, csa, out, ends, hist_out,
           load_pair, store_pair, comb_pair, ops[0], ops[1])


@njit(**_JIT, _nrt=False)
def run_argmax(P, ts, s, off, r, q, m, hist, flush, ident, st, cur, head, ring, lcs, csa, out, ends, hist_out, ops):
    """``argmax`` partials ``(value, position)``."""
    _drive(P, ts, s, off, r, q, m, hist, flush, ident, st, cur, head, ring, lcs, csa, out, ends, hist_out,
           load_pair, store_pair, comb_argmax, 0, 0)


@njit(**_JIT, _nrt=False)
def run_std(P, ts, s, off, r, q, m, hist, flush, ident, st, cur, head, ring, lcs, csa, out, ends, hist_out, ops):
    """``std`` partials ``(n, mean, M2)``, merged by Chan et al.'s update."""
    _drive(P, ts, s, off, r, q, m, hist, flush, ident, st, cur, head, ring, lcs, csa, out, ends, hist_out,
           load_triple, store_triple, comb_std, 0, 0)


def runner(layout: str, ops: tuple):
    """The fused kernel for an engine's ``layout`` and column codes ``ops``, or ``None`` (not covered:
    column partials other than two sums, user aggregations)."""
    width = len(ops)
    if layout == "scalar":
        return run_scalar
    if layout == "columns" and width == 2 and tuple(ops) == (ADD, ADD):
        return run_pair
    return {"argmax": run_argmax, "std": run_std}.get(layout)
