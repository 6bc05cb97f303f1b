"""Importing phrase-structure trees in PTB bracket format (``--constituency-parse ptb``).

Input: ``PREFIX.SRC.ptb`` beside each split's text, one bracketed tree per line, as written by
Berkeley/benepar, CoreNLP, Stanza or Enju converted to brackets, e.g.
``(ROOT (S (NP (DT The) (NN dog)) (VP (VBZ runs)) (. .)))``. The brackets are read with
NLTK's ``Tree.fromstring``. A line may hold several trees (a line the parser split into
sentences); they are joined like the constituents of one node (below).

Leaves must be the MT tokens of the line, compared after one normalisation of both
conventions (:func:`leaf_view`): PTB escapes (``-LRB-`` ``-RRB-`` ``-LSB-`` ``-RSB-`` ``-LCB-``
``-RCB-``, ``` `` ``` and ``''`` for double quotes, ``\\/`` and ``\\*``) and Moses escapes
(``&apos;`` ``&quot;`` ``&amp;`` ``&lt;`` ``&gt;`` ``&#91;`` ``&#93;`` ``&#124;`` and the
aggressive-hyphen ``@-@``) are both undone. A different tokenization (PTB's ``ca n't``
against Moses' ``can 't``) is a mismatch: parse the MT tokens (e.g. benepar on the
tokenized text).

Shape: a **unary chain** (``(NP (NN dog))``, a preterminal over its word, ``(ROOT (S ...))``)
collapses to its lowest node, so POS preterminals vanish and the leaves are the words. An
**n-ary node** ``(A B C D)`` is binarized **right-factored**, ``(A (B (C D)))`` (NLTK's
``chomsky_normal_form`` default factoring), and labels are dropped: the stored form is the
merges of :mod:`fairseq_syntax_core.phrase`.

Errors name the file, the line and what was expected: brackets that do not parse, an empty
line or one without a tree, an empty constituent, leaves that differ from the text (the first
differing leaf). With ``--phrase-fallback`` such a line instead gets no tree (counted in the
summary and ``syntax.json``); a file with another number of lines than the text is always an
error.
"""

import re
from typing import List, Optional, Sequence, Tuple

import numpy as np

from fairseq_syntax_core.errors import InputError
from fairseq_syntax_core.phrase import right_branching

from fairseq_syntax_core.fileio import read_lines
from .tokenize import parser_view

EXTENSION = "ptb"

_PTB_ESCAPES = {
    "-LRB-": "(", "-RRB-": ")", "-LSB-": "[", "-RSB-": "]", "-LCB-": "{", "-RCB-": "}",
    "``": '"', "''": '"',
}


def leaf_view(token: str) -> str:
    """The form a PTB leaf and an MT token are compared in (see module doc)."""
    token = _PTB_ESCAPES.get(token, token)
    if token == "@-@":
        return "-"
    if "\\" in token:
        token = token.replace("\\/", "/").replace("\\*", "*")
    return parser_view(token)


class BracketError(ValueError):
    """A line that is not a usable tree; the message says why."""


def _parse(line: str):
    from nltk import Tree

    text = line.strip()
    if not text:
        raise BracketError("empty line: expected a bracketed tree such as (S (NP ...) (VP ...))")
    if not text.startswith("("):
        raise BracketError(f"expected a bracketed tree starting with '(', found {text[:30]!r}")
    wrapper = "(LINE "
    try:
        # a wrapper node: several trees on the line become its children, one tree a unary chain
        return Tree.fromstring(f"{wrapper}{text})")
    except ValueError as error:
        if "MAX_TREE_DEPTH" in str(error):
            from nltk.tree import tree as nltk_tree

            raise BracketError(f"the brackets nest deeper than {nltk_tree.MAX_TREE_DEPTH} levels, NLTK's limit "
                               "against adversarial input: not a parse of one sentence") from None
        found = re.search(r"expected (.*?) but got (.*?)\s+at index (\d+)", str(error), re.S)
        if found is None:
            raise BracketError(f"the brackets do not parse: {' '.join(str(error).split())}") from None
        expected, got, index = found.group(1), found.group(2), int(found.group(3)) - len(wrapper)
        where = "the end of the line" if index >= len(text) else f"character {index + 1} ({text[max(0, index - 10):index + 10]!r})"
        raise BracketError(f"the brackets do not parse: expected {expected} but found {got} at {where}") from None


