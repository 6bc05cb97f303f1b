"""``fairseq-syntax-preprocess``: raw parallel text to a fairseq ``data-bin`` with source syntax.

Stages, in order (each also available alone, see ``preprocess/stages.py``):
tokenize (sacremoses, or ``--pretokenized``) -> parse the source (spaCy ``--parser`` or an
external CoNLL-U, ``--external-parse conllu``), and the target when asked (``--target-parser``
or ``--target-external-parse conllu``) -> BPE (subword-nmt: learn joint codes with
``--bpe-symbols`` or apply ``--bpe-codes``) -> project the word tree onto BPE pieces
(``--projection``), with the binary phrase structure (imported brackets, ``--constituency-parse
ptb``, or converted from the dependency tree) -> dictionaries (the text's counted by fairseq-preprocess
itself, labels and POS on the train split) -> write, sentence by sentence, through the pipeline's one
writer (:func:`~.streaming.write_split`: text through fairseq's binarizer, side streams as mmap indexed
datasets, CoNLL-U), which a sharded run (``--num-shards``) feeds block by block -> metadata. Everything
is written under a temporary directory next to ``--destdir`` and renamed into place only when complete.
"""

import logging
import os
import shutil
import sys
import time
from collections import Counter
from typing import Dict, Iterator, List, Optional

from tqdm import tqdm

from . import bpe as bpe_stage
from .conllu import trees_for_lines
from .destdir import filling
from .dictdir import DICT_ONLY_KEY, file_digests
from fairseq_syntax_core.databin import (
    CODES_FILE,
    FORMAT_VERSION,
    LABEL,
    PARSED_LANGS_KEY,
    PHRASE_FROM_DEPENDENCY,
    PHRASE_FROM_PTB,
    PHRASE_STRUCTURE_KEY,
    POS,
    PRODUCER,
    PRODUCER_KEY,
    SOURCE_STREAMS,
    STREAMS,
    TARGET_PARSE_KEY,
    TARGET_STREAMS,
)
from fairseq_syntax_core.errors import InputError
from fairseq_syntax_core.split_digests import FILES_KEY, split_file_digests
from fairseq_syntax_core.fileio import is_visible, nonempty_lines, read_lines
from fairseq_syntax_core.interrupts import USER_ERRORS, handle_termination, print_error
from fairseq_syntax_core.startup import ensure_standard_output
from .parse import load_pipeline, parse_lines, pipeline_metadata
from . import ptb
from .projection import SUBWORD_LABEL
from .side_files import build_tag_dictionary
from .streaming import (Counts, Dictionaries, Item, closing_summary, finish, project_onto_pieces, write_length_prior,
                        write_split)
from .tokenize import tokenize_lines
from .word_tree import WordTree
from .options import check_args, get_parser, split_input_prefixes, target_parsed  # noqa: F401 (get_parser: public)
from .split import Split
from .text_chain import StageClock, TextChain

logger = logging.getLogger("fairseq_syntax.preprocess")


def read_and_tokenize(split: Split, args) -> None:
    src_lines = read_lines(split.src_path, f"{split.name} source file")
    tgt_lines = read_lines(split.tgt_path, f"{split.name} target file")
    for path, lines in ((split.src_path, src_lines), (split.tgt_path, tgt_lines)):
        if not lines:
            raise InputError(path, None, f"is empty: the {split.name} split needs at least one line")
    if len(src_lines) != len(tgt_lines):
        shorter = split.src_path if len(src_lines) < len(tgt_lines) else split.tgt_path
        raise InputError(
            shorter,
            min(len(src_lines), len(tgt_lines)) + 1,
            f"line-count mismatch: {split.src_path} has {len(src_lines)} lines, "
            f"{split.tgt_path} has {len(tgt_lines)}",
        )
    for path, lines in ((split.src_path, src_lines), (split.tgt_path, tgt_lines)):
        nonempty_lines(path, lines)
    with tqdm(total=2, desc=f"tokenize {split.name}", unit="side", disable=None) as bar:
        split.src_tokens = tokenize_lines(src_lines, args.source_lang, args.pretokenized, args.workers)
        bar.update()
        split.tgt_tokens = tokenize_lines(tgt_lines, args.target_lang, args.pretokenized, args.workers)
        bar.update()
    for path, lines in ((split.src_path, split.src_tokens), (split.tgt_path, split.tgt_tokens)):
        check_tokens(path, lines)
    if args.max_len > 0:
        too_long = [
            i for i, (s, t) in enumerate(zip(split.src_tokens, split.tgt_tokens))
            if len(s) > args.max_len or len(t) > args.max_len
        ]
        if too_long and args.max_len_action == "error":
            i = too_long[0]
            path = split.src_path if len(split.src_tokens[i]) > args.max_len else split.tgt_path
            length = max(len(split.src_tokens[i]), len(split.tgt_tokens[i]))
            raise InputError(path, i + 1, f"line has {length} tokens, more than --max-len {args.max_len}")
        split.skipped_lines = [i + 1 for i in too_long]
        if len(too_long) == len(split.src_tokens):
            raise InputError(
                split.src_path, None,
                f"every line of the {split.name} split is longer than --max-len {args.max_len}: nothing is left",
            )
        if too_long:
            skip = set(too_long)
            split.unfiltered_src_tokens = split.src_tokens
            split.unfiltered_tgt_tokens = split.tgt_tokens
            split.src_tokens = [t for i, t in enumerate(split.src_tokens) if i not in skip]
            split.tgt_tokens = [t for i, t in enumerate(split.tgt_tokens) if i not in skip]


