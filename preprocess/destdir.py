"""Where a data-bin is written, and what ``--overwrite`` may replace.

A run writes into ``.NAME.tmp-HOST-PID-XXXX`` beside ``--destdir`` and renames it into place
only when every file is complete. ``--overwrite`` replaces only a directory that is
recognisably a data-bin made by this pipeline: it holds a ``syntax.json`` of ours, and
nothing but the files the pipeline writes (dictionaries, ``.bin``/``.idx``, ``.conllu``,
``bpe.codes``, ``syntax.json``). Anything else -- the folder holding the raw corpus, the
current directory, a data-bin with checkpoints or notes of the user's inside, a folder
that holds one of this run's inputs -- is refused by name, and nothing is deleted.
"""

import json
import os
import re
import shutil
import tempfile
from typing import Iterable

from fairseq_syntax_core.databin import FORMAT_VERSION, METADATA_FILE, PARSED_LANGS_KEY, PRODUCER, PRODUCER_KEY
from fairseq_syntax_core.errors import UsageError
from .fileio import dir_mode
from .interrupts import remove_stale, temp_tag

#: the files a data-bin of ours holds (fairseq-preprocess's and the side-files)
_OURS = re.compile(r"^(dict\..+\.txt|.+\.(bin|idx|conllu)|syntax\.json|bpe\.codes|preprocess\.log)$")
TMP_MARK = ".tmp-"
OLD_MARK = ".old-"


def is_our_metadata(path: str) -> bool:
    """A ``syntax.json`` written by this pipeline (any format version so far)."""
    try:
        with open(path, encoding="utf-8") as handle:
            meta = json.load(handle)
    except (OSError, ValueError):
        return False
    if not isinstance(meta, dict):
        return False
    if meta.get(PRODUCER_KEY) == PRODUCER:
        return True
    return meta.get("format_version") == FORMAT_VERSION and isinstance(meta.get(PARSED_LANGS_KEY), dict)  # 0.1.0


def _inside(path: str, folder: str) -> bool:
    path, folder = os.path.realpath(path), os.path.realpath(folder)
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def check_destdir(destdir: str, overwrite: bool, inputs: Iterable[str]) -> None:
    """Refuse, before any work, a ``--destdir`` that this run must not write or replace."""
    if os.path.islink(destdir):
        raise UsageError(f"--destdir {destdir} is a symbolic link: give the directory it points to")
    if os.path.exists(destdir) and not os.path.isdir(destdir):
        raise UsageError(f"--destdir {destdir} exists and is not a directory")
    parent = os.path.dirname(os.path.abspath(destdir))
    existing = parent
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing) or not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"--destdir {destdir}: cannot create it, {existing} is not a writable directory")
    cwd = os.getcwd()
    if os.path.isdir(destdir) and _inside(cwd, destdir):
        raise UsageError(f"--destdir {destdir} is the current directory (or holds it): name a data-bin folder")
    for path in inputs:
        if path and _inside(path, destdir):
            raise UsageError(f"--destdir {destdir} holds the input {path}: write the data-bin elsewhere")
    if not os.path.isdir(destdir) or not os.listdir(destdir):
        return
    if not overwrite:
        raise UsageError(f"--destdir {destdir} exists and is not empty: pass --overwrite to replace it")
    if not is_our_metadata(os.path.join(destdir, METADATA_FILE)):
        raise UsageError(
            f"--overwrite refused: {destdir} is not a data-bin made by {PRODUCER} (no {METADATA_FILE} "
            "of ours); nothing was deleted. Remove it yourself or choose another --destdir"
        )
    foreign = sorted(
        name for name in os.listdir(destdir)
        if not _OURS.match(name) or os.path.isdir(os.path.join(destdir, name))
    )
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise UsageError(
            f"--overwrite refused: {destdir} holds files the pipeline does not write ({shown}); "
            "nothing was deleted. Move them out, or choose another --destdir"
        )


def make_temp_dir(destdir: str) -> str:
    """A fresh temporary folder beside ``destdir``; stale ones of killed runs are removed first."""
    parent = os.path.dirname(os.path.abspath(destdir))
    os.makedirs(parent, exist_ok=True)
    base = os.path.basename(os.path.abspath(destdir))
    remove_stale(parent, [f".{base}{TMP_MARK}", f".{base}{OLD_MARK}"])
    return tempfile.mkdtemp(prefix=f".{base}{TMP_MARK}{temp_tag()}-", dir=parent)


def move_into_place(out: str, destdir: str) -> None:
    """Rename the finished ``out`` to ``destdir``, replacing a data-bin already there."""
    os.chmod(out, dir_mode())
    destdir = os.path.abspath(destdir)
    if os.path.exists(destdir) and not os.listdir(destdir):
        os.rmdir(destdir)  # an empty folder the user made for it
    if not os.path.exists(destdir):
        os.rename(out, destdir)
        return
    base = os.path.basename(destdir)
    old = os.path.join(os.path.dirname(destdir), f".{base}{OLD_MARK}{temp_tag()}-{os.path.basename(out)[-8:]}")
    os.rename(destdir, old)
    os.rename(out, destdir)
    shutil.rmtree(old, ignore_errors=True)
