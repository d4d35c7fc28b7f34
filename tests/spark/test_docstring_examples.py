"""Every Spark example in the adapter's docstrings runs as written (they are ``+SKIP`` in the plain doctest run).

Each docstring holding a skipped example is run whole, with the ``+SKIP`` directives removed, on the
shared session (the examples' own ``SparkSession.builder...getOrCreate()`` returns it), and its outputs
must match.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil
import re

import pytest

import spark_integration

pytestmark = pytest.mark.spark

_SKIP = re.compile(r"[ \t]*# doctest: \+SKIP")


def _skipped_examples():
    finder = doctest.DocTestFinder()
    for info in pkgutil.iter_modules(spark_integration.__path__):
        mod = importlib.import_module(f"spark_integration.{info.name}")
        for test in finder.find(mod):
            if test.docstring and "+SKIP" in test.docstring:
                yield pytest.param(mod, test, id=test.name)


@pytest.mark.parametrize("mod,test", list(_skipped_examples()))
def test_docstring_example_runs_as_written(spark, mod, test):
    parser = doctest.DocTestParser()
    runnable = parser.get_doctest(_SKIP.sub("", test.docstring), dict(mod.__dict__), test.name, test.filename,
                                  test.lineno)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    out: list[str] = []
    runner.run(runnable, out=out.append)
    assert runner.failures == 0 and runner.tries > 0, "".join(out)
