"""Reading and writing CoNLL-U (https://universaldependencies.org/format.html).

Reading follows the spec: comment lines start with ``#``; a sentence ends at a blank
line; word lines have 10 tab-separated columns; ``ID`` is an integer (a syntactic word),
a range ``a-b`` (a multiword token, whose FORM is the surface token) or a decimal ``a.b``
(an empty node of the enhanced graph, ignored for the basic tree).

Integers are read strictly, as the format defines them: ASCII digits without sign, underscore
or leading zero (Python's ``int`` would also take ``+3``, ``1_0`` and full-width digits).
DEPREL and the POS column read must be labels: not empty, no white space, not one of the
symbols the dictionaries reserve (``<pad>``, ``</s>``, ...), which would be stored as padding
or end of sentence.

The MT tokens are surface tokens, so a multiword token becomes one token: its head,
label and POS are those of the word of the range whose head lies outside the range
(the first such word if several do); heads of the other words are remapped to the token.
"""

import io
import re
from typing import Iterator, List, Optional, TextIO, Tuple

import numpy as np

from fairseq_syntax_core.trees import TreeError, validate_heads
from fairseq_syntax_core.oneline import quoted

from fairseq_syntax_core.errors import InputError
from fairseq_syntax_core.fileio import check_input_file, decode_utf8
from .word_tree import WordTree, tag_problem

POS_COLUMNS = {"upos": 3, "xpos": 4}
_NATURAL = re.compile(r"(0|[1-9][0-9]*)\Z", re.ASCII)
_RANGE = re.compile(r"[1-9][0-9]*-[1-9][0-9]*\Z", re.ASCII)
_EMPTY_NODE = re.compile(r"(0|[1-9][0-9]*)\.[1-9][0-9]*\Z", re.ASCII)


def _parse_int(value: str, path: str, line_no: int, column: str) -> int:
    if not _NATURAL.match(value):
        raise InputError(
            path, line_no, f"{column} must be a whole number in ASCII digits (0, 1, 2, ...), found {quoted(value)}"
        )
    return int(value)


def _check_tag(value: str, path: str, line_no: int, column: str) -> str:
    problem = tag_problem(value)
    if problem is not None:
        raise InputError(path, line_no, f"{column} {problem}; expected a label")
    return value


def read_conllu(handle: TextIO, path: str, pos_column: str = "upos") -> Iterator[Tuple[int, WordTree]]:
    """Yield ``(line number of the sentence's first word line, tree over surface tokens)``."""
    pos_index = POS_COLUMNS[pos_column]
    rows: List[Tuple[int, List[str]]] = []
    line_no = 0
    for line_no, raw in enumerate(handle, start=1):
        line = raw.rstrip("\n").rstrip("\r")
        if not line.strip():
            if rows:
                yield rows[0][0], _sentence_to_tree(rows, path, pos_index)
                rows = []
            continue
        if line.startswith("#"):
            continue
        columns = line.split("\t")
        if len(columns) != 10:
            raise InputError(
                path, line_no, f"expected 10 tab-separated CoNLL-U columns, found {len(columns)}"
            )
        rows.append((line_no, columns))
    if rows:
        yield rows[0][0], _sentence_to_tree(rows, path, pos_index)


def _sentence_to_tree(rows: List[Tuple[int, List[str]]], path: str, pos_index: int) -> WordTree:
    words: List[Tuple[int, List[str]]] = []  # syntactic words, in order
    ranges: List[Tuple[int, int, str, int]] = []  # (first id, last id, surface form, line)
    for line_no, columns in rows:
        word_id = columns[0]
        if _EMPTY_NODE.match(word_id):
            continue  # empty node: enhanced graph only
        if not (_RANGE.match(word_id) or _NATURAL.match(word_id)):
            raise InputError(
                path, line_no,
                f"ID must be a word number (1, 2, ...), a range (1-2) or an empty node (1.1), found {quoted(word_id)}",
            )
        if "-" in word_id:
            first, _, last = word_id.partition("-")
            a = _parse_int(first, path, line_no, "ID range start")
            b = _parse_int(last, path, line_no, "ID range end")
            if b < a:
                raise InputError(path, line_no, f"multiword token range {word_id} is empty")
            for c, d, _form, other_line in ranges:  # UD: ranges never overlap, nest or repeat
                if a <= d and c <= b:
                    raise InputError(path, line_no, f"multiword token range {word_id} overlaps the range {c}-{d} "
                                                    f"(line {other_line}): a word belongs to one token")
            ranges.append((a, b, columns[1], line_no))
            continue
        expected = len(words) + 1
        if _parse_int(word_id, path, line_no, "ID") != expected:
            raise InputError(path, line_no, f"expected word ID {expected}, found {quoted(word_id)}")
        words.append((line_no, columns))
    if not words:
        raise InputError(path, rows[0][0], "sentence has no word lines")
    n = len(words)
    heads = np.empty(n, dtype=np.int64)
    for i, (line_no, columns) in enumerate(words):
        head = _parse_int(columns[6], path, line_no, "HEAD")
        if head < 0 or head > n:
            raise InputError(path, line_no, f"HEAD {head} is outside 0..{n} (the sentence has {n} words)")
        heads[i] = head
        _check_tag(columns[7], path, line_no, "DEPREL")
        _check_tag(columns[pos_index], path, line_no, "UPOS" if pos_index == 3 else "XPOS")
    try:
        validate_heads(heads)
    except TreeError as error:
        raise InputError(path, words[0][0], f"not a dependency tree: {error}") from None

    # token index (0-based) of each syntactic word, and the representative word of each token
    token_of_word = np.arange(n)
    representative = list(range(n))
    keep = np.ones(n, dtype=bool)
    for a, b, form, line_no in ranges:
        if a < 1 or b > n:
            raise InputError(path, line_no, f"multiword token range {a}-{b} is outside 1..{n}")
        inside = np.arange(a - 1, b)
        outside_head = [w for w in inside if not (a <= heads[w] <= b)]
        rep = outside_head[0] if outside_head else inside[0]
        keep[inside] = False
        keep[rep] = True
        representative[rep] = rep
        words[rep] = (words[rep][0], words[rep][1][:1] + [form] + words[rep][1][2:])
        token_of_word[inside] = rep
    kept = np.flatnonzero(keep)
    new_index = np.full(n, -1)
    new_index[kept] = np.arange(len(kept))
    token_index = new_index[token_of_word]  # every word -> its surface token
    kept_heads = heads[kept]
    token_heads = np.where(kept_heads == 0, 0, token_index[np.maximum(kept_heads - 1, 0)] + 1)
    return WordTree(
        words=[words[w][1][1] for w in kept],
        heads=token_heads.astype(np.int64),
        labels=[words[w][1][7] for w in kept],
        pos=[words[w][1][pos_index] for w in kept],
    )


