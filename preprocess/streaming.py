"""The pipeline's one writer, and its streamed shards: memory bounded by the block, not by the corpus.

Every data-bin is written sentence by sentence through :func:`write_split`: the text through
fairseq's own ``VocabularyDatasetBinarizer`` and ``make_builder`` (what ``fairseq-preprocess``
writes, item for item), the side streams through :class:`~.side_files.StreamWriter`, the
CoNLL-U (``sent_id`` = split and input line), the closing counts and the length prior
(:class:`Counts`). Two sources feed it:

- a whole-file run (``cli.run``) learns its codes and dictionaries on the train split, so it
  holds the splits in memory, and feeds the sentences it parsed and projected;
- ``fairseq-syntax-preprocess --num-shards N --shard-id I`` takes the train lines
  :func:`~fairseq_syntax_core.shards.shard_range` ``(lines, N, I)`` (and, in shard 0, every
  valid and test split) and :func:`file_items` runs every stage on ``--block-lines`` lines at a
  time: read (:func:`~.fileio.iter_lines`, the same checks as a whole-file read), tokenize,
  apply the given BPE codes, parse (length-sorted within the block, :func:`~.parse.parse_lines`)
  and project. Nothing is learned: the dictionaries, BPE codes and label/POS dictionaries are
  given (``--dictdir``, or ``--srcdict/--tgtdict/--bpe-codes/--labeldict/--posdict``), which is
  what lets shards made on different machines share them.

What still grows with the lines of a shard: fairseq's index builders keep one size per
line per stream (8 bytes each: ~50 bytes a line with the target parsed), and the length
prior's counts grow with the distinct (source, target) length pairs only.
"""

import json
import logging
import os
import shutil
import time
from collections import Counter
from typing import Dict, Iterable, Iterator, List, Optional, Tuple

from fairseq_syntax_core.databin import (
    CODES_FILE, LABEL, METADATA_FILE, POS, SOURCE_STREAMS, STREAMS, TARGET_STREAMS, dictionary_path, stream_prefix,
)
from fairseq_syntax_core.errors import InputError
from fairseq_syntax_core.split_digests import FILES_KEY, split_file_digests
from fairseq_syntax_core.length_prior import PAPER_MAX_LENGTH, LengthPrior, length_prior_path, table_text
from fairseq_syntax_core.shards import SHARD_KEY, shard_range

from . import bpe as bpe_stage
from .conllu import format_conllu
from .destdir import filling, move_into_place
from fairseq_syntax_core.fileio import content_sha256, count_lines, iter_lines, nonempty_lines
from fairseq_syntax_core.interrupts import signals_deferred
from .parse import parse_lines
from .projection import project
from .side_files import StreamWriter
from .tokenize import tokenize_lines
from .word_tree import WordTree

logger = logging.getLogger("fairseq_syntax.preprocess")


def _blocks(src_path: str, tgt_path: str, start: int, stop: int, size: int, name: str
            ) -> Iterator[Tuple[int, List[str], List[str]]]:
    """``(first line number, source lines, target lines)`` of ``size`` lines at a time."""
    src_lines = iter_lines(src_path, start, stop, f"{name} source file")
    tgt_lines = iter_lines(tgt_path, start, stop, f"{name} target file")
    first = start + 1
    while True:
        src = [line for _, line in zip(range(size), src_lines)]
        tgt = [line for _, line in zip(range(len(src)), tgt_lines)]
        if not src:
            return
        yield first, src, tgt
        first += len(src)


class Dictionaries:
    """The text, label and POS dictionaries a run writes with: given (a sharded run), or learned on the train
    split (a whole-file run)."""

    def __init__(self, src, tgt, source_streams: Dict[str, object],
                 target_streams: Optional[Dict[str, object]] = None) -> None:
        self.src, self.tgt = src, tgt
        self.source_streams, self.target_streams = source_streams, target_streams

    @classmethod
    def given(cls, args) -> "Dictionaries":
        """Those named by ``--srcdict/--tgtdict/--labeldict/--posdict`` (and ``--target-*dict``), loaded once."""
        from fairseq.data import Dictionary

        src = Dictionary.load(args.srcdict)
        tgt = src if args.joined_dictionary and not args.tgtdict else Dictionary.load(args.tgtdict)
        target_streams = None
        if args.target_labeldict:
            target_streams = {LABEL.name: Dictionary.load(args.target_labeldict),
                              POS.name: Dictionary.load(args.target_posdict)}
        return cls(src, tgt, {LABEL.name: Dictionary.load(args.labeldict), POS.name: Dictionary.load(args.posdict)},
                   target_streams)

    def save(self, out: str, src: str, tgt: str, text: bool = True) -> None:
        """Into the folder, as ``fairseq-preprocess --srcdict`` saves a given dictionary (``text``: the text's too)."""
        if text:
            self.src.save(os.path.join(out, f"dict.{src}.txt"))
            self.tgt.save(os.path.join(out, f"dict.{tgt}.txt"))
        for lang, dictionaries in ((src, self.source_streams), (tgt, self.target_streams or {})):
            for name, dictionary in dictionaries.items():
                dictionary.save(dictionary_path(out, lang, STREAMS[name]))


