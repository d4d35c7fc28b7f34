"""Collect: ``collect``, every value of the window as a list (no vectorised form: its partial is a tuple).

Examples
--------
>>> from pba_runtime.aggregations import get_aggregation
>>> c = get_aggregation("collect")
>>> c.lower(c.combine(c.lift(1.0), c.lift(2.0)))
[1.0, 2.0]
"""

from __future__ import annotations

import operator

from .base import Aggregation, register_builtin


def _collect_lift(v):
    return (v,)


register_builtin(Aggregation(
    name="collect", lift=_collect_lift, combine=operator.add, lower=list, identity=(), result="list",
))
