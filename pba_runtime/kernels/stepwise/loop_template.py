"""The compiled slicing layer, written once: one tuple at a time, count and time windows, any slide.

This is :class:`pba_runtime.algorithms.base.SlicedAggregator` (``_step``, ``_step_time``,
``_advance``, ``_start``, ``_emit``) as a numba loop template. An algorithm (:class:`Algorithm`)
supplies the merger behind it as code snippets: ``push`` (a slice closed, its partial is ``P``),
``pop`` (evict the oldest slice), ``query`` (assign the aggregate of the slices held to ``RES``) and
``reset`` (empty), with the scalars, partials and arrays it keeps. :func:`source` writes the loop
for one algorithm, one partial width and with or without latency timing (``@LAT`` lines), through
:func:`pba_runtime.kernels.codegen.expand`'s ``@L``/``@S``.

The loop ``run(values, ts, lo, hi, si, sp, ida, <arrays>, out_ends, out_res, lat, no, final, pr_)``
steps tuples ``[lo, hi)`` and returns ``(i, no, event)``: the next tuple, the windows written to
``out_ends``/``out_res`` so far and why it stopped: 0 done, 1 the output is full, 2 the algorithm
asks its driver for something (PBA: chunks closed, to hand to the worker). Between calls the state
lives in ``si`` (int64 scalars), ``sp`` (partials, a row each) and the algorithm's arrays, so a
driver can stop and go on at any tuple. ``pr_`` holds ``r, s, q, m, offset, is_time`` and the
algorithm's parameters; ``final`` ends the stream (time windows: :meth:`flush`).
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field

from ..codegen import expand

__all__ = ["Algorithm", "source", "COMMON_INTS", "COMMON_PARTS", "N_PARAMS"]

#: the slicing layer's own scalars: si[0..7]
COMMON_INTS = ("n", "fill", "front", "back", "next_k", "slc", "has_slice", "t_last", "lat_lo", "lat_hi",
               "lat_t")
#: its partials: sp[0], sp[1]
COMMON_PARTS = ("cur", "head")
#: pr_[0..5]: r, s, q, m, offset, is_time; the algorithm's parameters follow
N_PARAMS = 6
#: expansion passes over the template: the macros expand into each other (``@ADVANCE`` holds ``@EMIT``,
#: ``@START`` and ``@PUSH``, ``@EMIT`` holds ``@POP`` and ``@QUERY``, ``@START`` holds ``@RESET``); more passes
#: than that nesting needs, so a macro added inside another still expands (a left-over ``@`` fails to compile)
MACRO_PASSES = 4


@dataclass(frozen=True)
class Algorithm:
    """The merger of one algorithm as snippets of the loop template (see the module doc)."""

    name: str
    push: str
    pop: str
    query: str
    reset: str
    ints: tuple[str, ...] = ()  # scalars kept in si after the common ones
    parts: tuple[str, ...] = ()  # partials kept in sp after the common ones
    arrays: tuple[str, ...] = ()  # arrays passed after ida, in this order
    params: tuple[str, ...] = ()  # read from pr_ after the common parameters
    after_tuple: str = ""  # may set `event` and `stop` (the loop breaks after the tuple)
    #: a query that adds the head of a partial slice itself (``RES``, ``HEAD``, ``HAS``): for a merger whose
    #: total takes the head in and out exactly (SoE's exact accumulators) instead of ``combine(query, head)``
    query_head: str = ""
    helpers: str = ""  # module-level functions the snippets call (compiled with the loop)
    helper_names: tuple[str, ...] = ()  # more functions to compile (their source: ``helpers`` or widths)
    #: module-level functions written for one partial width: ``width -> source`` (SlickDeque's ``kept``)
    width_helpers: Callable[[int], str] | None = None
    #: helpers numba inlines into their callers (a call that passes arrays costs their reference counts)
    inline: tuple[str, ...] = ()
    extra: dict = field(default_factory=dict)
    #: count windows with slide 1, once the window is full: the steps of a run of tuples none of which
    #: reaches one of the merger's boundaries, written as one tight loop (same combines, same order, each
    #: tuple still pushed, popped and queried). It owns the slicing layer's state (``i``, ``n``, ``no``,
    #: ``front``, ``back``, ``next_k``) for the tuples it steps and leaves the rest to the generic step
    run_count_s1: str = ""


_TEMPLATE = '''
def run(values, ts, lo, hi, si, sp, ida, @ARRAYS, out_ends, out_res, lat, no, final, pr_):
    r = pr_[0]
    s = pr_[1]
    q = pr_[2]
    m = pr_[3]
    off = pr_[4]
    is_time = @ISTIME  # a constant: each window kind compiles only its own path
    @PARAMS
    @LOAD
    ident = @L(ida, 0)
    cap = out_ends.shape[0]
    event = 0
    stop = False
    @LAT if lat_lo < lat_hi:
    @LAT     lat_dt = ticks() - lat_t
    @LAT     for w in range(lat_lo, lat_hi):
    @LAT         lat[w] += lat_dt
    @LAT     lat_lo = lat_hi
    i = lo
    if final and is_time and has_slice:
        if no + q + 3 > cap:
            event = 1
        else:
            @LAT t0 = ticks()
            @LAT w0 = no
            g = -(1 << 62)  # no slice: the stream ended
            t = 0
            @ADVANCE(1)
            @LAT t1 = ticks()
            @LAT for w in range(w0, no):
            @LAT     lat[w] = t1 - t0
    while i < hi and event == 0:
        @RUN1
        if no + q + 3 > cap:
            event = 1
            break
        @LAT t0 = ticks()
        @LAT w0 = no
        x = values[i]
        if is_time:
            t = ts[i]
            p = @LIFT(x, t)
            u0 = t - off - slc * s
            if has_slice != 0 and u0 >= 0 and u0 < s:
                g = slc
            else:
                g = (t - off) // s
            if has_slice == 0:
                @START
            elif g != slc:
                @ADVANCE(0)
            unit = t - off - g * s
            if m != 0 and next_k == g - q and unit >= m:
                @EMIT(next_k, kk * s + off + r, head, 1)
            if m != 0 and unit < m:
                head = combine(head, p)
            else:
                cur = combine(cur, p)
            t_last = t
            n += 1
        else:
            p = @LIFT(x, n)
            if s == 1:
                @PUSH(p)
                back += 1
            else:
                if fill == 0:
                    cur = p
                else:
                    cur = combine(cur, p)
                fill += 1
                if fill == s:
                    @PUSH(cur)
                    back += 1
                    cur = ident
                    fill = 0
            n += 1
            if n == next_k * s + r:
                @EMIT(next_k, n, cur, m != 0)
        i += 1
        @AFTER
        @LAT t1 = ticks()
        @LAT for w in range(w0, no):
        @LAT     lat[w] = t1 - t0
        @LAT if stop:
        @LAT     lat_lo = w0
        @LAT     lat_hi = no
        @LAT     lat_t = ticks()
        if stop:
            break
    @STORE
    return i, no, event
'''

_EMIT = '''
kk = {k}
while front < kk:
    @POP
    front += 1
@QUERY(res)
if {has_head}:
    res = combine(res, {head})
next_k = kk + 1
out_ends[no] = {end}
@OUT(res)
no += 1
'''

_START = '''
@RESET
slc = g
front = g
back = g
cur = ident
head = ident
next_k = (t - off - r) // s + 1
has_slice = 1
'''

_ADVANCE = '''
last = slc
S = slc
while True:
    if m != 0 and next_k == S - q:
        @EMIT(next_k, kk * s + off + r, head, 1)
    if m != 0:
        pp = combine(head, cur)
    else:
        pp = cur
    @PUSH(pp)
    back += 1
    head = ident
    cur = ident
    S += 1
    if m == 0 and next_k == S - q:
        @EMIT(next_k, kk * s + off + r, head, 0)
    if next_k > last:
        if {flush}:
            @RESET
            has_slice = 0
        else:
            @START
        break
    if S == g:
        slc = g
        break
'''


def _indent(code: str, prefix: str) -> str:
    return "\n".join(prefix + ln if ln.strip() else ln for ln in textwrap.dedent(code).strip("\n").splitlines())


def _macro(src: str, name: str, fn) -> str:
    """Replace each line ``<indent>@NAME(args)`` (or ``@NAME``) by ``fn(args)`` indented alike."""
    pat = re.compile(r"^([ \t]*)@" + name + r"(?:\((.*)\))?[ \t]*$", re.M)
    return pat.sub(lambda m: _indent(fn(m.group(2)), m.group(1)), src)


_ASSIGNED = re.compile(r"^[ \t]*(?:for[ \t]+)?([A-Za-z_]\w*(?:[ \t]*,[ \t]*[A-Za-z_]\w*)*)[ \t]*(?:[-+*/|&^]|<<|>>|//)?=(?!=)",
                       re.M)
_FOR = re.compile(r"^[ \t]*for[ \t]+(\w+)[ \t]+in\b", re.M)


def _assigned(code: str) -> set[str]:
    """Names a snippet assigns (``x = ``, ``x += ``, ``a, b = ``, ``for x in``)."""
    names = {n.strip() for m in _ASSIGNED.finditer(code) for n in m.group(1).split(",")}
    return names | set(_FOR.findall(code))


#: the template's own locals: a snippet that assigned one would corrupt the slicing layer
TEMPLATE_LOCALS = frozenset(
    _assigned(_TEMPLATE + _EMIT + _START + _ADVANCE) | set(COMMON_INTS) | set(COMMON_PARTS)
    | {"r", "s", "q", "m", "off", "is_time", "ident", "cap", "event", "stop", "i", "no", "lo", "hi", "final",
       "w", "w0", "t0", "t1", "lat_dt", "v"})  # the @LAT lines' and the vector output's


def check_names(alg: Algorithm) -> None:
    """Refuse an algorithm whose snippets assign one of the template's locals (a silent, wrong loop otherwise)."""
    snippets = (alg.push, alg.pop, alg.query, alg.reset, alg.query_head)
    clash = (set().union(*map(_assigned, snippets)) | _assigned(alg.after_tuple) - {"event", "stop"}) & TEMPLATE_LOCALS
    clash = sorted(clash)
    if clash:
        raise ValueError(f"algorithm {alg.name!r}: its snippets assign {', '.join(clash)}, locals of the slicing "
                         "template; rename them")


