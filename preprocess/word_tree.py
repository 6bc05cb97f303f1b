"""The word-level dependency tree of one source line, as the parser or a CoNLL-U file gives it."""

from dataclasses import dataclass
from typing import List

import numpy as np


@dataclass
class WordTree:
    """One source line: its MT tokens and their dependency tree.

    ``heads[i]`` is the 1-based position of token i's head within the line, 0 for a root.
    A line that the parser split into several sentences has several roots.
    """

    words: List[str]
    heads: np.ndarray
    labels: List[str]
    pos: List[str]

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
        dependents = np.arange(1, n + 1)
        has_head = self.heads > 0
        left = np.where(has_head, np.minimum(dependents, self.heads), 0)[has_head]
        right = np.where(has_head, np.maximum(dependents, self.heads), 0)[has_head]
        # arcs (l1, r1) and (l2, r2) cross iff l1 < l2 < r1 < r2
        l1, l2 = left[:, None], left[None, :]
        r1, r2 = right[:, None], right[None, :]
        return not bool(((l1 < l2) & (l2 < r1) & (r1 < r2)).any())