#: fairseq's dictionary specials: as text tokens they would be stored as padding or end of sentence
_SPECIAL_TOKENS = frozenset({"<s>", "<pad>", "</s>", "<unk>"})


def check_tokens(path: str, lines: List[List[str]], first_line: int = 1) -> None:
    """Every line holds a visible token, and none is one of fairseq's special symbols.

    ``lines[0]`` is line ``first_line`` of ``path`` (a block of a streamed file).
    """
    for number, tokens in enumerate(lines, start=first_line):
        if not tokens or not any(is_visible(t) for t in tokens):
            raise InputError(
                path, number,
                "no visible token (only spaces, control or zero-width characters): every line must hold a sentence",
            )
        special = _SPECIAL_TOKENS.intersection(tokens)
        if special:
            raise InputError(
                path, number,
                f"token {sorted(special)[0]!r} is one of fairseq's special symbols (<s> <pad> </s> <unk>) and "
                "would be stored as that symbol, not as a word; escape it, or tokenize without --pretokenized",
            )


def _side_trees(split: Split, args, nlp, external: Optional[str], lang: str, unfiltered, tokens, path):
    """One side's trees, in the order of ``tokens``: read from ``PREFIX.LANG.conllu`` (which covers every
    line, the skipped ones too) or parsed by spaCy ``nlp``."""
    if external == "conllu":
        trees = trees_for_lines(f"{split.prefix}.{lang}.conllu", unfiltered or tokens, path, args.pos_column)
        if split.skipped_lines:
            skipped = set(split.skipped_lines)
            trees = (t for i, t in enumerate(trees, start=1) if i not in skipped)
        return trees
    return parse_lines(nlp, tokens, args.pos_column, args.workers, args.parse_batch_size, path)


def parse_split(split: Split, args, nlp) -> float:
    """Fill ``split.trees``; returns seconds spent parsing."""
    start = time.perf_counter()
    trees = _side_trees(split, args, nlp, args.external_parse, args.source_lang,
                        split.unfiltered_src_tokens, split.src_tokens, split.src_path)
    split.trees = list(tqdm(trees, total=len(split.src_tokens), desc=f"parse {split.name}", unit="sent", disable=None))
    if args.constituency_parse == ptb.EXTENSION:
        read_phrase_structures(split, args)
    return time.perf_counter() - start


def parse_target_split(split: Split, args, nlp) -> float:
    """Fill ``split.tgt_trees`` (spaCy ``nlp``, or ``PREFIX.TGT.conllu``); returns seconds spent parsing.

    The target's phrase structure is always converted from its dependency parse at projection.
    """
    start = time.perf_counter()
    trees = _side_trees(split, args, nlp, args.target_external_parse, args.target_lang,
                        split.unfiltered_tgt_tokens, split.tgt_tokens, split.tgt_path)
    split.tgt_trees = list(tqdm(trees, total=len(split.tgt_tokens), desc=f"parse {split.name} target",
                                unit="sent", disable=None))
    return time.perf_counter() - start