def source(alg: Algorithm, w: int, *, positional: bool, latency: bool, vector: bool, time: bool) -> str:
    """The loop of ``alg`` for partials of ``w`` floats (module source; expects ``lift``,
    ``combine``, ``lower``, ``ticks``, ``fence``, ``relax`` among its globals)."""
    check_names(alg)
    src = _TEMPLATE.replace("@ISTIME", "True" if time else "False")
    # the macros expand into each other: a few passes
    for _ in range(MACRO_PASSES):
        src = _macro(src, "ADVANCE", lambda a: _ADVANCE.format(flush="True" if a.strip() == "1" else "False"))
        src = _macro(src, "START", lambda a: _START)
        src = _macro(src, "EMIT", lambda a: _emit(a, alg))
        src = _macro(src, "PUSH", lambda a: _sub(alg.push, "P", a))
        src = _macro(src, "POP", lambda a: alg.pop)
        src = _macro(src, "QUERY", lambda a: _sub(alg.query, "RES", a))
        src = _macro(src, "RESET", lambda a: alg.reset)
    src = _macro(src, "RUN1", lambda a: "pass" if time or not alg.run_count_s1 else
                 "if s == 1:\n" + _indent(alg.run_count_s1, "    "))
    src = _macro(src, "AFTER", lambda a: alg.after_tuple or "pass")
    src = _macro(src, "OUT", lambda a: (f"v = lower({a})\n@S(out_res, no, v)" if vector
                                        else f"out_res[no] = lower({a})"))
    load = [f"{name} = si[{j}]" for j, name in enumerate(COMMON_INTS + alg.ints)]
    load += [f"{name} = @L(sp, {j})" for j, name in enumerate(COMMON_PARTS + alg.parts)]
    store = [f"si[{j}] = {name}" for j, name in enumerate(COMMON_INTS + alg.ints)]
    store += [f"@S(sp, {j}, {name})" for j, name in enumerate(COMMON_PARTS + alg.parts)]
    params = [f"{name} = pr_[{N_PARAMS + j}]" for j, name in enumerate(alg.params)] or ["pass"]
    src = _macro(src, "LOAD", lambda a: "\n".join(load))
    src = _macro(src, "STORE", lambda a: "\n".join(store))
    src = _macro(src, "PARAMS", lambda a: "\n".join(params))
    src = src.replace("@ARRAYS", ", ".join(alg.arrays) if alg.arrays else "_unused")
    lift = "lift({x}, {pos})" if positional else "lift({x})"
    src = re.sub(r"@LIFT\((\w+), (\w+)\)", lambda m: _lift(lift, m.group(1), m.group(2), w), src)
    if latency:
        src = re.sub(r"^([ \t]*)@LAT ", r"\1", src, flags=re.M)
    else:
        src = re.sub(r"^[ \t]*@LAT .*\n", "", src, flags=re.M)
    helpers = alg.helpers
    if alg.width_helpers is not None:
        helpers += "\n" + alg.width_helpers(w)
    names = ("values", "ts", "out_ends", "out_res", "lat", "si", "sp", "ida", "pr_") + alg.arrays
    return unsigned_indices(expand(helpers + "\n" + src, w), names)


