"""``fairseq-syntax-perturb``: a copy of a data-bin whose parses are noisier, for parse-noise robustness.

    fairseq-syntax-perturb data-bin --destdir data-bin.p0.2 --p 0.2 --seed 1            # test splits
    fairseq-syntax-perturb data-bin --destdir noisy-bin --p 0.1 --splits train,valid,test

Xie et al. (2021) names robustness to parse errors as future work; this simulates a worse parser. The
perturbation works on the words, not the pieces: each word's tree is recovered from the piece
streams (a word is its first piece; later pieces hang from it or from each other with the
``<subword>`` label), and each word is perturbed with probability ``p``, in a random order:

* a non-root word is reattached to a head drawn uniformly from the words of its own tree that
  are not the word itself, one of its descendants or its present head (so the result is still a
  tree, with the same root, and the head changes; only where no other word qualifies, as in a
  sentence of two words, does the head stay);
* its label is replaced by another label of the data-bin's label dictionary, drawn uniformly
  (special symbols, ``<subword>``, ``</s>`` and the root label excluded). A root keeps its head
  and its label (a parser labels its root ``ROOT``/``root`` whatever else it gets wrong), so it
  is not counted as perturbed.

The perturbed word tree is projected onto the pieces again as the data-bin's rule did (first
pieces carry the word's head and label; the arcs inside words are unchanged). A phrase
structure converted from the dependency parse (the default) is converted again from the
perturbed tree; imported brackets (``--constituency-parse``) are kept as they are, since the
noise models a worse dependency parser (``syntax.json`` records which). Only the source side's
parse is perturbed: a target-side parse (Ma et al. (2019)'s target side) is copied unchanged, and
``syntax.json`` says so (``sides``). Text, dictionaries, POS and every split not chosen are
copied unchanged; the ``.conllu`` of a perturbed split keeps the pieces' text of the original.
Each split draws from its own generator, seeded with ``--seed`` and the split's name, so a
split's noise does not depend on which other splits are chosen (``syntax.json`` records the
scheme, :data:`SCHEME`). ``syntax.json`` records ``perturbation`` (p, seed,
splits, the source data-bin, words perturbed per split). The copy
is written beside ``--destdir`` and renamed into place when complete, as
``fairseq-syntax-preprocess`` does. Training on noisy parses is possible (``--splits
train,...``) but not the default: the robustness recipe perturbs test sets only.
"""

import argparse
import contextlib
import json
import logging
import os
import shutil
import sys
import zlib
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from fairseq_syntax_core.argtypes import refuse_repeats
from fairseq_syntax_core.databin import (
    HEAD, LABEL, METADATA_FILE, PARSED_LANGS_KEY, PHRASE, PHRASE_FROM_DEPENDENCY, PHRASE_STRUCTURE_KEY, POS, codes_file,
    recorded_perturbation, required, stream_prefix,
)
from fairseq_syntax_core.phrase import expand_to_pieces, from_dependency
from fairseq_syntax_core.split_digests import recorded as recorded_digests
from fairseq_syntax_core.split_digests import (
    FILES_KEY, check_split_files, split_file_digests,
)
from fairseq_syntax_core.errors import InputError, UsageError
from fairseq_syntax_core.jsonfile import read_json_file
from fairseq_syntax_core.indexed_files import (
    REBUILD, check_indexed_dataset, close_indexed_dataset, open_indexed_dataset,
)

from .conllu import format_conllu
from .destdir import check_data_bin_files, check_destdir, files_of, filling, is_inside, move_into_place, our_metadata
from fairseq_syntax_core.interrupts import USER_ERRORS, handle_termination, print_error, signals_deferred
from fairseq_syntax_core.startup import ensure_standard_output
from .word_tree import SUBWORD_LABEL, WordTree

PROG = "fairseq-syntax-perturb"
logger = logging.getLogger(__name__)
RESERVED_LABELS = (SUBWORD_LABEL, "</s>")
#: labels that only a root carries (spaCy's and Universal Dependencies' spelling)
ROOT_LABELS = ("ROOT", "root")
REMEDY = REBUILD
#: how the noise is drawn, recorded in syntax.json: a recipe re-perturbs a copy made another way
SCHEME = ("3: a generator per split seeded with (seed, crc32 of its name); roots keep head and label; "
          "a perturbed word gets another head where its tree has one")


