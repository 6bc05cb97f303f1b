"""The pipeline's stages as commands of their own, for inspecting or replacing one stage.

``fairseq-syntax-tokenize``  raw text -> Moses tokens (as fairseq's ``--tokenizer moses``)
``fairseq-syntax-parse``     tokenized text -> word-level CoNLL-U with a spaCy pipeline
``fairseq-syntax-bpe``       learn joint subword-nmt codes, or apply them

Their outputs chain back into ``fairseq-syntax-preprocess --pretokenized --external-parse
conllu --bpe-codes CODES``, which then projects and binarizes only. Each reads its inputs
through the pipeline's validation layer (:mod:`.fileio`), checks its arguments and output
paths before any work, and writes atomically; SIGTERM and Ctrl-C leave nothing behind.
"""

import argparse
import os
import sys
from typing import Callable, List, Optional

from tqdm import tqdm

from . import bpe as bpe_stage
from fairseq_syntax_core.argtypes import positive, refuse_repeats, workers
from .conllu import format_conllu
from fairseq_syntax_core.databin import METADATA_FILE
from fairseq_syntax_core.errors import InputError
from fairseq_syntax_core.fileio import atomic_write, atomic_write_with, check_bpe_codes, check_output_path, nonempty_lines, read_lines
from fairseq_syntax_core.interrupts import USER_ERRORS, handle_termination, print_error
from fairseq_syntax_core.startup import ensure_standard_output
from fairseq_syntax_core.names import LANGUAGE, name_problem
from .parse import DEFAULT_DISABLED, load_pipeline, parse_lines
from .tokenize import tokenize_lines


def _read(path: str) -> List[str]:
    lines = read_lines(path)
    if not lines:
        raise InputError(path, None, "is empty: expected one sentence per line")
    return nonempty_lines(path, lines)


def _check_output(path: str, inputs: List[str], overwrite: bool, flag: str = "--output") -> None:
    """``check_output_path``, and: never a file of a data-bin (a folder holding our syntax.json), and an existing
    file only with ``--overwrite`` (the user's file is not replaced without a word)."""
    check_output_path(path, inputs, flag)
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.basename(path) == METADATA_FILE or os.path.isfile(os.path.join(folder, METADATA_FILE)):
        raise InputError(path, None, f"{flag} is inside the data-bin {folder} (its {METADATA_FILE}): writing there "
                         "would break it; write elsewhere")
    if os.path.lexists(path) and not overwrite:
        raise InputError(path, None, f"{flag} exists: give --overwrite to replace it, or another file")


def _run(prog: str, main: Callable[[], None]) -> None:
    handle_termination()
    try:
        ensure_standard_output()
        main()
    except USER_ERRORS as error:  # OSError: disk full, permissions; it names the file
        sys.exit(print_error(prog, error))


def moses_knows(lang: str) -> bool:
    """Whether sacremoses has non-breaking prefixes for ``lang`` (its per-language rules)."""
    from sacremoses.corpus import NonbreakingPrefixes

    try:
        known = NonbreakingPrefixes().available_langs  # {"german": "de", ...}
    except (OSError, AttributeError):  # sacremoses' data missing: no warning rather than a wrong one
        return True
    return lang in known.values() or lang.split("_")[0].split("-")[0] in known.values()


def tokenize_main(argv: Optional[List[str]] = None) -> None:
    prog = "fairseq-syntax-tokenize"
    parser = argparse.ArgumentParser(prog=prog, description=__doc__)
    parser.add_argument("--lang", required=True, help="language of Moses' rules (en, de, fr ...)")
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--workers", type=workers, default=1)
    parser.add_argument("--overwrite", action="store_true", help="replace an existing output file")
    args = refuse_repeats(parser).parse_args(argv)
    problem = name_problem(LANGUAGE, args.lang)
    if problem is not None:  # sacremoses would read it as a language without rules, and tokenize otherwise
        parser.error(f"--lang: {problem}")
    if not moses_knows(args.lang):
        print(f"{prog}: warning: --lang {args.lang}: Moses has no non-breaking prefixes for it (sacremoses' "
              "languages): abbreviations are split as sentence ends", file=sys.stderr)

    def main():
        _check_output(args.output, [args.input], args.overwrite)
        tokens = tokenize_lines(_read(args.input), args.lang, workers=args.workers)
        atomic_write(args.output, (" ".join(t) + "\n" for t in tokens))

    _run(prog, main)


