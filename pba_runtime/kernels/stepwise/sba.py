"""SBA and PBA (Zhang, Akbarinia, Toumani, KDD'21) compiled: :mod:`pba_runtime.algorithms.pba`'s merger.

Slices are grouped into chunks of ``b``; chunk ``c`` lives in slot ``c % K`` of the flat buffers
``saa`` (its slice partials) and ``lcs`` (their suffix aggregates), ``ca`` holds its aggregate once
closed, ``csa`` the open chunk's running aggregate. A window of slices ``[pf, pg)`` is
``lcs[pf] (+) ca ... (+) csa``, as the Python operator computes it (same chunks, same order).

SBA (``parallel == 0``) builds a chunk's lcs on the main loop when the chunk closes. PBA
(``parallel == 1``) posts the chunk's tag to the queue ``wq`` (``ctl[0]``: tags posted, ``ctl[1]``:
tasks the worker is done with, ``ctl[2]``: stop, ``ctl[3]``: tasks it skipped) and goes on;
``worker_loop``, compiled with the GIL released on a pool thread for the whole run, builds each posted
lcs, then sets ``done[slot]`` behind a fence. Tags grow (``epoch * 2**40 + chunk``, the epoch counts
resets), so a flag left by an older chunk never passes.

The main loop never waits for a late worker, it helps (as DABA spreads Two-Stacks' flip over the
tuples). A chunk's lcs is first needed ``q - b + 1`` slices after it closed; if the worker has not
delivered it ``hdelay`` slices after the close (half that slack), the worker is *late*
(``worker_late``) and the main loop builds the lcs itself, ``hstep`` slices a push, into its own
buffer ``lcs2`` (the lcs is a pure function of the chunk: the worker's copy in ``lcs``, if it comes,
is equal and no longer read). Its first step *claims* the chunk (``claim[slot]``, a fence, then
``wst[slot]``, the worker's "started" flag; the worker sets ``wst`` then reads ``claim``, so one of
the two sees the other): a worker that has not started skips the task (``lcs_taken_back``, its
``ctl[3]``), one that started finishes it unread. The first window needing that lcs reads whichever
buffer holds it (``alt[slot]``: ``lcs2``; ``done[slot]``: ``lcs``), or completes the build there (a
*stall*, at most one build, never a wait: ``stall_ticks``). A slot is reused ``K`` chunks later only once
the worker is done with its task (``fin[slot]``) or will skip it (``own[slot]``: the main loop claimed
it, or a later chunk of the slot, before the worker started); ``slot_waits`` counts the waits for a
worker that started and has not finished.
A chunk that closes while the queue is full (the worker ``K - 1`` tasks behind) is not posted
(``queue_full``): the same help builds it. A window needing an lcs nobody built builds it
(``inline_builds``: only the first chunks after a restore).
No Python runs between the two threads: the hand-off is a store and a fence.
"""

from __future__ import annotations

from .loop_template import Algorithm

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


def worker_loop(saa, lcs, done, wq, ctl, b, K, claim, wst, fin, idle_ticks):
    # PBA's worker: builds the lcs of each chunk the main loop posts (wq[ctl[1] % K] .. wq[ctl[0] - 1 % K]),
    # until ctl[2] says stop and nothing is left; a task the main loop claimed first (it found the worker
    # late) is skipped. Idle, it spins with sched_yield (which gives the core to any other runnable
    # thread) for idle_ticks after its last task, then naps a short while at a time: a parked thread on a VM can
    # take longer to wake than a chunk's slack at large windows
    tail = ctl[1]
    last = ticks()
    while True:
        fence()
        head = ctl[0]
        if head > tail:
            fence()  # read the queue only after the count that published it
            tag = wq[tail % K]
            slot = (tag & 1099511627775) % K
            wst[slot] = tag
            fence()  # then read the main loop's claim: one of the two sees the other's flag
            if claim[slot] < tag:  # claims grow: a later chunk's claim means this slot moved on too
                build_lcs(saa, lcs, slot, b)
                fence()
                done[slot] = tag
            else:
                ctl[3] += 1
            fence()
            fin[slot] = tag
            tail += 1
            fence()
            ctl[1] = tail
            # then drop the partials just read from this core's caches (after publishing: the main loop
            # never waits for it): the main loop rewrites them K chunks on, and each of its stores would
            # otherwise wait for this core to give the line up (cache_hints: on vCPUs on different dies
            # that wait dominated PBA's main loop)
            rb = saa.strides[0]
            for off in range(slot * b * rb, (slot * b + b) * rb, 64):
                evict(saa, off)
            last = ticks()
        elif ctl[2] != 0:
            break
        elif ticks() - last < idle_ticks:
            relax()
        else:
            nap(20)


def slot_busy(fin, sub, own, wst, sl):
    # the worker may still read the slot's partials: it is building a task there, or one is posted that the
    # main loop claimed no chunk at or after (a claimed one it skips, reading only the flags)
    return fin[sl] < sub[sl] and (own[sl] < sub[sl] or wst[sl] > fin[sl])


def wait_slot(fin, sub, own, wst, sl, spin_limit):
    tw = ticks()
    while slot_busy(fin, sub, own, wst, sl) and ticks() - tw < spin_limit:
        relax()
        fence()


def take_back(claim, wst, own, sl, tg):
    # the main loop claims chunk tag tg (slot sl): 1 if the worker had not started it (it will skip it)
    claim[sl] = tg
    fence()
    if wst[sl] != tg:
        own[sl] = tg
        return 1
    return 0


