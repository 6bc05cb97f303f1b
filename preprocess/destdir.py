"""Where a data-bin is written, and what ``--overwrite`` may replace.

A run writes into ``.NAME.tmp-HOST-PID-<random suffix>`` beside ``--destdir`` and renames it into place
only when every file is complete. ``--overwrite`` replaces only a directory that is
recognisably a data-bin made by this pipeline: it holds a ``syntax.json`` of ours, and
nothing but the files the pipeline writes (dictionaries, ``.bin``/``.idx``, ``.conllu``,
``bpe.codes``, ``syntax.json``). Anything else -- the folder holding the raw corpus, the
current directory, a data-bin with checkpoints or notes of the user's inside, a folder
that holds one of this run's inputs -- is refused by name, and nothing is deleted.
"""

import contextlib
import os
import shutil
import tempfile
from typing import Iterable, Iterator, List, Optional, Set

from fairseq_syntax_core.databin import (
    CODES_FILE,
    LENGTH_PRIOR_FILE,
    FORMAT_VERSION,
    METADATA_FILE,
    PARSED_LANGS_KEY,
    PRODUCER,
    PRODUCER_KEY,
    STREAMS,
    check_metadata,
    dictionary_path,
)
from fairseq_syntax_core.errors import InputError, UsageError
from fairseq_syntax_core.jsonfile import read_json_file
from fairseq_syntax_core.fileio import check_dictionary_file, dir_mode, is_inside  # noqa: F401 (is_inside: its interface)
from fairseq_syntax_core.indexed_files import REBUILD, check_indexed_dataset
from fairseq_syntax_core.interrupts import remove_stale, removed_on_failure, temp_tag

TMP_MARK = ".tmp-"
OLD_MARK = ".old-"


def our_metadata(path: str) -> Optional[dict]:
    """The ``syntax.json`` at ``path`` if this pipeline wrote it (any version so far), else None.

    A file of ours with a name that cannot name files (a split ``../x``) is a DataBinError
    (:func:`fairseq_syntax_core.databin.check_metadata`).
    """
    try:
        meta = read_json_file(path)
    except InputError:  # missing, unreadable, not JSON: not a file of ours
        return None
    if not isinstance(meta, dict):
        return None
    if meta.get(PRODUCER_KEY) == PRODUCER:
        return check_metadata(meta, path)
    if meta.get("format_version") == FORMAT_VERSION and isinstance(meta.get(PARSED_LANGS_KEY), dict):
        return check_metadata(meta, path)  # 0.1.0 wrote no producer key
    return None


def files_of(meta: dict) -> Set[str]:
    """Every file name the pipeline writes for the data-bin that ``meta`` describes."""
    src, tgt = meta.get("source_lang"), meta.get("target_lang")
    names = {METADATA_FILE, CODES_FILE, f"dict.{src}.txt", f"dict.{tgt}.txt",
             LENGTH_PRIOR_FILE.format(src=src, tgt=tgt)}
    for lang, streams in meta.get(PARSED_LANGS_KEY, {}).items():
        for name in streams:
            stream = STREAMS.get(name)
            if stream is not None and stream.dictionary is not None:
                names.add(os.path.basename(dictionary_path("", lang, stream)))
    for split in meta.get("splits", {}):
        for lang in (src, tgt):
            names |= {f"{split}.{src}-{tgt}.{lang}.{ext}" for ext in ("bin", "idx")}
        for lang, streams in meta.get(PARSED_LANGS_KEY, {}).items():
            names.add(f"{split}.{src}-{tgt}.{lang}.conllu")
            names |= {f"{split}.{src}-{tgt}.{lang}.{name}.{ext}" for name in streams for ext in ("bin", "idx")}
    return names


def check_data_bin_files(folder: str, meta: dict, remedy: str = REBUILD) -> None:
    """The dictionaries and indexed datasets of the data-bin ``meta`` describes are in ``folder``, each readable
    as fairseq-train reads it (a dictionary's lines, an index and the items of its ``.bin``); else an InputError
    naming the file. Optional files (CoNLL-U, codes, the length table) are not required."""
    for name in sorted(files_of(meta)):
        path = os.path.join(folder, name)
        if name.startswith("dict.") and name.endswith(".txt"):
            check_dictionary_file(path)
        elif name.endswith(".idx"):
            check_indexed_dataset(path[: -len(".idx")], remedy)


def check_replaceable(destdir: str) -> None:
    """``destdir`` is empty, absent, or a data-bin of ours holding nothing else; else UsageError."""
    if not os.path.isdir(destdir) or not os.listdir(destdir):
        return
    meta = our_metadata(os.path.join(destdir, METADATA_FILE))
    if meta is None:
        raise UsageError(
            f"--overwrite refused: {destdir} is not a data-bin made by {PRODUCER} (no {METADATA_FILE} "
            "of ours); nothing was deleted. Remove it yourself or choose another --destdir"
        )
    ours = files_of(meta)
    foreign = sorted(
        name for name in os.listdir(destdir)
        if name not in ours or not os.path.isfile(os.path.join(destdir, name))
        or os.path.islink(os.path.join(destdir, name))
    )
    if foreign:
        raise UsageError(
            f"--overwrite refused: {destdir} holds files the pipeline did not write ({listed(foreign)}); "
            "nothing was deleted. Move them out, or choose another --destdir"
        )


