"""The one description of a data-bin: file names, ``syntax.json`` keys, and the stream registry.

The pipeline (``fairseq_syntax_preprocess``) writes what this module describes and the task
(``syntax_translation``) reads it; neither spells a file name or a stream of its own. A
data-bin is fairseq's own files plus, for a split ``S`` of the pair ``SRC-TGT`` and a parsed
language ``L``, one fairseq mmap indexed dataset per stream::

    S.SRC-TGT.L.STREAM.{bin,idx}      one item per line, in the line order of S.SRC-TGT.L.bin
    dict.L.DICTIONARY.txt             the symbols of a stream that has a dictionary

Adding a stream is one :class:`Stream` entry in :data:`STREAMS`: the pipeline writes every
registered stream of a parsed language, the task loads and checks every one the data-bin
lists in ``syntax.json`` (``parsed_langs``).

The target language may be parsed too (``fairseq-syntax-preprocess --target-parser``): its
streams are the same kinds under the target's language code (``S.SRC-TGT.TGT.head``,
``dict.TGT.deplabel.txt``), registered in :data:`TARGET_STREAM_REGISTRY` with ``side``
:data:`TARGET`; ``parsed_langs`` then lists the target language beside the source.
"""

import os
import re
from dataclasses import dataclass, replace
from typing import Callable, Dict, List, Optional, Tuple, Union

import numpy as np

from .errors import DataBinError
from .names import FILE_NAME, LANGUAGE, PIPELINE, SPLIT, STREAM, check_name
from .oneline import quoted
from .split_digests import FILES_KEY
from .stream_checks import Problem, check_heads, check_merges

METADATA_FILE = "syntax.json"
_SHA256 = re.compile(r"[0-9a-f]{64}")
CODES_FILE = "bpe.codes"
#: Eriguchi et al. (2016)'s length prior p(len(y) | len(x)) of the pair SRC-TGT, counted on the train split
#: (``fairseq_syntax/data/length_prior.py``); ``.format(src=..., tgt=...)`` gives the file name
LENGTH_PRIOR_FILE = "length_prior.{src}-{tgt}.json"
#: ``syntax.json`` key naming the program that wrote the data-bin, and its value
PRODUCER_KEY = "producer"
PRODUCER = "fairseq-syntax-preprocess"
FORMAT_VERSION = 1
#: ``syntax.json``: parsed language -> the names of its streams
PARSED_LANGS_KEY = "parsed_langs"
#: ``syntax.json``: how the target language was parsed (only when it was: ``--target-parser``)
TARGET_PARSE_KEY = "target_parse"

SOURCE, TARGET = "source", "target"
TOKEN, NODE = "token", "node"


@dataclass(frozen=True)
class Stream:
    """One side-file stream.

    ``granularity`` ``token``: one value per piece of the line (``</s>`` excluded: the dataset
    adds its entry), so its sizes must equal the source's minus one; ``node``: one value per
    tree node (e.g. the ``n - 1`` internal nodes of a binary constituency tree), with a length
    of its own; batches carry it as its own padded ``(B, N)`` tensor (``(B, N, width)`` when a
    node holds ``width`` values) and a ``NAME_mask`` (``fairseq_syntax/data/syntax_dataset.py``).
    ``binary_tree``: a node stream with one item per internal node of a binary tree over the
    line's ``n`` pieces, so ``n - 1`` items, or none (a line without a tree). ``dictionary``
    names ``dict.L.DICTIONARY.txt`` for symbol streams, stored as ids in the smallest integer
    type that holds the dictionary (``dtype`` None); integer streams have no dictionary and
    store ``dtype`` values. ``field`` is the attribute of the pipeline's piece tree the values
    come from. ``validator`` checks the whole split on load (:mod:`.stream_checks`; symbol
    streams are also checked against their dictionary).
    """

    name: str
    side: str
    dtype: Optional[type]
    dictionary: Optional[str]
    granularity: str
    field: str
    help: str
    validator: Optional[Callable[[np.ndarray, np.ndarray], Problem]] = None
    width: int = 1
    binary_tree: bool = False


HEAD = Stream("head", SOURCE, np.int32, None, TOKEN, "heads",
              "1-based position of the piece's head within the line, 0 for a root", check_heads)