def lcs_steps(saa, lcs2, sl, b, hj, hn):
    # lcs2 rows [hn, hj) of slot sl, downwards (row hj and up are built): build_lcs's combines, in its order
    base = sl * b
    while hj > hn:
        hj -= 1
        th = @L(saa, base + hj)
        if hj != b - 1:
            th = combine(th, @L(lcs2, base + hj + 1))
        @S(lcs2, base + hj, th)
    return hj
'''

ALGORITHM = Algorithm(
    name="sba",
    # pg, pf: slices pushed and popped since the last reset; lc, li, lsl: the chunk, index and slot of
    # slice pg - 1; fc, fj, fsl: those of slice pf (kept incrementally: no division per tuple)
    # hc, hj: the oldest closed chunk whose lcs is not known ready, and the lcs2 rows the main loop has
    # not built of it yet (b: none); kalt: the front chunk's lcs (chunk ``known``) is in lcs2
    ints=("pg", "pf", "lc", "li", "lsl", "fc", "fj", "fsl", "ep", "wh", "known", "stalls", "stall_ticks",
          "inline_builds", "fallbacks", "lcs_built", "hc", "hj", "kalt", "worker_late", "lcs_built_inline",
          "lcs_taken_back", "slot_waits", "queue_full"),
    parts=("csa",),
    arrays=("saa", "lcs", "ca", "done", "sub", "wq", "ctl", "lcs2", "alt", "claim", "wst", "fin", "own"),
    params=("b", "K", "parallel", "spin_limit", "hdelay", "hstep"),
    helpers=HELPERS,
    helper_names=("take_back", "lcs_steps", "slot_busy"),
    inline=("take_back", "lcs_steps", "slot_busy"),
    push="""
        li += 1
        if li == b:
            li = 0
            lc += 1
            lsl += 1
            if lsl == K:
                lsl = 0
            if slot_busy(fin, sub, own, wst, lsl):
                slot_waits += 1
                wait_slot(fin, sub, own, wst, lsl, spin_limit)
            csa = P
        else:
            csa = combine(csa, P)
        @S(saa, lsl * b + li, P)
        pg += 1
        if li == b - 1:
            @S(ca, lsl, csa)
            if parallel != 0:
                if wh - ctl[1] < K - 1:
                    tgc = ep * 1099511627776 + lc
                    wq[wh % K] = tgc
                    sub[lsl] = tgc
                    fence()
                    wh += 1
                    ctl[0] = wh
                else:
                    queue_full += 1  # the worker is behind: not posted, the main loop's help builds it
            else:
                # SBA: the lcs here, written out rather than called (a call in the loop makes the
                # register allocator spill the loop's scalars)
                bl = lsl * b
                tl = @L(saa, bl + b - 1)
                @S(lcs, bl + b - 1, tl)
                for jl in range(b - 2, -1, -1):
                    tl = combine(@L(saa, bl + jl), tl)
                    @S(lcs, bl + jl, tl)
                done[lsl] = ep * 1099511627776 + lc
                lcs_built += 1
        if parallel != 0:
            # help a late worker: the oldest closed chunk whose lcs is not known ready (see the module doc)
            if hc < fc:
                hc = fc
                hj = b
            if li == b - 1:
                hcl = lc + 1
            else:
                hcl = lc
            if hc < hcl:
                hsl = hc % K
                htg = ep * 1099511627776 + hc
                if hj == b and (done[hsl] == htg or alt[hsl] == htg):
                    hc += 1
                elif pg >= (hc + 1) * b + hdelay:
                    if hj == b:
                        worker_late += 1
                        lcs_taken_back += take_back(claim, wst, own, hsl, htg)
                    hn = hj - hstep
                    if hn < 0:
                        hn = 0
                    hj = lcs_steps(saa, lcs2, hsl, b, hj, hn)
                    if hj == 0:
                        fence()
                        alt[hsl] = htg
                        lcs_built_inline += 1
                        hc += 1
                        hj = b
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
                        if alt[fsl] == tg2:
                            kalt = 1
                        elif done[fsl] == tg2:
                            kalt = 0
                        elif parallel != 0:
                            # not built (posted, or not: the queue was full): the main loop finishes it here
                            # (it never waits for the worker)
                            stalls += 1
                            tw = ticks()
                            if hc != fc or hj == b:
                                if hc < fc:
                                    hc = fc
                                worker_late += 1
                                lcs_taken_back += take_back(claim, wst, own, fsl, tg2)
                                hj = b
                            lcs_steps(saa, lcs2, fsl, b, hj, 0)
                            fence()
                            alt[fsl] = tg2
                            lcs_built_inline += 1
                            if hc == fc:
                                hc += 1
                                hj = b
                            stall_ticks += ticks() - tw
                            kalt = 1
                        else:
                            build_lcs(saa, lcs, fsl, b)
                            done[fsl] = tg2
                            inline_builds += 1
                            lcs_built += 1
                            kalt = 0
                        fence()
                        known = tg2
                    if kalt != 0:
                        fst = @L(lcs2, fsl * b + fj)
                    else:
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
        if parallel != 0 and hc < lc:  # stop where a late worker's help would start (the generic step helps)
            hdue = (hc + 1) * b + hdelay - pg
            if hdue < nrun:
                nrun = hdue
        if (nrun > 0 and fc != lc and lc - fc <= 2 and pg > pf and front == next_k - 1 and n + 1 == next_k + r
                and known == ep * 1099511627776 + fc):
            if kalt != 0:
                lb = lcs2
            else:
                lb = lcs
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
                    res = combine(combine(@L(lb, bf), cmid), csa)
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
                    res = combine(@L(lb, bf), csa)
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
        hc = 0
        hj = b
    """,
)
