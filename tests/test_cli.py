"""``pba-run``: help, the default job, user errors as one line with exit code 2."""

from __future__ import annotations

import json
import multiprocessing
import os
import select
import signal
import subprocess
import sys
import time

import pytest

from pba_runtime.cli import main

CLI = [sys.executable, "-m", "pba_runtime"]


@pytest.fixture(autouse=True)
def no_leftover_children():
    yield
    assert multiprocessing.active_children() == []


def test_help_shows_examples():
    proc = subprocess.run(CLI + ["--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    assert "examples:" in proc.stdout and "--checkpoint-dir" in proc.stdout and "--resume" in proc.stdout


def test_the_command_exits_with_mains_code_its_collector_frozen(tmp_path):
    """``entry`` (the ``pba-run`` command) exits with :func:`main`'s code, its objects frozen out of the
    shutdown collection; ``main`` called in a process leaves that process's collector alone."""
    import gc

    code = ("import atexit, gc, sys\n"
            "atexit.register(lambda: print('frozen', gc.get_freeze_count() > 0))\n"
            "from pba_runtime.__main__ import entry\n"
            "sys.argv = ['pba-run', '--window', 'count', '--range', '0']\n"
            "entry()\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "range must be" in proc.stderr and "frozen True" in proc.stdout
    out, metrics = tmp_path / "out.csv", tmp_path / "m.json"
    args = f"'--tuples', '5000', '--range', '16', '-q', '--sink', 'csv:{out}', '--metrics-json', '{metrics}'"
    proc = subprocess.run([sys.executable, "-c", code.replace("'--window', 'count', '--range', '0'", args)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    windows = json.loads(metrics.read_text())["windows"]
    assert "frozen True" in proc.stdout and windows > 3000
    assert len(out.read_text().splitlines()) == 1 + windows  # the header and every window: written in full
    before = gc.get_freeze_count()
    assert main(["--window", "count", "--range", "0"]) == 2
    assert gc.get_freeze_count() == before


def test_python_m_cli_runs_main(tmp_path):
    """``python -m pba_runtime.cli`` runs :func:`main` (the command without its early forkserver, which
    ``python -m pba_runtime`` and ``pba-run`` start first): a user error is one line and exit code 2, a job writes
    every window and exits 0."""
    cli = [sys.executable, "-m", "pba_runtime.cli"]
    proc = subprocess.run(cli + ["--agg", "mode"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.startswith("pba-run: error: --agg: unknown aggregation 'mode'")
    assert proc.stderr.count("\n") == 1
    out, metrics = tmp_path / "out.csv", tmp_path / "m.json"
    proc = subprocess.run(cli + ["--tuples", "3000", "--range", "16", "-q", "--sink", f"csv:{out}", "--metrics-json",
                                 str(metrics)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert len(out.read_text().splitlines()) == 1 + json.loads(metrics.read_text())["windows"]


def test_default_job_prints_the_summary(tmp_path):
    metrics = tmp_path / "m.json"
    # the default job with fewer tuples (the full one is `pba-run` with no arguments)
    proc = subprocess.run(CLI + ["--tuples", "200000", "--metrics-json", str(metrics)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    # the default algorithm is auto: a window of 1,024 slices is SBA's, and the banner and summary say why
    assert "84 plugs" in out and "W[1024, 1] max (auto -> sba: 1,024 slices a window" in out and "x 2 slots" in out
    for word in ("tuples/s", "windows", "latency", "p99", "stalls", "late tuples", "sba x84: window too small",
                 "lcs          inline on the slots' main loops (SBA builds every lcs itself"):
        assert word in out, word
    m = json.loads(metrics.read_text())
    assert m["tuples"] == 200_000 and m["parallelism"] == 2 and m["algorithms"] == {"sba": 84}
    assert m["reasons"] == {"sba:small_window": 84} and m["worker_tasks"] == 0
    assert m["startup_s"] > 0 and "s start-up before: processes, kernels" in out  # the stream's clock starts after
    assert m["windows"] == 200_000 - 84 * 1023
    # each slot's start-up objects were frozen before the stream (TaskSlot.freeze_startup); its collections since counted
    assert all(s["gc"]["frozen"] is True and len(s["gc"]["collections"]) == 3 for s in m["slots"].values())
    assert proc.stderr == ""  # no progress bar when stderr is not a terminal


def test_explicit_pba_says_where_its_lcs_were_built(tmp_path):
    """PBA asked for: the summary says, from the slots' counts, that its worker got no task and why."""
    metrics = tmp_path / "m.json"
    proc = subprocess.run(CLI + ["--tuples", "100000", "--algorithm", "pba", "--metrics-json", str(metrics)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "(pba)" in proc.stdout and "pba x84: requested" in proc.stdout
    assert "0 worker tasks: every merge ran inline on the slots' main loops (a key's share of a batch was at most" \
        in proc.stdout
    m = json.loads(metrics.read_text())
    assert m["worker_tasks"] == 0 and 0 < m["largest_merge"] < 32_768 and m["merges"] > 84
    # one slot, batches of the whole stream per key, a window that splits: the worker takes merge halves
    proc = subprocess.run(CLI + ["--tuples", "3000000", "--keys", "2", "--range", "4096", "--algorithm", "pba",
                                 "-p", "1", "--batch-size", "3000000", "--metrics-json", str(metrics)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    m = json.loads(metrics.read_text())
    assert m["worker_tasks"] >= 2 and "worker tasks (lcs and merge halves) over" in proc.stdout


def test_log_file_gets_the_slot_processes_lines(tmp_path):
    log = tmp_path / "run.log"
    proc = subprocess.run(CLI + ["--tuples", "20000", "--log-level", "info", "--log-file", str(log), "-q"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    text = log.read_text()
    for slot in (0, 1):  # written by the slot processes themselves
        assert f"pba-slot-{slot} INFO pba_runtime: task slot {slot}: " in text, text


@pytest.mark.parametrize("args, message", [
    (["--range", "0"], "range must be a positive integer, got 0"),
    (["--range", "10", "--slide", "20"], "slide must be <= range"),
    (["--window", "time", "--range", "1x"], "--range '1x': unit 'x' is not supported; accepted units: ns, us, ms"),
    (["--window", "time", "--range", "90us"], "--range '90us' is not a whole number of milliseconds"),
    (["--window", "time", "--range", "1mo"], "--range '1mo': unit 'mo' is a calendar unit"),
    (["--window", "time", "--range", "10s", "--slide", "0s"], "--slide must be a positive duration, got '0s'"),
    (["--window", "count", "--offset", "5"], "--offset applies to time windows"),
    (["--agg", "mode"], "unknown aggregation 'mode'"),
    (["--algorithm", "fast"], "unknown algorithm 'fast'"),
    (["--parallelism", "0"], "expected a positive integer, got '0'"),
    (["--window", "count", "--allowed-lateness", "5"], "time windows only"),
    (["--source", "kafka:x"], "source must be debs14, debs12, csv:PATH or jsonl:PATH"),
    (["--source", "csv:/nonexistent/x.csv"], "no such file: /nonexistent/x.csv"),
    (["--source", "csv:-", "--tuples", "5"], "--tuples applies to generated sources"),
    (["--sink", "xml:out"], "sink must be none, csv:PATH, jsonl:PATH (PATH '-' for stdout), parquet:DIR or arrow:DIR"),
    (["--sink", "parquet"], "sink must be none, csv:PATH"),
    (["--sink", "arrow:"], "sink must be none, csv:PATH"),
    (["--sink", "parquet:-"], "a parquet sink writes part files into a directory; it cannot write stdout"),
    (["--sink", "parquet:/nonexistent/dir/parts"], "output directory does not exist: /nonexistent/dir"),
    (["--sink", "arrow:/dev/null"], "cannot create the output directory /dev/null"),
    (["--sink", "csv:/nonexistent/dir/out.csv"], "output directory does not exist"),
    (["--sink", "arrow:parts", "--compression", "snappy"], "compression of an arrow sink must be one of lz4, zstd"),
    (["--compression", "zstd"], "compression applies to the parquet and arrow sinks only"),
    (["--resume"], "--resume needs --checkpoint-dir"),
    (["--checkpoint-every", "10s"], "--checkpoint-every needs --checkpoint-dir"),
    (["--checkpoint-every", "soon", "--checkpoint-dir", "x"], "expected a number of tuples"),
    (["--no-such-option"], "unrecognized arguments: --no-such-option"),
])
def test_user_errors_are_one_line_and_exit_2(capsys, args, message):
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("pba-run: error: "), err
    assert message in err


def test_user_errors_from_the_input_file(capsys, tmp_path):
    data = tmp_path / "d.csv"
    data.write_text("plug,value\n1,2.0\n")
    assert main(["--source", f"csv:{data}", "--window", "time", "--key-col", "plug"]) == 2
    err = capsys.readouterr().err
    assert "no timestamp column 'ts' in the header; columns: plug, value" in err and err.count("\n") == 1
    assert main(["--source", f"csv:{data}", "--key-col", "plug", "--checkpoint-dir", str(tmp_path / "c"),
                 "--resume"]) == 2
    assert "no checkpoint in" in capsys.readouterr().err


def test_a_real_process_exits_2_without_a_traceback(tmp_path):
    proc = subprocess.run(CLI + ["--agg", "mode"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.startswith("pba-run: error: --agg: unknown aggregation 'mode'")
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1


def test_stdout_sink_and_metrics_on_sigusr1(tmp_path, sigint_default):
    proc = subprocess.Popen(CLI + ["--keys", "3", "--tuples", "0", "--range", "4", "--rate", "20000",
                                   "--batch-size", "1000", "--sink", "csv:-", "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=sigint_default)
    err_fd = proc.stderr.fileno()
    err = ""
    try:
        header = proc.stdout.readline()
        first = proc.stdout.readline()
        assert header == b"key,start,end,value\n" and first.count(b",") == 3
        # nobody reads stdout from here on: the sink blocks (backpressure), metrics must still come
        proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 30
        while "lcs stalls" not in err:
            assert time.monotonic() < deadline, f"no metrics line on SIGUSR1: {err!r}"
            if select.select([err_fd], [], [], 0.5)[0]:
                err += os.read(err_fd, 1 << 16).decode()
        proc.send_signal(signal.SIGINT)
        proc.stdout.read()
        err += proc.stderr.read().decode()
        assert proc.wait(timeout=30) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "tuples (" in err and "windows" in err and "lcs stalls" in err  # the SIGUSR1 metrics line
    assert "pba-run: interrupted" in err


def test_metrics_json_of_a_job_without_windows_is_strict_json(tmp_path):
    """No windows: the latency has no value; the JSON says null, not NaN (which strict parsers refuse)."""
    metrics = tmp_path / "m.json"
    proc = subprocess.run(CLI + ["--tuples", "500", "--range", "100000", "--metrics-json", str(metrics), "-q"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    text = metrics.read_text()
    assert "NaN" not in text
    m = json.loads(text, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
    assert m["windows"] == 0 and m["latency_ms"]["p50"] is None