class SplitWriter:
    """The open files of one split in the shard's temporary folder: text, side streams, CoNLL-U."""

    def __init__(self, out: str, name: str, src: str, tgt: str, dictionaries: Dictionaries, pos_column: str) -> None:
        from fairseq.binarizer import BinarizeSummary, VocabularyDatasetBinarizer
        from fairseq.data import indexed_dataset

        self.name, self.pos_column = name, pos_column
        self.text = {}
        for lang, vocab in ((src, dictionaries.src), (tgt, dictionaries.tgt)):
            prefix = os.path.join(out, f"{name}.{src}-{tgt}.{lang}")
            builder = indexed_dataset.make_builder(prefix + ".bin", impl="mmap", vocab_size=len(vocab))
            self.text[lang] = (prefix, builder, VocabularyDatasetBinarizer(vocab, append_eos=True), BinarizeSummary())
        self.streams = {src: StreamWriter({s: stream_prefix(out, name, src, tgt, src, s) for s in SOURCE_STREAMS},
                                          dictionaries.source_streams, SOURCE_STREAMS)}
        if dictionaries.target_streams is not None:
            self.streams[tgt] = StreamWriter({s: stream_prefix(out, name, src, tgt, tgt, s) for s in TARGET_STREAMS},
                                             dictionaries.target_streams, TARGET_STREAMS)
        self.conllu = {lang: open(stream_prefix(out, name, src, tgt, lang, "conllu"), "w", encoding="utf-8")
                       for lang in self.streams}

    def add(self, line_number: int, pieces: Dict[str, List[str]], trees: Dict[str, WordTree]) -> None:
        for lang, (_, builder, binarizer, summary) in self.text.items():
            builder.add_item(binarizer.binarize_line(" ".join(pieces[lang]), summary))
        for lang, writer in self.streams.items():
            writer.add(trees[lang])
            self.conllu[lang].write(format_conllu(trees[lang], f"sent_id = {self.name}-{line_number}", self.pos_column))

    def close(self) -> Dict[str, Dict[str, int]]:
        """Finalize every file; returns the unknown-symbol counts per parsed language."""
        for prefix, builder, _, _ in self.text.values():
            builder.finalize(prefix + ".idx")
        for handle in self.conllu.values():
            handle.close()
        return {lang: writer.finalize() for lang, writer in self.streams.items()}


class Counts:
    """The closing summary's and the length prior's counts, accumulated block by block."""

    def __init__(self) -> None:
        self.numbers: Counter = Counter()
        self.lengths: Counter = Counter()  # (source pieces, target pieces) of train pairs
        self.longest_target = 0
        self.empty_targets = 0

    def add_lengths(self, source: int, target: int) -> None:
        self.longest_target = max(self.longest_target, target)
        if target >= 1:
            self.lengths[(source, target)] += 1
        else:
            self.empty_targets += 1

    def add_sentence(self, train: bool, src: str, tgt: str, pieces: Dict[str, List[str]],
                     words: Dict[str, WordTree], trees: Dict[str, WordTree]) -> None:
        """One written sentence: its words, pieces and tree shape per parsed language; train pairs' lengths."""
        if train:
            self.add_lengths(len(pieces[src]), len(pieces[tgt]))
        for lang, prefix in ((src, ""), (tgt, "target_")):
            if lang in words:
                tree = words[lang]
                self.numbers[prefix + "words"] += len(tree)
                self.numbers[prefix + "subwords"] += len(trees[lang])
                self.numbers[prefix + "non_projective"] += not tree.is_projective()
                self.numbers[prefix + "multi_root"] += tree.num_roots > 1
        self.numbers["sentences"] += 1

    def length_prior(self, src: str, tgt: str) -> LengthPrior:
        """As :meth:`LengthPrior.from_lengths` on the same pairs."""
        pairs = sum(self.lengths.values())
        return LengthPrior(dict(self.lengths), max(PAPER_MAX_LENGTH, self.longest_target), source_lang=src,
                           target_lang=tgt, splits=["train"], lines=pairs + self.empty_targets,
                           skipped_empty_targets=self.empty_targets)


