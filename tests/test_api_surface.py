"""The API a newcomer meets first (issue 40): window defaults, durations, error texts, <NA> input, the default
algorithm, PEP 561. Error messages are asserted by their text."""

import datetime as dt
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import pba_runtime as pr
from pba_runtime import durations
from pba_runtime.cli import _windows, build_parser

ROOT = Path(__file__).resolve().parent.parent


# --------------------------------------------------------------------------- window defaults
def test_count_window_alone_slides_by_one():
    assert pr.CountWindow(4) == pr.CountWindow(range=4, slide=1)
    ends, res = pr.sliding_aggregate(np.arange(6.0), window=pr.CountWindow(4), agg="sum")
    assert ends.tolist() == [4, 5, 6] and res.tolist() == [6.0, 10.0, 14.0]


def test_time_window_alone_is_tumbling():
    w = pr.TimeWindow(1_000)
    assert (w.range, w.slide, w.offset, w.is_tumbling) == (1_000, 1_000, 0, True)
    assert pr.TimeWindow("1min") == pr.TimeWindow(range=60_000, slide=60_000)


# --------------------------------------------------------------------------- durations
@pytest.mark.parametrize("given, ms", [
    ("250ms", 250), ("60s", 60_000), ("5min", 300_000), ("5m", 300_000), ("1h30m", 5_400_000), ("1d", 86_400_000),
    ("1.5s", 1_500), ("1w", 604_800_000), ("1 minute", 60_000), ("2 hours", 7_200_000), ("10 seconds", 10_000),
    ("INTERVAL 1 minute 30 seconds", 90_000), ("1 minute, 30 seconds", 90_000), ("500 milliseconds", 500),
    ("2000us", 2), ("3000000ns", 3), ("1_000", 1_000), (" 42 ", 42), (1_000, 1_000), (np.int64(7), 7),
    (dt.timedelta(minutes=5), 300_000), (np.timedelta64(5, "m"), 300_000), (np.timedelta64(2_000_000, "ns"), 2),
])
def test_every_spelling_gives_the_same_milliseconds(given, ms):
    assert durations.parse_duration(given, name="range") == ms
    assert pr.TimeWindow(given).range == ms


def test_pandas_timedelta_is_exact_to_the_nanosecond():
    pd = pytest.importorskip("pandas")
    assert pr.TimeWindow(pd.Timedelta("90s")).range == 90_000
    assert pr.TimeWindow(pd.Timedelta(seconds=1).as_unit("s")).range == 1_000
    assert pr.TimeWindow(pd.Timedelta("1500ns"), unit="ns").range == 1_500
    with pytest.raises(ValueError, match=r"range '1us500ns' is not a whole number of milliseconds"):
        pr.TimeWindow(pd.Timedelta("1500ns"))
    with pytest.raises(ValueError, match="range is NaT"):
        pr.TimeWindow(pd.NaT)