def read_phrase_structures(split: Split, args) -> None:
    """Attach the imported bracketed trees of a split to its word trees (see ``preprocess/ptb.py``)."""
    path = f"{split.prefix}.{args.source_lang}.{ptb.EXTENSION}"
    lines = split.unfiltered_src_tokens or split.src_tokens
    phrases, failed = ptb.read_trees(path, lines, split.src_path, args.phrase_fallback)
    if split.skipped_lines:
        skipped = set(split.skipped_lines)
        phrases = [p for i, p in enumerate(phrases, start=1) if i not in skipped]
        failed = [line for line in failed if line not in skipped]
    for tree, phrase in zip(split.trees, phrases):
        tree.phrase, tree.has_phrase = phrase, phrase is not None
    split.phrase_fallback_lines = failed
    if failed:
        logger.warning(f"{path}: {len(failed)} lines have no usable tree and get no phrase structure "
                       f"(--phrase-fallback), first: line {failed[0]}")


def run(args) -> Dict[str, object]:
    """Run every stage; returns the summary. Nothing is written to ``--destdir`` unless all succeed."""
    src, tgt = args.source_lang, args.target_lang
    splits = [Split(name, prefix, src, tgt) for name, prefix in split_input_prefixes(args)]
    check_args(args, splits)
    destdir = os.path.abspath(args.destdir)

    nlp = None
    parser_meta: Dict[str, str] = {"parser": "conllu"}
    if args.external_parse is None:  # loaded first: an unknown pipeline fails before any work
        disable = [c for c in args.parser_disable.split(",") if c]
        nlp = load_pipeline(args.parser, disable, lang=src)
        parser_meta = pipeline_metadata(nlp, args.parser)
    target_nlp = None
    target_meta: Optional[Dict[str, str]] = None
    if target_parsed(args):
        target_meta = {"parser": "conllu"}
        if args.target_external_parse is None:
            target_nlp = load_pipeline(args.target_parser, [c for c in args.parser_disable.split(",") if c],
                                       flag="--target-parser", lang=tgt)
            target_meta = pipeline_metadata(target_nlp, args.target_parser)

    if args.num_shards is not None:
        from .streaming import run_shard

        return run_shard(args, splits, nlp, target_nlp, parser_meta, target_meta)

    start = time.perf_counter()
    stages = StageClock()
    text_chain = None
    with filling(destdir) as out:
        work = os.path.join(out, ".work")
        try:
            os.mkdir(work)
            for split in splits:
                read_and_tokenize(split, args)
            stages.lap("tokenize")
            # BPE and the text dictionaries need no parse: they run in a forked process while
            # the parser works (parsing dominates; see benchmarks/pipeline_vs_spacy.py)
            text_chain = TextChain(args, splits, work, out)
            text_chain.start()
            parse_seconds = sum(parse_split(split, args, nlp) for split in splits)
            if target_parsed(args):
                parse_seconds += sum(parse_target_split(split, args, target_nlp) for split in splits)
            stages.lap("parse")
            stages.seconds.update(text_chain.join())
            stages.lap("wait_bpe_and_dictionaries")
            for split in splits:
                split.src_pieces = _read_pieces(os.path.join(work, f"{split.name}.{src}"))
                split.tgt_pieces = _read_pieces(os.path.join(work, f"{split.name}.{tgt}"))
            piece_trees = _project_side(splits, "trees", "src_pieces", "src_path", args.projection)
            tgt_piece_trees = None
            if target_parsed(args):
                tgt_piece_trees = _project_side(splits, "tgt_trees", "tgt_pieces", "tgt_path", args.projection)
            stages.lap("project")

            dictionaries = _learned_dictionaries(args, out, splits, piece_trees, tgt_piece_trees)
            counts, unknown = Counts(), Counter()
            counts.numbers["parse_seconds"] = parse_seconds
            for split in splits:
                items = _learned_items(split, src, tgt, piece_trees[split.name],
                                       tgt_piece_trees[split.name] if tgt_piece_trees else None)
                write_split(args, out, split.name, items, dictionaries, counts, unknown)
            if any(s.name == "train" for s in splits):  # else decoding estimates it from the training data-bin
                write_length_prior(out, counts, src, tgt)
            stages.lap("write")

            split_meta = {s.name: {"sentences": len(s.trees), "skipped_lines": s.skipped_lines,
                                   FILES_KEY: split_file_digests(out, s.name, src, tgt)} for s in splits}
            result = closing_summary(counts, unknown, split_meta, tgt_piece_trees is not None,
                                     time.perf_counter() - start, sum(len(s.phrase_fallback_lines) for s in splits))
            result["stage_seconds"] = stages.seconds
            metadata = build_metadata(
                args, parser_meta, target_meta, split_meta,
                {s.name: s.phrase_fallback_lines for s in splits if s.phrase_fallback_lines},
            )
            shutil.rmtree(work)
            if args.dict_only:
                metadata = _keep_dictionaries_only(out, metadata, splits[0])
                result["dict_only"] = ", ".join(sorted(os.listdir(out)))
            finish(out, destdir, metadata, args.overwrite)
        except BaseException:
            if text_chain is not None:
                text_chain.stop()
            raise
    return result