def project_onto_pieces(tree: WordTree, pieces: List[str], rule: str, path: str, line: int) -> WordTree:
    """``tree`` projected onto its BPE pieces; an error names input line ``line`` of ``path``."""
    try:
        return project(tree, pieces, rule)
    except ValueError as error:  # BPE changed the words: codes that do not fit this text
        raise InputError(path, line, f"cannot project the parse onto the BPE pieces: {error}") from None


def _check_block(args, name: str, first: int, src_path: str, tgt_path: str, src_lines: List[str],
                 tgt_lines: List[str], src_tokens, tgt_tokens) -> List[int]:
    """The block's checks, as a whole-file run makes them; returns the 0-based indices to keep."""
    from .cli import check_tokens

    for path, lines in ((src_path, src_lines), (tgt_path, tgt_lines)):
        nonempty_lines(path, lines, first)
    for path, tokens in ((src_path, src_tokens), (tgt_path, tgt_tokens)):
        check_tokens(path, tokens, first)
    keep = list(range(len(src_tokens)))
    if args.max_len > 0:
        keep = []
        for i, (s, t) in enumerate(zip(src_tokens, tgt_tokens)):
            if len(s) <= args.max_len and len(t) <= args.max_len:
                keep.append(i)
            elif args.max_len_action == "error":
                path = src_path if len(s) > args.max_len else tgt_path
                raise InputError(path, first + i, f"line has {max(len(s), len(t))} tokens, more than "
                                                  f"--max-len {args.max_len}")
    return keep


#: one sentence on its way into the data-bin: its input line number, and per language its BPE pieces,
#: its word tree (parsed languages) and that tree projected onto the pieces
Item = Tuple[int, Dict[str, List[str]], Dict[str, WordTree], Dict[str, WordTree]]


def file_items(args, name: str, src_path: str, tgt_path: str, start: int, stop: int, nlps: Dict[str, object],
               counts: Counts, codes: Optional[str], skipped: List[int]) -> Iterator[Item]:
    """Lines ``[start, stop)`` of one split read, tokenized, segmented, parsed and projected block by block;
    the line numbers of lines left out (``--max-len-action skip``) are appended to ``skipped``."""
    src, tgt = args.source_lang, args.target_lang
    paths = {src: src_path, tgt: tgt_path}
    for first, src_lines, tgt_lines in _blocks(src_path, tgt_path, start, stop, args.block_lines, name):
        if len(tgt_lines) < len(src_lines):  # the counts were compared first: a file changed while we read
            raise InputError(tgt_path, first + len(tgt_lines), "ended early: the file changed during the run")
        tokens = {src: tokenize_lines(src_lines, src, args.pretokenized, args.workers),
                  tgt: tokenize_lines(tgt_lines, tgt, args.pretokenized, args.workers)}
        keep = _check_block(args, name, first, src_path, tgt_path, src_lines, tgt_lines, tokens[src], tokens[tgt])
        kept = set(keep)
        skipped += [first + i for i in range(len(src_lines)) if i not in kept]
        numbers = [first + i for i in keep]
        tokens = {lang: [lines[i] for i in keep] for lang, lines in tokens.items()}
        pieces = {lang: lines if args.no_bpe else bpe_stage.apply_codes(lines, codes, args.workers)
                  for lang, lines in tokens.items()}
        start_parse = time.perf_counter()
        words = {lang: list(parse_lines(nlp, tokens[lang], args.pos_column, args.workers, args.parse_batch_size,
                                        paths[lang], line_numbers=numbers))
                 for lang, nlp in nlps.items()}
        counts.numbers["parse_seconds"] += time.perf_counter() - start_parse
        for k, number in enumerate(numbers):
            yield (number, {lang: pieces[lang][k] for lang in pieces}, {lang: words[lang][k] for lang in words},
                   {lang: project_onto_pieces(words[lang][k], pieces[lang][k], args.projection, paths[lang], number)
                    for lang in words})


