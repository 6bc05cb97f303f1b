"""``fairseq-syntax-show``: the piece-level tree a model sees, drawn with spaCy's displaCy.

    fairseq-syntax-show data-bin --split test --sentences 0,5 --out trees.html
    fairseq-syntax-show data-bin --text "A man rides a bike ." --format svg --out trees/

Sentences of a data-bin split are drawn from its stored streams; raw text (``--text``) is
tokenized, BPE-segmented, parsed and projected as the data-bin records (its ``syntax.json``:
tokenizer, BPE codes, parser, projection rule), i.e. as ``fairseq-interactive`` would. Both show
the pieces the model reads, with their POS, and every arc with its label, including the
``<subword>`` arcs inside words and the ``</s>`` the dataset appends (attached to the last
root), unless ``--no-eos``.

displaCy escapes words but not arc labels or tags, and our reserved labels look like markup
(``<subword>``, ``</s>``): labels and tags are escaped here, and characters XML forbids (C0
controls, lone surrogates) are drawn as U+FFFD, so the output is valid SVG/HTML.
``--format html`` writes one page with every sentence; ``--format svg`` one SVG file per
sentence into the ``--out`` folder (``SPLIT.N.svg`` or ``text.N.svg``).
"""

import argparse
import html
import os
import re
import sys
from typing import Dict, List, Optional, Sequence, Tuple

from fairseq_syntax_core.argtypes import refuse_repeats
from fairseq_syntax_core.databin import HEAD, LABEL, METADATA_FILE, POS, codes_file
from fairseq_syntax_core.errors import InputError, UsageError
from fairseq_syntax_preprocess.destdir import is_inside
from fairseq_syntax_core.fileio import atomic_write_all, check_output_path, file_in_the_way, is_visible

from fairseq_syntax_core.oneline import one_line
from .commands import quiet_logging, run_command, text_writer

