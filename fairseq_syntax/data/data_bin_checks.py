"""Load-time checks of a data-bin's files, so that damage is an error naming the file.

fairseq reads a truncated ``.idx`` with ``ValueError: buffer is smaller than requested size``
and a truncated ``.bin`` only when a batch reaches the missing bytes (or never, for a
``.bin`` from another run of the same length); a junk dictionary gives ``Incorrect
dictionary format`` and an unreadable ``syntax.json`` a bare ``JSONDecodeError``. These
checks run before fairseq opens the files, cost a header read and a ``stat`` per file, and
raise :class:`~fairseq_syntax_preprocess.errors.DataBinError` naming the file, what is wrong
and what to do.
"""

import glob
import os
import re
from typing import Dict, List, Optional

from fairseq_syntax_core import indexed_files
from fairseq_syntax_core.databin import FORMAT_VERSION, PARSED_LANGS_KEY, check_metadata
from fairseq_syntax_core.errors import DataBinError, InputError, UsageError
from fairseq_syntax_core.names import SPLIT, name_problem
from fairseq_syntax_core.jsonfile import read_json_file
from fairseq_syntax_core.oneline import quoted
from fairseq_syntax_core.fileio import check_dictionary_file

REMAKE = indexed_files.REBUILD


def read_metadata(path: str) -> Dict:
    """The data-bin's ``syntax.json``."""
    if os.path.exists(path) and not os.path.isfile(path):
        raise DataBinError(path, None, f"is not a regular file (a folder, a pipe or a device); {REMAKE}")
    if not os.path.isfile(path):
        raise DataBinError(path, None, "not found: this is not a data-bin made by fairseq-syntax-preprocess")
    metadata = read_json_file(path, DataBinError, REMAKE)
    if not isinstance(metadata, dict) or PARSED_LANGS_KEY not in metadata:
        raise DataBinError(path, None, f"is not the metadata that fairseq-syntax-preprocess writes; {REMAKE}")
    version = metadata.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise DataBinError(path, None, f"format_version {quoted(version, 40)}: not a version of the format "
                                       f"(a positive integer): damaged or edited; {REMAKE}")
    if version > FORMAT_VERSION:
        raise DataBinError(
            path, None,
            f"format_version {quoted(version, 40)}: this fairseq-syntax reads data-bins up to version {FORMAT_VERSION} "
            "(made by a newer release, or edited); upgrade fairseq-syntax or re-run its preprocessing",
        )
    return check_metadata(metadata, path)  # every name that makes a path: splits, languages, streams


def check_dictionary(path: str, what: str) -> None:
    """A fairseq dictionary file that ``Dictionary.load`` will read."""
    try:
        check_dictionary_file(path, what)
    except InputError as error:
        raise DataBinError(error.path, error.line, f"{error.message}; {REMAKE}") from None


def check_indexed_dataset(prefix: str) -> None:
    """``PREFIX.idx`` is a readable fairseq mmap index and ``PREFIX.bin`` holds exactly its items."""
    indexed_files.check_indexed_dataset(prefix, REMAKE)


def split_prefixes(data_path: str, split: str, src: str, tgt: str) -> List[str]:
    """Every indexed dataset of ``split`` (and its shards ``split1``, ...) for the pair, both orders."""
    found = []
    pattern = re.compile(rf"^{re.escape(split)}\d*\.({re.escape(src)}-{re.escape(tgt)}|{re.escape(tgt)}-{re.escape(src)})\.")
    for path in sorted(glob.glob(os.path.join(glob.escape(data_path), f"{glob.escape(split)}*"))):
        name = os.path.basename(path)
        if pattern.match(name) and (name.endswith(".idx") or name.endswith(".bin")):
            prefix = path[: -len(".idx")]
            if prefix not in found:
                found.append(prefix)
    return found