@pytest.mark.parametrize("kwargs, error, message", [
    ({"range": "90us"}, ValueError,
     "range '90us' is not a whole number of milliseconds (against integer timestamps a duration means milliseconds)"),
    ({"range": "1h", "slide": "1.5ms"}, ValueError, "slide '1.5ms' is not a whole number of milliseconds"),
    ({"range": "1h", "slide": "1s", "offset": "10us"}, ValueError, "offset '10us' is not a whole number of milliseconds"),
    ({"range": "0s"}, ValueError, "range must be a positive duration, got '0s'"),
    ({"range": "-5s"}, ValueError, "range must be a positive duration, got '-5s'"),
    ({"range": "10s", "slide": "0ms"}, ValueError, "slide must be a positive duration, got '0ms'"),
    ({"range": 0}, ValueError, "range must be a positive integer, got 0"),
    ({"range": "10s", "slide": "20s"}, ValueError, "slide must be <= range"),
    ({"range": "1mo"}, ValueError, "range '1mo': unit 'mo' is a calendar unit (months, quarters and years vary in "
                                   "length); give a fixed length such as '30d'"),
    ({"range": "2 months"}, ValueError, "range '2 months': unit 'months' is a calendar unit"),
    ({"range": "1y"}, ValueError, "range '1y': unit 'y' is a calendar unit"),
    ({"range": "1h", "slide": "5M"}, ValueError, "slide '5M': unit 'M' is a calendar unit in pandas (month, year or "
                                                 "quarter, which vary in length); for minutes write 'min' or 'm'"),
    ({"range": "5i"}, ValueError, "range '5i': unit 'i' counts rows (polars); for a window of rows use a CountWindow"),
    ({"range": "5 fortnights"}, ValueError, "range '5 fortnights': unit 'fortnights' is not supported; accepted units: "
                                            "ns, us, ms, s, m or min, h, d, w"),
    ({"range": "five minutes"}, ValueError, "range 'five minutes' is not a duration; expected an integer"),
    ({"range": ""}, ValueError, "range '' is empty"),
    ({"range": "1.5ns", "unit": "ns"}, ValueError, "range '1.5ns' is not a whole number of nanoseconds"),
    ({"range": "1s", "unit": "m"}, ValueError, "unit must be one of 'ns', 'us', 'ms', 's', 'D', got 'm'"),
    ({"range": 1.5}, TypeError, "range must be an integer (the timestamps' unit), a duration string such as '5min'"),
    ({"range": 10, "slide": 5, "offset": 1.5}, TypeError, "offset must be an integer"),
    ({"range": True}, TypeError, "range must be an integer"),
    ({"range": np.timedelta64(1, "Y")}, ValueError, "unit 'Y' is a calendar unit"),
    ({"range": np.timedelta64(5)}, ValueError, "has no unit"),
    ({"range": np.timedelta64("NaT", "s")}, ValueError, "range is NaT"),
])
def test_bad_durations_name_the_parameter(kwargs, error, message):
    with pytest.raises(error) as info:
        pr.TimeWindow(**kwargs)
    assert message in str(info.value)


def test_offsets_may_be_zero_or_negative_and_stay_modulo_the_slide():
    assert pr.TimeWindow("10s", "4s", offset="-1s").offset == 3_000
    assert pr.TimeWindow(10, 4, offset=-1).offset == 3


def test_a_window_keeps_the_durations_as_given():
    w = pr.TimeWindow("5min", slide="1 minute", offset=dt.timedelta(seconds=5))
    assert (w.range, w.slide, w.offset) == (300_000, 60_000, 5_000)
    assert w.label == "5min"
    assert {k: (d.ns, d.label) for k, d in w.durations.items()} == {
        "range": (300 * 10**9, "5min"), "slide": (60 * 10**9, "1 minute"), "offset": (5 * 10**9, "5s")}
    assert pr.TimeWindow(60_000).label == "60000" and pr.TimeWindow(60_000).durations["range"].ns is None
    # the label and the durations are not part of the window's identity: integer ms and the same durations agree
    assert w == pr.TimeWindow(300_000, 60_000, 5_000) and hash(w) == hash(pr.TimeWindow(300_000, 60_000, 5_000))
    assert repr(w) == "TimeWindow(range=300000, slide=60000, offset=5000)"


def test_in_unit_resolves_durations_exactly_and_keeps_bare_integers():
    w = pr.TimeWindow("1h30m", "90s", offset="250ms")
    us = w.in_unit("us")
    assert (us.range, us.slide, us.offset, us.unit) == (5_400_000_000, 90_000_000, 250_000, "us")
    assert repr(us) == "TimeWindow(range=5400000000, slide=90000000, offset=250000, unit='us')"
    assert us.in_unit("ms") == w and us.label == "1h30m" and w.in_unit("ms") is w
    assert w.in_unit("ns").range == 5_400 * 10**9
    with pytest.raises(ValueError, match=r"offset '250ms' is not a whole number of seconds \(the unit is 's'\)"):
        w.in_unit("s")
    bare = pr.TimeWindow(1_000, 10).in_unit("ns")  # an integer is in the timestamps' unit, whatever it is
    assert (bare.range, bare.slide) == (1_000, 10)
    assert pr.TimeWindow("5min", unit="s").range == 300  # epoch-second timestamps


