"""``pba-run`` and the runtime on bad or unusual input (issue 15: items 13, 14 and first contact).

Every bad input is one line on stderr naming the file and line, exit code 2,
and nothing (no banner, no sink header) is printed or written before it.
Keys that differ only by trailing NUL characters stay distinct end to end.
"""

from __future__ import annotations

import json

import pytest

import pba_runtime as pr
from pba_runtime.cli import main
from pba_runtime.runtime import CsvSource, Job, JsonlSource, UserError

pytestmark = pytest.mark.timeout(120)

RUN = ["--no-progress", "-p", "1", "--range", "1"]


def one_line_error(capsys, args: list[str], code: int = 2) -> str:
    assert main(args) == code
    cap = capsys.readouterr()
    assert cap.out == ""  # no banner, no sink header
    assert cap.err.count("\n") == 1 and "Traceback" not in cap.err, cap.err
    return cap.err


@pytest.mark.parametrize("content, message", [
    (b"key,value\na,1\nb,\xff2\n", "line 3: not valid UTF-8 (byte 0xff"),
    (b"k\xe9y,value\na,1\n", "line 1: not valid UTF-8 (byte 0xe9"),
    (b"key,value\na,1\nb," + b"7" * 140_000 + b"\n", "line 3: a field is longer than 131,072 characters"),
    (b"key,value\na,1\nb,2,3\nc,4\n", "line 3: expected 2 columns (as the header), got 3"),
    (b"key,value\na,1\nb\nc,4\n", "line 3: expected 2 columns (as the header), got 1"),
], ids=["utf8", "utf8-header", "long-field", "extra-column", "short-row"])
def test_bad_csv_lines_are_one_line_errors_before_any_output(capsys, tmp_path, content, message):
    data = tmp_path / "in.csv"
    data.write_bytes(content)
    out = tmp_path / "out.csv"
    err = one_line_error(capsys, [*RUN, "--source", f"csv:{data}", "--sink", f"csv:{out}"])
    assert err.startswith(f"pba-run: error: csv source {data}, {message}"), err
    assert not out.exists()  # the sink was not even opened
    err = one_line_error(capsys, [*RUN, "--source", f"csv:{data}", "--sink", "csv:-"])  # no header on stdout
    assert message in err


@pytest.mark.parametrize("line, message", [
    (b'{"key": "a", "value": 1' + b"0" * 400 + b"}\n", "line 2: member 'value': cannot read 1000000000"),
    (b'{"key": "a", "value": 1' + b"0" * 5000 + b"}\n", "line 2: cannot read the line: Exceeds the limit"),
    (b'{"key": "a\xff", "value": 1}\n', "line 2: not valid UTF-8 (byte 0xff"),
], ids=["400-digits", "5000-digits", "utf8"])
def test_bad_jsonl_lines_are_one_line_errors(capsys, tmp_path, line, message):
    data = tmp_path / "in.jsonl"
    data.write_bytes(b'{"key": "a", "value": 1}\n' + line)
    err = one_line_error(capsys, [*RUN, "--source", f"jsonl:{data}", "--sink", "jsonl:-"])
    assert err.startswith(f"pba-run: error: jsonl source {data}, {message}"), err


def test_a_bad_header_fails_when_the_source_is_made(tmp_path):
    data = tmp_path / "in.csv"
    data.write_text("plug,value\n1,2\n")
    with pytest.raises(UserError, match="no key column 'key' in the header"):
        CsvSource(str(data), ts_col=None)


def test_zero_windows_summary_says_so(capsys, tmp_path):
    data = tmp_path / "in.csv"
    data.write_text("key,value\na,1\n")
    assert main(["--no-progress", "--source", f"csv:{data}", "--range", "5"]) == 0
    out = capsys.readouterr().out
    assert "windows      0 emitted" in out and "latency      - (no windows)" in out
    assert "nan" not in out


# ----------------------------------------------------------------------------- item 14: NUL in keys
NUL_KEYS = ["b", "b\x00", "b", "b\x00\x00", "b\x00", "b", "\x00", ""]