def check_split(data_path: str, split: str, src: str, tgt: str) -> None:
    """The split's name (a part of file names, never a path: ``../other/data-bin/test``), then its files."""
    problem = name_problem(SPLIT, split)
    if problem is not None:
        raise UsageError(f"the split to load (--train-subset, --valid-subset, --gen-subset, --split): {problem}")
    for prefix in split_prefixes(data_path, split, src, tgt):
        check_indexed_dataset(prefix)


def check_token_ids(data_path: str, split: str, src: str, tgt: str, sizes: Dict[str, int]) -> None:
    """Every token id of the split's text files is below its language's dictionary size ``sizes[lang]``:
    else a DataBinError naming the file (an id past the dictionary would index past the embedding,
    ``IndexError`` deep in a forward). One vectorised pass over each memory-mapped ``.bin``."""
    import numpy as np

    for prefix in split_prefixes(data_path, split, src, tgt):
        lang = prefix.rsplit(".", 1)[-1]
        if lang not in sizes:  # a side-file (SPLIT.SRC-TGT.LANG.STREAM): checked with its stream
            continue
        dataset = indexed_files.open_indexed_dataset(prefix)
        try:
            ids = np.frombuffer(dataset._bin_buffer, dtype=dataset._index.dtype)
            largest = int(ids.max()) if ids.size else -1
            smallest = int(ids.min()) if ids.size else 0
            del ids  # a view of the mapping: gone before it is unmapped
        finally:
            indexed_files.close_indexed_dataset(dataset)
        if largest >= sizes[lang] or smallest < 0:
            bad = largest if largest >= sizes[lang] else smallest
            raise DataBinError(prefix + ".bin", None, f"holds token id {bad}, outside its dictionary of {sizes[lang]} "
                                                      f"symbols (dict.{lang}.txt): damaged, or from another data-bin; "
                                                      f"{REMAKE}")



def check_epoch_paths(paths: List[str], first_meta: Dict) -> List[str]:
    """``DATA1:DATA2:...`` (fairseq reads one per epoch, with the first's dictionaries) belong together.

    Every path must be a data-bin of ours sharing the first's dictionaries, BPE codes and parse
    settings (:func:`fairseq_syntax_core.shards.check_same_run`), else a DataBinError naming it.
    A shard listed twice is refused. Returns warnings: a data-bin that is not a shard listed twice (an upsampling,
    or a slip). The shards missing from the list are named when the train split is loaded
    (:func:`fairseq_syntax_core.shards.missing_shards`).
    """
    from fairseq_syntax_core.databin import METADATA_FILE
    from fairseq_syntax_core.shards import (
        SHARD_KEY, check_same_features, check_same_ids, check_same_run, check_same_train_content,
    )

    if len(paths) < 2:  # one data-bin (fairseq-generate on data-bin/shard0 is the usual case)
        return []
    seen: Dict[int, str] = {}
    listed: Dict[str, int] = {}  # a data-bin's real path -> its first position in the list
    warnings = []
    cut = None  # (num_shards, train_total_lines, train_files) of the first shard: every shard must share it
    first_shard = None  # the first shard's record: every shard must be cut from its train bytes
    for position, path in enumerate(paths):
        if position:
            if not os.path.isdir(path):
                raise DataBinError(path, None, f"is not a directory: data path {position + 1} of {len(paths)} "
                                               "(fairseq-train reads one per epoch)")
            meta = read_metadata(os.path.join(path, METADATA_FILE))
            if isinstance(meta.get(SHARD_KEY), dict) or isinstance(first_meta.get(SHARD_KEY), dict):
                check_same_run(paths[0], first_meta, path, meta)
            else:  # data-bins that are not shards (several corpora): the same ids, features derived alike
                check_same_ids(paths[0], first_meta, path)
                check_same_features(paths[0], first_meta, path, meta)
            if meta.get("perturbation") != first_meta.get("perturbation"):  # epochs would alternate noisy and clean
                raise DataBinError(os.path.join(path, METADATA_FILE), None,
                                   f"records the parse perturbation {quoted(meta.get('perturbation'), 80)}, the first "
                                   f"data path {quoted(first_meta.get('perturbation'), 80)}: fairseq-train reads one "
                                   "path per epoch, so epochs would alternate parses; list paths perturbed alike")
        else:
            meta = first_meta
        shard = meta.get(SHARD_KEY)
        if isinstance(shard, dict):
            this_cut = (shard.get("num_shards"), shard.get("train_total_lines"), shard.get("train_files"))
            if cut is None:
                cut = this_cut
            elif this_cut != cut:
                raise DataBinError(
                    os.path.join(path, METADATA_FILE), None,
                    f"is shard {shard.get('id')} of {this_cut[0]} cut from train files {quoted(this_cut[2])} "
                    f"({this_cut[1]} lines), but the first shard of this list is one of {cut[0]} cut from "
                    f"{quoted(cut[2])} ({cut[1]} lines): shards of different cuts overlap or leave lines out; list "
                    "the shards of one fairseq-syntax-preprocess --num-shards run",
                )
            check_same_train_content(os.path.join(path, METADATA_FILE), shard, first_shard or shard)
            first_shard = first_shard or shard
            if shard.get("id") in seen:
                raise DataBinError(path, None, f"is shard {quoted(shard.get('id'))} again (also "
                                   f"{seen[shard.get('id')]}, data path {paths.index(seen[shard.get('id')]) + 1}): "
                                   "its lines would be trained on twice as often as the others; list each shard once")
            seen[shard.get("id")] = path
        elif os.path.realpath(path) in listed:
            warnings.append(f"{path} is listed twice in the data paths (also as path {listed[os.path.realpath(path)]}):"
                            " fairseq-train reads one per epoch, so its sentences are trained on twice as often")
        listed.setdefault(os.path.realpath(path), position + 1)
    return warnings


