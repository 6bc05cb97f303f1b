"""Sharded data-bins: which train lines a shard holds, and whether shards belong together.

``fairseq-syntax-preprocess --num-shards N --shard-id I`` writes train lines
:func:`shard_range` ``(lines, N, I)`` of the train files into a complete data-bin (valid and
test go with shard 0), with dictionaries and BPE codes given, never learned, so that every
shard shares them. ``syntax.json`` records the shard under :data:`SHARD_KEY`::

    "shard": {"id": I, "num_shards": N, "train_lines": [start, end],    0-based, end excluded
              "train_total_lines": n, "train_files": ["train.en", "train.de"],
              "train_sha256": "..."}                                    both train files' bytes

fairseq reads ``data-bin/shard0:data-bin/shard1:...`` one shard per epoch with the
dictionaries of the first (``paths[(epoch - 1) % len(paths)]``); a shard made with another
dictionary or other BPE codes would train on wrong ids without any error. :func:`check_same_run`
compares every file the ids depend on, by content, and the settings the task relies on;
:func:`check_shard_set` checks that ``N`` data-bins are the shards ``0..N-1`` of one train set.
Both are shared by the pipeline (``fairseq-syntax-preprocess-cluster``) and the task, and take
metadata their callers have read.
"""

import hashlib
import itertools
import os
import re
from typing import Dict, List, Optional, Sequence, Tuple

from .databin import (
    CODES_FILE, METADATA_FILE, PARSED_LANGS_KEY, PHRASE_STRUCTURE_KEY, STREAMS, TARGET_PARSE_KEY,
    dictionary_path,
)
from .errors import DataBinError
from .oneline import quoted

SHARD_KEY = "shard"
#: ``syntax.json`` entries every shard of a run must share (the ids' meaning, the trees' construction)
SHARED_SETTINGS = ("source_lang", "target_lang", PARSED_LANGS_KEY, "tokenizer", "pos_column", "projection",
                   TARGET_PARSE_KEY)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _record_problem(info: Dict) -> Optional[str]:
    """What is wrong with a shard record's fields (see the module docstring), or None."""
    for key in ("id", "num_shards", "train_total_lines"):
        if not _is_int(info.get(key)) or info[key] < 0:
            return f"{key} {quoted(info.get(key))}: expected a non-negative integer"
    if not info["id"] < info["num_shards"]:
        return f"id {info['id']} is not a shard of {info['num_shards']}"
    lines = info.get("train_lines")
    if not (isinstance(lines, list) and len(lines) == 2 and all(_is_int(v) for v in lines)):
        return f"train_lines {quoted(lines)}: expected [start, end]"
    files = info.get("train_files")
    if not (isinstance(files, list) and len(files) <= 2 and all(isinstance(f, str) and 0 < len(f) <= 4096 for f in files)):
        return f"train_files {quoted(files)}: expected the names of the source and target train files"
    digest = info.get("train_sha256")  # shards made before it was recorded have none
    if digest is not None and not (isinstance(digest, str) and re.fullmatch(r"[0-9a-f]{64}", digest)):
        return f"train_sha256 {quoted(digest)}: expected 64 hexadecimal digits"
    return None


def check_shard_record(info: object, path: str) -> None:
    """The :data:`SHARD_KEY` record of the ``syntax.json`` at ``path`` has the fields the pipeline writes,
    of their types (None: not a shard); else a one-line DataBinError naming ``path`` and the key."""
    if info is None:
        return
    problem = _record_problem(info) if isinstance(info, dict) else f"{type(info).__name__}: expected an object"
    if problem is not None:
        raise DataBinError(path, None, f"key {SHARD_KEY}: {problem}; not a shard record fairseq-syntax-preprocess "
                                       "wrote (edited?): remake the shard")


def shard_range(lines: int, num_shards: int, shard_id: int) -> Tuple[int, int]:
    """The 0-based line range ``[start, end)`` of shard ``shard_id``: contiguous, sizes differing by at most one."""
    if not 0 <= shard_id < num_shards:
        raise ValueError(f"shard id {shard_id} outside 0..{num_shards - 1}")
    return lines * shard_id // num_shards, lines * (shard_id + 1) // num_shards


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def id_files(meta: Dict) -> List[str]:
    """The files of a data-bin that give ids their meaning: text and stream dictionaries, BPE codes."""
    src, tgt = meta.get("source_lang"), meta.get("target_lang")
    names = [f"dict.{src}.txt", f"dict.{tgt}.txt"]
    for lang, streams in sorted(meta.get(PARSED_LANGS_KEY, {}).items()):
        for name in streams:
            stream = STREAMS.get(name)
            if stream is not None and stream.dictionary is not None:
                names.append(os.path.basename(dictionary_path("", lang, stream)))
    if meta.get("bpe", {}).get("name", "none") != "none":
        names.append(CODES_FILE)
    return names