def _write_keys(path, fmt: str, keys, values) -> None:
    if fmt == "csv":
        with open(path, "w", newline="") as f:
            f.write("key,value\n" + "".join(f"{k},{v}\n" for k, v in zip(keys, values)))
    else:
        with open(path, "w") as f:
            f.write("".join(json.dumps({"key": k, "value": v}) + "\n" for k, v in zip(keys, values)))


def _expected(keys, values, r):
    per: dict[str, list] = {}
    for k, v in zip(keys, values):
        per.setdefault(k, []).append(v)
    return {k: [sum(vs[i:i + r]) for i in range(len(vs) - r + 1)] for k, vs in per.items()}


def _read_jsonl(path) -> dict[str, list]:
    got: dict[str, list] = {}
    with open(path) as f:
        for line in f:
            row = json.loads(line)
            got.setdefault(row["key"], []).append(row["value"])
    return got


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
@pytest.mark.parametrize("parallelism", [1, 2])
def test_keys_differing_by_trailing_nul_stay_distinct(tmp_path, fmt, parallelism):
    """numpy's str_ strips trailing NULs: "b\\x00" must not merge into "b" anywhere in the runtime."""
    keys = NUL_KEYS * 3
    values = [float(i + 1) for i in range(len(keys))]
    data = tmp_path / f"in.{fmt}"
    _write_keys(data, fmt, keys, values)
    out = tmp_path / "out.jsonl"
    src = (CsvSource if fmt == "csv" else JsonlSource)(str(data), ts_col=None)
    summary = Job(src, pr.CountWindow(range=2, slide=1), "sum", "sba", parallelism=parallelism,
                  sink=f"jsonl:{out}").run()
    want = _expected(keys, values, 2)
    assert summary["keys"] == len(set(keys)) == 5
    assert _read_jsonl(out) == {k: v for k, v in want.items() if v}


def test_nul_keys_resume_into_the_slot_that_owns_them(tmp_path):
    """A checkpoint's keys are re-partitioned on resume: "b\\x00" must go back to its own slot, not to "b"'s."""
    keys = (["b", "b\x00"] * 40)
    values = [float(i) for i in range(len(keys))]
    data = tmp_path / "in.csv"
    good = "key,value\n" + "".join(f"{k},{v}\n" for k, v in zip(keys, values))
    broken = good.replace("\n" + f"b,{values[60]}\n", "\n" + "b," + "?" * len(str(values[60])) + "\n")
    assert broken != good and len(broken) == len(good)

    def job(name, p):
        return Job(CsvSource(str(data), ts_col=None), pr.CountWindow(range=4, slide=1), "sum", "sba",
                   parallelism=p, sink=f"jsonl:{tmp_path / name}", checkpoint_dir=str(tmp_path / f"ck-{name}"),
                   checkpoint_every=10, batch_size=5)

    data.write_text(good)
    job("ref.jsonl", 2).run()
    data.write_text(broken)
    with pytest.raises(UserError, match="cannot read"):
        job("out.jsonl", 1).run()
    data.write_text(good)
    job("out.jsonl", 2).run(resume=True)  # another parallelism: every key is re-partitioned
    assert _read_jsonl(tmp_path / "out.jsonl") == _read_jsonl(tmp_path / "ref.jsonl")
    assert set(_read_jsonl(tmp_path / "ref.jsonl")) == {"b", "b\x00"}


def test_stdin_source_with_nul_keys(tmp_path):
    import subprocess
    import sys

    lines = "".join(json.dumps({"key": k, "value": 1.0}) + "\n" for k in NUL_KEYS)
    proc = subprocess.run([sys.executable, "-m", "pba_runtime", "--source", "jsonl:-", "--range", "1",
                           "--agg", "count", "--sink", "jsonl:-", "-q", "--no-progress"],
                          input=lines.encode(), capture_output=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr.decode()
    got = [json.loads(x)["key"] for x in proc.stdout.decode().splitlines()]
    assert sorted(got) == sorted(NUL_KEYS)
