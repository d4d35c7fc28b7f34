"""Every code example of README.md and docs/ runs as written, as a script.

Each ```python block of ``README.md`` and ``docs/**/*.md`` is written to a file
and run with this interpreter in a subprocess, in a fresh temporary working
directory, with a timeout: as a user who pastes it into ``example.py`` would
run it. A script, not ``exec`` in this process, because that is what the
examples promise: process pools and ``pba-run`` jobs start spawn/forkserver
children that re-import ``__main__`` from its file, and Spark starts its own
JVM and Python workers. ``PYSPARK_PYTHON`` is removed from the environment, so
a Spark example has to work the way the docs tell a user to run it.

A ```bash block preceded by ``<!-- test: shell -->`` is run with ``bash -e``
the same way, with this interpreter's ``bin`` directory first on ``PATH``
(where ``pba-run`` is installed).

What a block prints is shown in a ```text block right after it (only blank
lines between), as a reader expects to see it, and the block's standard output
must be exactly that (each line's trailing spaces and the final newlines aside).
``...`` in it stands for any text, as doctest's ``ELLIPSIS``: for what varies
from run to run (timings, temporary paths), never for a result. A Python block
without one must print nothing; a shell block's output is compared when shown.

Directives, in an HTML comment on the line(s) just before a block:

``<!-- no-test: why -->``
    a fragment that is not meant to run on its own (keep these very few);
``<!-- test: slow -->``
    runs only under ``-m slow``;
``<!-- test: xfail why -->``
    expected to fail today for the reason given (``strict=False``), to be
    removed once that fix is merged.

Blocks that mention ``pyspark`` or ``spark_integration`` get the ``spark``
marker and are skipped without Java; blocks that start ``redis-server`` are
skipped without it (``.ci/run`` installs both). A block repeated verbatim (the README's
Spark example, shown again in docs/spark.md) runs once: each Spark block
starts a JVM, which costs 10-20 s.
"""

from __future__ import annotations

import difflib
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
TIMEOUT = 90  # seconds per block; each is meant to take well under 15 s

_FENCE = re.compile(r"^```(\w*)\s*$")
_DIRECTIVE = re.compile(r"^<!--\s*(no-test|test:\s*(?:slow|xfail|shell))\b(.*?)-->\s*$")


@dataclass
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    directives: dict[str, str] = field(default_factory=dict)
    end: int = 0  # 1-based line of the closing fence
    expected: str | None = None  # the ```text block right after it: what it prints

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def _blocks(path: Path) -> list[Block]:
    """The fenced blocks of one Markdown file with the directives just above them."""
    lines = path.read_text(encoding="utf-8").splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, lang = i, m.group(1)
        j = i + 1
        while j < len(lines) and lines[j].rstrip() != "```":
            j += 1
        if j == len(lines):
            raise AssertionError(f"{path.relative_to(ROOT)}:{start + 1}: unclosed code fence")
        directives: dict[str, str] = {}
        k = start - 1
        while k >= 0 and (d := _DIRECTIVE.match(lines[k].strip())):
            kind = d.group(1).replace(" ", "").split(":")[-1]  # no-test, slow, xfail, shell
            directives[kind] = d.group(2).strip()
            k -= 1
        out.append(Block(path, start + 1, lang, "\n".join(lines[start + 1:j]) + "\n", directives, j + 1))
        i = j + 1
    for block, after in zip(out, out[1:]):
        if (block.lang != "text" and after.lang == "text" and not after.directives
                and all(not ln.strip() for ln in lines[block.end : after.line - 1])):
            block.expected = after.code
    return out


ALL_BLOCKS = [b for p in DOC_FILES for b in _blocks(p)]
PYTHON_BLOCKS = [b for b in ALL_BLOCKS if b.lang == "python"]
SHELL_BLOCKS = [b for b in ALL_BLOCKS if b.lang in ("bash", "sh", "shell") and "shell" in b.directives]


def _java_available() -> bool:
    home = os.environ.get("JAVA_HOME")
    return bool(shutil.which("java") or (home and os.path.exists(os.path.join(home, "bin", "java"))))


def _params(blocks: list[Block]) -> list:
    params, seen = [], set()
    for b in blocks:
        if "no-test" in b.directives or (b.code, b.expected) in seen:
            continue  # a fragment; or a copy of a block already collected (runs once, under the first id)
        seen.add((b.code, b.expected))
        marks = []
        if "pyspark" in b.code or "spark_integration" in b.code:
            marks.append(pytest.mark.spark)
            if not _java_available():
                marks.append(pytest.mark.skip(reason="Spark examples need Java (JDK 17)"))
        if "redis-server" in b.code and shutil.which("redis-server") is None:
            marks.append(pytest.mark.skip(reason="Redis examples need redis-server (Debian's package)"))
        if "slow" in b.directives:
            marks.append(pytest.mark.slow)
        if "xfail" in b.directives:
            marks.append(pytest.mark.xfail(reason=b.directives["xfail"], strict=False))
        params.append(pytest.param(b, id=b.id, marks=marks))
    return params


