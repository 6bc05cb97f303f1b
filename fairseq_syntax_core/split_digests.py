"""SHA-256 of each binarized file of a split, recorded in ``syntax.json`` and checked when the task loads the split.

Side-files are checked for their lengths and their ids' ranges, and the dictionaries and BPE codes by their
digests, but a side-file copied in from another data-bin of the same text passes both: a perturbed copy's
``head``/``deplabel``/``phrase`` files (``fairseq-syntax-perturb``) have the clean files' lengths, and a data-bin
holding them decoded as clean parses, recorded as unperturbed. So the pipeline records, per split, the digest of
every ``SPLIT.SRC-TGT.*.bin``/``.idx`` it wrote (text and side-files), under ``splits.SPLIT.files_sha256``, and the
task refuses a split whose files are not those (:func:`split_files_problem`). Hashing reads each file once per
process while it is unchanged (about 1 s per GB); data-bins made before this record carry none and are not checked
(a warning says so).
"""

import hashlib
import itertools
import logging
import os
import re
import time
from typing import Dict, List, Optional, Tuple

from .errors import DataBinError

__all__ = ["FILES_KEY", "check_split_files", "combined_splits", "records_digests", "split_file_digests",
           "split_files_problem"]

#: the key of a split's entry in syntax.json's ``splits`` that holds its files' digests
FILES_KEY = "files_sha256"

logger = logging.getLogger("fairseq_syntax")
_CHUNK = 1 << 20
_warned: set = set()  # (folder, split) warned about once per process
#: a recorded name is only looked up in the data-bin's folder: a plain file name, never a path
_PLAIN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


#: digests already taken in this process, by the file's identity and state: a sharded run loads a split every
#: epoch; a file written since (another size, mtime or ctime, or another inode) is hashed again, and so is one
#: changed in the last seconds (file times are coarser than a write: two writes may share them)
_taken: Dict[Tuple, str] = {}


def _sha256(path: str) -> str:
    with open(path, "rb") as handle:
        state = os.fstat(handle.fileno())
        key = (state.st_dev, state.st_ino, state.st_size, state.st_mtime_ns, state.st_ctime_ns)
        if key in _taken:
            return _taken[key]
        digest = hashlib.sha256()
        for chunk in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(chunk)
    if len(_taken) > 4096:
        _taken.clear()
    if time.time_ns() - state.st_ctime_ns > 2_000_000_000:
        _taken[key] = digest.hexdigest()
    return digest.hexdigest()


def split_file_digests(folder: str, split: str, src: str, tgt: str) -> Dict[str, str]:
    """``{file name: SHA-256}`` of the split's binarized files in ``folder``: ``SPLIT.SRC-TGT.LANG[.STREAM].bin``
    and ``.idx`` (the text fairseq reads and every side-file); names come from the folder, never from a file."""
    pattern = re.compile(rf"{re.escape(split)}\.{re.escape(src)}-{re.escape(tgt)}\.[A-Za-z0-9_.]+\.(bin|idx)")
    names = sorted(n for n in os.listdir(folder) if pattern.fullmatch(n) and os.path.isfile(os.path.join(folder, n)))
    return {name: _sha256(os.path.join(folder, name)) for name in names}


def _read_files(meta: Dict, split: str, src: str, tgt: str) -> List[str]:
    """The files the task reads for the split: the two texts and every stream ``parsed_langs`` lists, .bin and .idx."""
    langs = meta.get("parsed_langs") if isinstance(meta.get("parsed_langs"), dict) else {}
    prefixes = []
    for lang in (src, tgt):
        prefixes.append(f"{split}.{src}-{tgt}.{lang}")
        streams = langs.get(lang)
        prefixes += [f"{split}.{src}-{tgt}.{lang}.{s}" for s in streams if isinstance(s, str)] \
            if isinstance(streams, list) else []
    return [prefix + ext for prefix in prefixes for ext in (".bin", ".idx")]


