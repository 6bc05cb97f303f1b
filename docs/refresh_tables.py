"""Rebuild every generated table of the documentation from the committed JSON.

A generated table sits between two HTML comments (invisible on GitHub and in the site); the first
names the command that makes it, run from the checkout's root::

    <!-- table: fairseq-syntax-report table examples/tree2seq/results/multi30k --baseline lstm -->
    ... the command's output ...
    <!-- /table -->

Three commands are accepted: ``fairseq-syntax-report table ...`` (results of the recipes, one JSON
per model and seed), ``fairseq-syntax-report claims ...`` (each paper's direction of effect, from the same
JSON) and ``python benchmarks/gpu_table.py JSON...`` (the GPU check). Every
Markdown file of the documentation is read: ``README.md``, ``docs/**/*.md``, ``examples/**/*.md``
and ``benchmarks/*.md``.

    python docs/refresh_tables.py            # rewrite the blocks that differ
    python docs/refresh_tables.py --check    # change nothing; exit 1 naming every stale block

``tests/test_docs_tables.py`` runs the check: a result added, edited or removed without
refreshing the tables fails the test suite.
"""

import argparse
import contextlib
import glob
import importlib.util
import io
import os
import re
import shlex
import sys
import tempfile
from typing import List, Optional, Sequence

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: a block's markers stand on lines of their own: a name in the table that holds one (in a code span, inside a
#: row) neither opens nor closes a block
BLOCK = re.compile(r"(?P<open>^<!-- table: (?P<command>[^\n]+?) -->\n)(?P<body>.*?)(?P<close>^<!-- /table -->$)",
                   re.S | re.M)
PATTERNS = ("README.md", "docs/**/*.md", "examples/**/*.md", "benchmarks/*.md")


def report_table(argv: List[str]) -> str:
    """``fairseq-syntax-report table|claims ...`` (``argv`` from the subcommand on): the Markdown it writes with
    ``--markdown``."""
    from fairseq_syntax_analysis import results

    command = shlex.join(["fairseq-syntax-report"] + argv)
    if "--markdown" in argv or any(a.startswith("--markdown=") or a in ("-h", "--help") for a in argv):
        raise ValueError(f"{command}: a table command names no --markdown and no --help (the block is its output)")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "table.md")
        said = io.StringIO()
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(said):
                status = results.cli_main(argv + ["--markdown", out])
        except SystemExit as stop:  # argparse refused the command line (its usage is in ``said``)
            status = stop.code if isinstance(stop.code, int) else 2
        if status != 0 or not os.path.isfile(out):
            last = (said.getvalue().strip().splitlines() or ["no output"])[-1]
            raise RuntimeError(f"{command} failed (exit {status}): {last}")
        with open(out, encoding="utf-8") as handle:
            return handle.read()


def gpu_table(argv: List[str]) -> str:
    """``python benchmarks/gpu_table.py JSON...``: what it prints."""
    spec = importlib.util.spec_from_file_location("gpu_table", os.path.join(REPO, "benchmarks", "gpu_table.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text, said = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(text), contextlib.redirect_stderr(said):
            status = module.main(argv)
    except SystemExit as stop:  # argparse's refusal, or --help
        status = stop.code if isinstance(stop.code, int) else 2
    if status not in (0, None) or any(a in ("-h", "--help") for a in argv):
        last = (said.getvalue().strip().splitlines() or ["no table"])[-1]
        raise RuntimeError(f"{shlex.join(['python', 'benchmarks/gpu_table.py'] + argv)} failed: {last}")
    return text.getvalue()


def generate(command: str) -> str:
    """The Markdown a marker's command makes (run from the checkout's root)."""
    argv = shlex.split(command)
    if argv[:2] in (["fairseq-syntax-report", "table"], ["fairseq-syntax-report", "claims"]):
        return report_table(argv[1:])
    if argv[:2] == ["python", "benchmarks/gpu_table.py"]:
        return gpu_table(argv[2:])
    raise ValueError(f"unknown table command {command!r}: expected 'fairseq-syntax-report table ...', "
                     "'fairseq-syntax-report claims ...' or 'python benchmarks/gpu_table.py ...'")


def refresh_text(text: str, stale: Optional[List[str]] = None) -> str:
    """``text`` with every marked block rebuilt: a blank line, the command's output, a blank line, the
    closing marker. The commands of the blocks that change are appended to ``stale``."""

    def rebuilt(match: "re.Match[str]") -> str:
        body = generate(match.group("command")).rstrip("\n")
        block = f"{match.group('open')}\n{body}\n\n{match.group('close')}"
        if stale is not None and block != match.group(0):
            stale.append(match.group("command"))
        return block

    return BLOCK.sub(rebuilt, text)


def documentation_files() -> List[str]:
    found = set()
    for pattern in PATTERNS:
        for path in glob.glob(os.path.join(REPO, pattern), recursive=True):
            if os.sep + "_build" + os.sep not in path:
                found.add(path)
    return sorted(found)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 when a block is stale")
    parser.add_argument("files", nargs="*", help="Markdown files (default: every documentation file)")
    args = parser.parse_args(argv)
    files = [os.path.abspath(f) for f in args.files] or documentation_files()
    cwd = os.getcwd()
    os.chdir(REPO)  # the commands name their folders relative to the checkout
    try:
        return _refresh(files, args.check)
    finally:
        os.chdir(cwd)


#: a line that opens a block (its closing marker is checked by :data:`BLOCK`)
OPENING = re.compile(r"^<!-- table: ", re.M)


def _refresh(files: List[str], check: bool) -> int:
    stale = []
    blocks = 0
    rewritten = {}
    for path in files:  # every file is rebuilt before any is written: a failing block changes nothing
        name = os.path.relpath(path, REPO)
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
            found = len(BLOCK.findall(text))
            if found != len(OPENING.findall(text)):
                line = next(text.count("\n", 0, m.start()) + 1 for m in OPENING.finditer(text)
                            if not BLOCK.match(text, m.start()))
                raise ValueError(f"line {line}: a '<!-- table: COMMAND -->' line without its '<!-- /table -->' line "
                                 "(each marker on a line of its own)")
            blocks += found
            commands: List[str] = []
            new = refresh_text(text, commands)
        except (RuntimeError, ValueError, OSError) as error:  # a failing or malformed block, an unreadable file
            what = f"{error.strerror}" if isinstance(error, OSError) and error.strerror else str(error)
            print(f"refresh_tables: error: {name}: {what}".replace("\n", " "), file=sys.stderr)
            return 1
        if new == text:
            continue
        stale.append(name)
        for command in commands:
            print(f"{name}: stale: {command}", file=sys.stderr)
        rewritten[path] = new
    if not check:
        for path, new in rewritten.items():
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(new)
    if check and stale:
        print(f"stale tables in {', '.join(stale)}: run python docs/refresh_tables.py", file=sys.stderr)
        return 1
    verb = "would rewrite" if check else "rewrote"
    print(f"{blocks} tables; {verb} {len(stale)} files" + (f": {', '.join(stale)}" if stale else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
