"""Subtract-on-evict (SoE), :mod:`pba_runtime.algorithms.soe` compiled: a running total, an inverse on eviction.

Invertible aggregations only (the aggregation declares ``inverse``, as the Python SoE requires).
Four mergers, chosen by the aggregation exactly as the Python algorithm chooses its own:

* :data:`ALGORITHM` (``count`` and user aggregations with a compiled ``inverse``): the total in two
  parts, the *old* one (slices pushed before a checkpoint), which only shrinks by inverses, and the
  *new* one, which only grows by combines; the Python algorithm's steps in its order, so its bits.
* :data:`SUM`, :data:`PAIR` (``mean``, ``geomean``) and :data:`STD`: **exact** accumulators, as the
  Python SoE keeps them (a float total maintained with inverses would carry the rounding of
  tuples already evicted, and a NaN or infinity that entered it would never leave). Every finite
  float is an integer multiple of ``2**-1074``: the sum of the values is held exactly as a fixed-point
  integer of 30-bit limbs (``acc1``, limb ``i`` weighs ``2**(30 i - 1074)``), a push adds the value's
  53-bit significand at its place and a pop subtracts it. Limbs carry lazily; a query normalises the
  limbs touched and rounds the total once, to nearest even: the correctly rounded sum, which is what
  the Python algorithm's integers give, so the same bits. Non-finite values are counted aside and
  leave with their slice. ``std`` keeps ``sum x`` and ``sum x**2`` (``acc2``, at ``2**-2148``) exactly,
  ``n sum x**2 - (sum x)**2`` is formed exactly at the query (limb products over the limbs in use)
  and rounded once, then divided by ``n``: within an ulp or two of the Python algorithm's, which
  rounds once, and exact in its cancellations (a window of equal values has M2 exactly 0).
"""

from __future__ import annotations

import textwrap

from .loop_template import Algorithm

__all__ = ["ALGORITHM", "SUM", "PAIR", "STD", "EXACT", "N_LIMBS1", "N_LIMBS2", "N_TMP"]

#: limbs of ``sum x`` (bits 2**-1074 .. 2**(1024 + 53 + 64)) and of ``sum x**2`` (2**-2148 ..)
N_LIMBS1 = 80
N_LIMBS2 = 160
N_TMP = 4 * N_LIMBS1 + 2 * N_LIMBS2 + 32

ALGORITHM = Algorithm(
    name="soe",
    ints=("f", "e", "mark", "refreshes"),
    parts=("old", "new"),
    arrays=("vals",),
    params=("vmask",),
    push="""
        @S(vals, e & vmask, P)
        e += 1
        new = combine(new, P)
    """,
    pop="""
        jo = f & vmask
        po = @L(vals, jo)
        f += 1
        if f < mark:
            if f == mark - 1:
                jo = f & vmask
                old = @L(vals, jo)
            else:
                old = inverse(old, po)
        elif f == mark:
            old = ident
        else:
            if f < e:
                old = inverse(new, po)
            else:
                old = ident
            new = ident
            mark = e
            refreshes += 1
    """,
    query="""
        if f == mark:
            RES = new
        elif mark == e:
            RES = old
        else:
            RES = combine(old, new)
    """,
    reset="""
        f = 0
        e = 0
        mark = 0
        old = ident
        new = ident
    """,
)