def build_metadata(args, parser_meta: Dict[str, str], target_meta: Optional[Dict[str, str]],
                   split_meta: Dict[str, Dict[str, object]], fallback_lines: Dict[str, List[int]]) -> Dict[str, object]:
    """The data-bin's ``syntax.json`` (``fairseq_syntax_core.databin`` names its keys).

    ``split_meta``: per split, its sentence count and skipped lines; ``fallback_lines``: per split,
    the lines without a phrase structure (``--phrase-fallback``).
    """
    src, tgt = args.source_lang, args.target_lang
    metadata = {
        PRODUCER_KEY: PRODUCER,
        "format_version": FORMAT_VERSION,
        "source_lang": src,
        "target_lang": tgt,
        PARSED_LANGS_KEY: {src: list(SOURCE_STREAMS)},
        "tokenizer": {"name": "none" if args.pretokenized else "moses",
                      "moses_aggressive_dash_splits": True, "moses_escape": True},
        "parser": parser_meta,
        "pos_column": args.pos_column,
        "bpe": {"name": "none"} if args.no_bpe else {
            "name": "subword_nmt", "codes": CODES_FILE, "separator": bpe_stage.SEPARATOR,
            "symbols": args.bpe_symbols, "given_codes": os.path.basename(args.bpe_codes or "")},
        "projection": {"rule": args.projection, "subword_label": SUBWORD_LABEL},
        PHRASE_STRUCTURE_KEY: {
            "source": PHRASE_FROM_PTB if args.constituency_parse else PHRASE_FROM_DEPENDENCY,
            "binarization": "right-factored, unary chains collapsed" if args.constituency_parse else
            "each head absorbs its dependents nearest first (ties: left); roots joined left to right",
            "subwords": "right-branching subtree per word",
            "fallback_lines": fallback_lines,
        },
        "eos": "appended by the dataset: head = last root of the line, label and POS = </s>",
        "splits": split_meta,
    }
    if target_meta is not None:
        metadata[PARSED_LANGS_KEY][tgt] = list(TARGET_STREAMS)
        metadata[TARGET_PARSE_KEY] = {
            "parser": target_meta,
            "phrase_structure": PHRASE_FROM_DEPENDENCY,
            "eos": "appended by the dataset as on the source: head = last root of the line, "
            "label and POS = </s>",
        }
    return metadata


def _keep_dictionaries_only(out: str, metadata: Dict[str, object], train: Split) -> Dict[str, object]:
    """``--dict-only``: remove the binarized splits from the finished temporary folder; returns its metadata."""
    from fairseq_syntax_core.shards import id_files

    keep = set(id_files(metadata))
    for name in os.listdir(out):
        if name not in keep:
            os.remove(os.path.join(out, name))
    metadata[DICT_ONLY_KEY] = {"learned_on": [train.src_path, train.tgt_path], "sentences": len(train.trees),
                               "sha256": file_digests(out, keep & set(os.listdir(out)))}
    metadata["splits"] = {}
    return metadata


def _project_side(splits: List[Split], trees_attr: str, pieces_attr: str, path_attr: str,
                  rule: str) -> Dict[str, List[WordTree]]:
    """Each split's word trees (``split.<trees_attr>``) projected onto its pieces, by split name."""
    return {
        split.name: [
            project_onto_pieces(tree, pieces, rule, getattr(split, path_attr), split.line_of(i))
            for i, (tree, pieces) in enumerate(tqdm(
                zip(getattr(split, trees_attr), getattr(split, pieces_attr)),
                total=len(getattr(split, trees_attr)),
                desc=f"project {split.name}" + ("" if trees_attr == "trees" else " target"), unit="sent",
                disable=None,
            ))
        ]
        for split in splits
    }