def word_tree_of_pieces(heads: np.ndarray, is_first: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """(first piece of each word, 1-based head word of each word, 0 = root) from a piece-level tree."""
    first = np.flatnonzero(is_first)
    word_of_piece = np.cumsum(is_first) - 1
    piece_head = heads[first]  # 1-based piece, 0 = root
    word_head = np.where(piece_head == 0, 0, word_of_piece[np.maximum(piece_head - 1, 0)] + 1)
    return first, word_head


def phrase_of_pieces(heads: np.ndarray, is_first: np.ndarray) -> np.ndarray:
    """The piece-level phrase structure converted from a piece-level dependency tree, as the pipeline does."""
    if len(heads) == 0:
        return np.zeros((0, 2), dtype=np.int64)
    _, word_head = word_tree_of_pieces(np.asarray(heads, dtype=np.int64), is_first)
    return expand_to_pieces(from_dependency(word_head), np.cumsum(is_first) - 1)


def _root_and_ancestors(word_head: np.ndarray, w: int) -> List[int]:
    """0-based words from ``w`` up to its root, ``w`` included."""
    path, seen = [w], {w}
    while word_head[path[-1]] != 0:
        nxt = int(word_head[path[-1]]) - 1
        if nxt in seen:  # cannot happen in a valid tree; stop rather than loop
            break
        path.append(nxt)
        seen.add(nxt)
    return path


def perturb_words(word_head: np.ndarray, word_label: np.ndarray, p: float, labels: np.ndarray,
                  rng: np.random.Generator) -> Tuple[np.ndarray, np.ndarray, int]:
    """Perturb a word tree (see the module docstring); returns new heads, labels and the count.

    ``labels`` is the pool a non-root word's new label is drawn from (no root label in it).
    """
    heads, labs = word_head.copy(), word_label.copy()
    n = len(heads)
    count = 0
    for w in rng.permutation(n):
        if rng.random() >= p or heads[w] == 0:  # a root keeps its head and label
            continue
        count += 1
        others = labels[labels != labs[w]]
        if len(others):
            labs[w] = others[rng.integers(len(others))]
        root = _root_and_ancestors(heads, w)[-1]
        candidates = [c for c in range(n) if c != w and _root_and_ancestors(heads, c)[-1] == root
                      and w not in _root_and_ancestors(heads, c)]
        # another head where there is one (a perturbed word's head changes); never empty: w's head qualifies
        moved = [c for c in candidates if c != heads[w] - 1] or candidates
        heads[w] = moved[rng.integers(len(moved))] + 1
    return heads, labs, count


def perturb_pieces(heads: np.ndarray, labels: np.ndarray, subword: int, p: float, label_pool: np.ndarray,
                   rng: np.random.Generator) -> Tuple[np.ndarray, np.ndarray, int]:
    """A piece-level tree (1-based heads, label ids) with its words perturbed and projected back."""
    heads, labels = np.asarray(heads, dtype=np.int64), np.asarray(labels, dtype=np.int64)
    is_first = labels != subword
    if len(heads) == 0:
        return heads, labels, 0
    if not is_first[0]:
        raise ValueError("the first piece continues a word (<subword>)")
    first, word_head = word_tree_of_pieces(heads, is_first)
    new_head, new_label, count = perturb_words(word_head, labels[first], p, label_pool, rng)
    out_heads, out_labels = heads.copy(), labels.copy()
    out_heads[first] = np.where(new_head == 0, 0, first[np.maximum(new_head - 1, 0)] + 1)
    out_labels[first] = new_label
    return out_heads, out_labels, count


def _load(prefix: str, opened: contextlib.ExitStack):
    """An mmap indexed dataset, unmapped when ``opened`` closes, or an error naming its file (a system error,
    such as too many open files, as itself)."""
    for ext in (".bin", ".idx"):
        if not os.path.isfile(prefix + ext):
            raise InputError(prefix + ext, None, "not found: the data-bin is incomplete")
    check_indexed_dataset(prefix, REMEDY)  # names the damaged .idx or .bin
    data = open_indexed_dataset(prefix)
    opened.callback(close_indexed_dataset, data)
    failure = None
    try:
        if len(data):
            data[len(data) - 1]  # reads through the end of the .bin
    except Exception as error:  # truncated or foreign files surface as many exception types
        failure = InputError(prefix + ".bin", None, f"cannot be read as a fairseq indexed dataset "
                             f"({type(error).__name__}): damaged")
    if failure is not None:
        raise failure
    return data


def _tree_problem(heads: np.ndarray, labels: np.ndarray, pos: np.ndarray, n_pieces: int, subword: int,
                  n_labels: int, n_pos: int, forbidden: Sequence[int]) -> Optional[Tuple[str, str]]:
    """(the stream, what is wrong) with a stored piece tree (its heads, label and POS ids), or None.

    ``forbidden`` are the dictionaries' ids no word can carry (``<s>``, ``<pad>``, ``</s>``).
    """
    from fairseq_syntax_core.trees import validate_heads

    for stream, values in ((HEAD.name, heads), (LABEL.name, labels), (POS.name, pos)):
        if len(values) != n_pieces:
            return stream, f"{len(values)} values for {n_pieces} pieces"
    for stream, name, ids, size in ((LABEL.name, "label", labels, n_labels), (POS.name, "POS", pos, n_pos)):
        bad = (ids < 0) | (ids >= size) | np.isin(ids, forbidden)
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            return stream, f"piece {k + 1} has {name} id {int(ids[k])}, not a tag of the dictionary"
    if n_pieces and labels[0] == subword:
        return LABEL.name, "the first piece continues a word (<subword>)"
    try:
        validate_heads(heads)
    except ValueError as error:
        return HEAD.name, f"not a tree ({error})"
    # a piece that continues a word hangs inside its word (either projection rule), so the words form a
    # tree of their own and the word-level noise keeps the pieces a tree
    word_of_piece = np.cumsum(labels != subword) - 1
    inner = np.flatnonzero(labels == subword)
    outside = (heads[inner] == 0) | (word_of_piece[np.maximum(heads[inner] - 1, 0)] != word_of_piece[inner])
    if outside.any():
        k = int(inner[np.flatnonzero(outside)[0]])
        where = "is a root" if heads[k] == 0 else f"hangs from piece {int(heads[k])}, in another word"
        return HEAD.name, f"piece {k + 1} continues a word (<subword>) but {where}"
    return None


def _original_forms(path: str, n: int) -> Optional[List[List[str]]]:
    """The pieces' text of each sentence from the split's ``.conllu`` (None when it is not there or
    does not match): the dictionary maps a piece it does not hold to ``<unk>``, the file does not."""
    if not os.path.isfile(path):
        return None
    forms: List[List[str]] = [[]]
    try:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                line = line.rstrip("\n")
                if not line.strip():
                    if forms[-1]:
                        forms.append([])
                elif not line.startswith("#"):
                    columns = line.split("\t")
                    if len(columns) != 10:
                        return None
                    forms[-1].append(columns[1])
    except (OSError, ValueError):  # unreadable or not UTF-8: the dictionary's symbols instead
        return None
    if not forms[-1]:
        forms.pop()
    return forms if len(forms) == n else None


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data_bin", help="a data-bin made by fairseq-syntax-preprocess")
    p.add_argument("--destdir", required=True, help="the perturbed copy")
    p.add_argument("--p", type=float, required=True, help="probability that a word is perturbed, in [0, 1]")
    p.add_argument("--seed", type=int, default=1, help="seed of the noise (a non-negative integer)")
    p.add_argument("--splits", default=None,
                   help="comma-separated splits to perturb (default: the test splits, test, test1, ...)")
    p.add_argument("--overwrite", action="store_true", help="replace a data-bin already at --destdir")
    return refuse_repeats(p)


def run(args) -> Dict[str, int]:
    """Write the perturbed copy; returns the number of words perturbed per split."""
    from fairseq.data import Dictionary

    from .side_files import write_streams

    if not 0.0 <= args.p <= 1.0:
        raise UsageError(f"--p {args.p}: expected a probability in [0, 1]")
    args.p = abs(args.p)  # in [0, 1]: only -0.0 changes, recorded as 0.0
    if args.seed < 0:
        raise UsageError(f"--seed {args.seed}: expected a non-negative integer")
    meta_path = os.path.join(args.data_bin, METADATA_FILE)
    meta = our_metadata(meta_path)
    if meta is None:
        read_json_file(meta_path, remedy=REMEDY)  # missing, unreadable, not JSON: that, in one line
        raise InputError(meta_path, None, "not found or not written by fairseq-syntax-preprocess: "
                         "perturb a data-bin the pipeline made")
    src, tgt = required(meta, "source_lang", meta_path), required(meta, "target_lang", meta_path)
    recorded_perturbation(meta, meta_path)  # an earlier round's record is carried on: it must be one
    streams = meta.get(PARSED_LANGS_KEY, {}).get(src, [])
    if HEAD.name not in streams or LABEL.name not in streams:
        raise InputError(meta_path, None, f"the source '{src}' has no parse streams to perturb")
    known = list(meta.get("splits", {}))
    if args.splits is not None and not all(x.strip() for x in args.splits.split(",")):
        raise UsageError(f"--splits {args.splits!r}: an empty split name (an unset variable?): give split names "
                         f"separated by commas, of {known}")
    requested = [x.strip() for x in args.splits.split(",") if x.strip()] if args.splits else \
        [s for s in known if s.startswith("test")]
    splits = list(dict.fromkeys(requested))  # each split once
    unknown = [s for s in splits if s not in known]
    if unknown or not splits:
        raise UsageError(f"--splits {args.splits or '(test splits)'}: the data-bin holds {known}")
    check_destdir(args.destdir, args.overwrite, [args.data_bin])
    if is_inside(args.destdir, args.data_bin):
        raise UsageError(f"--destdir {args.destdir} is inside the data-bin {args.data_bin} it copies: write elsewhere")
    # the BPE codes by the name syntax.json records (a plain file name of the folder: codes_file refuses others)
    codes = codes_file(meta, meta_path)
    recorded_codes = [codes] if (meta.get("bpe") or {}).get("name", "none") != "none" else []
    for name in (f"dict.{src}.{LABEL.dictionary}.txt", f"dict.{src}.{POS.dictionary}.txt", f"dict.{src}.txt",
                 *recorded_codes):
        if not os.path.isfile(os.path.join(args.data_bin, name)):
            raise InputError(os.path.join(args.data_bin, name), None, "not found: the data-bin is incomplete")
    check_data_bin_files(args.data_bin, meta)  # what is copied unchanged too: the copy is a data-bin that loads
    labels = Dictionary.load(os.path.join(args.data_bin, f"dict.{src}.{LABEL.dictionary}.txt"))
    specials = {labels.bos(), labels.pad(), labels.eos(), labels.unk()}
    reserved = {labels.index(x) for x in RESERVED_LABELS if x in labels.indices}
    roots = {labels.index(x) for x in ROOT_LABELS if x in labels.indices}
    pool = np.asarray([i for i in range(len(labels)) if i not in specials | reserved | roots], dtype=np.int64)
    subword = labels.indices.get(SUBWORD_LABEL, -1)
    forbidden = [labels.bos(), labels.pad(), labels.eos()]  # the same ids in every fairseq Dictionary
    pos_dict = Dictionary.load(os.path.join(args.data_bin, f"dict.{src}.{POS.dictionary}.txt"))
    src_dict = Dictionary.load(os.path.join(args.data_bin, f"dict.{src}.txt"))

    phrase_source = (meta.get(PHRASE_STRUCTURE_KEY) or {}).get("source", PHRASE_FROM_DEPENDENCY)
    reconvert = PHRASE.name in streams and phrase_source == PHRASE_FROM_DEPENDENCY
    written = [HEAD.name, LABEL.name] + ([PHRASE.name] if reconvert else [])

    counts: Dict[str, int] = {}
    # the datasets are unmapped (ExitStack) before an error removes the temporary folder: with the file
    # descriptors used up (EMFILE) the removal itself needs some
    with filling(args.destdir) as out, contextlib.ExitStack() as opened:
        inside = os.path.realpath(args.data_bin)
        for name in sorted(files_of(meta) | {codes}):
            path = os.path.join(args.data_bin, name)
            if os.path.islink(path) and os.path.dirname(os.path.realpath(path)) != inside:
                raise InputError(path, None, "is a symbolic link out of the data-bin: the copy takes the data-bin's "
                                             "own files only (copy the file in, or perturb a data-bin without links)")
            if os.path.isfile(path):
                shutil.copy2(path, os.path.join(out, name))
        for split in splits:
            # a split's noise depends on the seed and its own name, not on the other splits chosen
            rng = np.random.default_rng([args.seed, zlib.crc32(split.encode("utf-8"))])
            prefix = {s: stream_prefix(args.data_bin, split, src, tgt, src, s) for s in (HEAD.name, LABEL.name, POS.name)}
            prefix["text"] = os.path.join(args.data_bin, f"{split}.{src}-{tgt}.{src}")
            data = {s: _load(pre, opened) for s, pre in prefix.items()}
            text = data.pop("text")
            n = len(text)
            for s_name, d in data.items():
                if len(d) != n:
                    raise InputError(prefix[s_name] + ".bin", None, f"holds {len(d)} sentences, the source text {n}: "
                                     "damaged, or from another run")
            recorded = (meta.get("splits", {}).get(split) or {}).get("sentences")
            if isinstance(recorded, int) and recorded != n:
                raise InputError(meta_path, None, f"records {recorded} sentences for split {split!r}, its files hold "
                                 f"{n}: the metadata of another data-bin; {REMEDY}")
            forms = _original_forms(stream_prefix(args.data_bin, split, src, tgt, src, "conllu"), n)
            trees: List[WordTree] = []
            counts[split] = 0
            for i in range(len(data[HEAD.name])):
                heads = data[HEAD.name][i].numpy()
                label_ids = data[LABEL.name][i].numpy()
                pos_ids = data[POS.name][i].numpy()
                problem = _tree_problem(heads, label_ids, pos_ids, len(text[i]) - 1, subword, len(labels),
                                        len(pos_dict), forbidden)
                if problem:
                    raise InputError(prefix[problem[0]] + ".bin", None, f"sentence {i}: {problem[1]}: damaged, or "
                                     "from another run")
                new_heads, new_labels, c = perturb_pieces(heads, label_ids, subword, args.p, pool, rng)
                counts[split] += c
                pieces = forms[i] if forms is not None and len(forms[i]) == len(heads) else \
                    [src_dict[t] for t in text[i].tolist()[:-1]]
                tree = WordTree(words=pieces, heads=new_heads, labels=[labels[x] for x in new_labels],
                                pos=[pos_dict[x] for x in pos_ids.tolist()])
                if reconvert:
                    tree.phrase = phrase_of_pieces(new_heads, new_labels != subword)
                trees.append(tree)
            check_split_files(args.data_bin, meta, split, src, tgt)  # after what names a damage
            out_prefix = {s: stream_prefix(out, split, src, tgt, src, s) for s in written}
            write_streams(out_prefix, trees, {LABEL.name: labels}, written)
            with open(stream_prefix(out, split, src, tgt, src, "conllu"), "w", encoding="utf-8") as handle:
                for i, tree in enumerate(trees, start=1):
                    handle.write(format_conllu(tree, f"sent_id = {split}-{i}", meta.get("pos_column", "upos")))
            opened.close()  # this split's datasets (nothing read from them is used after: the trees hold copies)
        meta = dict(meta, splits={k: dict(v) for k, v in meta.get("splits", {}).items()})
        checked = {}
        for split in meta["splits"]:  # the copied splits checked: a split whose record was none (an earlier
            if split not in splits:  # release's) stays without one, warned about, not recorded afresh as checked
                check_split_files(args.data_bin, meta, split, src, tgt)
            checked[split] = split in splits or recorded_digests(meta, split) is not None
        for split in meta["splits"]:  # then the digests: the perturbed splits' are new
            if checked[split]:
                meta["splits"][split][FILES_KEY] = split_file_digests(out, split, src, tgt)
        record = {"p": args.p, "seed": args.seed, "splits": splits, "phrase_structure_reconverted": reconvert,
                  "sides": [src], "unchanged_sides": [lang for lang in meta.get(PARSED_LANGS_KEY, {}) if lang != src],
                  "rng": SCHEME,
                  "source": os.path.abspath(args.data_bin), "words_perturbed": counts}
        if "perturbation" in meta:  # a perturbed data-bin perturbed again: keep the earlier round
            record["previous"] = meta["perturbation"]
        meta["perturbation"] = record
        with open(os.path.join(out, METADATA_FILE), "w", encoding="utf-8") as handle:
            json.dump(meta, handle, indent=2, sort_keys=True)
            handle.write("\n")
        with signals_deferred():
            move_into_place(out, args.destdir, args.overwrite)
    return counts


def cli_main(argv: Optional[Sequence[str]] = None) -> int:
    logging.basicConfig(format="%(asctime)s | %(levelname)s | %(name)s | %(message)s", level=logging.INFO, stream=sys.stderr)
    handle_termination()
    try:
        ensure_standard_output()
        counts = run(get_parser().parse_args(argv))
    except USER_ERRORS as error:  # OSError: disk full, permissions; it names the file
        return print_error(PROG, error)
    for split, c in counts.items():
        print(f"{split}: {c} words perturbed", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(cli_main())