LABEL = Stream("deplabel", SOURCE, None, "deplabel", TOKEN, "labels", "dependency-label id")
POS = Stream("pos", SOURCE, None, "pos", TOKEN, "pos", "POS-tag id")
PHRASE = Stream("phrase", SOURCE, np.int32, None, NODE, "phrase",
                "binary phrase structure: (left, right) child of each merge, bottom-up "
                "(fairseq_syntax_core/phrase.py)", check_merges, width=2, binary_tree=True)

#: every stream a data-bin may hold, by name
STREAMS: Dict[str, Stream] = {s.name: s for s in (HEAD, LABEL, POS, PHRASE)}
#: the streams this version writes for a parsed source language, in order
SOURCE_STREAMS: Tuple[str, ...] = (HEAD.name, LABEL.name, POS.name, PHRASE.name)
#: the streams this version writes for a parsed target language (``--target-parser``), in order:
#: the source's kinds, with the phrase structure always converted from the dependency parse
TARGET_STREAMS: Tuple[str, ...] = SOURCE_STREAMS
#: every stream a parsed target language may hold, by name: the source's entries with ``side`` TARGET
TARGET_STREAM_REGISTRY: Dict[str, Stream] = {name: replace(STREAMS[name], side=TARGET) for name in TARGET_STREAMS}
#: ``syntax.json``: where the phrase structure came from, and the lines without one
PHRASE_STRUCTURE_KEY = "phrase_structure"
PHRASE_FROM_DEPENDENCY, PHRASE_FROM_PTB = "dependency-conversion", "ptb"
#: ``syntax.json`` keys whose value is an object of settings, where present
OBJECT_KEYS = ("tokenizer", "parser", "bpe", "projection", PHRASE_STRUCTURE_KEY, TARGET_PARSE_KEY)


def registry(side: str) -> Dict[str, Stream]:
    """The streams a language on ``side`` (:data:`SOURCE` or :data:`TARGET`) may hold, by name."""
    if side == SOURCE:
        return STREAMS
    if side == TARGET:
        return TARGET_STREAM_REGISTRY
    raise ValueError(f"side {side!r}: expected {SOURCE!r} or {TARGET!r}")


def dictionary_path(destdir: str, lang: str, stream: Stream) -> str:
    """``dict.L.DICTIONARY.txt`` of a symbol stream."""
    if stream.dictionary is None:
        raise ValueError(f"stream {stream.name!r} stores integers and has no dictionary")
    return os.path.join(destdir, f"dict.{lang}.{stream.dictionary}.txt")


def stream_prefix(destdir: str, split: str, src: str, tgt: str, lang: str, stream: str) -> str:
    """``S.SRC-TGT.L.STREAM``, the prefix of a stream's ``.bin``/``.idx`` (or of its ``.conllu``)."""
    return os.path.join(destdir, f"{split}.{src}-{tgt}.{lang}.{stream}")


#: the settings decoding applies to raw text, and the values the pipeline writes for them
#: (``None``: any string). A value of another kind is refused where it is read, not deep in a stage.
SETTING_VALUES = {
    ("bpe", "name"): ("subword_nmt", "none"),
    ("bpe", "separator"): ("@@",),
    ("tokenizer", "name"): ("moses", "none"),
    ("projection", "rule"): ("first", "chain"),
    ("projection", "subword_label"): None,
    (PHRASE_STRUCTURE_KEY, "source"): (PHRASE_FROM_DEPENDENCY, PHRASE_FROM_PTB),
    ("pos_column",): ("upos", "xpos"),
    ("tokenizer", "moses_aggressive_dash_splits"): (True, False),
    ("tokenizer", "moses_escape"): (True, False),
}


def _check_settings(meta: Dict, path: str) -> None:
    for keys, allowed in SETTING_VALUES.items():
        value: object = meta
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        if value is None:
            continue  # absent: the reader's default (older data-bins)
        where = ".".join(keys)
        if allowed == (True, False):  # a JSON true or false, not "false" read as true
            if not isinstance(value, bool):
                raise DataBinError(path, None, f"key {where}: {quoted(value)}, expected true or false (what "
                                               "fairseq-syntax-preprocess writes: damaged, or edited?)")
        elif not isinstance(value, str) or (allowed is not None and value not in allowed):
            expected = f"one of {', '.join(allowed)}" if allowed is not None else "a string"
            raise DataBinError(path, None, f"key {where}: {quoted(value)}, expected {expected} (what "
                                           "fairseq-syntax-preprocess writes: damaged, or edited?)")


