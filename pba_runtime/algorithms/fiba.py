"""FiBA, the finger B-tree aggregator: sliding windows over out-of-order streams.

Tangwongsan, Hirzel, Schneider, *Sub-O(log n) Out-of-Order Sliding-Window Aggregation* (Sections 3-4):
:class:`FingerBTree`, a B-tree keyed by time whose nodes keep partial aggregates suited to their position,
so a query is O(1) and an insert or evict at distance ``d`` from the nearer end of the window costs
amortised ``O(log d)`` (O(1) for in-order streams); :class:`FiBA` (``"fiba"``) runs the spec's windows on
it, out-of-order time windows with ``allowed_lateness`` included. The seed text lost most formulas; what
follows is derived from its prose and checked by ``tests/test_fiba.py``.

Examples
--------
>>> tree = FingerBTree(lambda a, b: a + b, "", min_arity=2)
>>> for t, v in [(1, "a"), (5, "e"), (3, "c"), (2, "b"), (4, "d"), (3, "C")]:
...     tree.insert(t, v)
>>> tree.query(), tree.query(2, 3), len(tree)
('abcCde', 'bcC', 5)
>>> tree.evict(3), tree.query()
(True, 'abde')
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from typing import Any

import numpy as np

from .base import WindowOperator, as_timestamps, check_order, check_timestamp, no_timestamps, sizeof
from .reorder import check_allowed_lateness

__all__ = ["FingerBTree", "FiBA"]


class _Node:
    __slots__ = ("times", "vals", "kids", "parent", "agg", "level", "left", "right", "alive")

    def __init__(self, level: int, parent: _Node | None = None):
        self.times: list = []
        self.vals: list = []
        self.kids: list | None = None if level == 0 else []
        self.parent = parent
        self.agg: Any = None
        self.level = level  # 0 for leaves
        self.left = False  # on the left spine (non-root)
        self.right = False  # on the right spine (non-root)
        self.alive = True


class FingerBTree:
    """Finger B-tree with position-aware partial aggregates (out-of-order sliding-window aggregation).

    Parameters
    ----------
    combine : callable
        Associative ``combine(older, newer)``; not necessarily commutative nor invertible.
    identity : object
        Returned by queries over no value.
    min_arity : int
        ``MIN_ARITY >= 2``; nodes other than the root have ``MIN_ARITY .. 2*MIN_ARITY`` children.

    Notes
    -----
    :class:`FingerBTree` is a B-tree keyed by time, with ``MAX_ARITY = 2 * MIN_ARITY``,
    values stored in inner nodes as well as leaves, parent pointers and *fingers*
    to the leftmost and rightmost leaves. Searches start at the nearer finger and
    climb only as far as needed; rebalancing (split, merge, move) happens after
    the fact, bottom-up (a *move* evens out the two siblings rather than shifting
    a single entry, so a run of in-order evictions underflows less often). Each node keeps the partial aggregate suited to its
    position, so a change only repairs nodes on the search path and on one spine
    walk, not the whole path to the root:

    * a node on neither spine keeps its **up-aggregate**, the aggregate of its
      subtree: ``c0 (+) v0 (+) c1 (+) ... (+) v_{k-1} (+) c_k``;
    * the **root** keeps its **inner aggregate**, everything except its first and
      last child: ``v0 (+) c1 (+) ... (+) c_{k-1} (+) v_{k-1}`` (a root leaf: all its values);
    * a non-root node on the **left spine** keeps its **left aggregate**, everything
      under the root's first child except its own first child:
      ``v0 (+) c1 (+) ... (+) c_k (+) left(parent)`` (no parent term below the root);
    * a non-root node on the **right spine**, symmetrically, its **right aggregate**:
      ``right(parent) (+) c0 (+) v0 (+) ... (+) v_{k-1}``.

    So ``query() = left(left finger) (+) inner(root) (+) right(right finger)``: O(1).
    An insert or evict at distance ``d`` from the nearer end of the window costs
    amortised ``O(log d)``: O(1) for in-order streams. ``insert(t, v)`` on a time
    already present combines ``old (+) v`` (arrival order) in place; ``evict(t)``
    removes a time (a value in an inner node is replaced by its neighbour from a
    leaf); ``query(t_from, t_to)`` aggregates the times in ``[t_from, t_to]``
    (inclusive) by recursing only along the two boundary paths.

    Examples
    --------
    >>> t = FingerBTree(max, float("-inf"))
    >>> for i, v in enumerate([3.0, 1.0, 4.0, 1.0, 5.0]):
    ...     t.insert(i, v)
    >>> t.evict_oldest(), t.query(), t.query(1, 3), t.min_key(), t.max_key()
    (True, 5.0, 4.0, 1, 4)
    """

    def __init__(self, combine: Callable[[Any, Any], Any], identity: Any, min_arity: int = 4):
        if isinstance(min_arity, bool) or not isinstance(min_arity, int) or min_arity < 2:
            raise ValueError(f"min_arity must be an integer >= 2, got {min_arity!r}")
        self._c = combine
        self._id = identity
        self.min_arity = min_arity
        self.max_arity = 2 * min_arity
        self._max_keys = 2 * min_arity - 1  # arity <= MAX_ARITY
        self._min_keys = min_arity - 1  # arity >= MIN_ARITY (non-root)
        self.clear()

    def clear(self) -> None:
        """Remove everything."""
        root = _Node(0)
        root.agg = self._id
        self.root = self._lf = self._rf = root
        self._size = 0
        self.splits = self.merges = self.moves = 0

    def __len__(self) -> int:
        return self._size

    # ------------------------------------------------------------------ queries
    def query(self, t_from: Any = None, t_to: Any = None) -> Any:
        """Aggregate of the values with ``t_from <= time <= t_to`` (``None``: unbounded), oldest first."""
        if self._size == 0:
            return self._id
        if t_from is None and t_to is None:
            root = self.root
            if root.kids is None:
                return root.agg
            c = self._c
            return c(c(self._lf.agg, root.agg), self._rf.agg)
        lo = self._lf.times[0] if t_from is None else t_from
        hi = self._rf.times[-1] if t_to is None else t_to
        if lo > hi:
            return self._id
        if lo <= self._lf.times[0] and hi >= self._rf.times[-1]:
            return self.query()
        res = self._range(self.root, lo, hi, False, False)
        return self._id if res is None else res

    def _range(self, x: _Node, lo: Any, hi: Any, lin: bool, rin: bool) -> Any:
        """Aggregate of ``x``'s subtree within ``[lo, hi]`` (None if nothing); ``lin``/``rin``: the
        subtree's keys are known to be ``>= lo`` / ``<= hi``."""
        if lin and rin and x.parent is not None and not x.left and not x.right:
            return x.agg  # whole subtree inside and it has its up-aggregate
        c = self._c
        times, vals = x.times, x.vals
        k = len(times)
        acc = None
        if x.kids is None:
            i = 0 if lin else bisect_left(times, lo)
            while i < k and (rin or times[i] <= hi):
                acc = vals[i] if acc is None else c(acc, vals[i])
                i += 1
            return acc
        kids = x.kids
        i = 0 if lin else bisect_left(times, lo)  # children before i hold keys < lo
        while i <= k:
            if i > 0 and times[i - 1] >= hi:
                break
            sub = self._range(kids[i], lo, hi, lin if i == 0 else times[i - 1] >= lo,
                              rin if i == k else times[i] <= hi)
            if sub is not None:
                acc = sub if acc is None else c(acc, sub)
            if i < k and lo <= times[i] <= hi:
                acc = vals[i] if acc is None else c(acc, vals[i])
            i += 1
        return acc

    def min_key(self) -> Any:
        """Oldest time (the first entry of the left finger); ``None`` if empty."""
        return self._lf.times[0] if self._size else None

    def max_key(self) -> Any:
        """Newest time (the last entry of the right finger); ``None`` if empty."""
        return self._rf.times[-1] if self._size else None

    def items(self) -> list[tuple[Any, Any]]:
        """All ``(time, value)`` pairs in time order."""
        out: list = []

        def walk(x: _Node) -> None:
            if x.kids is None:
                out.extend(zip(x.times, x.vals))
                return
            for i, t in enumerate(x.times):
                walk(x.kids[i])
                out.append((t, x.vals[i]))
            walk(x.kids[-1])

        walk(self.root)
        return out

    def state(self) -> dict[str, Any]:
        """The tree as it is (nodes, partial aggregates, fingers), without ``combine``: a picklable
        description from which :meth:`from_state` continues bit for bit. A tree rebuilt by
        inserting the items again could have another shape, so another grouping of the combines."""
        return {k: v for k, v in vars(self).items() if k != "_c"}

    @classmethod
    def from_state(cls, combine: Callable[[Any, Any], Any], state: dict[str, Any]) -> FingerBTree:
        """The tree a :meth:`state` describes (the caller passes a copy it may own)."""
        tree = cls.__new__(cls)
        vars(tree).update(state)
        tree._c = combine
        return tree

    def height(self) -> int:
        return self.root.level + 1

    # ------------------------------------------------------------------ search
    def _search(self, t: Any) -> tuple[_Node, int, bool]:
        """Finger search: climb from the nearer finger to the first node whose range holds ``t``, then descend."""
        root = self.root
        if root.kids is None:
            node = root
        else:
            rt = root.times
            if t >= rt[len(rt) // 2]:
                node = self._rf
                while node.parent is not None and not t > node.parent.times[-1]:
                    node = node.parent
            else:
                node = self._lf
                while node.parent is not None and not t < node.parent.times[0]:
                    node = node.parent
        while True:
            times = node.times
            i = bisect_left(times, t)
            if i < len(times) and times[i] == t:
                return node, i, True
            if node.kids is None:
                return node, i, False
            node = node.kids[i]

    # ------------------------------------------------------------------ insert
    def insert(self, t: Any, v: Any) -> None:
        """Insert ``v`` at time ``t``; if ``t`` is present, its value becomes ``old (+) v``."""
        rf = self._rf
        rt = rf.times
        if not rt or t > rt[-1]:  # in order: append to the right finger
            node, i = rf, len(rt)
        else:
            node, i, found = self._search(t)
            if found:
                node.vals[i] = self._c(node.vals[i], v)
                self._repair([node])
                return
        node.times.insert(i, t)
        node.vals.insert(i, v)
        self._size += 1
        if len(node.times) <= self._max_keys:
            if node is rf and i == len(rt) - 1 and (rf.right or rf.parent is None) and len(rt) > 1:
                rf.agg = self._c(rf.agg, v)  # right aggregate (or root leaf fold) extended by one value
            else:
                self._repair([node])
            return
        dirty = [node]
        full = False
        while len(node.times) > self._max_keys:
            if node.parent is None:
                self._height_increase()
                full = True
            dirty.append(self._split(node))
            node = node.parent
            dirty.append(node)
        self._repair(dirty, full)

    def _height_increase(self) -> None:
        old = self.root
        new = _Node(old.level + 1)
        new.kids.append(old)
        old.parent = new
        old.left = old.right = True
        self.root = new

    def _split(self, node: _Node) -> _Node:
        """Split an overfull node around its middle entry, which moves up into the parent."""
        mu = self.min_arity
        parent = node.parent
        sib = _Node(node.level, parent)
        sep_t, sep_v = node.times[mu], node.vals[mu]
        sib.times = node.times[mu + 1 :]
        sib.vals = node.vals[mu + 1 :]
        del node.times[mu:], node.vals[mu:]
        if node.kids is not None:
            sib.kids = node.kids[mu + 1 :]
            del node.kids[mu + 1 :]
            for k in sib.kids:
                k.parent = sib
        sib.right = node.right
        node.right = False
        if node is self._rf:
            self._rf = sib
        idx = _index(parent.kids, node)
        parent.times.insert(idx, sep_t)
        parent.vals.insert(idx, sep_v)
        parent.kids.insert(idx + 1, sib)
        self.splits += 1
        return sib

    # ------------------------------------------------------------------ evict
    def evict(self, t: Any) -> bool:
        """Remove time ``t``; ``False`` if it is not present."""
        if self._size == 0:
            return False
        node, i, found = self._search(t)
        if not found:
            return False
        self._size -= 1
        if node.kids is None:
            del node.times[i], node.vals[i]
            self._after_evict(node, [node])
            return True
        # inner node: replace the entry by its neighbour from a leaf (Fig. 8, evictInner)
        right = node.kids[i + 1]
        if len(right.times) > self._min_keys:
            leaf = right
            while leaf.kids is not None:
                leaf = leaf.kids[0]
            node.times[i], node.vals[i] = leaf.times.pop(0), leaf.vals.pop(0)
        else:
            leaf = node.kids[i]
            while leaf.kids is not None:
                leaf = leaf.kids[-1]
            node.times[i], node.vals[i] = leaf.times.pop(), leaf.vals.pop()
        self._after_evict(leaf, [leaf, node])
        return True

    def evict_oldest(self) -> bool:
        """Remove the oldest time (at the left finger); ``False`` if empty."""
        if self._size == 0:
            return False
        lf = self._lf
        self._size -= 1
        del lf.times[0], lf.vals[0]
        if len(lf.times) >= self._min_keys or lf.parent is None:
            self._repair_left_finger(lf)
        else:
            self._after_evict(lf, [lf])
        return True

    def evict_before(self, t: Any) -> int:
        """Remove every time ``< t``; return how many."""
        n = 0
        while self._size and self._lf.times[0] < t:
            self.evict_oldest()
            n += 1
        return n

    def _repair_left_finger(self, lf: _Node) -> None:
        """The left finger lost an entry without underflowing: recompute its aggregate only."""
        c = self._c
        vals = lf.vals
        if not vals:
            lf.agg = self._id
            return
        acc = vals[0]
        for v in vals[1:]:
            acc = c(acc, v)
        p = lf.parent
        if p is not None and p.parent is not None:
            acc = c(acc, p.agg)
        lf.agg = acc

    def _after_evict(self, node: _Node, dirty: list[_Node]) -> None:
        """Rebalance after ``node`` lost an entry (merge with or borrow from a sibling), then repair."""
        full = False
        while node.parent is not None and len(node.times) < self._min_keys:
            p = node.parent
            idx = _index(p.kids, node)
            sidx = idx + 1 if idx + 1 < len(p.kids) else idx - 1
            sib = p.kids[sidx]
            if len(sib.times) <= self._min_keys:  # sibling at MIN_ARITY: merge the two
                li = min(idx, sidx)
                left, right = p.kids[li], p.kids[li + 1]
                left.times.append(p.times[li])
                left.vals.append(p.vals[li])
                left.times.extend(right.times)
                left.vals.extend(right.vals)
                if left.kids is not None:
                    for k in right.kids:
                        k.parent = left
                    left.kids.extend(right.kids)
                del p.times[li], p.vals[li], p.kids[li + 1]
                left.right = right.right
                right.alive = False
                if right is self._rf:
                    self._rf = left
                self.merges += 1
                dirty.append(left)
                dirty.append(p)
                if p.parent is None and not p.times:  # the root lost its last entry: height decrease
                    p.alive = False
                    left.parent = None
                    left.left = left.right = False
                    self.root = left
                    full = True
                    break
                node = p
            else:  # move entries (and children) from the sibling through the parent, evening out the two
                if sidx > idx:
                    left, right, j = node, sib, idx
                else:
                    left, right, j = sib, node, sidx
                times = left.times + [p.times[j]] + right.times
                vals = left.vals + [p.vals[j]] + right.vals
                h = len(times) // 2
                left.times, p.times[j], right.times = times[:h], times[h], times[h + 1 :]
                left.vals, p.vals[j], right.vals = vals[:h], vals[h], vals[h + 1 :]
                if left.kids is not None:
                    kids = left.kids + right.kids
                    left.kids, right.kids = kids[: h + 1], kids[h + 1 :]
                    for k in left.kids:
                        k.parent = left
                    for k in right.kids:
                        k.parent = right
                self.moves += 1
                dirty.append(node)
                dirty.append(sib)
                dirty.append(p)
                break
        self._repair(dirty, full)

    # ------------------------------------------------------------------ aggregate repair
    def _fold_up(self, x: _Node) -> Any:
        c = self._c
        vals = x.vals
        if x.kids is None:
            acc = vals[0]
            for v in vals[1:]:
                acc = c(acc, v)
            return acc
        kids = x.kids
        acc = kids[0].agg
        for i, v in enumerate(vals):
            acc = c(c(acc, v), kids[i + 1].agg)
        return acc

    def _fold_root(self, x: _Node) -> Any:
        c = self._c
        vals = x.vals
        if not vals:
            return self._id
        acc = vals[0]
        if x.kids is None:
            for v in vals[1:]:
                acc = c(acc, v)
            return acc
        kids = x.kids
        for i in range(1, len(vals)):
            acc = c(c(acc, kids[i].agg), vals[i])
        return acc

    def _fold_left(self, x: _Node) -> Any:
        c = self._c
        vals = x.vals
        acc = vals[0]
        if x.kids is None:
            for v in vals[1:]:
                acc = c(acc, v)
        else:
            kids = x.kids
            for i in range(1, len(vals)):
                acc = c(c(acc, kids[i].agg), vals[i])
            acc = c(acc, kids[-1].agg)
        p = x.parent
        if p.parent is not None:
            acc = c(acc, p.agg)
        return acc

    def _fold_right(self, x: _Node) -> Any:
        c = self._c
        vals = x.vals
        if x.kids is None:
            acc = vals[0]
            for v in vals[1:]:
                acc = c(acc, v)
        else:
            kids = x.kids
            acc = c(kids[0].agg, vals[0])
            for i in range(1, len(vals)):
                acc = c(c(acc, kids[i].agg), vals[i])
        p = x.parent
        if p.parent is not None:
            acc = c(p.agg, acc)
        return acc

    def _repair(self, dirty: list[_Node], full: bool = False) -> None:
        """Repair aggregates after the nodes in ``dirty`` changed.

        Up-aggregates bottom-up from the changed nodes until a spine or the root
        is reached; then the root's inner aggregate; then each touched spine
        top-down from its highest touched node to its finger (``full``: both
        whole spines, after a height change).
        """
        hit_root = False
        top_left = top_right = None
        buckets: dict[int, list[_Node]] = {}
        for x in dirty:
            if x.alive:
                bucket = buckets.setdefault(x.level, [])
                if x not in bucket:  # nodes compare by identity
                    bucket.append(x)
        lvl = min(buckets) if buckets else 0
        top = self.root.level
        while lvl <= top:
            for x in buckets.get(lvl, ()):
                if x.parent is None:
                    hit_root = True
                elif x.left:
                    if top_left is None or x.level > top_left.level:
                        top_left = x
                elif x.right:
                    if top_right is None or x.level > top_right.level:
                        top_right = x
                else:  # up-aggregate; the change goes on to the parent
                    x.agg = self._fold_up(x)
                    p = x.parent
                    bucket = buckets.setdefault(lvl + 1, [])
                    if p not in bucket:
                        bucket.append(p)
            lvl += 1
        root = self.root
        if hit_root or full:
            root.agg = self._fold_root(root)
        if full and root.kids is not None:
            top_left, top_right = root.kids[0], root.kids[-1]
        x = top_left
        while x is not None:
            x.agg = self._fold_left(x)
            x = x.kids[0] if x.kids is not None else None
        x = top_right
        while x is not None:
            x.agg = self._fold_right(x)
            x = x.kids[-1] if x.kids is not None else None

    # ------------------------------------------------------------------ checks
    def check(self) -> None:
        """Assert every invariant: key order, arities, equal leaf depth, parent links, spine flags,
        fingers, size, and each node's position-aware aggregate (recomputed from scratch)."""
        root = self.root
        assert root.parent is None and root.alive
        c = self._c
        count = 0

        def fold(items: list) -> Any:
            acc = None
            for v in items:
                acc = v if acc is None else c(acc, v)
            return acc

        def values(x: _Node) -> list:  # values of the subtree, in order
            if x.kids is None:
                return list(x.vals)
            out = []
            for i, v in enumerate(x.vals):
                out += values(x.kids[i])
                out.append(v)
            return out + values(x.kids[-1])

        def walk(x: _Node, lo: Any, hi: Any, on_left: bool, on_right: bool) -> None:
            nonlocal count
            k = len(x.times)
            count += k
            assert x.alive
            assert len(x.vals) == k
            assert all(x.times[j] < x.times[j + 1] for j in range(k - 1)), "times in order"
            assert lo is None or not k or x.times[0] > lo
            assert hi is None or not k or x.times[-1] < hi
            if x is not root:
                assert self._min_keys <= k <= self._max_keys, f"arity {k + 1} outside [{self.min_arity}, {self.max_arity}]"
                assert x.left == on_left and x.right == on_right, "spine flags"
            else:
                assert k <= self._max_keys
                assert x.kids is None or k >= 1, "inner root has arity >= 2"
            if x.kids is None:
                assert x.level == 0
            else:
                assert len(x.kids) == k + 1
                for j, kid in enumerate(x.kids):
                    assert kid.parent is x, "parent link"
                    assert kid.level == x.level - 1, "all leaves at the same depth"
                    kl = lo if j == 0 else x.times[j - 1]
                    kh = hi if j == k else x.times[j]
                    walk(kid, kl, kh, (on_left or x is root) and j == 0, (on_right or x is root) and j == k)

        walk(root, None, None, False, False)
        assert count == self._size, (count, self._size)
        lf = rf = root
        while lf.kids is not None:
            lf = lf.kids[0]
        while rf.kids is not None:
            rf = rf.kids[-1]
        assert self._lf is lf and self._rf is rf, "fingers"

        # aggregates, from their definitions
        def expect(x: _Node) -> Any:
            if x is root:
                if x.kids is None:
                    return fold(x.vals) if x.vals else self._id
                inner = []
                for j, v in enumerate(x.vals):
                    if j:
                        inner += values(x.kids[j])
                    inner.append(v)
                return fold(inner)
            if x.left:  # subtree of root's first child minus x's first child
                top = x
                while top.parent is not root:
                    top = top.parent
                allv = values(top)
                skip = len(values(x.kids[0])) if x.kids is not None else 0
                # x's first child's values come first under x; everything before x's subtree is
                # in earlier subtrees of the left spine, which is nothing (x is leftmost)
                return fold(allv[skip:])
            if x.right:
                top = x
                while top.parent is not root:
                    top = top.parent
                allv = values(top)
                skip = len(values(x.kids[-1])) if x.kids is not None else 0
                return fold(allv[: len(allv) - skip])
            return fold(values(x))

        def check_aggs(x: _Node) -> None:
            want = expect(x)
            where = "root" if x is root else "left" if x.left else "right" if x.right else "up"
            assert x.agg == want, f"aggregate of a {where} node at level {x.level}: {x.agg!r} != {want!r}"
            for kid in x.kids or ():
                check_aggs(kid)

        check_aggs(root)


def _index(kids: list, node: _Node) -> int:
    for i, k in enumerate(kids):
        if k is node:
            return i
    raise AssertionError("child not found in its parent")


def _level(x: _Node) -> int:
    return x.level


class FiBA(WindowOperator):
    """Sliding windows on a finger B-tree; out-of-order time windows with ``allowed_lateness``.

    Parameters
    ----------
    window : CountWindow or TimeWindow
    agg : str or Aggregation
    allowed_lateness : int, optional
        Time windows only: accept tuples up to this far behind the largest
        timestamp seen (the watermark is ``max timestamp - allowed_lateness``).
        ``None`` (default): timestamps must be non-decreasing.
    min_arity : int
        B-tree ``MIN_ARITY`` (``>= 2``); ``MAX_ARITY = 2 * min_arity``. The
        default 8 is higher than the paper's best C++ values (2-4): in Python a
        restructuring step costs far more than a few more combines per node.

    Notes
    -----
    :class:`FiBA` (``"fiba"``) runs the windows of the spec on the tree. Count
    windows key each tuple by its stream position, time windows by its timestamp
    (both rounded down to the start of its slice, or of the slice's head or tail
    when ``range % slide != 0``, so a key is a slice, unless out-of-order input of
    a non-commutative aggregation needs the exact timestamp to keep the order).
    A window is emitted once the watermark passes its end; keys before the next
    window's start are evicted from the left finger. With ``allowed_lateness=L``
    the watermark is ``max timestamp seen - L`` and any tuple at or above it lands
    in its windows; a tuple below it is late: counted in ``stats()["late"]`` and
    returned by ``take_late()``. Without ``allowed_lateness`` a decreasing
    timestamp is refused like in the FIFO algorithms.

    Examples
    --------
    >>> import pba_runtime as pr
    >>> op = pr.create("fiba", pr.TimeWindow(range=10, slide=5), "collect", allowed_lateness=6)
    >>> op.insert("a", 1), op.insert("c", 8), op.insert("b", 4)  # b is 4 late: still in its windows
    ([], [], [])
    >>> op.insert("d", 16)  # watermark 16 - 6 = 10 passes the ends 5 and 10
    [(5, ['a', 'b']), (10, ['a', 'b', 'c'])]
    >>> op.insert("e", 2), op.take_late()  # 2 < watermark 10: late
    ([], [('e', 2)])
    >>> op.flush()[1]
    [['c'], ['d'], ['d']]
    """

    name = "fiba"
    native_lateness = True

    def __init__(self, window, agg, *, allowed_lateness: int | None = None, min_arity: int = 8):
        super().__init__(window, agg)
        if allowed_lateness is not None:
            allowed_lateness = check_allowed_lateness(allowed_lateness, self.window)
        self._lateness = allowed_lateness
        self._tree = FingerBTree(self.agg.combine, self.agg.identity, min_arity)
        self.min_arity = min_arity
        # a key per (sub-)slice unless out-of-order input needs exact timestamps to keep the order
        self._round = allowed_lateness is None or self.agg.commutative
        self._wm: int | None = None  # watermark (time windows)
        self._next_k: int | None = 0 if not self._is_time else None
        self._late: list[tuple[Any, int]] = []
        self._nlate = 0

    # ------------------------------------------------------------------ keys
    def _key(self, u: int) -> int:
        """Round a position / timestamp down to its slice start (or head/tail start when ``r % s``)."""
        if not self._round or self._s == 1:
            return u
        off, s, m = self._off, self._s, self._m
        base = u - (u - off) % s
        return base + m if m and u - base >= m else base

    # ------------------------------------------------------------------ public API
    def insert(self, value: Any, timestamp: int | None = None) -> list[tuple[int, Any]]:
        """Insert one tuple; return the windows it completes (a late tuple is kept for :meth:`take_late`)."""
        if self._flushed or self._closed:
            self._check_open()
        agg = self.agg
        if not self._is_time:
            no_timestamps(timestamp, self.window)
            p = agg.lift(value, self._n) if agg.positional else agg.lift(value)
            return self._step(p, None)
        t = check_timestamp(timestamp, self.window)
        mx = self._t_last
        if mx is not None and t < mx:
            if self._lateness is None:
                check_order(t, mx)
            p = agg.lift(value, t) if agg.positional else agg.lift(value)  # bad values raise, late or not
            if t < self._wm:
                self._late.append((value, t))
                self._nlate += 1
                return []
            return self._step(p, t)
        p = agg.lift(value, t) if agg.positional else agg.lift(value)
        return self._step(p, t)

    def insert_many(self, values: Any, timestamps: Any = None) -> tuple[np.ndarray, Any]:
        if self._lateness is None:
            return super().insert_many(values, timestamps)
        self._check_open()
        if not hasattr(values, "__len__"):
            values = list(values)
        ts = as_timestamps(timestamps, len(values), self.window)
        parts = self._lift_all(values, ts)
        raw = values.tolist() if isinstance(values, np.ndarray) else values
        out: list[tuple[int, Any]] = []
        for i, t in enumerate(ts.tolist()):
            wm = self._wm
            if wm is not None and t < wm:
                self._late.append((raw[i], t))
                self._nlate += 1
                continue
            got = self._step(parts[i], t)
            if got:
                out.extend(got)
        return self._pack([e for e, _ in out], [r for _, r in out])

    def take_late(self) -> list[tuple[Any, int]]:
        """Return and clear the late tuples, as ``(value, timestamp)`` in arrival order."""
        late, self._late = self._late, []
        return late

    def query(self, t_from: int | None = None, t_to: int | None = None) -> Any:
        """Lowered aggregate of the held tuples with ``t_from <= key <= t_to`` (window sharing, ad hoc queries).

        A key is the tuple's timestamp (count windows: position) rounded down to
        the start of its slice, or its exact timestamp when ``slide == 1`` or an
        out-of-order non-commutative aggregation needs it.
        """
        return self.agg.lower(self._tree.query(t_from, t_to))

    @property
    def tree(self) -> FingerBTree:
        return self._tree

    @property
    def watermark(self) -> int | None:
        return self._wm

    # ------------------------------------------------------------------ per tuple
    def _step(self, p: Any, t: int | None) -> list[tuple[int, Any]]:
        tree = self._tree
        if t is None:  # count window: key = position
            n = self._n
            tree.insert(self._key(n) if self._round else n, p)
            n = self._n = n + 1
            e = n - self._r
            if e < 0 or e % self._s:
                return []
            k = e // self._s
            tree.evict_before(k * self._s)
            self._next_k = k + 1
            self._emitted += 1
            return [(n, self.agg.lower(tree.query()))]
        out: list[tuple[int, Any]] = []
        mx = self._t_last
        if mx is None or t > mx:
            self._t_last = t
            wm = t - (self._lateness or 0)
            if self._wm is None or wm > self._wm:
                self._wm = wm
                if tree._size:
                    self._advance(wm, out)
        tree.insert(self._key(t) if self._round else t, p)
        self._n += 1
        return out

    def _advance(self, wm: int | None, out: list) -> None:
        """Emit every window that ends at or before ``wm`` (``None``: all) and holds a tuple."""
        tree = self._tree
        s, r, off = self._s, self._r, self._off
        k_open = None if wm is None else (wm - off - r) // s + 1  # first window still open
        lower = self.agg.lower
        while tree._size:
            tmin = tree._lf.times[0]
            kf = (tmin - off - r) // s + 1  # first window that holds tmin
            k = kf if k_open is None or kf < k_open else k_open
            if self._next_k is not None and self._next_k > k:
                k = self._next_k
            if k_open is not None and k >= k_open:
                self._next_k = k
                return
            start = k * s + off
            end = start + r
            tree.evict_before(start)
            self._next_k = k + 1
            if not tree._size or tree._lf.times[0] >= end:
                continue
            if tree._rf.times[-1] < end:
                res = tree.query()
            else:
                res = tree.query(start, end - 1)
            out.append((end, lower(res)))
            self._emitted += 1
        if self._next_k is not None and k_open is not None and self._next_k < k_open:
            self._next_k = None  # empty: the next tuple decides where windows start

    def _flush(self) -> list[tuple[int, Any]]:
        out: list[tuple[int, Any]] = []
        self._advance(None, out)
        return out

    # ------------------------------------------------------------------ bookkeeping
    _STATE_FIELDS = WindowOperator._STATE_FIELDS + ("_wm", "_next_k", "_nlate")

    def _get_state(self) -> dict[str, Any]:
        st = super()._get_state()
        st["tree"] = self._tree.state()
        st["late"] = list(self._late)
        st["allowed_lateness"] = self._lateness
        st["min_arity"] = self.min_arity
        return st

    def _set_state(self, st: dict[str, Any]) -> None:
        if st["allowed_lateness"] != self._lateness:
            raise ValueError(f"state was taken with allowed_lateness {st['allowed_lateness']}, "
                             f"this operator has {self._lateness}")
        super()._set_state(st)
        self._tree = FingerBTree.from_state(self.agg.combine, st["tree"])
        self.min_arity = st["min_arity"]
        self._late = list(st["late"])

    def stats(self) -> dict[str, Any]:
        st = super().stats()
        tree = self._tree
        st.update(late=self._nlate, held=len(tree), height=tree.height(), min_arity=self.min_arity,
                  allowed_lateness=self._lateness, watermark=self._wm,
                  splits=tree.splits, merges=tree.merges, moves=tree.moves)
        return st

    def state_bytes(self) -> int:
        n = len(self._tree)
        if not n:
            return 0
        lf = self._tree._lf
        return n * (8 + 8 + sizeof(lf.vals[0])) + 200 * (n // max(1, self.min_arity) + 1)