def _env() -> dict[str, str]:
    env = dict(os.environ)
    for name in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"):
        env.pop(name, None)  # the examples must work as the docs say, not thanks to the test runner
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _run(cmd: list[str], block: Block, cwd: Path) -> subprocess.CompletedProcess:
    try:
        proc = subprocess.run(cmd, check=False, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{block.id}: did not finish in {TIMEOUT} s\n{exc.stdout or ''}\n{exc.stderr or ''}")
    assert proc.returncode == 0, (
        f"{block.id} failed (exit {proc.returncode})\n--- code\n{block.code}--- stdout\n{proc.stdout}"
        f"--- stderr\n{proc.stderr}")
    return proc


def _lines(text: str) -> list[str]:
    """``text``'s lines without their trailing spaces, the blank lines at its end dropped."""
    lines = [ln.rstrip() for ln in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def output_matches(want: str, got: str) -> bool:
    """Whether ``got`` is ``want``, each ``...`` of ``want`` standing for any text (newlines too).

    >>> output_matches("took ... s\\n[1.0, 2.0]", "took 0.31 s\\n[1.0, 2.0]\\n")
    True
    >>> output_matches("took ... s\\n[1.0, 2.0]", "took 0.31 s\\n[1.0, 2.5]")
    False
    """
    pieces = "\n".join(_lines(want)).split("...")
    text = "\n".join(_lines(got))
    if len(pieces) == 1:
        return text == pieces[0]
    first, *middle, last = pieces
    if len(text) < len(first) + len(last) or not (text.startswith(first) and text.endswith(last)):
        return False
    pos, stop = len(first), len(text) - len(last)
    for piece in middle:
        pos = text.find(piece, pos, stop)
        if pos < 0:
            return False
        pos += len(piece)
    return True


def _check_output(block: Block, proc: subprocess.CompletedProcess) -> None:
    want = block.expected if block.expected is not None else ""
    if output_matches(want, proc.stdout):
        return
    if block.expected is None:
        pytest.fail(f"{block.id} prints, and the doc does not show it: put what it prints in a ```text block "
                    f"right after it\n--- stdout\n{proc.stdout}")
    diff = "\n".join(difflib.unified_diff(_lines(want), _lines(proc.stdout), "the doc shows", "it prints",
                                          lineterm=""))
    pytest.fail(f"{block.id} prints other than its ```text block shows ('...' stands for any text)\n{diff}")


@pytest.mark.parametrize("block", _params(PYTHON_BLOCKS))
def test_python_example_runs_as_a_script(block: Block, tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(block.code, encoding="utf-8")
    _check_output(block, _run([sys.executable, str(script)], block, tmp_path))


@pytest.mark.parametrize("block", _params(SHELL_BLOCKS))
def test_shell_example_runs(block: Block, tmp_path: Path) -> None:
    script = tmp_path / "example.sh"
    script.write_text(block.code, encoding="utf-8")
    proc = _run(["bash", "-e", "-o", "pipefail", str(script)], block, tmp_path)
    if block.expected is not None:
        _check_output(block, proc)


def test_pba_run_help_runs() -> None:
    """The command every guide points to for the full list of options."""
    exe = Path(sys.executable).with_name("pba-run")
    if not exe.exists():
        pytest.skip("pba-run is not installed beside this interpreter")
    proc = subprocess.run([str(exe), "--help"], check=False, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "examples:" in proc.stdout, proc.stderr


def test_the_docs_have_examples_and_few_fragments() -> None:
    """The harness finds the blocks (a renamed fence would otherwise skip them silently)."""
    assert len(PYTHON_BLOCKS) >= 10
    untested = [b.id for b in PYTHON_BLOCKS if "no-test" in b.directives]
    assert len(untested) <= 3, untested
    for b in ALL_BLOCKS:
        assert b.lang in ("python", "bash", "sh", "shell", "text", ""), f"{b.id}: unknown fence language {b.lang!r}"


def test_readme_keeps_the_two_commands() -> None:
    """CI (.ci/run) runs the README's test command verbatim: the first block must stay as it is."""
    first = _blocks(ROOT / "README.md")[0]
    assert first.lang == "bash"
    assert first.code.splitlines() == [
        "python3 -m venv .venv && .venv/bin/pip install -q -e '.[dev]' && .venv/bin/pba-run          # the main job",
        "python3 -m venv .venv && .venv/bin/pip install -q -e '.[dev]' && .venv/bin/python -m pytest -q   # the tests",
    ]


def test_relative_links_resolve() -> None:
    """Every relative link of the docs points to a file that exists."""
    link = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")
    broken = []
    for path in DOC_FILES:
        for target in link.findall(path.read_text(encoding="utf-8")):
            if re.match(r"^[a-z]+:", target):
                continue
            if not (path.parent / target).exists():
                broken.append(f"{path.relative_to(ROOT)} -> {target}")
    assert not broken, broken


def test_the_spec_copy_is_current() -> None:
    """docs/semantics.md is the project's copy of the shared contract; it must not drift from it."""
    shared = ROOT.parent / "shared" / "spec" / "semantics.md"
    if not shared.exists():
        pytest.skip("no shared spec beside this checkout (a clone has only the copy)")
    assert (ROOT / "docs" / "semantics.md").read_text(encoding="utf-8") == shared.read_text(encoding="utf-8"), (
        "docs/semantics.md differs from shared/spec/semantics.md: copy the shared spec over it")


def test_a_text_block_right_after_a_block_is_its_output(tmp_path: Path) -> None:
    """Only blank lines may stand between a block and the ```text block showing what it prints."""
    doc = tmp_path / "doc.md"
    doc.write_text("```python\nprint(1)\n```\n\n```text\n1\n```\n\n```python\nprint(2)\n```\nprose\n```text\n2\n```\n",
                   encoding="utf-8")
    first, shown, second, other = _blocks(doc)
    assert (first.expected, second.expected, shown.expected, other.expected) == ("1\n", None, None, None)
    assert output_matches("a ... c\n...\n", "a b c\nd\ne") and not output_matches("a ... c", "a b c d")
    assert not output_matches("", "printed") and output_matches("x", "x  \n\n")
