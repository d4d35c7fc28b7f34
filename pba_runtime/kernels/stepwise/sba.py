"""SBA and PBA (Zhang, Akbarinia, Toumani, KDD'21) compiled: :mod:`pba_runtime.algorithms.pba`'s merger.

Slices are grouped into chunks of ``b``; chunk ``c`` lives in slot ``c % K`` of the flat buffers
``saa`` (its slice partials) and ``lcs`` (their suffix aggregates), ``ca`` holds its aggregate once
closed, ``csa`` the open chunk's running aggregate. A window of slices ``[pf, pg)`` is
``lcs[pf] (+) ca ... (+) csa``, as the Python operator computes it (same chunks, same order).

SBA (``parallel == 0``) builds a chunk's lcs on the main loop when the chunk closes. PBA
(``parallel == 1``) posts the chunk's tag to the queue ``wq`` (``ctl[0]``: tags posted, ``ctl[1]``:
lcs built, ``ctl[2]``: stop) and goes on; ``worker_loop``, compiled with the GIL released on a pool
thread for the whole run, builds each posted lcs, then sets ``done[slot]`` behind a fence. Tags grow
(``epoch * 2**40 + chunk``, the epoch counts resets), so a slot's task is in flight while
``sub[slot] > done[slot]`` (the main loop waits before it reuses that slot) and a flag left by an older
chunk never passes. The main loop reads ``done`` when a window first needs that lcs: ready, it goes
on; posted but not built, it waits (a *stall*, counted with its ticks; after ``spin_limit`` ticks it
builds the lcs itself, a *fallback*); never posted (the queue was full), it builds it (``inline_builds``).
No Python runs between the two threads: the hand-off is a store and a fence.
"""

from __future__ import annotations

from .slicing import Algorithm

__all__ = ["ALGORITHM", "TAG"]

TAG = 1 << 40

HELPERS = '''
def build_lcs(saa, lcs, slot, b):
    base = slot * b
    src = saa[base:base + b][::-1]
    dst = lcs[base:base + b][::-1]
    t_ = @L(src, 0)
    @S(dst, 0, t_)
    for j in range(1, b):
        prefetch(saa, base + b - 1 - j - 128, 0)  # read downwards, from the main loop's core: ask ahead
        t_ = combine(@L(src, j), t_)
        @S(dst, j, t_)


def lcs_worker(saa, lcs, done, slot, b, tag):
    build_lcs(saa, lcs, slot, b)
    fence()
    done[slot] = tag
    fence()


def worker_loop(saa, lcs, done, wq, ctl, b, K):
    # PBA's worker: builds the lcs of each chunk the main loop posts (wq[ctl[1] % K] .. wq[ctl[0] - 1 % K]),
    # until ctl[2] says stop and nothing is left; idle, it spins with sched_yield (which gives the core
    # to any other runnable thread) ~2000 times, then naps 20 us at a time. Measured on the loaded
    # project machine: napping at once instead stalls as often (the worker waits for a core either way)
    tail = ctl[1]
    idle = 0
    while True:
        fence()
        head = ctl[0]
        if head > tail:
            fence()  # read the queue only after the count that published it
            tag = wq[tail % K]
            slot = (tag & 1099511627775) % K
            build_lcs(saa, lcs, slot, b)
            fence()
            done[slot] = tag
            tail += 1
            fence()
            ctl[1] = tail
            # then drop the partials just read from this core's caches (after publishing: the main loop
            # never waits for it): the main loop rewrites them K chunks on, and each of its stores would
            # otherwise wait for this core to give the line up (cache_hints; at W[2^13, 1] on vCPUs on
            # different dies: PBA 54M -> 213-324M tuples/s)
            rb = saa.strides[0]
            for off in range(slot * b * rb, (slot * b + b) * rb, 64):
                evict(saa, off)
            idle = 0
        elif ctl[2] != 0:
            break
        else:
            idle += 1
            if idle < 2000:
                relax()
            else:
                nap(20)


def wait_slot(done, sub, sl, spin_limit):
    tw = ticks()
    while sub[sl] > done[sl] and ticks() - tw < spin_limit:
        relax()
        fence()
'''