def parse_main(argv: Optional[List[str]] = None) -> None:
    prog = "fairseq-syntax-parse"
    parser = argparse.ArgumentParser(prog=prog, description=__doc__)
    parser.add_argument("--parser", required=True, help="spaCy pipeline name or path")
    parser.add_argument("--input", required=True, help="tokenized text, one line a sentence")
    parser.add_argument("--output", required=True, help="CoNLL-U, one sentence block per line")
    parser.add_argument("--pos-column", choices=["upos", "xpos"], default="upos")
    parser.add_argument("--parser-disable", default=",".join(DEFAULT_DISABLED))
    parser.add_argument("--workers", type=workers, default=1)
    parser.add_argument("--overwrite", action="store_true", help="replace an existing output file")
    parser.add_argument("--batch-size", type=positive, default=512)
    args = refuse_repeats(parser).parse_args(argv)

    def main():
        _check_output(args.output, [args.input], args.overwrite)
        lines = [line.split() for line in _read(args.input)]
        nlp = load_pipeline(args.parser, [c for c in args.parser_disable.split(",") if c])
        trees = parse_lines(nlp, lines, args.pos_column, args.workers, args.batch_size, args.input)
        atomic_write(
            args.output,
            (format_conllu(t, f"sent_id = {i}", args.pos_column)
             for i, t in enumerate(tqdm(trees, total=len(lines), desc="parse", unit="sent", disable=None), 1)),
        )

    _run(prog, main)


def bpe_main(argv: Optional[List[str]] = None) -> None:
    prog = "fairseq-syntax-bpe"
    parser = argparse.ArgumentParser(prog=prog, description=__doc__)
    parser.add_argument("--codes", required=True, help="codes file to write (with --learn) or read")
    parser.add_argument("--learn", nargs="+", metavar="TOKENIZED", help="learn joint codes on these files")
    parser.add_argument("--symbols", type=positive, default=10000)
    parser.add_argument("--input", help="tokenized text to segment (with --output)")
    parser.add_argument("--output", help="where the segmented --input goes")
    parser.add_argument("--workers", type=workers, default=1)
    parser.add_argument("--overwrite", action="store_true", help="replace an existing output file")
    args = refuse_repeats(parser).parse_args(argv)
    if not args.learn and not args.input:
        parser.error("give --learn FILES (write --codes), --input FILE --output FILE (apply --codes), or both")
    if bool(args.input) != bool(args.output):
        parser.error("--input and --output go together")

    def main():
        inputs = list(args.learn or []) + ([args.input] if args.input else [])
        if args.learn:
            _check_output(args.codes, inputs, args.overwrite, "--codes")
        else:
            check_bpe_codes(args.codes)
        if args.input:
            _check_output(args.output, inputs + [args.codes], args.overwrite)
        if args.learn:
            lines = [line.split() for path in args.learn for line in _read(path)]
            if not lines:
                raise InputError(args.learn[0], None, "is empty: learning BPE codes needs text")
            def learn(tmp: str) -> None:
                if bpe_stage.learn_codes(lines, args.symbols, tmp) == 0:
                    raise InputError(args.learn[0], None, f"BPE learned no merges from the {len(lines)} lines of "
                                     f"{', '.join(args.learn)} (too little text: every pair of symbols is seen "
                                     "fewer than 2 times): learn from more text")

            atomic_write_with(args.codes, learn)
        if args.input:
            pieces = bpe_stage.apply_codes([l.split() for l in _read(args.input)], args.codes, args.workers)
            atomic_write(args.output, (" ".join(p) + "\n" for p in pieces))

    _run(prog, main)


if __name__ == "__main__":  # three commands live here: run as a module, it ran none and exited 0
    sys.exit("python -m fairseq_syntax_preprocess.stages: error: this module holds three commands; run "
             "fairseq-syntax-tokenize, fairseq-syntax-parse or fairseq-syntax-bpe")
