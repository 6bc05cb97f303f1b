"""SHA-256 of each binarized file of a split, recorded in ``syntax.json`` and checked when the task loads the split.

Side-files are checked for their lengths and their ids' ranges, and the dictionaries and BPE codes by their
digests, but a side-file copied in from another data-bin of the same text passes both: a perturbed copy's
``head``/``deplabel``/``phrase`` files (``fairseq-syntax-perturb``) have the clean files' lengths, and a data-bin
holding them decoded as clean parses, recorded as unperturbed. So the pipeline records, per split, the digest of
every ``SPLIT.SRC-TGT.*.bin``/``.idx`` it wrote (text and side-files), under ``splits.SPLIT.files_sha256``, and the
task refuses a split whose files are not those (:func:`split_files_problem`). Hashing reads each file once per
load (about 1 s per GB); data-bins made before this record carry none and are not checked (a warning says so).
"""

import hashlib
import os
import re
from typing import Dict, Optional, Tuple

__all__ = ["FILES_KEY", "check_split_files", "split_file_digests", "split_files_problem"]

#: the key of a split's entry in syntax.json's ``splits`` that holds its files' digests
FILES_KEY = "files_sha256"

_CHUNK = 1 << 20
#: a recorded name is only looked up in the data-bin's folder: a plain file name, never a path
_PLAIN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def split_file_digests(folder: str, split: str, src: str, tgt: str) -> Dict[str, str]:
    """``{file name: SHA-256}`` of the split's binarized files in ``folder``: ``SPLIT.SRC-TGT.LANG[.STREAM].bin``
    and ``.idx`` (the text fairseq reads and every side-file); names come from the folder, never from a file."""
    pattern = re.compile(rf"{re.escape(split)}\.{re.escape(src)}-{re.escape(tgt)}\.[A-Za-z0-9_.]+\.(bin|idx)")
    names = sorted(n for n in os.listdir(folder) if pattern.fullmatch(n) and os.path.isfile(os.path.join(folder, n)))
    return {name: _sha256(os.path.join(folder, name)) for name in names}


def split_files_problem(folder: str, meta: Dict, split: str, src: str, tgt: str) -> Optional[Tuple[str, str]]:
    """The first of the split's files that differs from ``meta``'s record and what is wrong with it, or None (also
    when nothing is recorded: :func:`recorded` tells that case apart)."""
    recorded_files = recorded(meta, split)
    if recorded_files is None:
        return None
    found = {name: _sha256(os.path.join(folder, name)) for name in recorded_files
             if _PLAIN.fullmatch(name) and os.path.isfile(os.path.join(folder, name))}
    for name in sorted(recorded_files):  # files added later are not the pipeline's: no stream of it reads them
        if name not in found:
            return name, f"missing, but syntax.json records it for split {split!r}"
        if found[name] != recorded_files[name]:
            return name, (f"not the file this data-bin was made with (SHA-256 {found[name][:12]}..., syntax.json "
                    f"records {str(recorded_files[name])[:12]}...): copied in from another data-bin (a perturbed "
                    "copy?) or changed since")
    return None


def recorded(meta: Dict, split: str) -> Optional[Dict[str, str]]:
    """The split's recorded digests, or None when the data-bin carries none (made by an earlier release)."""
    entry = (meta.get("splits") or {}).get(split)
    files = entry.get(FILES_KEY) if isinstance(entry, dict) else None
    return files if isinstance(files, dict) else None


def check_split_files(folder: str, meta: Dict, split: str, src: str, tgt: str) -> None:
    """Refuse the split (:class:`~.errors.DataBinError`, naming the file) when its files are not those ``meta``
    records; a data-bin that records none is loaded with a warning that the check is impossible."""
    import logging

    from .errors import DataBinError

    if recorded(meta, split) is None:
        logging.getLogger("fairseq_syntax").warning(
            f"{os.path.join(folder, 'syntax.json')} records no digests of the {split} split's files (a data-bin made "
            "by an earlier release): a side-file copied in from another data-bin cannot be detected; remake it with "
            "fairseq-syntax-preprocess to have its files checked")
        return
    problem = split_files_problem(folder, meta, split, src, tgt)
    if problem is not None:
        raise DataBinError(os.path.join(folder, problem[0]), None, f"{problem[1]}; take the data-bin's own file, or "
                           "remake the data-bin with fairseq-syntax-preprocess")