def check_metadata(meta: Dict, path: str) -> Dict:
    """``meta``, read from the ``syntax.json`` at ``path``, with every name that makes a path checked.

    Languages, parsed languages and their streams, splits, the BPE codes file, the spaCy
    pipelines that decoding loads (``parser.name``, ``target_parse.parser.name``: package names,
    never folders) and the shard record (:func:`fairseq_syntax_core.shards.check_shard_record`)
    must be what the pipeline writes (:mod:`.names`); the settings (:data:`OBJECT_KEYS`) and each
    split's entry must be objects. Else a DataBinError naming ``path`` and the key. Every reader of
    ``syntax.json`` calls this, so no consumer builds a path from an unchecked name, loads a
    pipeline from a folder the file names, or reads a setting of the wrong type.
    """
    from .shards import SHARD_KEY, check_shard_record

    for key in ("source_lang", "target_lang"):
        if key in meta:
            check_name(LANGUAGE, meta[key], path, key)
    for key in (PARSED_LANGS_KEY, "splits"):
        if key in meta and not isinstance(meta[key], dict):
            raise DataBinError(path, None, f"key {key}: {type(meta[key]).__name__}, expected an object of names")
    for key in OBJECT_KEYS:
        if key in meta and not isinstance(meta[key], dict):
            raise DataBinError(path, None, f"key {key}: {type(meta[key]).__name__}, expected an object of settings")
    target_parser = meta.get(TARGET_PARSE_KEY, {}).get("parser")
    if target_parser is not None and not isinstance(target_parser, dict):
        raise DataBinError(path, None, f"key {TARGET_PARSE_KEY}.parser: {type(target_parser).__name__}, "
                                       "expected an object of settings")
    for key, record in (("parser", meta.get("parser")), (f"{TARGET_PARSE_KEY}.parser", target_parser)):
        if record is not None and record.get("name") is not None:
            check_name(PIPELINE, record["name"], path, f"{key}.name")
    for i, (lang, streams) in enumerate(meta.get(PARSED_LANGS_KEY, {}).items()):
        check_name(LANGUAGE, lang, path, f"{PARSED_LANGS_KEY}[{i}]")
        if not isinstance(streams, list):
            raise DataBinError(path, None, f"key {PARSED_LANGS_KEY}.{lang}: {type(streams).__name__}, "
                                           "expected a list of stream names")
        langs = (meta.get("source_lang"), meta.get("target_lang"))
        if None not in langs and lang not in langs:  # a missing language: the readers name that key
            raise DataBinError(path, None, f"key {PARSED_LANGS_KEY}.{quoted(lang)}: not the source or target language "
                                           f"({quoted(meta.get('source_lang'))}, {quoted(meta.get('target_lang'))})")
        for j, name in enumerate(streams):
            where = f"{PARSED_LANGS_KEY}.{lang}[{j}]"
            check_name(STREAM, name, path, where)
            if name not in STREAMS or name in streams[:j]:
                raise DataBinError(path, None, f"key {where}: {quoted(name)} is "
                                   f"{'listed twice' if name in STREAMS else 'not a stream the pipeline writes'} "
                                   f"(expected some of {', '.join(STREAMS)})")
    for i, (split, entry) in enumerate(meta.get("splits", {}).items()):
        check_name(SPLIT, split, path, f"splits[{i}]")
        if not isinstance(entry, dict):
            raise DataBinError(path, None, f"key splits.{split}: {type(entry).__name__}, expected an object "
                                           "(the split's sentences and skipped lines)")
        files = entry.get(FILES_KEY)
        if files is not None and not (isinstance(files, dict) and all(
                isinstance(k, str) and isinstance(v, str) and _SHA256.fullmatch(v) for k, v in files.items())):
            raise DataBinError(path, None, f"key splits.{split}.{FILES_KEY}: expected an object of the split's "
                                           "file names and their SHA-256 digests (64 hexadecimal digits)")
        for name in files or ():
            check_name(FILE_NAME, name, path, f"splits.{split}.{FILES_KEY}")
    bpe = meta.get("bpe")
    if isinstance(bpe, dict) and "codes" in bpe:
        check_name(FILE_NAME, bpe["codes"], path, "bpe.codes")
    _check_settings(meta, path)
    if SHARD_KEY in meta:
        check_shard_record(meta[SHARD_KEY], path)
    return meta


