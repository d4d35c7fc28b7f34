"""The text sinks' lines, compiled: a batch's columns straight to CSV or JSON lines, floats spelled as ``repr``.

The CSV sink writes one line ``key,start,end,value`` per window, the JSON-lines sink one object
``{"key": ..., "start": ..., "end": ..., "value": ...}``. Formatting those lines was the sinks' bound:
pyarrow's float-to-string cast and CSV writer, Python's ``repr`` and the per-line formatter
(:func:`pba_runtime.runtime.sinks.format_results`) each cost a row far more than the aggregation (the
default ``pba-run`` job emits a window per tuple, tens of millions a second). This module writes the whole
batch in one compiled pass over its columns (no Python object per result). The two formats differ only in the
text between the numbers and in how ``nan`` and the infinities are spelled: a :class:`Layout`
(:data:`CSV`, :data:`JSONL`) says which; the key's text and what follows it (``7,`` or ``{"key": 7,
"start": ``) is the caller's *prefix*.

Most rows of a count window with slide 1 are the row before's line with ``start`` and ``end`` one more
and, for a sliding max or min, the same value. The writer keeps the last line it wrote in full as a
*template* of up to 12 words (:mod:`pba_runtime.runtime.unaligned`), and writes such a row as the
template's words followed by the last two digits of both numbers; a row whose ``start`` or ``end`` is
a multiple of 100 (the digits before the last two change), a key or value change, a line longer than
96 bytes or numbers of one digit take the full path, which makes that line the new template.
Formatting the two integers from scratch was most of a CSV row's cost; incrementing their digits in the
words of the line before, carry by carry, made each row wait on the row before's; the template, written
as three words when the line fits in 24 bytes (the default job's lines do) with each number's two digits
put in as one two-byte store, is the cheapest of the three.

Floats are written exactly as ``repr`` writes them (as :mod:`json` does too), so they read back to the same
double: the shortest decimal that rounds to the value, in ``repr``'s layout, found in the loop by
:func:`pba_runtime.runtime.float_repr.put_repr` (Schubfach; ``-0.0`` too; ``nan`` and the infinities as the
layout spells them). Results of a mean, a standard deviation or a sum of fractions need 15-17 digits on most
rows: before, those went to Python's ``repr``, and the CSV sink made the default job with ``--agg std``
several times slower than without a sink. :func:`lines` is checked against the readable
reference (:func:`pba_runtime.runtime.sinks.format_results`) by the tests, for keys that need quoting too.

Examples
--------
>>> import numpy as np
>>> print(lines([b"7,", b'"a,b",'], np.array([2, 1]), np.array([3, 4, 9]), 3,
...             np.array([0.5, 2.0, 0.1 + 0.2])).decode(), end="")
7,0,3,0.5
7,1,4,2.0
"a,b",6,9,0.30000000000000004
>>> print(lines([b'{"key": "a", "start": '], np.array([2]), np.array([3, 4]), 3,
...             np.array([float("nan"), -float("inf")]), JSONL).decode(), end="")
{"key": "a", "start": 0, "end": 3, "value": NaN}
{"key": "a", "start": 1, "end": 4, "value": -Infinity}
>>> float_text(np.array([1e-5, -0.0, 5977587022847.288, float("nan"), 1e16, 123.0]))
['1e-05', '-0.0', '5977587022847.288', 'nan', '1e+16', '123.0']
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import numpy as np
from numba import njit

from .float_repr import (
    DIGITS2,
    LITTLE,
    POW10U,
    REPR_BYTES,
    G,
    digit_count,
    put_digits,
    put_digits_at,
    put_repr,
)
from .unaligned import load2, load8, store2, store8

__all__ = ["Layout", "CSV", "JSONL", "blob", "lines", "lines_into", "column_lines_into", "write_float_lines", "float_text", "compile_now"]


@dataclasses.dataclass(frozen=True)
class Layout:
    """What a line holds besides its key prefix and numbers: ``prefix start <between> end <before_value> value
    <end>``, how a non-finite value is spelled, and how a vector value's numbers are put together
    (``<vector_open> x <vector_sep> y ... <vector_close>``: a ``moment_sketch``'s).

    Examples
    --------
    >>> JSONL.between, JSONL.nan, CSV.end, CSV.vector_sep, JSONL.vector_open
    (', "end": ', 'NaN', '\\n', ';', '[')
    """

    between: str
    before_value: str
    end: str
    nan: str
    inf: str
    neg_inf: str
    vector_open: str
    vector_sep: str
    vector_close: str

    @functools.cached_property
    def texts(self) -> tuple[np.ndarray, np.ndarray]:
        """The texts as one :func:`blob` (what the compiled loops take), in the order of the fields.

        >>> data, off = CSV.texts; data.tobytes(), off.tolist()
        (b',,\\nnaninf-inf;', [0, 1, 2, 3, 6, 9, 13, 13, 14, 14])
        """
        return blob([getattr(self, f.name).encode() for f in dataclasses.fields(self)])

    @functools.cached_property
    def row_bound(self) -> int:
        """Most bytes one row's start, end and value take besides the key: two int64 (20 bytes each), a value
        (``repr``: at most :data:`~pba_runtime.runtime.float_repr.REPR_BYTES`, or a non-finite spelling) and the
        texts between them."""
        return 2 * 20 + self.value_bound + len(self.between) + len(self.before_value) + len(self.end)

    @functools.cached_property
    def value_bound(self) -> int:
        """Most bytes one float's text takes."""
        return max(REPR_BYTES, len(self.nan), len(self.inf), len(self.neg_inf))

    def vector_row_bound(self, width: int) -> int:
        """:attr:`row_bound` of a row whose value is ``width`` floats."""
        return (self.row_bound - self.value_bound + len(self.vector_open) + len(self.vector_close)
                + width * (self.value_bound + len(self.vector_sep)))


#: ``key,start,end,value``: non-finite values as ``repr`` spells them, a vector's numbers joined by ``;``
CSV = Layout(",", ",", "\n", "nan", "inf", "-inf", "", ";", "")
#: ``{"key": ..., "start": ..., "end": ..., "value": ...}``: non-finite values and vectors (lists) as :mod:`json`
#: writes them
JSONL = Layout(', "end": ', ', "value": ', "}\n", "NaN", "Infinity", "-Infinity", "[", ", ", "]")

# the texts' places in Layout.texts
_BETWEEN, _BEFORE_VALUE, _END, _NAN, _INF, _NEG_INF, _VECTOR_OPEN, _VECTOR_SEP, _VECTOR_CLOSE = range(9)
#: bytes past the last line the writer may touch: a short line's three template words reach 24 bytes from its
#: start, a longer line's last word up to 7 bytes past it, and digits stored as words up to
#: :data:`~pba_runtime.runtime.float_repr.REPR_SLACK` past them
_SLACK = 32
#: words of the slide-1 shortcut's template: lines of up to 96 bytes (a JSON line with a long key and 17 digits)
_TEMPLATE_WORDS = 12
#: the machine's byte order is little-endian: a word's first byte is its lowest (the slide-1 shortcut's words)
_LITTLE = LITTLE
_EXPONENT = np.uint64(0x7FF << 52)
_MASK63 = np.uint64((1 << 63) - 1)


@njit(cache=True, nogil=True, inline="always")
def _put_text(buf, pos, texts, texts_off, k):  # pragma: no cover - compiled
    """Write the layout's text ``k`` at ``pos``, byte by byte; returns the position after it. (As one or two
    word stores, a row of the full path cost more.)"""
    for j in range(texts_off[k], texts_off[k + 1]):
        buf[pos] = texts[j]
        pos += 1
    return pos


@njit(cache=True, nogil=True, inline="always")
def _put_float(buf, pos, bits, texts, texts_off, g, pow10u, digits2, little):  # pragma: no cover - compiled
    """Write the double whose bits are ``bits`` at ``pos``: ``repr``'s text if it is finite, else the layout's
    spelling of ``nan`` or the infinity; returns the position after it."""
    if bits & _MASK63 < _EXPONENT:
        return put_repr(buf, pos, bits, g, pow10u, digits2, little)
    k = _NAN if bits & _MASK63 > _EXPONENT else (_NEG_INF if bits >> np.uint64(63) else _INF)
    return _put_text(buf, pos, texts, texts_off, k)


@njit(cache=True, nogil=True, inline="always")
def _put_int(buf, pos, x, pow10u, digits2, little):  # pragma: no cover - compiled
    """Write int ``x`` at ``pos``; returns the position after it. With ``little``, up to 17 digits go as words
    (:func:`~pba_runtime.runtime.float_repr.put_digits_at`), which may write up to
    :data:`~pba_runtime.runtime.float_repr.REPR_SLACK` bytes past it."""
    if x < 0:
        buf[pos] = 45  # '-'
        pos += 1
        u = np.uint64(-x)
    else:
        u = np.uint64(x)
    n = digit_count(u, pow10u)
    if n <= 17:
        put_digits_at(buf, pos, u, n, digits2, little)
    else:
        put_digits(buf, pos + n, u, n, digits2)
    return pos + n


@njit(cache=True, nogil=True)
def _write_ints(buf, prefix, prefix_off, counts, ends, range_, values, texts, texts_off, pow10u,
                digits2, little):  # pragma: no cover - compiled
    """Write the lines of int64 values into ``buf`` (bytes enough: the caller's bound), per row
    ``prefix[part] start between end before_value value end``; returns their length."""
    pos = 0
    row = 0
    for p in range(counts.shape[0]):
        p0, p1 = prefix_off[p], prefix_off[p + 1]
        for _ in range(counts[p]):
            for j in range(p0, p1):
                buf[pos] = prefix[j]
                pos += 1
            e = ends[row]
            pos = _put_int(buf, pos, e - range_, pow10u, digits2, little)
            pos = _put_text(buf, pos, texts, texts_off, _BETWEEN)
            pos = _put_int(buf, pos, e, pow10u, digits2, little)
            pos = _put_text(buf, pos, texts, texts_off, _BEFORE_VALUE)
            pos = _put_int(buf, pos, values[row], pow10u, digits2, little)
            pos = _put_text(buf, pos, texts, texts_off, _END)
            row += 1
    return pos


@njit(cache=True, nogil=True)
def _write_fast(buf, prefix, prefix_off, counts, ends, range_, bits, texts, texts_off, g, pow10u, digits2,
                little):  # pragma: no cover - compiled
    """The lines of float values (``bits``: their bits, uint64) into ``buf`` in one pass, each value spelled as
    ``repr`` spells it (:func:`~pba_runtime.runtime.float_repr.put_repr`; ``nan`` and the infinities as the
    layout's ``texts`` do); returns the length written. Two shortcuts, each writing the bytes the full path
    would:

    * a row of the same part (key) as the row before with its window one position on (``end`` one more: a
      count window with slide 1, every row of the default job but a key's first), whose ``start`` and
      ``end`` are not multiples of 100 (so neither has crossed one since the last line written: only their
      last two digits differ from that line's) is that line, the *template*, with the last two digits of
      both numbers put in; with the same value (the row before's bits) that is the whole line (most rows of
      a sliding max or min), else the line up to the text before the value, and the value is written after
      it. The template is kept as up to :data:`_TEMPLATE_WORDS` words (``uint64``, the machine's byte order:
      ``little``, else no shortcut) that are only read here: each row stores them (at least three: a line of
      up to 24 bytes is three stores) and then its two pairs of digits, two bytes a store, so no row's work
      waits on the row before's;
    * otherwise a value with the row before's bits (so ``0.0`` and ``-0.0`` differ) copies that row's text.

    A row's word stores may reach past its line: to 24 bytes from its start for a shorter line, else up to 7
    bytes (the caller's bound keeps :data:`_SLACK` bytes of room after the last line).
    """
    pos = 0
    row = 0
    before_value = texts_off[_BEFORE_VALUE + 1] - texts_off[_BEFORE_VALUE]
    # the bits of the last value written in full here, and where its text is (at first: bits no row's value
    # can have before one is written, the first value's complement)
    prev = ~bits[0] if bits.shape[0] else np.uint64(0)
    prev_lo = prev_hi = 0
    line = np.zeros(_TEMPLATE_WORDS, np.uint64)  # the template: the last line written in full, as words
    n_words = line_len = 0  # (n_words 0: none)
    t0 = t1 = t2 = t3 = np.uint64(0)  # line's first four words
    start_stop = end_stop = 0  # offsets in the template just past start's digits and past end's
    prev_end = np.int64(0)
    s_lo = e_lo = np.int64(99)  # the last two digits of the row before's start and end
    for p in range(counts.shape[0]):
        p0, p1 = prefix_off[p], prefix_off[p + 1]
        same_part = False
        for _ in range(counts[p]):
            e = ends[row]
            v = bits[row]
            s = e - range_
            same = v == prev
            if same_part and n_words and same and e == prev_end + 1 and s_lo < 99 and e_lo < 99:
                # the template's whole line, with start's and end's last two digits put in
                s_lo += 1
                e_lo += 1
                if n_words <= 4:  # most CSV lines: three or four stores of words held in registers
                    store8(buf, pos, t0)
                    store8(buf, pos + 8, t1)
                    store8(buf, pos + 16, t2)
                    if n_words == 4:
                        store8(buf, pos + 24, t3)
                else:
                    for w in range(n_words):
                        store8(buf, pos + 8 * w, line[w])
                store2(buf, pos + start_stop - 2, load2(digits2, 2 * s_lo))
                store2(buf, pos + end_stop - 2, load2(digits2, 2 * e_lo))
                pos += line_len
                prev_end = e
                row += 1
                continue
            if same_part and n_words and e == prev_end + 1 and s_lo < 99 and e_lo < 99:
                # a new value: the template's line up to the text before the value (the stores above, written
                # out again: as an inlined helper of both branches they made the loop several times slower, and
                # one branch for both rows slowed the default job's loop too), then the value below
                s_lo += 1
                e_lo += 1
                if n_words <= 4:
                    store8(buf, pos, t0)
                    store8(buf, pos + 8, t1)
                    store8(buf, pos + 16, t2)
                    if n_words == 4:
                        store8(buf, pos + 24, t3)
                else:
                    for w in range(n_words):
                        store8(buf, pos + 8 * w, line[w])
                store2(buf, pos + start_stop - 2, load2(digits2, 2 * s_lo))
                store2(buf, pos + end_stop - 2, load2(digits2, 2 * e_lo))
                line_lo = pos
                pos += end_stop + before_value
                prev_end = e
            else:
                same_part = True
                line_lo = pos
                prev_end = e
                for j in range(p0, p1):
                    buf[pos] = prefix[j]
                    pos += 1
                pos = _put_int(buf, pos, s, pow10u, digits2, little)
                start_stop = pos - line_lo
                pos = _put_text(buf, pos, texts, texts_off, _BETWEEN)
                pos = _put_int(buf, pos, e, pow10u, digits2, little)
                end_stop = pos - line_lo
                pos = _put_text(buf, pos, texts, texts_off, _BEFORE_VALUE)
            if same:  # the row before's value (a sliding max or min repeats): its text again
                for j in range(prev_lo, prev_hi):
                    buf[pos] = buf[j]
                    pos += 1
            else:
                prev_lo = pos
                # _put_float written out: inlined here as a helper, it slowed a row of the full path
                if v & _MASK63 < _EXPONENT:  # finite
                    pos = put_repr(buf, pos, v, g, pow10u, digits2, little)
                else:  # nan or an infinity, as the layout spells it
                    k = _NAN if v & _MASK63 > _EXPONENT else (_NEG_INF if v >> np.uint64(63) else _INF)
                    pos = _put_text(buf, pos, texts, texts_off, k)
                prev, prev_hi = v, pos
            pos = _put_text(buf, pos, texts, texts_off, _END)
            line_len = pos - line_lo
            s_lo = s % 100
            e_lo = e % 100
            # a template needs two digits in both numbers and at most _TEMPLATE_WORDS words
            n_words = (line_len + 7) >> 3 if little and s >= 10 and e >= 10 else 0
            if n_words > _TEMPLATE_WORDS:
                n_words = 0
            for w in range(n_words):
                line[w] = load8(buf, line_lo + 8 * w)
            t0, t1, t2, t3 = line[0], line[1], line[2], line[3]
            row += 1
    return pos


@njit(cache=True, nogil=True)
def _write_vectors(buf, prefix, prefix_off, counts, ends, range_, bits, texts, texts_off, g, pow10u,
                   digits2, little):  # pragma: no cover - compiled
    """The lines of vector values (``bits``: their bits, uint64, one row of floats a window) into ``buf``, each
    number spelled as :func:`_write_fast` spells a value, put together as the layout says; returns the length
    written. No shortcut: a vector's numbers rarely repeat from window to window, and they are most of the
    line. The line's head (prefix, start, end) is :func:`_write_ints`'s, written out: as a helper of both, inlined
    or called, it slowed the int loop."""
    pos = 0
    row = 0
    for p in range(counts.shape[0]):
        p0, p1 = prefix_off[p], prefix_off[p + 1]
        for _ in range(counts[p]):
            for j in range(p0, p1):
                buf[pos] = prefix[j]
                pos += 1
            e = ends[row]
            pos = _put_int(buf, pos, e - range_, pow10u, digits2, little)
            pos = _put_text(buf, pos, texts, texts_off, _BETWEEN)
            pos = _put_int(buf, pos, e, pow10u, digits2, little)
            pos = _put_text(buf, pos, texts, texts_off, _BEFORE_VALUE)
            pos = _put_text(buf, pos, texts, texts_off, _VECTOR_OPEN)
            for i in range(bits.shape[1]):
                if i:
                    pos = _put_text(buf, pos, texts, texts_off, _VECTOR_SEP)
                pos = _put_float(buf, pos, bits[row, i], texts, texts_off, g, pow10u, digits2, little)
            pos = _put_text(buf, pos, texts, texts_off, _VECTOR_CLOSE)
            pos = _put_text(buf, pos, texts, texts_off, _END)
            row += 1
    return pos


@njit(cache=True, nogil=True, inline="always")
def _put_head(buf, pos, prefix, p0, p1, e, range_, with_start, texts, texts_off, pow10u, digits2,
              little):  # pragma: no cover - compiled
    """Write a query line's head: its key prefix ``prefix[p0:p1]``, ``start`` (``e - range_``) and the
    layout's ``between`` when ``with_start``, then ``end``; returns the position after it."""
    for j in range(p0, p1):
        buf[pos] = prefix[j]
        pos += 1
    if with_start:
        pos = _put_int(buf, pos, e - range_, pow10u, digits2, little)
        pos = _put_text(buf, pos, texts, texts_off, _BETWEEN)
    return _put_int(buf, pos, e, pow10u, digits2, little)


@njit(cache=True, nogil=True)
def _write_columns(buf, prefix, prefix_off, counts, ends, range_, with_start, values, bits, absent, is_int, names,
                   names_off, null, texts, texts_off, g, pow10u, digits2, little):  # pragma: no cover - compiled
    """The lines of a query's rows into ``buf``: per row ``prefix[part] [start between] end``, then per output
    column ``names[i]`` and its number (an int where ``is_int[i]``, else as :func:`_write_fast` spells a value;
    ``null`` where ``absent[row, i]``; ``absent`` of shape ``(0, 0)``: none is), then the layout's end;
    returns the length written."""
    pos = 0
    row = 0
    k = bits.shape[1]
    masked = absent.shape[0] > 0
    for p in range(counts.shape[0]):
        p0, p1 = prefix_off[p], prefix_off[p + 1]
        for _ in range(counts[p]):
            pos = _put_head(buf, pos, prefix, p0, p1, ends[row], range_, with_start, texts, texts_off, pow10u,
                            digits2, little)
            for i in range(k):
                pos = _put_text(buf, pos, names, names_off, i)
                if masked and absent[row, i]:
                    for j in range(null.shape[0]):
                        buf[pos] = null[j]
                        pos += 1
                elif is_int[i]:
                    pos = _put_int(buf, pos, np.int64(values[row, i]), pow10u, digits2, little)
                else:
                    pos = _put_float(buf, pos, bits[row, i], texts, texts_off, g, pow10u, digits2, little)
            pos = _put_text(buf, pos, texts, texts_off, _END)
            row += 1
    return pos


def column_lines_into(alloc: Callable[[int], np.ndarray], prefixes: list[bytes] | tuple[np.ndarray, np.ndarray],
                      counts: np.ndarray, ends: np.ndarray, range_: int | None, values: np.ndarray,
                      absent: np.ndarray | None, is_int: np.ndarray, names: list[bytes], null: bytes,
                      layout: Layout = CSV) -> int:
    """The lines of a query's rows (one column per output) written into ``alloc(n)``'s buffer; returns the
    bytes written.

    Per row: the key prefix, ``start`` and the layout's ``between`` (only with ``range_``: ``start`` is
    ``end - range_``), ``end``, then for each output column ``i`` the text ``names[i]`` and the row's
    ``values[:, i]`` (float64; written as an integer where ``is_int[i]``), or ``null`` where
    ``absent[:, i]``; then the layout's ``end``.

    Examples
    --------
    >>> out = np.zeros(64, np.uint8)
    >>> n = column_lines_into(lambda size: out, [b"k,"], np.array([2]), np.array([5, 6]), None,
    ...                       np.array([[0.25, 3.0], [0.5, 4.0]]), np.array([[False, False], [False, True]]),
    ...                       np.array([False, True]), [b",", b","], b"")
    >>> print(out[:n].tobytes().decode(), end="")
    k,5,0.25,3
    k,6,0.5,
    """
    ends = np.ascontiguousarray(ends, dtype=np.int64)
    counts = np.ascontiguousarray(counts, dtype=np.int64)
    values = np.ascontiguousarray(values, dtype=np.float64)
    if values.ndim != 2 or len(values) != len(ends) or len(ends) != int(counts.sum()) or len(names) != values.shape[1]:
        raise ValueError(f"values must be (rows, {len(names)}) with rows = sum of counts = rows of ends")
    is_blob = isinstance(prefixes, tuple) and len(prefixes) == 2 and isinstance(prefixes[0], np.ndarray)
    prefix, prefix_off = prefixes if is_blob else blob(prefixes)
    texts, texts_off = layout.texts
    names_blob, names_off = blob(names)
    prefix_bytes = int(np.dot(np.diff(prefix_off), counts))
    per_row = 2 * 20 + len(layout.between) + len(layout.end) + sum(len(t) for t in names) \
        + values.shape[1] * max(layout.value_bound, 20, len(null))
    mask = np.zeros((0, 0), np.bool_) if absent is None else np.ascontiguousarray(absent, dtype=np.bool_)
    return _write_columns(alloc(prefix_bytes + len(ends) * per_row + _SLACK), prefix, prefix_off, counts, ends,
                          np.int64(range_ or 0), range_ is not None, values, values.view(np.uint64), mask,
                          np.ascontiguousarray(is_int, dtype=np.bool_), names_blob, names_off,
                          np.frombuffer(null, np.uint8), texts, texts_off, G, POW10U, DIGITS2, _LITTLE)


def blob(items: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """``items`` end to end as one uint8 array, and their offsets (``len(items) + 1``): how the compiled
    loops take a batch's key prefixes (:func:`lines_into` takes them so too).

    >>> data, off = blob([b"a,", b"bc,"]); data.tobytes(), off.tolist()
    (b'a,bc,', [0, 2, 5])
    """
    off = np.zeros(len(items) + 1, np.int64)
    np.cumsum([len(b) for b in items], out=off[1:])
    return np.frombuffer(b"".join(items), np.uint8), off  # read-only, empty or not: one compiled type


def write_float_lines(buf: np.ndarray, prefix: np.ndarray, prefix_off: np.ndarray, counts: np.ndarray,
                      ends: np.ndarray, range_: int, values: np.ndarray, layout: Layout = CSV) -> int:
    """The compiled loop alone: the lines of float64 ``values`` into ``buf`` (room enough: :func:`lines_into`'s
    bound), the key prefixes as a :func:`blob`; returns the bytes written (``bench/bench_sink_floor.py`` times it).
    """
    texts, texts_off = layout.texts
    return _write_fast(buf, prefix, prefix_off, counts, ends, np.int64(range_), values.view(np.uint64), texts,
                       texts_off, G, POW10U, DIGITS2, _LITTLE)


def lines(prefixes: list[bytes] | tuple[np.ndarray, np.ndarray], counts: np.ndarray, ends: np.ndarray,
          range_: int, values: np.ndarray, layout: Layout = CSV) -> bytes:
    """The lines ``prefix start <between> end <before_value> value <end>`` of a batch, one per window.

    Parameters
    ----------
    prefixes : list of bytes, or their :func:`blob`
        Per part (a key's run of rows), the line's text before ``start``: the key's CSV field (quoted as CSV
        needs) and its comma, or ``{"key": <the key in JSON>, "start": ``.
    counts : array of int
        Rows of each part, in order.
    ends : int64 array
        Every row's window end (exclusive); ``start = end - range_``.
    range_ : int
    values : 1-D float64 or int64 array, or 2-D float64
        Every row's result (floats spelled as ``repr``); 2-D: a vector a row (:class:`Layout` says how its
        numbers are put together).
    layout : Layout
        :data:`CSV` or :data:`JSONL`.
    """
    buf = None

    def alloc(n: int) -> np.ndarray:
        nonlocal buf
        buf = np.empty(n, np.uint8)
        return buf

    n = lines_into(alloc, prefixes, counts, ends, range_, values, layout)
    return buf[:n].tobytes()


def lines_into(alloc: Callable[[int], np.ndarray], prefixes: list[bytes] | tuple[np.ndarray, np.ndarray],
               counts: np.ndarray, ends: np.ndarray, range_: int, values: np.ndarray, layout: Layout = CSV) -> int:
    """:func:`lines` written into a buffer of the caller's: returns the bytes written.

    ``prefixes`` may also be their :func:`blob` (a caller that keeps it from batch to batch).

    ``alloc(n)`` returns a writable uint8 array of at least ``n`` bytes (``n`` bounds the
    lines' length; called once). A task slot passes a region of its shared-memory ring
    (:mod:`~pba_runtime.runtime.byte_ring`), so the lines are written where the sink reads them.

    Examples
    --------
    >>> out = np.zeros(64, np.uint8)
    >>> n = lines_into(lambda size: out, [b"k,"], np.array([1]), np.array([5]), 2, np.array([0.25]))
    >>> out[:n].tobytes()
    b'k,3,5,0.25\\n'
    """
    ends = np.ascontiguousarray(ends, dtype=np.int64)
    counts = np.ascontiguousarray(counts, dtype=np.int64)
    if len(ends) != int(counts.sum()) or len(values) != len(ends):
        raise ValueError(f"counts must sum to the rows of ends and values ({int(counts.sum())}, {len(ends)}, "
                         f"{len(values)})")
    is_blob = isinstance(prefixes, tuple) and len(prefixes) == 2 and isinstance(prefixes[0], np.ndarray)
    prefix, prefix_off = prefixes if is_blob else blob(prefixes)
    texts, texts_off = layout.texts
    prefix_bytes = int(np.dot(np.diff(prefix_off), counts))  # every row's key prefix
    if values.ndim == 2:
        bound = prefix_bytes + len(ends) * layout.vector_row_bound(values.shape[1]) + _SLACK
        bits = np.ascontiguousarray(values, dtype=np.float64).view(np.uint64)
        return _write_vectors(alloc(bound), prefix, prefix_off, counts, ends, np.int64(range_), bits, texts,
                              texts_off, G, POW10U, DIGITS2, _LITTLE)
    bound = prefix_bytes + len(ends) * layout.row_bound + _SLACK
    if values.dtype.kind == "f":
        return write_float_lines(alloc(bound), prefix, prefix_off, counts, ends, range_,
                                 np.ascontiguousarray(values, dtype=np.float64), layout)
    return _write_ints(alloc(bound), prefix, prefix_off, counts, ends, np.int64(range_),
                       np.ascontiguousarray(values, dtype=np.int64), texts, texts_off, POW10U, DIGITS2, _LITTLE)


def float_text(values: np.ndarray) -> list[str]:
    """``[repr(float(v)) for v in values]`` through the compiled path (what :func:`lines` writes in CSV)."""
    values = np.ascontiguousarray(values, dtype=np.float64)
    text = lines([b""], np.array([len(values)]), np.zeros(len(values), np.int64), 0, values).decode()
    return [line.split(",", 2)[2] for line in text.splitlines()]


def compile_now() -> None:
    """Compile (or load from numba's cache) the loops of scalar results: a job's forkserver and slots call it
    before the stream (one compiled form serves both layouts; vector results load theirs at their first batch)."""
    lines([b"0,"], np.array([3]), np.array([1, 2, 3]), 1, np.array([0.5, 0.5, 1e-9]))
    lines([b"0,"], np.array([1]), np.array([1]), 1, np.array([3]))