def concatenate(trees: List[WordTree]) -> WordTree:
    """Join the trees of several sentences of one source line (each keeps its root)."""
    if len(trees) == 1:
        return trees[0]
    offsets = np.cumsum([0] + [len(t) for t in trees[:-1]])
    heads = np.concatenate([np.where(t.heads == 0, 0, t.heads + off) for t, off in zip(trees, offsets)])
    return WordTree(
        words=[w for t in trees for w in t.words],
        heads=heads,
        labels=[x for t in trees for x in t.labels],
        pos=[x for t in trees for x in t.pos],
    )


def format_conllu(
    tree: WordTree, comment: Optional[str] = None, pos_column: str = "upos"
) -> str:
    """One sentence in CoNLL-U; POS goes to the UPOS or XPOS column as it came from there."""
    lines = [f"# {comment}"] if comment else []
    for i, (word, head, label, pos) in enumerate(zip(tree.words, tree.heads, tree.labels, tree.pos)):
        upos, xpos = (pos, "_") if pos_column == "upos" else ("_", pos)
        lines.append(f"{i + 1}\t{word}\t_\t{upos}\t{xpos}\t_\t{int(head)}\t{label}\t_\t_")
    return "\n".join(lines) + "\n\n"


def trees_for_lines(
    conllu_path: str, token_lines: List[List[str]], text_path: str, pos_column: str = "upos"
) -> Iterator[WordTree]:
    """One tree per text line from an external CoNLL-U parse of those lines.

    A parser may split a line into several sentences: consecutive CoNLL-U sentences are
    joined until they cover the line's tokens, keeping one root per sentence. Tokens must
    equal the line's tokens (compared as the parser sees them, Moses escapes undone).
    """
    from .tokenize import parser_view

    check_input_file(conllu_path, "CoNLL-U parse")
    with open(conllu_path, "rb") as raw:
        text = decode_utf8(raw.read(), conllu_path)
    with io.StringIO(text.lstrip("\ufeff"), newline="\n") as handle:
        sentences = read_conllu(handle, conllu_path, pos_column)
        for text_line, tokens in enumerate(token_lines, start=1):
            parts: List[WordTree] = []
            covered = 0
            while covered < len(tokens):
                try:
                    start_line, tree = next(sentences)
                except StopIteration:
                    raise InputError(
                        conllu_path,
                        None,
                        f"the parse ends before line {text_line} of {text_path} is covered "
                        f"(fewer parsed sentences than text lines)",
                    ) from None
                expected = [parser_view(t) for t in tokens[covered : covered + len(tree)]]
                found = [parser_view(w) for w in tree.words]
                if expected != found:
                    mismatch = next(
                        (i for i, (a, b) in enumerate(zip(expected, found)) if a != b), len(expected)
                    )
                    want = expected[mismatch] if mismatch < len(expected) else "<end of line>"
                    got = found[mismatch] if mismatch < len(found) else "<end of sentence>"
                    raise InputError(
                        conllu_path,
                        start_line,
                        f"parse words differ from {text_path} line {text_line}: token "
                        f"{covered + mismatch + 1} is {quoted(got)} in the parse, {quoted(want)} in the text",
                    )
                parts.append(tree)
                covered += len(tree)
            merged = concatenate(parts)
            merged.words = list(tokens)
            yield merged
        leftover = next(sentences, None)
        if leftover is not None:
            raise InputError(
                conllu_path,
                leftover[0],
                f"the parse has more sentences than {text_path} has lines ({len(token_lines)})",
            )