def test_windows_stay_frozen_hashable_and_picklable():
    w = pr.TimeWindow("5min", "1min")
    back = pickle.loads(pickle.dumps(w))
    assert back == w and hash(back) == hash(w) and back.label == "5min" and back.in_unit("s").range == 300
    with pytest.raises(AttributeError):
        w.range = 5  # type: ignore[misc]
    assert {w, back, pr.TimeWindow(300_000, 60_000)} == {w}
    # a snapshot taken with integer ms restores into the same window given as durations
    with pr.create("sba", pr.TimeWindow(300_000, 60_000), "max") as a:
        a.insert(1.0, 10)
        state = a.snapshot()
    with pr.create("sba", pr.TimeWindow("5min", "1 minute"), "max") as b:
        b.restore(state)
        assert b.flush()[1].tolist() == [1.0] * 5


def test_the_job_fingerprint_does_not_see_the_spelling():
    from pba_runtime.runtime.checkpoint import fingerprint
    from pba_runtime.runtime.job import Job
    from pba_runtime.runtime.sources import Debs12Source

    src = Debs12Source(sensors=1, tuples=10)
    a = Job(src, pr.TimeWindow(60_000, 1_000), "max", parallelism=1).describe()
    b = Job(src, pr.TimeWindow("1 minute", "1s"), "max", parallelism=1).describe()
    assert fingerprint(a) == fingerprint(b)