def write_split(args, out: str, name: str, items: Iterable[Item], dictionaries: Dictionaries, counts: Counts,
                unknown: Counter) -> int:
    """Every sentence of ``items`` into split ``name`` of the temporary folder ``out``: the text through
    fairseq's binarizer, the side streams, the CoNLL-U; counted in ``counts``. Returns the sentences written.

    The one writer of the pipeline: a whole-file run feeds it the sentences it learned its dictionaries on
    (``cli.run``), a sharded run the blocks it streams (:func:`file_items`).
    """
    src, tgt = args.source_lang, args.target_lang
    before = counts.numbers["sentences"]
    try:
        writer = SplitWriter(out, name, src, tgt, dictionaries, args.pos_column)
        for number, pieces, words, trees in items:
            writer.add(number, pieces, trees)
            counts.add_sentence(name == "train", src, tgt, pieces, words, trees)
        missing = writer.close()
    except OSError as error:  # written through open files: a full disk or ulimit -f names none
        if error.filename is not None:
            raise
        raise OSError(error.errno, error.strerror, os.path.join(out, f"{name}.{src}-{tgt}.*")) from None
    for lang, side in ((src, "source"), (tgt, "target")):
        text = writer.text[lang][3]
        counts.numbers[f"{side}_tokens"] += text.num_tok
        unknown[f"unknown_{side}_tokens"] += text.num_replaced
    for lang, stream_missing in missing.items():
        prefix = "" if lang == src else "target_"
        unknown[prefix + "unknown_labels"] += stream_missing[LABEL.name]
        unknown[prefix + "unknown_pos"] += stream_missing[POS.name]
    return counts.numbers["sentences"] - before


def closing_summary(counts: Counts, unknown: Counter, split_meta: Dict[str, Dict[str, object]], target: bool,
            seconds: float, no_phrase: int = 0) -> Dict[str, object]:
    """The closing summary's numbers (``fairseq-syntax-preprocess`` prints them)."""
    numbers = counts.numbers
    parse_seconds = numbers.get("parse_seconds", 0.0)
    result: Dict[str, object] = {
        "sentences": numbers["sentences"], "words": numbers["words"], "subwords": numbers["subwords"],
        "parse_seconds": round(parse_seconds, 2),
        "parse_sentences_per_second": round(numbers["sentences"] / parse_seconds, 1) if parse_seconds > 0 else None,
        "non_projective": numbers["non_projective"], "multi_root": numbers["multi_root"],
        "skipped_too_long": sum(len(m["skipped_lines"]) for m in split_meta.values()),
        "unknown_labels": unknown["unknown_labels"], "unknown_pos": unknown["unknown_pos"],
        "unknown_source_tokens": unknown["unknown_source_tokens"], "source_tokens": numbers["source_tokens"],
        "unknown_target_tokens": unknown["unknown_target_tokens"], "target_tokens": numbers["target_tokens"],
        "no_phrase_structure": no_phrase,
    }
    if target:
        result.update({key: numbers[key] for key in ("target_words", "target_subwords", "target_non_projective",
                                                     "target_multi_root")})
        result.update({"target_unknown_labels": unknown["target_unknown_labels"],
                       "target_unknown_pos": unknown["target_unknown_pos"]})
    result["total_seconds"] = round(seconds, 2)
    return result


def write_length_prior(out: str, counts: Counts, src: str, tgt: str) -> None:
    """Eriguchi et al. (2016)'s length prior of the train pairs written (:mod:`fairseq_syntax_core.length_prior`)."""
    with open(length_prior_path(out, src, tgt), "w", encoding="utf-8") as handle:
        handle.write(table_text(counts.length_prior(src, tgt)))


def finish(out: str, destdir: str, metadata: Dict[str, object], overwrite: bool) -> None:
    """Write ``syntax.json`` last, then rename the finished temporary folder into place."""
    with open(os.path.join(out, METADATA_FILE), "w", encoding="utf-8") as handle:
        json.dump(metadata, handle, indent=2, sort_keys=True)
        handle.write("\n")
    with signals_deferred():
        move_into_place(out, destdir, overwrite)