PROG = "fairseq-syntax-show"
EOS = "</s>"
#: the most sentences one call draws (each is an SVG of its own)
MAX_SENTENCES = 1000
#: characters XML 1.0 forbids (and U+FFFE/U+FFFF), drawn as U+FFFD
_NOT_XML = re.compile("[^\u0009\u000a\u000d\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml_safe(text: str) -> str:
    """``text`` with every character XML cannot hold replaced by U+FFFD (not yet escaped)."""
    return _NOT_XML.sub("\ufffd", text)


def displacy_parse(pieces: Sequence[str], heads: Sequence[int], labels: Sequence[str], tags: Sequence[str],
                   title: str = "") -> Dict:
    """displaCy's manual dependency format for one piece-level tree (1-based heads, 0 = root).

    Arcs run from head to dependent; the arrow points at the dependent. Labels and tags are
    HTML-escaped (displaCy escapes only the words).
    """
    if not (len(pieces) == len(heads) == len(labels) == len(tags)):
        raise ValueError(f"{len(pieces)} pieces, {len(heads)} heads, {len(labels)} labels, {len(tags)} tags")
    words = [{"text": xml_safe(p), "tag": html.escape(xml_safe(t))} for p, t in zip(pieces, tags)]
    arcs = []
    for i, (h, lab) in enumerate(zip(heads, labels)):
        h = int(h)
        if h == 0 or h - 1 == i:
            continue  # a root
        head = h - 1
        start, end = min(i, head), max(i, head)
        arcs.append({"start": start, "end": end, "label": html.escape(xml_safe(lab)),
                     "dir": "left" if i < head else "right"})
    parse = {"words": words, "arcs": arcs}
    if title:
        parse["settings"] = {}
        parse["title"] = html.escape(xml_safe(title))
    return parse


def render(parses: List[Dict], page: bool) -> str:
    """displaCy's markup: one SVG per parse, or an HTML page with all of them."""
    from spacy import displacy

    return displacy.render(parses, style="dep", manual=True, page=page, jupyter=False,
                           options={"compact": False, "distance": 110})


def _setup(data_bin: str, parser: Optional[str] = None):
    from fairseq_syntax.tasks.syntax_translation import SyntaxTranslationConfig, SyntaxTranslationTask

    cfg = SyntaxTranslationConfig(_name="syntax_translation", data=data_bin, dataset_impl="mmap",
                                  required_seq_len_multiple=1, syntax_parser=parser)
    return SyntaxTranslationTask.setup_task(cfg)


def split_trees(task, split: str, indices: Sequence[int], eos: bool) -> List[Tuple[str, List[str], List[int], List[str], List[str]]]:
    """(name, pieces, heads, labels, tags) of sentences of a split, as the dataset hands them to the model."""
    from fairseq_syntax.data.syntax_features import append_eos

    from fairseq_syntax_analysis.buckets import check_split

    check_split(task, split, "--split")
    task.load_dataset(split)
    dataset = task.datasets[split]
    n = len(dataset)
    out = []
    for i in indices:
        if not 0 <= i < n:
            raise UsageError(f"--sentences: {i} is not a sentence of split {split!r} (0..{n - 1})")
        src = dataset.dataset.src[i]
        heads, labels, pos = dataset.streams[HEAD.name][i], dataset.streams[LABEL.name][i], dataset.streams[POS.name][i]
        if eos:
            heads, labels, pos = append_eos(heads, labels, pos, task.label_dict.eos(), task.pos_dict.eos())
        else:
            src = src[:-1]
        pieces = [task.src_dict[t] for t in src.tolist()]
        out.append((f"{split}.{i}", pieces, heads.tolist(), [task.label_dict[x] for x in labels.tolist()],
                    [task.pos_dict[x] for x in pos.tolist()]))
    return out


def text_trees(task, lines: Sequence[str], eos: bool) -> List[Tuple[str, List[str], List[int], List[str], List[str]]]:
    """The same for raw text: tokenized, segmented, parsed and projected as the data-bin records."""
    from fairseq_syntax_preprocess.bpe import apply_codes
    from fairseq_syntax_core.fileio import check_bpe_codes
    from fairseq_syntax_preprocess.tokenize import tokenize_line

    meta = task.metadata
    lang = meta.get("source_lang", task.cfg.source_lang)
    recorded = meta.get("tokenizer") if isinstance(meta.get("tokenizer"), dict) else {}  # checked when read
    tokens = [tokenize_line(line, lang, pretokenized=recorded.get("name") == "none",
                            aggressive_dash_splits=recorded.get("moses_aggressive_dash_splits", True) is not False,
                            escape=recorded.get("moses_escape", True) is not False) for line in lines]
    bpe = meta.get("bpe", {})
    if bpe.get("name", "none") != "none":
        metadata_path = os.path.join(task.cfg.data, METADATA_FILE)
        codes = os.path.join(task.cfg.data, codes_file(meta, metadata_path))
        if os.path.islink(codes):
            raise InputError(metadata_path, None, f"its BPE codes {one_line(codes)} are a symbolic link: expected the "
                             "codes file fairseq-syntax-preprocess wrote into the data-bin")
        if not os.path.isfile(codes):
            raise InputError(codes, None, "the data-bin's BPE codes are missing: raw text cannot be segmented")
        check_bpe_codes(codes, "the bpe.codes fairseq-syntax-preprocess wrote into the data-bin")
        tokens = apply_codes(tokens, codes)
    trees = task.online_parser().piece_trees(tokens)
    out = []
    for k, (pieces, tree) in enumerate(zip(tokens, trees)):
        heads, labels, tags = [int(h) for h in tree.heads], list(tree.labels), list(tree.pos)
        pieces = list(pieces)
        if eos:
            roots = [i for i, h in enumerate(heads) if h == 0]
            heads.append(roots[-1] + 1 if roots else 0)
            labels.append(EOS)
            tags.append(EOS)
            pieces.append(EOS)
        out.append((f"text.{k}", pieces, heads, labels, tags))
    return out


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data_bin", help="a data-bin made by fairseq-syntax-preprocess")
    p.add_argument("--split", default="test", help="split whose sentences to draw (default: test)")
    p.add_argument("--sentences", default="0", help="comma-separated 0-based sentence indices (default: 0)")
    p.add_argument("--text", action="append", default=[], help="raw source text to parse and draw (repeatable)")
    p.add_argument("--format", choices=("html", "svg"), default="html")
    p.add_argument("--out", required=True, help="the HTML file, or the folder for the SVG files")
    p.add_argument("--no-eos", action="store_true", help="leave out the </s> the dataset appends")
    p.add_argument("--syntax-parser", default=None, metavar="NAME",
                   help="with --text: the spaCy pipeline that parses it (default: the one syntax.json records; "
                        "needed for a data-bin made from an external parse), as fairseq-interactive's option")
    return refuse_repeats(p)


def cli_main(argv: Optional[Sequence[str]] = None) -> int:
    return run_command(PROG, _main, argv)


def _main(argv: Optional[Sequence[str]] = None) -> int:
    parser = get_parser()
    args = parser.parse_args(argv)
    quiet_logging()
    if args.text and (args.sentences != "0" or args.split != "test"):
        parser.error("--text draws the given text: --sentences and --split choose sentences of a split instead")
    try:
        indices = [int(x) for x in args.sentences.split(",") if x.strip()] if not args.text else []
    except ValueError:
        parser.error(f"--sentences {args.sentences!r}: expected 0-based indices such as 0,5,7")
    indices = list(dict.fromkeys(indices))  # each sentence once
    if not args.text and not indices:
        parser.error("--sentences names no sentence: give 0-based indices such as 0,5,7")
    if len(indices) + len(args.text) > MAX_SENTENCES:
        parser.error(f"at most {MAX_SENTENCES} sentences a call (got {len(indices) + len(args.text)})")
    if any(not is_visible(t) for t in args.text):  # blanks, controls, zero-width and format characters alone
        parser.error("--text is empty: give the source sentence to parse")
    for t in args.text:
        try:
            t.encode("utf-8")
        except UnicodeEncodeError as error:
            bad = t[error.start].encode("utf-8", "surrogateescape")
            raise InputError("--text", None, f"is not UTF-8 (byte {bad!r} at character {error.start + 1}): "
                             "give the text in UTF-8") from None
    if not args.out or not args.out.strip():
        parser.error("--out is empty: name the HTML file, or the folder for the SVG files")
    if is_inside(args.out, args.data_bin):
        raise InputError(args.out, None, f"is inside the data-bin {args.data_bin} it draws from: write elsewhere")
    if args.format == "html":
        check_output_path(args.out, [], "--out")
    elif os.path.exists(args.out) and not os.path.isdir(args.out):
        raise InputError(args.out, None, "is not a folder: --format svg writes one file per sentence into --out")
    elif file_in_the_way(args.out) is not None:
        raise InputError(args.out, None, f"cannot write here: {file_in_the_way(args.out)} is a file, not a folder")
    if args.syntax_parser and not args.text:
        parser.error("--syntax-parser parses --text: the sentences of a split are drawn from their stored parse")
    task = _setup(args.data_bin, args.syntax_parser)
    trees = text_trees(task, args.text, not args.no_eos) if args.text else \
        split_trees(task, args.split, indices, not args.no_eos)
    # titles are HTML headings above each SVG: for the page only
    titled = args.format == "html"
    parses = [displacy_parse(pieces, heads, labels, tags, title=name if titled else "")
              for name, pieces, heads, labels, tags in trees]
    if args.format == "html":
        atomic_write_all([(args.out, text_writer([render(parses, page=True)]))])
        print(f"wrote {one_line(args.out)} ({len(parses)} sentence{'s' if len(parses) != 1 else ''})", file=sys.stderr)
        return 0
    paths = [os.path.join(args.out, f"{name}.svg") for name, *_ in trees]
    made = not os.path.isdir(args.out)
    os.makedirs(args.out, exist_ok=True)
    try:
        for path in paths:  # every file checked before any is written: all of them or none
            check_output_path(path, [], "--out")
        atomic_write_all([(path, text_writer([render([parse], page=False)])) for path, parse in zip(paths, parses)])
    except BaseException:
        if made:
            try:
                os.rmdir(args.out)  # the folder this call made, still empty
            except OSError:
                pass
        raise
    for path in paths:
        print(f"wrote {one_line(path)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(cli_main())