def split_files_problem(folder: str, meta: Dict, split: str, src: str, tgt: str) -> Optional[Tuple[str, str]]:
    """The first of the split's files that differs from ``meta``'s record and what is wrong with it, or None (also
    when nothing is recorded: :func:`recorded` tells that case apart). A file the task reads that the record does
    not list (an emptied or cut record, a stream added by hand) is a problem too."""
    recorded_files = recorded(meta, split)
    if recorded_files is None:
        return None
    for name in _read_files(meta, split, src, tgt):
        if name not in recorded_files and os.path.lexists(os.path.join(folder, name)):
            return name, (f"read for split {split!r}, but syntax.json records no digest of it (its record of the "
                          "split was edited, or the file added by hand)")
    found = {name: _sha256(os.path.join(folder, name)) for name in recorded_files
             if _PLAIN.fullmatch(name) and os.path.isfile(os.path.join(folder, name))}
    for name in sorted(recorded_files):
        if name not in found:
            what = ("not a plain file name" if not _PLAIN.fullmatch(name) else "not a regular file (a folder?)"
                    if os.path.lexists(os.path.join(folder, name)) else "missing")
            return name, f"{what}, but syntax.json records it for split {split!r}"
        if found[name] != recorded_files[name]:
            return name, (f"not the file this data-bin was made with (SHA-256 {found[name][:12]}..., syntax.json "
                          f"records {str(recorded_files[name])[:12]}...): copied in from another data-bin (a "
                          "perturbed copy?) or changed since")
    return None


def recorded(meta: Dict, split: str) -> Optional[Dict[str, str]]:
    """The split's recorded digests, or None when it has none (a data-bin of an earlier release, or a split that
    ``perturb`` copied from one unchecked). In a data-bin that records them, a split it does not list at all is
    ``{}`` (every file it has is then unrecorded): a split added by hand is not taken for one of an earlier release."""
    splits = meta.get("splits") if isinstance(meta.get("splits"), dict) else {}
    entry = splits.get(split)
    if isinstance(entry, dict):
        files = entry.get(FILES_KEY)
        return files if isinstance(files, dict) else None
    return {} if records_digests(meta) else None


def records_digests(meta: Dict) -> bool:
    """Whether the data-bin records its splits' digests (made by this release or later)."""
    splits = meta.get("splits") if isinstance(meta.get("splits"), dict) else {}
    return any(isinstance(entry, dict) and FILES_KEY in entry for entry in splits.values())


def check_split_files(folder: str, meta: Dict, split: str, src: str, tgt: str) -> None:
    """Refuse the split (:class:`~.errors.DataBinError`, naming the file) when its files are not those ``meta``
    records; a data-bin that records none is loaded with a warning that the check is impossible."""
    if recorded(meta, split) is None:
        if (os.path.realpath(folder), split) not in _warned:
            _warned.add((os.path.realpath(folder), split))
            logger.warning(
                f"{os.path.join(folder, 'syntax.json')} records no digests of the {split} split's files (a data-bin "
                "of an earlier release, a copy of one, or a record removed): a side-file copied in from another "
                "data-bin cannot be detected; remake it with fairseq-syntax-preprocess to have its files checked")
        return
    if split not in (meta.get("splits") or {}):
        listed = sorted(n for n, e in (meta.get("splits") or {}).items() if isinstance(e, dict) and FILES_KEY in e)
        raise DataBinError(os.path.join(folder, "syntax.json"), None, f"records no files of a split {split!r} (it "
                           f"records {', '.join(listed)}): that split's files were added by hand; make it with "
                           "fairseq-syntax-preprocess")
    problem = split_files_problem(folder, meta, split, src, tgt)
    if problem is not None:
        raise DataBinError(os.path.join(folder, problem[0]), None, f"{problem[1]}; take the data-bin's own file, or "
                           "remake the data-bin with fairseq-syntax-preprocess")


def combined_splits(folder: str, split: str, src: str, tgt: str) -> List[str]:
    """``split`` and the ``split1``, ``split2``... fairseq's combine reads after it (while either direction's source
    text is there, as fairseq looks for them), whether or not syntax.json lists them."""
    names = [split]
    for k in itertools.count(1):
        name = f"{split}{k}"
        if not any(os.path.lexists(os.path.join(folder, f"{name}.{a}-{b}.{src}.{ext}"))
                   for a, b in ((src, tgt), (tgt, src)) for ext in ("bin", "idx")):
            return names
        names.append(name)
    return names