def _inputs(args, splits) -> List[Tuple[object, int, int, int]]:
    """``(split, start, stop, lines of the split)`` of this shard: its train lines, and every other split in shard 0."""
    pairs = []
    for split in splits:
        what = f"{split.name} source file"
        src_count, tgt_count = count_lines(split.src_path, what), count_lines(split.tgt_path, f"{split.name} target file")
        for path, count in ((split.src_path, src_count), (split.tgt_path, tgt_count)):
            if count == 0:
                raise InputError(path, None, f"is empty: the {split.name} split needs at least one line")
        if src_count != tgt_count:
            shorter = split.src_path if src_count < tgt_count else split.tgt_path
            raise InputError(shorter, min(src_count, tgt_count) + 1,
                             f"line-count mismatch: {split.src_path} has {src_count} lines, "
                             f"{split.tgt_path} has {tgt_count}")
        if split.name == "train":
            start, stop = shard_range(src_count, args.num_shards, args.shard_id)
            if start == stop:
                raise InputError(split.src_path, None, f"has {src_count} lines: too few for {args.num_shards} shards "
                                                       f"(shard {args.shard_id} would be empty)")
            pairs.append((split, start, stop, src_count))
        elif args.shard_id == 0:
            pairs.append((split, 0, src_count, src_count))
    return pairs


def run_shard(args, splits, nlp, target_nlp, parser_meta: Dict, target_meta: Optional[Dict]) -> Dict[str, object]:
    """Write shard ``args.shard_id`` of ``args.num_shards`` to ``--destdir``; returns the summary."""
    from .cli import build_metadata

    src, tgt = args.source_lang, args.target_lang
    started = time.perf_counter()
    inputs = _inputs(args, splits)
    if args.shard_id > 0 and len(inputs) < len(splits):
        logger.info(f"shard {args.shard_id}: valid and test splits go with shard 0 only")
    dictionaries = Dictionaries.given(args)
    nlps = {src: nlp}
    if target_nlp is not None:
        nlps[tgt] = target_nlp
    counts = Counts()
    split_meta: Dict[str, Dict[str, object]] = {}
    unknown: Counter = Counter()
    with filling(os.path.abspath(args.destdir)) as out:
        dictionaries.save(out, src, tgt)
        codes = None
        if not args.no_bpe:
            codes = os.path.join(out, CODES_FILE)
            shutil.copyfile(args.bpe_codes, codes)
        shard_info = None
        train = next((split for split, _, _, _ in inputs if split.name == "train"), None)
        digest = content_sha256([train.src_path, train.tgt_path]) if train else None  # before it is read
        for split, start, stop, total in inputs:
            skipped: List[int] = []
            items = file_items(args, split.name, split.src_path, split.tgt_path, start, stop, nlps, counts, codes,
                               skipped)
            written = write_split(args, out, split.name, items, dictionaries, counts, unknown)
            if written == 0:
                raise InputError(split.src_path, None, f"every line of the {split.name} split"
                                 f"{' in this shard' if split.name == 'train' else ''} is longer than "
                                 f"--max-len {args.max_len}: nothing is left")
            split_meta[split.name] = {"sentences": written, "skipped_lines": skipped,
                                      FILES_KEY: split_file_digests(out, split.name, src, tgt)}
            if split.name == "train":
                shard_info = {"id": args.shard_id, "num_shards": args.num_shards, "train_lines": [start, stop],
                              "train_total_lines": total,
                              "train_files": [os.path.basename(split.src_path), os.path.basename(split.tgt_path)],
                              "train_sha256": digest}
        if train is not None and content_sha256([train.src_path, train.tgt_path]) != digest:
            raise InputError(train.src_path, None, f"{train.src_path} or {train.tgt_path} changed while the shard "
                             "was read: its lines and its recorded digest would disagree; run it again")
        write_length_prior(out, counts, src, tgt)
        metadata = build_metadata(args, parser_meta, target_meta, split_meta, {})
        metadata[SHARD_KEY] = shard_info
        finish(out, os.path.abspath(args.destdir), metadata, args.overwrite)
    result = {"shard": f"{args.shard_id} of {args.num_shards} (train lines {shard_info['train_lines'][0] + 1}-"
                       f"{shard_info['train_lines'][1]})"}
    result.update(closing_summary(counts, unknown, split_meta, target_nlp is not None, time.perf_counter() - started))
    return result