_UINT = "uidx("


def unsigned_indices(src: str, names: tuple[str, ...]) -> str:
    """``src`` with each subscript of an array in ``names`` (not a slice) made unsigned (:func:`.index.uidx`).

    numba lets a signed index count from the end (``a[-1]``): every load and store pays a sign test
    and a select for it, and the loop keeps each array's length live for it. Every index in these
    loops is >= 0 by construction, so an unsigned one says so and the code goes (see
    ``docs/stepwise.md``). Integer literals are left alone (LLVM folds them).

    >>> unsigned_indices("x = a[i + 1] + b[0, j]\\na[k] = c[i]", ("a", "b"))
    'x = a[uidx(i + 1)] + b[0, uidx(j)]\\na[uidx(k)] = c[i]'
    """
    pat = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\[([^\[\]:]+)\]")

    def cast(m: re.Match) -> str:
        parts = [p.strip() for p in _split(m.group(2))]
        parts = [p if p.isdigit() or p.startswith(_UINT) else f"{_UINT}{p})" for p in parts]
        return f"{m.group(1)}[{', '.join(parts)}]"

    while True:
        new = pat.sub(cast, src)
        if new == src:
            return src
        src = new


def _lift(form: str, x: str, pos: str, w: int) -> str:
    call = form.format(x=x, pos=pos)
    return f"float({call})" if w == 0 else call


def _sub(code: str, var: str, value: str) -> str:
    return re.sub(r"\b" + var + r"\b", value.strip(), code)


def _emit(args: str, alg: Algorithm) -> str:
    k, end, head, has_head = [a.strip() for a in _split(args)]
    text = _EMIT.format(k=k, end=end, head=head, has_head=has_head)
    if alg.query_head:
        q = f"@QUERY(res)\nif {has_head}:\n    res = combine(res, {head})\n"
        assert q in text
        qh = _sub(_sub(_sub(alg.query_head, "RES", "res"), "HEAD", head), "HAS", f"({has_head})")
        text = text.replace(q, qh.strip("\n") + "\n")
    return text


def _split(args: str) -> list[str]:
    """Split macro arguments on top-level commas."""
    out, depth, cur = [], 0, ""
    for ch in args:
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
            continue
        depth += ch in "(["
        depth -= ch in ")]"
        cur += ch
    out.append(cur)
    return out