def _settings(meta: Dict) -> Dict:
    settings = {key: meta.get(key) for key in SHARED_SETTINGS}
    settings["parser"] = {k: v for k, v in (meta.get("parser") or {}).items() if k != "components"}
    settings[PHRASE_STRUCTURE_KEY] = (meta.get(PHRASE_STRUCTURE_KEY) or {}).get("source")
    return settings


def check_same_run(first: str, first_meta: Dict, other: str, other_meta: Dict) -> None:
    """``other`` shares ``first``'s dictionaries, BPE codes and parse settings; else DataBinError naming ``other``."""
    mine, theirs = _settings(first_meta), _settings(other_meta)
    for key in mine:
        if mine[key] != theirs[key]:
            raise DataBinError(
                os.path.join(other, METADATA_FILE), None,
                f"{key} {quoted(theirs[key])} differs from {first}'s {quoted(mine[key])}: the shards of one training must "
                "come from one preprocessing setup (the same --dictdir and flags)",
            )
    for name in id_files(first_meta):
        path, reference = os.path.join(other, name), os.path.join(first, name)
        if not os.path.isfile(path):
            raise DataBinError(path, None, f"not found: every shard holds the {name} of {first}")
        if os.path.isfile(reference) and _sha256(path) != _sha256(reference):
            what = "BPE codes" if name == CODES_FILE else "dictionary"
            raise DataBinError(
                path, None,
                f"this {what} differs from {first}'s: a shard made with another run's {what} "
                "(fairseq would read its ids with the first shard's); remake it with the same --dictdir",
            )


#: how many missing shards a warning names
MAX_NAMED = 20


def missing_shards(listed: Sequence[Tuple[str, Dict]]) -> Optional[str]:
    """A warning naming the shards of a run that the data paths ``listed`` (path, metadata) leave out, or None.

    They are named after the listed paths when these end in their shard ids with one prefix
    (``data-bin/shard0`` lacks ``data-bin/shard1``, ...: the cluster command's layout), else by id.
    """
    records = [(path.rstrip("/\\") or path, meta[SHARD_KEY]) for path, meta in listed
               if isinstance(meta.get(SHARD_KEY), dict)]
    if not records or not _is_int(records[0][1].get("num_shards")):
        return None
    total = records[0][1]["num_shards"]
    seen = {info.get("id") for _, info in records}
    # the count comes from a file: name the first missing ones, never list a huge range
    missing_count = total - len({k for k in seen if _is_int(k) and 0 <= k < total})
    if missing_count <= 0:
        return None
    missing = list(itertools.islice((k for k in range(total) if k not in seen), MAX_NAMED))
    named = [re.fullmatch(r"(.*?)(\d+)", path) for path, _ in records]
    prefixes = {m.group(1) for m in named if m is not None}
    if len(prefixes) == 1 and all(m is not None and int(m.group(2)) == info.get("id")
                                  for m, (_, info) in zip(named, records)):
        prefix = next(iter(prefixes))
        names = [f"{prefix}{k}" for k in missing]
    else:
        names = [f"shard {k}" for k in missing]
    if missing_count > len(names):
        names.append(f"and {missing_count - len(names)} more")
    return (f"the data paths hold {len(seen)} of the {total} shards of their run; missing: {', '.join(names)}, "
            "whose train lines are never trained on: list every shard (DATA/shard0:DATA/shard1:...) to train "
            "on the whole train set")


def check_same_ids(first: str, first_meta: Dict, other: str) -> None:
    """``other`` holds ``first``'s dictionaries (text, labels, POS: same content). BPE codes may differ:
    ids are read with the dictionaries, and corpora segmented by other codes still share them."""
    for name in id_files(first_meta):
        if name == CODES_FILE:
            continue
        path, reference = os.path.join(other, name), os.path.join(first, name)
        if not os.path.isfile(path):
            raise DataBinError(path, None, f"not found: every data path holds the {name} of {first}")
        if os.path.isfile(reference) and _sha256(path) != _sha256(reference):
            raise DataBinError(
                path, None,
                f"differs from {first}'s: fairseq reads every data path with the first one's dictionaries, so "
                "this data-bin's ids would mean other words; make it with --dictdir " + first,
            )


