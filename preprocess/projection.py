"""Projection of a word-level dependency tree onto BPE pieces.

Rules (the data-bin's ``syntax.json`` records which one made it):

``first`` (default; Duan et al. 2019, section III.D)
    The first piece of a word inherits the word's label, POS and head, attaching to the
    first piece of the head word. Every later piece of the word attaches to the word's
    first piece with the reserved label :data:`SUBWORD_LABEL`. All pieces keep the word's POS.
``chain``
    As ``first`` for the first piece; every later piece attaches to the piece just before it
    (a right-branching chain inside the word), again with :data:`SUBWORD_LABEL`. Depth then
    grows along a long word instead of staying flat.

Either way a word's dependents attach to its first piece, roots stay roots (head 0) and a
line with several sentences keeps its several roots.

The phrase structure (imported, or converted from the word-level dependency tree) is
projected the same way for both rules: the pieces of a split word form a right-branching
subtree, so the word is one node (:func:`fairseq_syntax_core.phrase.expand_to_pieces`).
"""

from typing import List, Sequence

import numpy as np

from fairseq_syntax_core.phrase import EMPTY, expand_to_pieces, from_dependency

from .bpe import word_index_of_pieces
from .word_tree import SUBWORD_LABEL, WordTree

RULES = ("first", "chain")


def project(tree: WordTree, pieces: Sequence[str], rule: str = "first") -> WordTree:
    """The piece-level tree for ``pieces``, the BPE segmentation of ``tree.words``."""
    if rule not in RULES:
        raise ValueError(f"unknown projection rule {rule!r}; choose from {RULES}")
    n_words = len(tree.words)
    if len(pieces) == 0 and n_words == 0:  # an empty line at decoding: only </s> follows
        return WordTree(words=[], heads=np.zeros(0, dtype=np.int64), labels=[], pos=[], phrase=EMPTY.copy(),
                        has_phrase=tree.has_phrase)
    word_of_piece = word_index_of_pieces(pieces)
    if len(pieces) == 0 or word_of_piece[-1] + 1 != n_words:
        raise ValueError(
            f"{len(pieces)} pieces spell {0 if len(pieces) == 0 else word_of_piece[-1] + 1} words, "
            f"the tree has {n_words}"
        )
    n = len(pieces)
    is_first = np.ones(n, dtype=bool)
    is_first[1:] = word_of_piece[1:] != word_of_piece[:-1]
    first_piece = np.flatnonzero(is_first)  # first piece of each word, 0-based
    word_head = tree.heads[word_of_piece]  # 1-based head word of each piece's word, 0 = root
    head_of_first = np.where(word_head == 0, 0, first_piece[np.maximum(word_head - 1, 0)] + 1)
    positions = np.arange(n)
    if rule == "first":
        later_head = first_piece[word_of_piece] + 1
    else:  # chain: the previous piece, 1-based index = own 0-based index
        later_head = positions
    heads = np.where(is_first, head_of_first, later_head).astype(np.int64)
    labels: List[str] = [tree.labels[w] if f else SUBWORD_LABEL for w, f in zip(word_of_piece, is_first)]
    pos = [tree.pos[w] for w in word_of_piece]
    word_phrase = None
    if tree.has_phrase:
        word_phrase = tree.phrase if tree.phrase is not None else from_dependency(tree.heads)
    phrase = expand_to_pieces(word_phrase, word_of_piece)
    return WordTree(words=list(pieces), heads=heads, labels=labels, pos=pos, phrase=phrase, has_phrase=tree.has_phrase)
