"""The pipeline's stages as commands of their own, for inspecting or replacing one stage.

``fairseq-syntax-tokenize``  raw text -> Moses tokens (as fairseq's ``--tokenizer moses``)
``fairseq-syntax-parse``     tokenized text -> word-level CoNLL-U with a spaCy pipeline
``fairseq-syntax-bpe``       learn joint subword-nmt codes, or apply them

Their outputs chain back into ``fairseq-syntax-preprocess --pretokenized --external-parse
conllu --bpe-codes CODES``, which then projects and binarizes only.
"""

import argparse
import os
import sys
import tempfile
from typing import List, Optional

from tqdm import tqdm

from . import bpe as bpe_stage
from .conllu import format_conllu
from .errors import InputError
from .parse import DEFAULT_DISABLED, load_pipeline, parse_lines
from .tokenize import tokenize_lines


def _read(path: str) -> List[str]:
    with open(path, encoding="utf-8") as handle:
        lines = [line.rstrip("\n").rstrip("\r") for line in handle]
    empty = next((i for i, line in enumerate(lines) if not line.strip()), None)
    if empty is not None:
        raise InputError(path, empty + 1, "empty line: every line must hold a sentence")
    return lines


def _atomic_write(path: str, chunks) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    handle = tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=directory, delete=False,
                                         prefix=f".{os.path.basename(path)}.tmp-")
    try:
        with handle:
            for chunk in chunks:
                handle.write(chunk)
        os.replace(handle.name, path)
    except BaseException:
        os.unlink(handle.name)
        raise


def _run(main) -> None:
    try:
        main()
    except InputError as error:
        print(f"{os.path.basename(sys.argv[0])}: error: {error}", file=sys.stderr)
        sys.exit(1)


def tokenize_main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(prog="fairseq-syntax-tokenize", description=__doc__)
    parser.add_argument("--lang", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args(argv)

    def main():
        tokens = tokenize_lines(_read(args.input), args.lang, workers=args.workers)
        _atomic_write(args.output, (" ".join(t) + "\n" for t in tokens))

    _run(main)


def parse_main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(prog="fairseq-syntax-parse", description=__doc__)
    parser.add_argument("--parser", required=True, help="spaCy pipeline name or path")
    parser.add_argument("--input", required=True, help="tokenized text, one line a sentence")
    parser.add_argument("--output", required=True, help="CoNLL-U, one sentence block per line")
    parser.add_argument("--pos-column", choices=["upos", "xpos"], default="upos")
    parser.add_argument("--parser-disable", default=",".join(DEFAULT_DISABLED))
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=512)
    args = parser.parse_args(argv)

    def main():
        lines = [line.split() for line in _read(args.input)]
        nlp = load_pipeline(args.parser, [c for c in args.parser_disable.split(",") if c])
        trees = parse_lines(nlp, lines, args.pos_column, args.workers, args.batch_size, args.input)
        _atomic_write(
            args.output,
            (format_conllu(t, f"sent_id = {i}", args.pos_column)
             for i, t in enumerate(tqdm(trees, total=len(lines), desc="parse", unit="sent", disable=None), 1)),
        )

    _run(main)


def bpe_main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(prog="fairseq-syntax-bpe", description=__doc__)
    parser.add_argument("--codes", required=True, help="codes file to write (with --learn) or read")
    parser.add_argument("--learn", nargs="+", metavar="TOKENIZED", help="learn joint codes on these files")
    parser.add_argument("--symbols", type=int, default=10000)
    parser.add_argument("--input", help="tokenized text to segment")
    parser.add_argument("--output")
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args(argv)

    def main():
        if args.learn:
            lines = [line.split() for path in args.learn for line in _read(path)]
            bpe_stage.learn_codes(lines, args.symbols, args.codes)
        if args.input:
            pieces = bpe_stage.apply_codes([l.split() for l in _read(args.input)], args.codes, args.workers)
            _atomic_write(args.output, (" ".join(p) + "\n" for p in pieces))

    _run(main)
