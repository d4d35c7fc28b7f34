"""Ring buffers for the FIFO baselines: slice partials in flat Python lists, indexed by absolute position.

A FIFO merger numbers its slices with ever-growing *absolute* positions and
keeps them in one or more parallel rings (plain lists, no object per element)
of a power-of-two capacity, slot ``i & (cap - 1)``. A ring is preallocated for
the window (up to :data:`PREALLOC_MAX` slices) and doubles while a larger
window fills, the only non-constant step (Hammer Slide, Theodorakis et al.).

:class:`RingAggregator` is that scaffolding for Two-Stacks, DABA and
SlickDeque: it allocates the rings named in ``_rings``, grows them, reads and
restores their contents, and sets the flags of the fused per-tuple
``insert``. The algorithms keep their own ``_push``/``_pop``/``_query`` and
their hand-inlined ``insert`` fast paths. SoE and FlatFAT use the helpers.

Examples
--------
>>> bufs = [[1, 2, None, 0]]  # absolute positions 3..5 in a ring of 4: slots 3, 0, 1
>>> grow_ring(bufs, 3, 6, 4), bufs
(8, [[None, None, None, 0, 1, 2, None, None]])
"""

from __future__ import annotations

from typing import Any

from .base import SlicedAggregator

__all__ = ["RingAggregator", "PREALLOC_MAX", "ring_capacity", "fast_path_flags", "grow_ring"]

#: Largest ring preallocated up front; bigger windows grow it by doubling while they fill.
PREALLOC_MAX = 1 << 12


def ring_capacity(slots: int) -> int:
    """The power of two ``>= slots`` (at least 4), capped at :data:`PREALLOC_MAX` for the first allocation.

    Examples
    --------
    >>> ring_capacity(3), ring_capacity(1000), ring_capacity(10**9)
    (4, 1024, 4096)
    """
    cap = 4
    while cap < slots and cap < PREALLOC_MAX:
        cap <<= 1
    return cap


def fast_path_flags(op: SlicedAggregator) -> tuple[bool, bool, bool]:
    """``(fast, passthrough, lower_float)`` for a fused per-tuple ``insert``.

    *fast*: count window with slide 1 and a non-positional aggregation (one slice
    per tuple: push, pop, query); *passthrough*: built-in max/min/sum lift a
    Python float to itself; *lower_float*: ``lower`` is ``float``.
    """
    agg = op.agg
    fast = not op._is_time and op._s == 1 and not agg.positional
    passthrough = agg.float_passthrough
    return fast, passthrough, agg.lower is float


def grow_ring(bufs: list[list], lo: int, hi: int, cap: int) -> int:
    """Double the rings in ``bufs`` (same capacity ``cap``) keeping absolute positions ``[lo, hi)``; new capacity."""
    new = cap << 1
    mask, nmask = cap - 1, new - 1
    for j, old in enumerate(bufs):
        buf = [None] * new
        for i in range(lo, hi):
            buf[i & nmask] = old[i & mask]
        bufs[j] = buf
    return new


class RingAggregator(SlicedAggregator):
    """A merger over parallel rings ``_rings`` (``(attribute, fill)`` pairs) of capacity ``_cap``.

    Sets ``_combine``, ``_ident``, the fused-insert flags ``_fast``,
    ``_passthrough``, ``_lower_float`` (:func:`fast_path_flags`) and the rings,
    then calls ``_reset_merger``.
    """

    _rings: tuple[tuple[str, Any], ...] = (("_vals", None),)

    def __init__(self, window, agg):
        super().__init__(window, agg)
        self._combine = self.agg.combine
        self._ident = self.agg.identity
        self._fast, self._passthrough, self._lower_float = fast_path_flags(self)
        self._new_rings(0)
        self._reset_merger()

    def _new_rings(self, n: int) -> None:
        """Fresh, empty rings of the preallocated capacity, or larger to hold ``n`` slices (a restore)."""
        cap = ring_capacity(self._q + 2)
        while cap < n:
            cap <<= 1
        self._cap = cap
        for name, fill in self._rings:
            setattr(self, name, [fill] * cap)

    def _grow_rings(self, lo: int, hi: int) -> None:
        """The rings are full: double them, keeping absolute positions ``[lo, hi)``."""
        bufs = [getattr(self, name) for name, _ in self._rings]
        self._cap = grow_ring(bufs, lo, hi, self._cap)
        for (name, _), buf in zip(self._rings, bufs):
            setattr(self, name, buf)

    def _ring_items(self, ring: list, lo: int, hi: int) -> list:
        """The contents of absolute positions ``[lo, hi)`` of ``ring``, oldest first."""
        mask = self._cap - 1
        return [ring[i & mask] for i in range(lo, hi)]

    def _put_items(self, ring: list, lo: int, items: list) -> None:
        """Write ``items`` to ``ring`` from absolute position ``lo`` on (the inverse of :meth:`_ring_items`)."""
        mask = self._cap - 1
        for k, x in enumerate(items, lo):
            ring[k & mask] = x
