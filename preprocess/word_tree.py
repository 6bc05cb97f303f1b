"""The word-level dependency tree of one source line, as the parser or a CoNLL-U file gives it."""

from dataclasses import dataclass, field
from typing import List, Optional

import numpy as np

from fairseq_syntax_core.oneline import quoted

from fairseq_syntax_core.vocabulary import SUBWORD_LABEL  # the arc from a later piece of a word (projection.py)
#: symbols a label or POS tag may not be: fairseq's dictionary specials, and ours
RESERVED_TAGS = frozenset({"<s>", "<pad>", "</s>", "<unk>", SUBWORD_LABEL})


def tag_problem(value: str) -> Optional[str]:
    """Why ``value`` cannot be stored as a dependency label or POS tag, or None if it can."""
    if not value:
        return "is empty"
    if any(c.isspace() for c in value):
        return f"{quoted(value)} contains white space"
    if value in RESERVED_TAGS:
        return f"{quoted(value)} is a reserved symbol ({', '.join(sorted(RESERVED_TAGS))})"
    return None


@dataclass
class WordTree:
    """One source line: its MT tokens and their dependency tree.

    ``heads[i]`` is the 1-based position of token i's head within the line, 0 for a root.
    A line that the parser split into several sentences has several roots.

    ``phrase``: the binary phrase structure as merges (:mod:`fairseq_syntax_core.phrase`), when
    one was imported; None derives it from the dependency tree at projection
    (:func:`fairseq_syntax_core.phrase.from_dependency`). ``has_phrase`` False: the line has no
    phrase structure (a fallback the user allowed), stored as no merge.
    """

    words: List[str]
    heads: np.ndarray
    labels: List[str]
    pos: List[str]
    phrase: Optional[np.ndarray] = field(default=None, repr=False)
    has_phrase: bool = True

    def __len__(self) -> int:
        return len(self.words)

    @property
    def num_roots(self) -> int:
        return int((self.heads == 0).sum())

    def is_projective(self) -> bool:
        """True when no two arcs cross (arcs of different sentences never do)."""
        n = len(self.words)
        if n < 3:
            return True
        has_head = self.heads > 0
        dependents = np.arange(1, n + 1)[has_head]
        heads = self.heads[has_head]
        left, right = np.minimum(dependents, heads), np.maximum(dependents, heads)
        # arcs (l1, r1) and (l2, r2) cross iff l1 < l2 < r1 < r2: by left end (the longer first at a tie), each
        # arc must close within the innermost arc still open at its left end; O(n log n) time, O(n) memory
        order = np.lexsort((-right, left))
        open_ends: List[int] = []
        for start, end in zip(left[order].tolist(), right[order].tolist()):
            while open_ends and open_ends[-1] <= start:
                open_ends.pop()
            if open_ends and end > open_ends[-1]:
                return False
            open_ends.append(end)
        return True
