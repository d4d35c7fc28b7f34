"""SBA and PBA (Zhang, Akbarinia, Toumani, KDD'21) compiled: :mod:`pba_runtime.algorithms.pba`'s merger.

Slices are grouped into chunks of ``b``; chunk ``c`` lives in slot ``c % K`` of the flat buffers
``saa`` (its slice partials) and ``lcs`` (their suffix aggregates), ``ca`` holds its aggregate once
closed, ``csa`` the open chunk's running aggregate. A window of slices ``[pf, pg)`` is
``lcs[pf] (+) ca ... (+) csa``, as the Python operator computes it (same chunks, same order).

SBA (``parallel == 0``) builds a chunk's lcs on the main loop when the chunk closes. PBA
(``parallel == 1``) appends the chunk's tag to ``pend`` and stops after the tuple (event 2): its
driver hands ``lcs_worker`` to a pool thread (compiled, GIL released) and sets ``sub[slot]``; the
worker writes the lcs, then ``done[slot]`` behind a fence (tags grow, so a slot's task is in flight
while ``sub[slot] > done[slot]``; the main loop waits for it before it reuses the slot). The main loop reads ``done`` when a window
first needs that lcs: ready, it goes on; submitted but not done, it waits (a *stall*, counted with
its ticks; after ``spin_limit`` ticks it builds the lcs itself, a *fallback*); closed but not yet
submitted (several chunks closed by one tuple of a time window), it builds it inline. A tag is
``epoch * 2**40 + chunk`` (the epoch counts resets), so a flag left by an older chunk never passes.
"""

from __future__ import annotations

from .slicing import Algorithm

__all__ = ["ALGORITHM", "TAG"]

TAG = 1 << 40

ALGORITHM = Algorithm(
    name="sba",
    ints=("pg", "pf", "ep", "npend", "known", "stalls", "stall_ticks", "inline_builds", "fallbacks", "lcs_built"),
    parts=("csa",),
    arrays=("saa", "lcs", "ca", "done", "sub", "pend"),
    params=("b", "K", "parallel", "spin_limit"),
    helpers='''
def build_lcs(saa, lcs, slot, b):
    base = slot * b
    src = saa[base:base + b][::-1]
    dst = lcs[base:base + b][::-1]
    t_ = @L(src, 0)
    @S(dst, 0, t_)
    for j in range(1, b):
        t_ = combine(@L(src, j), t_)
        @S(dst, j, t_)


def lcs_worker(saa, lcs, done, slot, b, tag):
    build_lcs(saa, lcs, slot, b)
    fence()
    done[slot] = tag
    fence()


def wait_slot(done, sub, sl, spin_limit):
    tw = ticks()
    while sub[sl] > done[sl] and ticks() - tw < spin_limit:
        relax()
        fence()
''',
    push="""
        ci = pg // b
        ii = pg - ci * b
        sl = ci % K
        if ii == 0:
            if sub[sl] > done[sl]:
                wait_slot(done, sub, sl, spin_limit)
            csa = P
        else:
            csa = combine(csa, P)
        @S(saa, sl * b + ii, P)
        pg += 1
        if ii == b - 1:
            @S(ca, sl, csa)
            if parallel != 0 and npend < pend.shape[0]:
                pend[npend] = ep * 1099511627776 + ci
                npend += 1
            else:
                build_lcs(saa, lcs, sl, b)
                done[sl] = ep * 1099511627776 + ci
                lcs_built += 1
    """,
    pop="""
        pf += 1
    """,
    query="""
        if pf >= pg:
            RES = ident
        else:
            cf = pf // b
            cl = (pg - 1) // b
            if pg % b != 0:
                lst = csa
            else:
                lst = @L(ca, cl % K)
            jj = pf - cf * b
            if cf == cl:
                if jj == 0:
                    RES = lst
                else:
                    bs = (cf % K) * b
                    RES = @L(saa, bs + jj)
                    for jx in range(jj + 1, pg - cl * b):
                        RES = combine(RES, @L(saa, bs + jx))
            else:
                if jj == 0:
                    fst = @L(ca, cf % K)
                else:
                    sl2 = cf % K
                    tg2 = ep * 1099511627776 + cf
                    if known != tg2:
                        if done[sl2] != tg2:
                            if sub[sl2] == tg2:
                                stalls += 1
                                tw = ticks()
                                while done[sl2] != tg2:
                                    relax()
                                    fence()
                                    if ticks() - tw > spin_limit:
                                        build_lcs(saa, lcs, sl2, b)
                                        fallbacks += 1
                                        break
                                stall_ticks += ticks() - tw
                            else:
                                build_lcs(saa, lcs, sl2, b)
                                done[sl2] = tg2
                                inline_builds += 1
                                lcs_built += 1
                        fence()
                        known = tg2
                    fst = @L(lcs, sl2 * b + jj)
                for cc in range(cf + 1, cl):
                    fst = combine(fst, @L(ca, cc % K))
                RES = combine(fst, lst)
    """,
    reset="""
        pg = 0
        pf = 0
        ep += 1
        csa = ident
    """,
    after_tuple="""
        if npend > 0:
            event = 2
            stop = True
    """,
)