def codes_file(meta: Dict, path: str) -> str:
    """The name of the data-bin's BPE codes file, as ``syntax.json`` (at ``path``) records it (``bpe.codes``),
    or :data:`CODES_FILE` where it records none; a recorded name that is not one plain file of the folder (a
    path, ``..``) is a DataBinError naming ``path`` and the key."""
    bpe = meta.get("bpe")
    if isinstance(bpe, dict) and bpe.get("codes") is not None:
        name = check_name(FILE_NAME, bpe["codes"], path, "bpe.codes")
        codes = os.path.join(os.path.dirname(path), name)
        if os.path.islink(codes):
            raise DataBinError(path, None, f"bpe.codes names {quoted(name)}, a symbolic link: expected the codes "
                                           "file fairseq-syntax-preprocess wrote into the data-bin")
        if not bpe.get("given_codes") and os.path.isfile(codes):  # codes the pipeline learned start so
            with open(codes, "rb") as handle:
                first = handle.readline(64)
            if not first.startswith(b"#version:"):
                raise DataBinError(path, None, f"bpe.codes names {quoted(name)}, which is not the subword-nmt codes "
                                               "the pipeline learned (no '#version:' line): damaged, or edited")
        return name
    return CODES_FILE


def required(meta: Dict, key: str, path: str) -> object:
    """``meta[key]``, or a DataBinError naming ``path`` and the missing key."""
    if key not in meta:
        raise DataBinError(path, None, f"has no key {key}: not the metadata that fairseq-syntax-preprocess writes "
                                       "(damaged, or edited); re-run fairseq-syntax-preprocess")
    return meta[key]


def split_perturbation(record: object, split: Optional[str]) -> object:
    """The rounds of a ``perturbation`` record (fairseq-syntax-perturb's, ``previous`` chained) that perturbed
    ``split``: a round whose ``splits`` do not name it left that split's parses as they were (None: no round did).
    Records without ``splits`` are kept whole; ``split`` None keeps every round."""
    if split is None:
        return record
    rounds = []
    for _ in range(100):  # recorded_perturbation refuses longer chains
        if not isinstance(record, dict):
            break
        splits = record.get("splits")
        if not isinstance(splits, list) or split in splits:
            rounds.append({k: v for k, v in record.items() if k != "previous"})
        record = record.get("previous")
    kept = None
    for round_ in reversed(rounds):
        kept = dict(round_, previous=kept) if kept is not None else round_
    return kept


def perturbation_rounds(record: object, split: Optional[str] = None) -> List[Tuple[object, object]]:
    """What decides the parses of ``split`` in a ``perturbation`` record: (p, seed) of each round that perturbed it,
    first first, rounds with p = 0 left out (they changed nothing). Empty: the parses as parsed."""
    rounds = []
    record = split_perturbation(record, split)
    for _ in range(100):
        if not isinstance(record, dict):
            break
        if record.get("p") != 0:
            rounds.append((record.get("p"), record.get("seed")))
        record = record.get("previous")
    return rounds[::-1]


def recorded_perturbation(metadata: dict, path: str, split: Optional[str] = None) -> Union[float, List[float]]:
    """The share of perturbed parses a data-bin records (``perturbation.p`` of fairseq-syntax-perturb; 0 when
    none): one p, or the p of each round, first first, for a copy perturbed again (``perturbation.previous``).
    With ``split``, only the rounds that perturbed that split count (:func:`split_perturbation`).
    A record that is not what fairseq-syntax-perturb writes is refused, naming ``path`` and the key."""
    rounds: List[float] = []
    record, key = split_perturbation(metadata.get("perturbation"), split), "perturbation"
    while record is not None:
        p = record.get("p") if isinstance(record, dict) else None
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p <= 1 or len(rounds) >= 100:
            raise DataBinError(path, None, f"{key}.p: {quoted(p, 40)} is not the probability in [0, 1] "
                               "fairseq-syntax-perturb records (edited?)")
        rounds.append(float(p))
        record, key = record.get("previous"), key + ".previous"
    if not rounds:
        return 0.0
    return rounds[0] if len(rounds) == 1 else rounds[::-1]