#: what every data path of one training must share even when not shards of one run: what its features mean
FEATURE_SETTINGS = ("source_lang", "target_lang", PARSED_LANGS_KEY, "pos_column", "projection")


def check_same_features(first: str, first_meta: Dict, other: str, other_meta: Dict) -> None:
    """``other``'s parse features are derived as ``first``'s (languages, streams, POS column, projection rule onto
    subwords); parsers may differ. Else DataBinError naming ``other``'s syntax.json."""
    for key in FEATURE_SETTINGS + (PHRASE_STRUCTURE_KEY,):
        mine, theirs = first_meta.get(key), other_meta.get(key)
        if key == PHRASE_STRUCTURE_KEY:  # where the trees come from: imported brackets, or the dependency parse
            mine, theirs = ((m or {}).get("source") if isinstance(m, dict) else m for m in (mine, theirs))
        if mine != theirs:
            raise DataBinError(
                os.path.join(other, METADATA_FILE), None,
                f"{key} {quoted(theirs)} differs from {first}'s {quoted(mine)}: fairseq-train reads one data path per "
                "epoch, so the model would see features that mean other things from epoch to epoch; make every "
                "data-bin with the same --projection, --pos-column, --constituency-parse and languages",
            )


def check_same_train_content(where: str, info: Dict, first: Dict) -> None:
    """Shard ``info`` was cut from the same train bytes as ``first`` (their ``train_sha256``); else
    DataBinError naming ``where``. Shards made before the hash was recorded have none and pass, but only
    together: one shard with it and one without is refused."""
    mine, theirs = info.get("train_sha256"), first.get("train_sha256")
    if bool(mine) != bool(theirs):  # shards of one run record it in all of them, or (older runs) in none
        raise DataBinError(where, None, f"is shard {info.get('id')}, which {'records' if mine else 'lacks'} the "
                           f"SHA-256 of the train files that the first shard {'lacks' if mine else 'records'}: "
                           "shards of one fairseq-syntax-preprocess --num-shards run record it alike (edited, or "
                           "shards of two runs?)")
    if mine and theirs and mine != theirs:
        raise DataBinError(where, None, f"is shard {info.get('id')}, cut from train files {quoted(info.get('train_files'))} "
                           f"whose content differs from the first shard's (SHA-256 {mine[:12]}... against "
                           f"{theirs[:12]}...): another corpus with the same file names and line count; use "
                           "the shards of one fairseq-syntax-preprocess --num-shards run")


def check_shard_set(shards: Sequence[Tuple[str, Dict]]) -> None:
    """``shards`` (folder, metadata), in order, are shards ``0..N-1`` of one train set; else DataBinError.

    Each must record :data:`SHARD_KEY` with ``id`` its position and ``num_shards`` ``N``; their line
    ranges must tile the same train files; and all must share the first's files and settings.
    """
    count = len(shards)
    if count == 0:
        raise ValueError("no shard to check")
    first, first_meta = shards[0]
    total = None
    for position, (folder, meta) in enumerate(shards):
        info = meta.get(SHARD_KEY)
        where = os.path.join(folder, METADATA_FILE)
        if not isinstance(info, dict):
            raise DataBinError(where, None, "is not a shard (made without --num-shards/--shard-id)")
        if info.get("num_shards") != count or info.get("id") != position:
            raise DataBinError(where, None, f"is shard {info.get('id')} of {info.get('num_shards')}, "
                                            f"expected shard {position} of {count}")
        if total is None:
            total, files = info.get("train_total_lines"), info.get("train_files")
        elif (info.get("train_total_lines"), info.get("train_files")) != (total, files):
            raise DataBinError(where, None, f"was cut from train files {quoted(info.get('train_files'))} of "
                                            f"{info.get('train_total_lines')} lines, shard 0 from {quoted(files)} of {total}")
        check_same_train_content(where, info, shards[0][1].get(SHARD_KEY))
        expected = list(shard_range(total, count, position))
        if info.get("train_lines") != expected:
            raise DataBinError(where, None, f"holds train lines {info.get('train_lines')}, expected {expected}")
        if position:
            check_same_run(first, first_meta, folder, meta)