def listed(names: List[str]) -> str:
    """The first five ``names`` and how many more, for a message."""
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def check_folder_given(path: Optional[str], flag: str = "--destdir", what: str = "data-bin folder") -> None:
    """Refuse an empty folder argument: an unset shell variable, which would mean the current directory."""
    if path is not None and not path.strip():
        raise UsageError(f"{flag} is empty (an unset shell variable?): name the {what}")


def check_folder_creatable(path: str, flag: str = "--destdir") -> None:
    """Refuse a folder argument that names a file, or lies where no folder can be made."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise UsageError(f"{flag} {path} exists and is not a directory")
    existing = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing) or not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"{flag} {path}: cannot create it, {existing} is not a writable directory")


def check_destdir(destdir: str, overwrite: bool, inputs: Iterable[str]) -> None:
    """Refuse, before any work, a ``--destdir`` that this run must not write or replace."""
    check_destdir_path(destdir, inputs)
    if not os.path.isdir(destdir) or not os.listdir(destdir):
        return
    if not overwrite:
        raise not_empty(destdir)
    check_replaceable(destdir)


def not_empty(destdir: str) -> UsageError:
    """The refusal of a ``--destdir`` that holds files, without ``--overwrite``."""
    return UsageError(f"--destdir {destdir} exists and is not empty: pass --overwrite to replace it")


def check_destdir_path(destdir: str, inputs: Iterable[str] = ()) -> None:
    """The checks of :func:`check_destdir` on the path alone, not on what it holds: not empty, not a
    symbolic link or a file, creatable, neither the current directory nor a folder holding an input."""
    check_folder_given(destdir or "")
    if os.path.islink(destdir):
        raise UsageError(f"--destdir {destdir} is a symbolic link: give the directory it points to")
    check_folder_creatable(destdir)
    cwd = os.getcwd()
    if os.path.isdir(destdir) and is_inside(cwd, destdir):
        raise UsageError(f"--destdir {destdir} is the current directory (or holds it): name a data-bin folder")
    for path in inputs:
        if path and is_inside(path, destdir):
            raise UsageError(f"--destdir {destdir} holds the input {path}: write the data-bin elsewhere")


def make_temp_dir(destdir: str) -> str:
    """A fresh temporary folder beside ``destdir``; stale ones of killed runs are removed first.

    A folder that cannot be made there is a UsageError naming ``--destdir``, not the temporary folder."""
    parent = os.path.dirname(os.path.abspath(destdir))
    base = os.path.basename(os.path.abspath(destdir))
    try:
        os.makedirs(parent, exist_ok=True)
        remove_stale(parent, [f".{base}{TMP_MARK}", f".{base}{OLD_MARK}"])
        return tempfile.mkdtemp(prefix=f".{base}{TMP_MARK}{temp_tag()}-", dir=parent)
    except OSError as error:
        raise UsageError(f"--destdir {destdir}: cannot create a folder there ({error.strerror or error})") from None


@contextlib.contextmanager
def filling(destdir: str) -> Iterator[str]:
    """A fresh temporary folder beside ``destdir`` (:func:`make_temp_dir`) for the block to fill and move into
    place; it is removed if the block fails or the process is interrupted.

    A file-system error about a file in it (disk full, file too large) names the file's place in ``destdir``
    (``pt/train.en-de.de.bin``), not the temporary folder the user never asked for.
    """
    out = make_temp_dir(destdir)
    with removed_on_failure(out):
        try:
            yield out
        except OSError as error:
            named = _in_destdir(error, out, destdir)
            if named is None:
                raise
            raise named from error


def _in_destdir(error: OSError, out: str, destdir: str) -> Optional[OSError]:
    """``error`` with the files it names inside ``out`` named inside ``destdir`` instead; None if it names none."""
    if not error.strerror:
        return None
    root = os.path.abspath(out)
    names: List[object] = []
    for name in (error.filename, error.filename2):
        path = os.path.abspath(os.fsdecode(name)) if isinstance(name, (str, bytes)) else None
        if path is not None and (path == root or path.startswith(root + os.sep)):
            name = os.path.normpath(os.path.join(destdir, os.path.relpath(path, root)))
        names.append(name)
    if names == [error.filename, error.filename2]:
        return None
    if names[1] is not None and names[1] == names[0]:  # the rename of the folder into place
        names[1] = None
    return OSError(error.errno, error.strerror, names[0], None, names[1])


def move_into_place(out: str, destdir: str, overwrite: bool) -> None:
    """Rename the finished ``out`` to ``destdir``, replacing a data-bin already there.

    What ``destdir`` holds is checked again here, with the signals held: files added, or a
    data-bin written by another run, since the run started are never replaced.
    """
    os.chmod(out, dir_mode())
    destdir = os.path.abspath(destdir)
    if os.path.isdir(destdir) and os.listdir(destdir):
        if not overwrite:
            raise UsageError(
                f"--destdir {destdir} was filled while this run worked (another run?); nothing was "
                "replaced. Pass --overwrite to replace a data-bin, or choose another --destdir"
            )
        check_replaceable(destdir)
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