def oversized_message(datasets: Dict, dataset, indices, max_positions, lines_before: Optional[int] = None) -> str:
    """fairseq's "Size of sample #N is invalid" as one line: which split (or input line: ``lines_before``, the
    lines of fairseq-interactive's earlier buffers), how many sentences, the first one's lengths, the limits."""
    split = next((name for name, loaded in datasets.items() if loaded is dataset), None)
    _, ignored = dataset.filter_indices_by_size(indices, max_positions)
    first = int(ignored[0])
    if split is not None:
        where, which = f"the {split} split", f"the first sentence id {first}"
    elif lines_before is not None:
        where, which = "the input", f"the first input line {lines_before + first + 1}"
    else:
        where, which = "the input", f"the first sentence {first} of those given"
    size = dataset.size(first)
    pair = isinstance(size, (tuple, list)) and len(size) == 2
    lengths = (f"{int(size[0])} source and {int(size[1])} target tokens" if pair and int(size[1]) > 0
               else f"{int(size[0]) if pair else size} source tokens")
    return (f"{len(ignored)} sentence(s) of {where} are longer than the limits ({limits_text(max_positions)}: the "
            f"least of --max-source-positions/--max-target-positions and the model's), {which} with {lengths}: "
            "raise the limits, shorten the input, or skip such sentences with --skip-invalid-size-inputs-valid-test")


def limits_text(max_positions) -> str:
    return (f"source {max_positions[0]}, target {max_positions[1]} tokens" if isinstance(max_positions, (tuple, list))
            and len(max_positions) == 2 else f"{max_positions} tokens")


def nothing_left_message(datasets: Dict, dataset, count: int, max_positions, train_split: str) -> Optional[str]:
    """A split of the data-bin that the limits leave without a sentence (fairseq went on to an ``IndexError``
    in training, a division by zero in generation), or None for another dataset."""
    split = next((name for name, loaded in datasets.items() if loaded is dataset), None)
    if split is None:
        return None
    then = "nothing is left to train on" if split == train_split else "nothing is left to decode or validate"
    return (f"every one of the {count} sentence pairs of the {split} split is longer than the limits "
            f"({limits_text(max_positions)}: the least of --max-source-positions/--max-target-positions, "
            f"--max-tokens and the model's) and would be skipped: {then}; raise the limits")