def _read_pieces(path: str) -> List[List[str]]:
    with open(path, encoding="utf-8") as handle:
        return [line.split() for line in handle]


def _learned_dictionaries(args, out: str, splits: List[Split], piece_trees: Dict[str, List[WordTree]],
                          tgt_piece_trees: Optional[Dict[str, List[WordTree]]]) -> Dictionaries:
    """The text dictionaries the text chain wrote to ``out``; label and POS dictionaries counted on the train
    split's piece trees (every split's without one), or given (``--labeldict`` ...), saved to ``out``."""
    from fairseq.data import Dictionary

    src, tgt = args.source_lang, args.target_lang
    text = {lang: Dictionary.load(os.path.join(out, f"dict.{lang}.txt")) for lang in (src, tgt)}
    streams = {}
    for lang, names, trees, given in (
        (src, SOURCE_STREAMS, piece_trees, {LABEL.name: args.labeldict, POS.name: args.posdict}),
        (tgt, TARGET_STREAMS, tgt_piece_trees, {LABEL.name: args.target_labeldict, POS.name: args.target_posdict}),
    ):
        if trees is not None:
            train = trees.get("train") or [t for s in splits for t in trees[s.name]]
            streams[lang] = {name: Dictionary.load(given[name]) if given.get(name) else build_tag_dictionary(
                (getattr(t, STREAMS[name].field) for t in train), [SUBWORD_LABEL] if name == LABEL.name else [])
                for name in names if STREAMS[name].dictionary is not None}
    dictionaries = Dictionaries(text[src], text[tgt], streams[src], streams.get(tgt))
    dictionaries.save(out, src, tgt, text=False)
    return dictionaries


def _learned_items(split: Split, src: str, tgt: str, trees: List[WordTree],
                   tgt_trees: Optional[List[WordTree]]) -> Iterator[Item]:
    """A learned split's sentences, for :func:`~.streaming.write_split`."""
    for i, tree in enumerate(trees):
        pieces, words, projected = {src: split.src_pieces[i], tgt: split.tgt_pieces[i]}, {src: split.trees[i]}, {src: tree}
        if tgt_trees is not None:
            words[tgt], projected[tgt] = split.tgt_trees[i], tgt_trees[i]
        yield split.line_of(i), pieces, words, projected


def cli_main(argv: Optional[List[str]] = None) -> None:
    logging.basicConfig(format="%(asctime)s | %(levelname)s | %(name)s | %(message)s", level=logging.INFO, stream=sys.stderr)
    args = get_parser().parse_args(argv)
    handle_termination()
    try:
        ensure_standard_output()
        summary = run(args)
    except USER_ERRORS as error:  # OSError: disk full, permissions; the message names the file
        note = f"nothing was written to {os.path.abspath(args.destdir)}" \
            if isinstance(error, OSError) and args.destdir else ""
        sys.exit(print_error("fairseq-syntax-preprocess", error, note))

    print(f"fairseq-syntax-preprocess: wrote {os.path.abspath(args.destdir)}")
    pieces = summary.get("subwords") or 0
    if pieces and (summary.get("unknown_labels") or 0) > 0.1 * pieces:  # dictionaries of another parser's labels
        logger.warning(f"{summary['unknown_labels']} of {pieces} pieces got the label <unk>: the label dictionary "
                       "(--labeldict, --dictdir) was made from another parser's labels?")
    for side, flag in (("source", "--srcdict"), ("target", "--tgtdict")):  # fairseq-preprocess says it too
        tokens, missing = summary.get(f"{side}_tokens") or 0, summary.get(f"unknown_{side}_tokens") or 0
        if tokens and missing > 0.1 * tokens:
            logger.warning(f"{missing} of {tokens} {side} tokens are <unk> in the text dictionary ({flag}, "
                           "--dictdir, --nwords*, --threshold*): the dictionary of another corpus or language?")
    width = max(len(k) for k in summary)
    for key, value in summary.items():
        print(f"  {key.ljust(width)}  {value}")


if __name__ == "__main__":
    cli_main()