# ------------------------------------------------------------------ exact accumulators (limb arithmetic)
_HELPERS = '''
def x_add(acc, v, sh, sgn, lo, hi):
    """acc += sgn * v * 2**sh (0 <= v < 2**60, sh >= 0), three limbs touched, carried lazily."""
    i = sh // 30
    b = sh - 30 * i
    a0 = (v & 1073741823) << b
    a1 = (v >> 30) << b
    acc[i] += sgn * (a0 & 1073741823)
    acc[i + 1] += sgn * ((a0 >> 30) + (a1 & 1073741823))
    acc[i + 2] += sgn * (a1 >> 30)
    if i < lo:
        lo = i
    if i + 3 > hi:
        hi = i + 3
    return lo, hi


def x_addmul(acc, scr, a, b, c, sh, sgn, lo, hi):
    """acc += sgn * a * b * c * 2**sh (a, b, c < 2**53 non-negative integers)."""
    scr[0] = a & 1073741823
    scr[1] = a >> 30
    nd = 2
    for f in (b, c):
        if f == 1:
            continue
        f0 = f & 1073741823
        f1 = f >> 30
        for j in range(nd + 3):
            scr[8 + j] = 0
        for j in range(nd):
            p0 = scr[j] * f0
            p1 = scr[j] * f1
            scr[8 + j] += p0 & 1073741823
            scr[8 + j + 1] += (p0 >> 30) + (p1 & 1073741823)
            scr[8 + j + 2] += p1 >> 30
        for j in range(nd + 2):
            cy = scr[8 + j] >> 30
            scr[j] = scr[8 + j] - (cy << 30)
            scr[8 + j + 1] += cy
        nd += 2
    for j in range(nd):
        if scr[j] != 0:
            lo, hi = x_add(acc, scr[j], sh + 30 * j, sgn, lo, hi)
    return lo, hi


def x_float(x):
    """A finite non-zero float as (m, k): x = m * 2**k exactly, 0 < m < 2**53, k >= -1074 (m >= 0 for |x|)."""
    fr, ex = math.frexp(abs(x))
    m = np.int64(fr * 9007199254740992.0)
    k = ex - 53
    if k < -1074:
        m >>= -1074 - k
        k = -1074
    return m, k


def x_norm(acc, lo, hi):
    """Carry limbs [lo, hi) into [0, 2**30); the sign stays in limb hi."""
    for i in range(lo, hi):
        cy = acc[i] >> 30
        acc[i] -= cy << 30
        acc[i + 1] += cy


def x_digits(acc, lo, hi, out):
    """|acc| over limbs [lo, hi] as digits in [0, 2**30) in out[0 .. n), acc normalised in place: (n, negative)."""
    if hi < lo:
        return 0, False
    x_norm(acc, lo, hi)
    n = hi - lo + 1
    neg = acc[hi] < 0
    for j in range(n):
        out[j] = -acc[lo + j] if neg else acc[lo + j]
    out[n] = 0
    out[n + 1] = 0
    for j in range(n + 1):
        cy = out[j] >> 30
        out[j] -= cy << 30
        out[j + 1] += cy
    return n + 2, neg


def x_top(d, n):
    """The digits d[0 .. n) rounded to 53 bits, to nearest even: (significand as a float, exponent of its last bit)."""
    h = n - 1
    while h >= 0 and d[h] == 0:
        h -= 1
    if h < 0:
        return 0.0, 0
    nb = math.frexp(float(d[h]))[1]
    total = 30 * h + nb
    bl = total if total < 62 else 62
    need = bl
    mant = np.int64(0)
    sticky = False
    for j in range(h, -1, -1):
        dj = d[j]
        wd = nb if j == h else 30
        if need >= wd:
            mant = (mant << wd) | dj
            need -= wd
        elif need > 0:
            mant = (mant << need) | (dj >> (wd - need))
            if dj & ((np.int64(1) << (wd - need)) - 1):
                sticky = True
            need = 0
        elif dj != 0:
            sticky = True
            break
    lsb = total - bl
    if bl > 53:
        extra = bl - 53
        rest = mant & ((np.int64(1) << extra) - 1)
        mant >>= extra
        lsb += extra
        half = np.int64(1) << (extra - 1)
        if rest > half or (rest == half and (sticky or (mant & 1) != 0)):
            mant += 1
    return float(mant), lsb


def x_sum(acc, xs, tmp):
    """The exact total, rounded once to nearest even; numpy's sum when non-finite values are held.

    The limbs in use are carried in place; the top 62 bits go to an int64 whose last bit is set when
    any bit below them is (sticky), so ``float()`` rounds it once, correctly, and ``ldexp`` scales it
    exactly (a subnormal total has fewer than 53 bits: nothing to round).
    """
    lo = xs[0]
    hi = xs[1]
    fin = 0.0
    if hi >= lo:
        for i in range(lo, hi):
            cy = acc[i] >> 30
            acc[i] -= cy << 30
            acc[i + 1] += cy
        neg = acc[hi] < 0
        if neg:  # |total| in tmp[0 .. n)
            n = hi - lo + 1
            for i in range(n):
                tmp[i] = -acc[lo + i]
            for i in range(n - 1):
                cy = tmp[i] >> 30
                tmp[i] -= cy << 30
                tmp[i + 1] += cy
            d = tmp
            b = 0
            h = n - 1
        else:
            d = acc
            b = lo
            h = hi
        while h >= b and d[h] == 0:
            h -= 1
        if h >= b:
            mant = d[h]
            room = 62 - math.frexp(float(mant))[1]
            lsb = 30 * (h - b)
            j = h - 1
            sticky = False
            while room > 0 and j >= b:
                if room >= 30:
                    mant = (mant << 30) | d[j]
                    room -= 30
                    lsb -= 30
                else:
                    mant = (mant << room) | (d[j] >> (30 - room))
                    sticky = (d[j] & ((np.int64(1) << (30 - room)) - 1)) != 0
                    lsb -= room
                    room = 0
                j -= 1
            while not sticky and j >= b:
                sticky = d[j] != 0
                j -= 1
            if sticky:
                mant |= 1
            fin = math.ldexp(float(mant), lsb + 30 * lo - 1074)
            if neg:
                fin = -fin
    nan = xs[4]
    pinf = xs[5]
    ninf = xs[6]
    if nan == 0 and pinf == 0 and ninf == 0:
        return fin
    if nan != 0:
        return math.nan
    pos = pinf > 0 or fin == math.inf
    ng = ninf > 0 or fin == -math.inf
    if pos and ng:
        return math.nan
    return math.inf if pos else -math.inf


def x_take(acc, xs, x, sgn):
    """Add (sgn 1) or subtract (-1) the float x exactly; non-finite values counted aside."""
    if x != 0.0:
        if x - x == 0.0:
            m, k = x_float(x)
            lo, hi = x_add(acc, m, k + 1074, -sgn if x < 0.0 else sgn, xs[0], xs[1])
            xs[0] = lo
            xs[1] = hi
        elif x > 0.0:
            xs[5] += sgn
        elif x < 0.0:
            xs[6] += sgn
        else:
            xs[4] += sgn


def x_take_std(acc1, acc2, xs, scr, n, mean, m2, ml, sgn):
    """std's partial (n, mean, M2, lo) as the exact n, sum x = n (mean + lo) and
    sum x**2 = M2 + n (mean + lo)**2 = M2 + n mean**2 + 2 n mean lo + n lo**2."""
    if n == 0.0:
        return
    k = np.int64(n)
    xs[7] += sgn * k
    if not (mean - mean == 0.0 and m2 - m2 == 0.0 and ml - ml == 0.0):
        xs[4] += sgn  # np.std of a window holding NaN or an infinity is NaN
        return
    if mean != 0.0:
        mm, me = x_float(mean)
        lo, hi = x_addmul(acc1, scr, mm, k, 1, me + 1074, -sgn if mean < 0.0 else sgn, xs[0], xs[1])
        xs[0] = lo
        xs[1] = hi
        lo, hi = x_addmul(acc2, scr, mm, mm, k, 2 * me + 2148, sgn, xs[2], xs[3])
        xs[2] = lo
        xs[3] = hi
    if ml != 0.0:
        lm, le = x_float(ml)
        lo, hi = x_addmul(acc1, scr, lm, k, 1, le + 1074, -sgn if ml < 0.0 else sgn, xs[0], xs[1])
        xs[0] = lo
        xs[1] = hi
        lo, hi = x_addmul(acc2, scr, lm, lm, k, 2 * le + 2148, sgn, xs[2], xs[3])
        xs[2] = lo
        xs[3] = hi
        if mean != 0.0:
            lo, hi = x_addmul(acc2, scr, mm, lm, 2 * k, me + le + 2148, -sgn if (mean < 0.0) != (ml < 0.0) else sgn,
                              xs[2], xs[3])
            xs[2] = lo
            xs[3] = hi
    if m2 != 0.0:
        mm, me = x_float(m2)
        lo, hi = x_add(acc2, mm, me + 2148, -sgn if m2 < 0.0 else sgn, xs[2], xs[3])
        xs[2] = lo
        xs[3] = hi


def x_clear(acc1, acc2, xs):
    """The window is empty: every total is exactly zero again."""
    for i in range(xs[0], xs[1] + 1):
        acc1[i] = 0
    for i in range(xs[2], xs[3] + 1):
        acc2[i] = 0
    xs[0] = 1 << 30
    xs[1] = -1
    xs[2] = 1 << 30
    xs[3] = -1
    for i in range(4, 8):
        xs[i] = 0


def x_std(acc1, acc2, xs, tmp, xn):
    """(n, mean, M2, 0) of the window from the exact sum x and sum x**2: M2 = (n sum x**2 - (sum x)**2) / n
    (a query's partial is only lowered: the mean's lo is not formed)."""
    lo1 = xs[0]
    hi1 = xs[1]
    lo2 = xs[2]
    hi2 = xs[3]
    nan = xs[4]
    cnt = xs[7]
    if cnt == 0:
        return (0.0, 0.0, 0.0, 0.0)
    fn = float(cnt)
    if nan != 0:
        return (fn, math.nan, math.nan, 0.0)
    n1, neg = x_digits(acc1, lo1, hi1, tmp)
    mant, lsb = x_top(tmp, n1)
    mean = math.ldexp(mant, lsb + 30 * lo1 - 1074) / fn if mant != 0.0 else 0.0
    if neg:
        mean = -mean
    n2, _neg2 = x_digits(acc2, lo2, hi2, tmp[n1:])
    # xn = cnt * S2 at limb offset lo2 - 2 lo1, minus S**2 at offset 0 (weights 2**(30 (i + 2 lo1) - 2148))
    off2 = lo2 - 2 * lo1 if n2 > 0 else 0
    base = -off2 if off2 < 0 else 0  # S2 has limbs below S's square: the frame starts lower
    off2 += base
    top = base + 2 * n1 + 2
    if off2 + n2 + 3 > top:
        top = off2 + n2 + 3
    for j in range(top + 2):
        xn[j] = 0
    k0 = cnt & 1073741823
    k1 = cnt >> 30
    for j in range(n2):
        b = tmp[n1 + j]
        if b != 0:
            p0 = b * k0
            p1 = b * k1
            xn[off2 + j] += p0 & 1073741823
            xn[off2 + j + 1] += (p0 >> 30) + (p1 & 1073741823)
            xn[off2 + j + 2] += p1 >> 30
    for i in range(n1):
        a = tmp[i]
        if a != 0:
            for j in range(n1):
                p = a * tmp[j]
                xn[base + i + j] -= p & 1073741823
                xn[base + i + j + 1] -= p >> 30
    nd, negn = x_digits(xn, 0, top + 1, tmp)
    mant, lsb = x_top(tmp, nd)
    if mant == 0.0:
        return (fn, mean, 0.0, 0.0)
    m2 = math.ldexp(mant / fn, lsb + 30 * (2 * lo1 - base) - 2148)
    return (fn, mean, -m2 if negn else m2, 0.0)
'''