def test_the_parser_imports_neither_numpy_nor_pandas():
    code = ("import sys, pba_runtime as pr; w = pr.TimeWindow('5min'); "
            "print(w.range, 'numpy' in sys.modules, 'pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.stdout.split() == ["300000", "False", "False"], out.stderr


# --------------------------------------------------------------------------- the CLI's window options
def _cli_window(*argv):
    (w,) = _windows(build_parser().parse_args(list(argv)))
    return w


def test_cli_window_options_take_every_duration():
    w = _cli_window("--window", "time", "--range", "1h30m", "--slide", "1 minute", "--offset", "250ms")
    assert (w.range, w.slide, w.offset, w.label) == (5_400_000, 60_000, 250, "1h30m")
    assert _cli_window("--window", "time", "--range", "5s") == pr.TimeWindow(5_000, 5_000)  # tumbling
    assert _cli_window("--window", "time") == pr.TimeWindow(60_000)  # the default range, tumbling
    assert _cli_window("--window", "time", "--range", "2000", "--slide", "500") == pr.TimeWindow(2_000, 500)
    assert _cli_window("--range", "16") == pr.CountWindow(16, 1)
    several = _windows(build_parser().parse_args(["--window", "time", "--range", "1s,5min", "--range", "1h",
                                                  "--slide", "1s"]))
    assert several == [pr.TimeWindow(1_000, 1_000), pr.TimeWindow(300_000, 1_000), pr.TimeWindow(3_600_000, 1_000)]
    assert [w.label for w in several] == ["1s", "5min", "1h"]


def test_cli_durations_are_the_core_parser():
    from pba_runtime.cli import parse_duration

    assert parse_duration("1 minute") == 60_000 and parse_duration("2m") == 120_000 and parse_duration("0") == 0
    args = build_parser().parse_args(["--window", "time", "--allowed-lateness", "1.5s", "--disorder", "2 seconds"])
    assert (args.allowed_lateness, args.disorder) == (1_500, 2_000)


# --------------------------------------------------------------------------- the Spark adapter's windows
def test_spark_windows_use_the_core_parser():
    si = pytest.importorskip("spark_integration")
    from spark_integration.intervals import as_window

    assert si.parse_interval("5min") == 300_000 and si.parse_interval("1 hour") == 3_600_000
    assert si.time_window("1 minute", "10s", offset="-2s") == pr.TimeWindow(60_000, 10_000, 8_000)
    assert as_window("1 minute") == pr.TimeWindow(60_000, 60_000)  # one duration: tumbling, as window()
    assert as_window(("1h30m", "90s")).label == "1h30m"
    assert as_window((dt.timedelta(seconds=10),)) == pr.TimeWindow(10_000)
    with pytest.raises(ValueError, match=r"slide '5 microseconds' is not a whole number of milliseconds"):
        si.time_window("1 second", "5 microseconds")
    with pytest.raises(ValueError, match=r"interval '1 months': unit 'months' is a calendar unit"):
        si.parse_interval("1 months")
    with pytest.raises(TypeError, match=r"window must be a pba_runtime.CountWindow, a pba_runtime.TimeWindow, "
                                        r"an interval such as '1 minute' \(tumbling\)"):
        as_window(3.5)


# --------------------------------------------------------------------------- sliding_aggregate's messages
def test_time_window_without_timestamps_names_sliding_aggregate():
    with pytest.raises(ValueError) as info:
        pr.sliding_aggregate([1.0, 2.0], window=pr.TimeWindow(10), agg="max")
    assert str(info.value) == ("timestamps are required for time windows (TimeWindow); "
                               "pass sliding_aggregate(values, window=..., agg=..., timestamps=...)")


@pytest.mark.parametrize("algorithm", ["auto", "pba", "sba", "two_stacks", "daba", "fiba", "flatfat"])
def test_unsorted_timestamps_get_a_remedy_sliding_aggregate_takes(algorithm):
    ts = np.array([0, 5, 3, 9])
    with pytest.raises(ValueError) as info:
        pr.sliding_aggregate([1.0, 2.0, 3.0, 4.0], window=pr.TimeWindow(4, 2), agg="max", timestamps=ts,
                             algorithm=algorithm)
    text = str(info.value)
    assert text.startswith("timestamps must be non-decreasing; timestamps[2] = 3 < timestamps[1] = 5: sort the input "
                           'first (order = np.argsort(timestamps, kind="stable"), then sliding_aggregate(values[order], '
                           "..., timestamps=timestamps[order]))"), text
    assert "pr.create(..., allowed_lateness=L)" in text and "configure allowed_lateness" not in text


def test_the_sorting_remedy_works():
    ts = np.array([0, 5, 3, 9])
    values = np.array([1.0, 2.0, 3.0, 4.0])
    order = np.argsort(ts, kind="stable")
    ends, res = pr.sliding_aggregate(values[order], window=pr.TimeWindow(4, 2), agg="max", timestamps=ts[order])
    assert ends.tolist() == [2, 4, 6, 8, 10, 12] and res.tolist() == [1.0, 3.0, 3.0, 2.0, 4.0, 4.0]


def test_operators_keep_their_own_remedy():
    with pr.create("sba", pr.TimeWindow(4, 2), "max") as op:
        with pytest.raises(ValueError, match=r"timestamps\[2\] = 3 < timestamps\[1\] = 5 \(configure allowed_lateness"):
            op.insert_many([1.0, 2.0, 3.0], [0, 5, 3])
        with pytest.raises(ValueError, match="pass insert_many\\(values, timestamps=...\\)"):
            op.insert_many([1.0, 2.0])


# --------------------------------------------------------------------------- missing values
NA_POLICY = ('missing="propagate" refuses them (the default for arrays and per-tuple operators); '
             'pass missing="skip" to skip missing values and NaN')


def _pandas_inputs():
    pd = pytest.importorskip("pandas")
    return [pd.Series([1.0, None, 3.0, 4.0], dtype="Float64"), pd.Series([1, None, 3, 4], dtype="Int64"),
            pd.array([1.0, None, 3.0, 4.0], dtype="Float64"), pd.Series([1.0, None, 3.0, 4.0], dtype="float64[pyarrow]")]


@pytest.mark.parametrize("algorithm", ["auto", "sba", "pba", "two_stacks"])
def test_pandas_na_is_refused_naming_values(algorithm):
    for series in _pandas_inputs():
        with pytest.raises(ValueError) as info:
            pr.sliding_aggregate(series, window=pr.CountWindow(2), agg="max", algorithm=algorithm)
        assert str(info.value) == (f"values holds a missing value (<NA> at position 1): {NA_POLICY}; pass "
                                   ".to_numpy(dtype=float, na_value=np.nan) if NaN is what you mean, or .dropna() "
                                   "to drop them")


def test_nan_stays_a_value_and_na_free_nullable_input_runs():
    pd = pytest.importorskip("pandas")
    nan = pd.Series([1.0, np.nan, 3.0, 4.0])
    assert np.isnan(pr.sliding_aggregate(nan, window=pr.CountWindow(2), agg="max")[1][:2]).all()
    ok = pd.Series([1.0, 5.0, 3.0], dtype="Float64")
    assert pr.sliding_aggregate(ok, window=pr.CountWindow(2), agg="max")[1].tolist() == [5.0, 5.0]
    na = pd.Series([1.0, None, 3.0], dtype="Float64")
    fixed = na.to_numpy(dtype=float, na_value=np.nan)  # the remedy the message gives
    assert np.isnan(pr.sliding_aggregate(fixed, window=pr.CountWindow(2), agg="max")[1]).tolist() == [True, True]


def test_masked_arrow_and_polars_missing_values_are_refused():
    masked = np.ma.masked_array([1.0, 2.0, 3.0], mask=[False, False, True])
    with pytest.raises(ValueError) as info:
        pr.sliding_aggregate(masked, window=pr.CountWindow(2), agg="sum")
    assert str(info.value) == (f"values holds a missing value (a masked entry at position 2): {NA_POLICY}; pass "
                               ".filled(np.nan) if NaN is what you mean, or .compressed() to drop them")
    pa = pytest.importorskip("pyarrow")
    with pytest.raises(ValueError, match=r"values holds a missing value \(a null at position 0\)"):
        pr.sliding_aggregate(pa.array([None, 1.0, 2.0]), window=pr.CountWindow(2), agg="sum")
    pl = pytest.importorskip("polars")
    with pytest.raises(ValueError, match=r"values holds a missing value \(a null at position 1\).*\.fill_null"):
        pr.sliding_aggregate(pl.Series([1.0, None, 2.0]), window=pr.CountWindow(2), agg="sum")


def test_operators_refuse_na_too_and_change_nothing():
    pd = pytest.importorskip("pandas")
    agg = pr.Aggregation(lift=lambda v: v, combine=lambda a, b: a, lower=lambda p: p, identity=None, name="first")
    for a in ("max", agg):
        with pr.create("sba", pr.CountWindow(2), a) as op:
            with pytest.raises(ValueError, match=r"values holds a missing value \(<NA> at position 0\)"):
                op.insert_many(pd.Series([None, 1.0], dtype="Float64"))
            assert op.stats()["tuples"] == 0
    with pr.create("two_stacks", pr.CountWindow(2), "max") as op:
        with pytest.raises(ValueError) as info:
            op.insert(pd.NA)
        assert str(info.value) == f"value is missing (<NA>): {NA_POLICY}; pass float('nan') if NaN is what you mean"


def test_missing_policy_in_the_signatures():
    import inspect

    for fn in (pr.sliding_aggregate, pr.create):
        params = inspect.signature(fn).parameters
        assert params["missing"].default == "propagate" and params["missing"].kind is inspect.Parameter.KEYWORD_ONLY
        assert params["min_periods"].default == 1 and params["min_periods"].kind is inspect.Parameter.KEYWORD_ONLY
    with pytest.raises(ValueError, match="missing must be 'propagate' or 'skip', got 'drop'"):
        pr.sliding_aggregate([1.0], window=pr.CountWindow(1), agg="max", missing="drop")


# --------------------------------------------------------------------------- one default algorithm
def test_job_defaults_to_auto_as_every_entry_point():
    import inspect

    from pba_runtime.runtime.job import Job

    assert inspect.signature(Job).parameters["algorithm"].default == "auto"
    assert inspect.signature(pr.sliding_aggregate).parameters["algorithm"].default == "auto"
    assert build_parser().parse_args([]).algorithm == "auto"
    guide = (ROOT / "docs" / "runtime.md").read_text()
    assert "default `pba`" not in guide and "default `auto`" in guide


# --------------------------------------------------------------------------- PEP 561
def test_packages_ship_py_typed():
    import tomllib

    for pkg in ("pba_runtime", "spark_integration"):
        assert (ROOT / pkg / "py.typed").is_file()
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert data == {"pba_runtime": ["py.typed"], "spark_integration": ["py.typed"]}


def test_results_are_typed():
    import typing

    from pba_runtime.algorithms.base import Results, WindowOperator

    hints = typing.get_type_hints(pr.sliding_aggregate)
    assert hints["return"] == Results
    assert typing.get_type_hints(WindowOperator.insert_many)["return"] == Results
    assert typing.get_type_hints(WindowOperator.insert)["return"] == list[tuple[int, typing.Any]]
    assert typing.get_type_hints(pr.create)["return"] is WindowOperator


def test_no_source_cites_the_shared_spec():
    for pkg in ("pba_runtime", "spark_integration"):
        for path in (ROOT / pkg).rglob("*.py"):
            assert "shared/spec" not in path.read_text(), path