def tree_merges(line: str) -> Tuple[np.ndarray, List[str]]:
    """The merges (stored form) and the leaves of one line of brackets (see module doc)."""
    from nltk import Tree

    tree = _parse(line)
    outside = [child for child in tree if not isinstance(child, Tree)]
    if outside:
        raise BracketError(f"word {outside[0]!r} stands outside every bracketed tree of the line")
    leaves: List[str] = []
    merges: List[List[int]] = []
    # iterative post-order: (node, visited); a node's value is its id in the merged tree
    values: List[int] = []
    stack = [(tree, False)]
    internal: List[List[int]] = []  # per internal node, its children's ids (filled bottom-up)
    while stack:
        node, visited = stack.pop()
        if not isinstance(node, Tree):
            values.append(len(leaves))
            leaves.append(str(node))
            continue
        if not visited:
            if len(node) == 0:
                raise BracketError(f"constituent ({node.label()}) is empty: expected words or constituents in it")
            stack.append((node, True))
            stack.extend((child, False) for child in reversed(node))
            continue
        children = values[len(values) - len(node):]
        del values[len(values) - len(node):]
        internal.append(children)
        values.append(-len(internal))  # placeholder: numbered once the leaf count is known
    n = len(leaves)
    # number the merges: leaves are 0..n-1, each n-ary node adds (arity - 1) merges, bottom-up
    node_id: List[int] = []
    next_id = n
    for children in internal:
        ids = [c if c >= 0 else node_id[-c - 1] for c in children]
        if len(ids) == 1:  # unary: collapsed onto its child
            node_id.append(ids[0])
            continue
        part, top, next_id = right_branching(ids, next_id)
        merges.extend(part)
        node_id.append(top)
    return np.asarray(merges, dtype=np.int64).reshape(-1, 2), leaves


def read_trees(
    path: str, token_lines: Sequence[List[str]], text_path: str, fallback: bool = False
) -> Tuple[List[Optional[np.ndarray]], List[int]]:
    """Word-level merges for every text line (None: no tree, with ``fallback``), and the fallback lines.

    ``token_lines`` are the MT tokens of every line of ``text_path`` (before any line is
    skipped); the bracket file must have exactly one line for each.
    """
    lines = read_lines(path, "bracketed parse")
    if len(lines) != len(token_lines):
        # a tree dropped or added in the middle shifts every later one: name the first line whose
        # tree does not fit its text too, which is where to look
        first = next((number for number, (line, tokens) in enumerate(zip(lines, token_lines), start=1)
                      if not _fits(line, tokens)), None)
        hint = f"; the first tree that does not fit its line is line {first}" if first is not None else ""
        raise InputError(path, min(len(lines), len(token_lines)) + 1,
                         f"line-count mismatch: {len(lines)} bracketed trees for the {len(token_lines)} "
                         f"lines of {text_path}: expected one tree per line{hint}")
    out: List[Optional[np.ndarray]] = []
    failed: List[int] = []
    for number, (line, tokens) in enumerate(zip(lines, token_lines), start=1):
        try:
            merges, leaves = tree_merges(line)
            _check_leaves(leaves, tokens, text_path, number)
        except BracketError as error:
            if not fallback:
                raise InputError(path, number, f"{error} (or allow lines without a tree with --phrase-fallback)") from None
            out.append(None)
            failed.append(number)
            continue
        out.append(merges)
    return out, failed


def _fits(line: str, tokens: List[str]) -> bool:
    try:
        _check_leaves(tree_merges(line)[1], tokens, "", 0)
    except BracketError:
        return False
    return True


def _check_leaves(leaves: List[str], tokens: List[str], text_path: str, number: int) -> None:
    found = [leaf_view(t) for t in leaves]
    expected = [leaf_view(t) for t in tokens]
    if found == expected:
        return
    k = next((i for i, (a, b) in enumerate(zip(found, expected)) if a != b), min(len(found), len(expected)))
    got = repr(leaves[k]) if k < len(leaves) else "<end of tree>"
    want = repr(tokens[k]) if k < len(tokens) else "<end of line>"
    raise BracketError(
        f"leaves differ from {text_path} line {number}: leaf {k + 1} is {got} in the tree, {want} in the text "
        f"({len(leaves)} leaves, {len(tokens)} tokens)"
    )