_NAMES = ("x_add", "x_addmul", "x_float", "x_norm", "x_digits", "x_top", "x_sum", "x_take", "x_take_std", "x_clear",
          "x_std")
#: small helpers inlined into the ones the loop calls (the loop itself makes one call per push, pop or query:
#: its own code stays small, which keeps numba's loop fast)
_INLINE = ("x_add", "x_float", "x_norm", "x_digits", "x_top", "x_take", "x_sum")


def _take_sum(p: str, sgn: str) -> str:
    return f"x_take(acc1, xs, {p}, {sgn})\n"


def _take_pair(p: str, sgn: str) -> str:
    return f"x_take(acc1, xs, {p}[0], {sgn})\nxs[7] += ({sgn}) * np.int64({p}[1])\n"


def _take_std(p: str, sgn: str) -> str:
    return f"x_take_std(acc1, acc2, xs, xscr, {p}[0], {p}[1], {p}[2], {p}[3], {sgn})\n"


def _exact(name: str, take, query: str) -> Algorithm:
    ind = textwrap.indent
    return Algorithm(
        name=name,
        ints=("f", "e"),
        arrays=("vals", "acc1", "acc2", "xt", "xn", "xscr", "xs"),
        params=("vmask",),
        helpers=_HELPERS,
        helper_names=_NAMES,
        inline=_INLINE,
        push="@S(vals, e & vmask, P)\ne += 1\n" + take("P", "1"),
        pop=("jo = f & vmask\npo = @L(vals, jo)\nf += 1\nif f == e:\n    x_clear(acc1, acc2, xs)\nelse:\n"
             + ind(take("po", "-1"), "    ")),
        query=query,
        query_head=("if HAS:\n" + ind(take("HEAD", "1"), "    ") + query + "\nif HAS:\n" + ind(take("HEAD", "-1"), "    ")),
        reset="f = 0\ne = 0\nx_clear(acc1, acc2, xs)\n",
    )


SUM = _exact("soe_sum", _take_sum, "RES = x_sum(acc1, xs, xt)")
PAIR = _exact("soe_pair", _take_pair, "RES = (x_sum(acc1, xs, xt), float(xs[7]))")
STD = _exact("soe_std", _take_std, "RES = x_std(acc1, acc2, xs, xt, xn)")

#: the exact accumulators the Python SoE keeps (``CompiledForms.exact``), and their mergers here
EXACT = {"sum": SUM, "pair": PAIR, "std": STD}
