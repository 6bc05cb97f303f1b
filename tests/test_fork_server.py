"""The end-to-end tests start installed commands by fork (tests/fork_server.py): a forked command must
answer exactly as a fresh process of the same command does."""

import os
import re
import subprocess

import pytest

from . import fork_server
from .conftest import tool


#: what importing fairseq logs once per process (fairseq/tasks/text_to_speech.py); a fork does not repeat it
IMPORT_NOTICE = "Please install tensorboardX"


#: the time stamp of a log line
TIME = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", re.M)


#: where a warning is said to come from when its stack level points past the script: ``sys:1`` in a fresh
#: process, the fork's own frames in a fork
WARNING_PLACE = re.compile(r"^[^\n]*?:\d+: (\w*Warning)", re.M)


def _without_import_notice(result):
    result.stdout, result.stderr = (
        WARNING_PLACE.sub(r"\1", "".join(l for l in text.splitlines(keepends=True) if IMPORT_NOTICE not in l))
        for text in (result.stdout, result.stderr))
    return result


def _fresh_and_forked(args, cwd, stdin=None):
    env = dict(os.environ, PYTHONPATH="")
    fresh = subprocess.run(args, cwd=cwd, env=env, input=stdin, capture_output=True, text=True, timeout=300)
    forked = fork_server.run(args, cwd=cwd, env=env, stdin=stdin, timeout=300)
    return _without_import_notice(fresh), _without_import_notice(forked)


@pytest.mark.slow
def test_a_forked_command_answers_as_a_fresh_process(tmp_path):
    if os.environ.get("FORK_SERVER", "1") == "0":
        pytest.skip("FORK_SERVER=0: every command already runs as a fresh process")
    # fairseq-train's own logging set-up (its configuration logged to stdout), then the plugin's
    # task (--user-dir, imported by the command itself) refusing a data-bin that is not there
    fresh, forked = _fresh_and_forked([tool("fairseq-train"), str(tmp_path / "nowhere"), "--user-dir",
                                       "fairseq_syntax", "--task", "syntax_translation", "--arch",
                                       "transformer_dep_rel", "--max-tokens", "100"], tmp_path)
    assert forked.returncode == fresh.returncode == 1
    assert forked.stderr == fresh.stderr and "nowhere: is not a directory" in forked.stderr
    assert TIME.sub("", forked.stdout) == TIME.sub("", fresh.stdout) and "| INFO | fairseq_cli.train |" in forked.stdout
    # a usage error of the pipeline: same exit status, same message, on the same stream
    fresh, forked = _fresh_and_forked([tool("fairseq-syntax-preprocess"), "-s", "en", "-t", "de", "--destdir",
                                       "out", "--trainpref", "missing"], tmp_path)
    assert forked.returncode == fresh.returncode != 0
    assert (forked.stdout, forked.stderr) == (fresh.stdout, fresh.stderr) and "give --parser" in forked.stderr
    assert not (tmp_path / "out").exists()