ALGORITHM = Algorithm(
    name="sba",
    # pg, pf: slices pushed and popped since the last reset; lc, li, lsl: the chunk, index and slot of
    # slice pg - 1; fc, fj, fsl: those of slice pf (kept incrementally: no division per tuple)
    ints=("pg", "pf", "lc", "li", "lsl", "fc", "fj", "fsl", "ep", "wh", "known", "stalls", "stall_ticks",
          "inline_builds", "fallbacks", "lcs_built"),
    parts=("csa",),
    arrays=("saa", "lcs", "ca", "done", "sub", "wq", "ctl"),
    params=("b", "K", "parallel", "spin_limit"),
    helpers=HELPERS,
    push="""
        li += 1
        if li == b:
            li = 0
            lc += 1
            lsl += 1
            if lsl == K:
                lsl = 0
            if sub[lsl] > done[lsl]:
                wait_slot(done, sub, lsl, spin_limit)
            csa = P
        else:
            csa = combine(csa, P)
        @S(saa, lsl * b + li, P)
        pg += 1
        if li == b - 1:
            @S(ca, lsl, csa)
            if parallel != 0 and wh - ctl[1] < K - 1:
                tgc = ep * 1099511627776 + lc
                wq[wh % K] = tgc
                sub[lsl] = tgc
                fence()
                wh += 1
                ctl[0] = wh
            else:
                # SBA: the lcs here, written out rather than called (a call in the loop makes the
                # register allocator spill the loop's scalars: ~10% of SBA's time per tuple, measured)
                bl = lsl * b
                tl = @L(saa, bl + b - 1)
                @S(lcs, bl + b - 1, tl)
                for jl in range(b - 2, -1, -1):
                    tl = combine(@L(saa, bl + jl), tl)
                    @S(lcs, bl + jl, tl)
                done[lsl] = ep * 1099511627776 + lc
                lcs_built += 1
    """,
    pop="""
        pf += 1
        fj += 1
        if fj == b:
            fj = 0
            fc += 1
            fsl += 1
            if fsl == K:
                fsl = 0
    """,
    query="""
        if pf >= pg:
            RES = ident
        else:
            if li != b - 1:
                lst = csa
            else:
                lst = @L(ca, lsl)
            if fc == lc:
                if fj == 0:
                    RES = lst
                else:
                    bs = fsl * b
                    RES = @L(saa, bs + fj)
                    for jx in range(fj + 1, li + 1):
                        RES = combine(RES, @L(saa, bs + jx))
            else:
                if fj == 0:
                    fst = @L(ca, fsl)
                else:
                    tg2 = ep * 1099511627776 + fc
                    if known != tg2:
                        if done[fsl] != tg2:
                            if sub[fsl] == tg2:
                                stalls += 1
                                tw = ticks()
                                while done[fsl] != tg2:
                                    relax()
                                    fence()
                                    if ticks() - tw > spin_limit:
                                        # the worker is not running: this lcs and every later one here
                                        build_lcs(saa, lcs, fsl, b)
                                        fallbacks += 1
                                        parallel = 0
                                        pr_[8] = 0  # N_PARAMS + 2: parallel
                                        break
                                stall_ticks += ticks() - tw
                            else:
                                build_lcs(saa, lcs, fsl, b)
                                done[fsl] = tg2
                                inline_builds += 1
                                lcs_built += 1
                        fence()
                        known = tg2
                    fst = @L(lcs, fsl * b + fj)
                msl = fsl
                for cc in range(fc + 1, lc):
                    msl += 1
                    if msl == K:
                        msl = 0
                    fst = combine(fst, @L(ca, msl))
                RES = combine(fst, lst)
    """,
    # a run of tuples that open, close or leave no chunk and whose query needs no lcs check (its chunk's
    # was confirmed, ``known``): push (csa, saa), pop (fj), query lcs[fj] (+) [ca of the one middle
    # chunk] (+) csa, as ``query`` does it when ``li != b - 1``, ``fc != lc`` and ``fj != 0``; the scalars
    # the generic step keeps per tuple (pg, pf, front, back, next_k) move once per run
    run_count_s1="""
        nrun = hi - i
        if b - 2 - li < nrun:
            nrun = b - 2 - li
        if b - 1 - fj < nrun:
            nrun = b - 1 - fj
        if cap - q - 3 - no < nrun:
            nrun = cap - q - 3 - no
        if (nrun > 0 and fc != lc and lc - fc <= 2 and pg > pf and front == next_k - 1 and n + 1 == next_k + r
                and known == ep * 1099511627776 + fc):
            bl = lsl * b + li + 1
            bf = fsl * b + fj + 1
            iend = i + nrun
            if lc - fc == 2:
                msl = fsl + 1
                if msl == K:
                    msl = 0
                cmid = @L(ca, msl)
                while i < iend:
                    @LAT t0 = ticks()
                    xv = values[i]
                    pv = @LIFT(xv, n)
                    csa = combine(csa, pv)
                    @S(saa, bl, pv)
                    res = combine(combine(@L(lcs, bf), cmid), csa)
                    bl += 1
                    bf += 1
                    i += 1
                    n += 1
                    out_ends[no] = n
                    @OUT(res)
                    @LAT lat[no] = ticks() - t0
                    no += 1
            else:
                while i < iend:
                    @LAT t0 = ticks()
                    xv = values[i]
                    pv = @LIFT(xv, n)
                    csa = combine(csa, pv)
                    @S(saa, bl, pv)
                    res = combine(@L(lcs, bf), csa)
                    bl += 1
                    bf += 1
                    i += 1
                    n += 1
                    out_ends[no] = n
                    @OUT(res)
                    @LAT lat[no] = ticks() - t0
                    no += 1
            li += nrun
            fj += nrun
            pg += nrun
            pf += nrun
            front += nrun
            back += nrun
            next_k += nrun
            if i >= hi:
                break
    """,
    reset="""
        pg = 0
        pf = 0
        lc = -1
        li = b - 1
        lsl = K - 1
        fc = 0
        fj = 0
        fsl = 0
        ep += 1
        csa = ident
    """,
)
